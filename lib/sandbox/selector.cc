// Label and field selectors: parsing as the server does (labels.Parse, fields.ParseSelector),
// matching objects, and which fields each type supports.

#include "sandbox/selector.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "error.h"
#include "sandbox/strategy.h"

namespace trainctl::sandbox {

namespace {

[[noreturn]] void reject_selector(std::string message) {
  throw Error(ErrorKind::BadRequest, std::move(message), 400);
}

// ---------------------------------------------------------------------------------------------
// Label selector lexer and parser, token for token as apimachinery's labels.Parse so that errors
// read the same.

enum class Tok {
  Error,
  End,
  ClosedPar,
  Comma,
  DoesNotExist,
  DoubleEquals,
  Equals,
  Greater,
  Identifier,
  In,
  Less,
  NotEquals,
  NotIn,
  OpenPar,
};

struct Token {
  Tok tok;
  std::string literal;
};

bool is_selector_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}
bool is_special(char c) {
  return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}

std::optional<Tok> special_token(std::string_view s) {
  static const std::array<std::pair<std::string_view, Tok>, 9> kTable = {{
      {")", Tok::ClosedPar},
      {",", Tok::Comma},
      {"!", Tok::DoesNotExist},
      {"==", Tok::DoubleEquals},
      {"=", Tok::Equals},
      {">", Tok::Greater},
      {"<", Tok::Less},
      {"!=", Tok::NotEquals},
      {"(", Tok::OpenPar},
  }};
  for (const auto& [text, tok] : kTable) {
    if (text == s)
      return tok;
  }
  return std::nullopt;
}

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  std::size_t pos = 0;
  while (true) {
    while (pos < s.size() && is_selector_space(s[pos]))
      ++pos;
    if (pos >= s.size()) {
      out.push_back({Tok::End, ""});
      return out;
    }
    if (is_special(s[pos])) {
      // Longest run of special characters that still names a token.
      std::optional<Token> last;
      std::string buffer;
      while (pos < s.size() && is_special(s[pos])) {
        buffer += s[pos];
        if (auto tok = special_token(buffer)) {
          last = Token{*tok, buffer};
          ++pos;
        } else if (last) {
          break;
        } else {
          ++pos;
        }
      }
      if (!last)
        out.push_back({Tok::Error, "error expected: keyword found '" + buffer + "'"});
      else
        out.push_back(*last);
      continue;
    }
    std::string id;
    while (pos < s.size() && !is_special(s[pos]) && !is_selector_space(s[pos]))
      id += s[pos++];
    if (id == "in")
      out.push_back({Tok::In, id});
    else if (id == "notin")
      out.push_back({Tok::NotIn, id});
    else
      out.push_back({Tok::Identifier, id});
  }
}

// field.ErrorList.ToAggregate().Error(): one message alone, several in brackets.
std::string aggregate(const std::vector<std::string>& errs) {
  if (errs.size() == 1)
    return errs.front();
  std::string out = "[";
  for (std::size_t i = 0; i < errs.size(); ++i)
    out += (i ? ", " : "") + errs[i];
  return out + "]";
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i ? std::string(sep) : "") + parts[i];
  return out;
}

class LabelParser {
 public:
  explicit LabelParser(std::string_view text) : tokens_(lex(text)) {}

  std::vector<LabelRequirement> parse() {
    std::vector<LabelRequirement> out;
    while (true) {
      auto [tok, lit] = lookahead(true);
      if (tok == Tok::Identifier || tok == Tok::DoesNotExist) {
        std::string err;
        auto requirement = parse_requirement(err);
        if (!requirement)
          reject_selector("unable to parse requirement: " + err);
        out.push_back(std::move(*requirement));
        auto [t, l] = consume(true);
        if (t == Tok::End)
          return out;
        if (t == Tok::Comma) {
          auto [t2, l2] = lookahead(true);
          if (t2 != Tok::Identifier && t2 != Tok::DoesNotExist)
            reject_selector(fmt::format("found '{}', expected: identifier after ','", l2));
          continue;
        }
        reject_selector(fmt::format("found '{}', expected: ',' or 'end of string'", l));
      }
      if (tok == Tok::End)
        return out;
      reject_selector(fmt::format("found '{}', expected: !, identifier, or 'end of string'", lit));
    }
  }

 private:
  // In value context the keywords `in` and `notin` are plain identifiers.
  static Token as_context(Token t, bool values) {
    if (values && (t.tok == Tok::In || t.tok == Tok::NotIn))
      t.tok = Tok::Identifier;
    return t;
  }
  Token lookahead(bool values) const { return as_context(tokens_[pos_], values); }
  Token consume(bool values) {
    Token t = as_context(tokens_[pos_], values);
    if (pos_ + 1 < tokens_.size())
      ++pos_;
    return t;
  }

  std::optional<LabelRequirement> parse_requirement(std::string& err) {
    LabelRequirement r;
    Token key = consume(true);
    bool does_not_exist = false;
    if (key.tok == Tok::DoesNotExist) {
      does_not_exist = true;
      key = consume(true);
    }
    if (key.tok != Tok::Identifier) {
      err = fmt::format("found '{}', expected: identifier", key.literal);
      return std::nullopt;
    }
    if (auto errs = api::names::qualified_name(key.literal); !errs.empty()) {
      err = "<nil>: Invalid value: " + api::names::go_quote(key.literal) + ": " + join(errs, "; ");
      return std::nullopt;
    }
    r.key = key.literal;
    const Tok next = lookahead(true).tok;
    if (does_not_exist || next == Tok::End || next == Tok::Comma) {
      r.op = does_not_exist ? LabelRequirement::Op::DoesNotExist : LabelRequirement::Op::Exists;
      return r;
    }
    auto [op_tok, op_lit] = consume(false);
    switch (op_tok) {
      case Tok::In:
        r.op = LabelRequirement::Op::In;
        break;
      case Tok::Equals:
        r.op = LabelRequirement::Op::Equals;
        break;
      case Tok::DoubleEquals:
        r.op = LabelRequirement::Op::DoubleEquals;
        break;
      case Tok::Greater:
        r.op = LabelRequirement::Op::Greater;
        break;
      case Tok::Less:
        r.op = LabelRequirement::Op::Less;
        break;
      case Tok::NotIn:
        r.op = LabelRequirement::Op::NotIn;
        break;
      case Tok::NotEquals:
        r.op = LabelRequirement::Op::NotEquals;
        break;
      default:
        err = fmt::format("found '{}', expected: in, notin, =, ==, !=, gt, lt", op_lit);
        return std::nullopt;
    }
    std::set<std::string> values;
    const bool set_based = r.op == LabelRequirement::Op::In || r.op == LabelRequirement::Op::NotIn;
    if (!(set_based ? parse_values(values, err) : parse_exact_value(values, err)))
      return std::nullopt;
    r.values.assign(values.begin(), values.end());
    return validate(std::move(r), err);
  }

  bool parse_values(std::set<std::string>& out, std::string& err) {
    const Token open = consume(true);
    if (open.tok != Tok::OpenPar) {
      err = fmt::format("found '{}' expected: '('", open.literal);
      return false;
    }
    const Token first = lookahead(true);
    if (first.tok == Tok::ClosedPar) {
      consume(true);
      out.insert("");
      return true;
    }
    if (first.tok != Tok::Identifier && first.tok != Tok::Comma) {
      err = fmt::format("found '{}', expected: ',', ')' or identifier", first.literal);
      return false;
    }
    while (true) {
      auto [t, l] = consume(true);
      if (t == Tok::Identifier) {
        out.insert(l);
        auto [t2, l2] = lookahead(true);
        if (t2 == Tok::Comma)
          continue;
        if (t2 == Tok::ClosedPar)
          break;
        err = fmt::format("found '{}', expected: ',' or ')'", l2);
        return false;
      }
      if (t == Tok::Comma) {
        if (out.empty())
          out.insert("");
        const Tok t2 = lookahead(true).tok;
        if (t2 == Tok::ClosedPar) {
          out.insert("");
          break;
        }
        if (t2 == Tok::Comma)
          out.insert("");
        continue;
      }
      err = fmt::format("found '{}', expected: ',', or identifier", l);
      return false;
    }
    consume(true);  // the ')'
    return true;
  }

  bool parse_exact_value(std::set<std::string>& out, std::string& err) {
    const Tok next = lookahead(true).tok;
    if (next == Tok::End || next == Tok::Comma) {
      out.insert("");
      return true;
    }
    auto [tok, lit] = consume(true);
    if (tok != Tok::Identifier) {
      err = fmt::format("found '{}', expected: identifier", lit);
      return false;
    }
    out.insert(lit);
    return true;
  }

  // labels.NewRequirement's value checks.
  static std::optional<LabelRequirement> validate(LabelRequirement r, std::string& err) {
    std::vector<std::string> errs;
    const bool numeric =
        r.op == LabelRequirement::Op::Greater || r.op == LabelRequirement::Op::Less;
    for (std::size_t i = 0; i < r.values.size(); ++i) {
      const auto& v = r.values[i];
      if (numeric) {
        std::int64_t n = 0;
        auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc() || ptr != v.data() + v.size() || v.empty()) {
          errs.push_back(
              fmt::format("values[{}]: Invalid value: {}: for 'Gt', 'Lt' operators, the "
                          "value must be an integer",
                          i, api::names::go_quote(v)));
        }
      }
    }
    for (std::size_t i = 0; i < r.values.size(); ++i) {
      if (auto msgs = api::names::label_value(r.values[i]); !msgs.empty()) {
        errs.push_back(fmt::format("values[{}][{}]: Invalid value: {}: {}", i, r.key,
                                   api::names::go_quote(r.values[i]), join(msgs, "; ")));
      }
    }
    if (!errs.empty()) {
      err = aggregate(errs);
      return std::nullopt;
    }
    return r;
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
};

const nlohmann::json* find_label(const nlohmann::json& labels, const std::string& key) {
  if (!labels.is_object())
    return nullptr;
  auto it = labels.find(key);
  if (it == labels.end() || !it->is_string())
    return nullptr;
  return &*it;
}

std::optional<std::int64_t> to_int(const std::string& s) {
  std::int64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
    return std::nullopt;
  return n;
}

}  // namespace

bool LabelRequirement::matches(const nlohmann::json& labels) const {
  const nlohmann::json* value = find_label(labels, key);
  auto has_value = [&] {
    const auto& v = value->get_ref<const std::string&>();
    return std::find(values.begin(), values.end(), v) != values.end();
  };
  switch (op) {
    case Op::In:
    case Op::Equals:
    case Op::DoubleEquals:
      return value && has_value();
    case Op::NotIn:
    case Op::NotEquals:
      return !value || !has_value();
    case Op::Exists:
      return value != nullptr;
    case Op::DoesNotExist:
      return value == nullptr;
    case Op::Greater:
    case Op::Less: {
      if (!value || values.size() != 1)
        return false;
      auto have = to_int(value->get_ref<const std::string&>());
      auto want = to_int(values.front());
      if (!have || !want)
        return false;
      return op == Op::Greater ? *have > *want : *have < *want;
    }
  }
  return false;
}

LabelSelector LabelSelector::parse(std::string_view text) {
  LabelSelector selector;
  selector.requirements_ = LabelParser(text).parse();
  std::stable_sort(selector.requirements_.begin(), selector.requirements_.end(),
                   [](const auto& a, const auto& b) { return a.key < b.key; });
  return selector;
}

std::optional<LabelSelector> LabelSelector::from_api(const nlohmann::json& selector) {
  if (!selector.is_object())
    return std::nullopt;
  LabelSelector out;
  using Op = LabelRequirement::Op;
  if (auto it = selector.find("matchLabels"); it != selector.end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) {
      out.requirements_.push_back(
          {key, Op::Equals, {value.is_string() ? value.get<std::string>() : value.dump()}});
    }
  }
  if (auto it = selector.find("matchExpressions"); it != selector.end() && it->is_array()) {
    static const std::map<std::string, Op> kOps = {{"In", Op::In},
                                                   {"NotIn", Op::NotIn},
                                                   {"Exists", Op::Exists},
                                                   {"DoesNotExist", Op::DoesNotExist}};
    for (const auto& e : *it) {
      const std::string op = e.value("operator", "");
      auto found = kOps.find(op);
      if (found == kOps.end())
        throw Error(ErrorKind::Invalid,
                    fmt::format("{:?} is not a valid label selector operator", op));
      LabelRequirement r{e.value("key", ""), found->second, {}};
      for (const auto& v : e.value("values", nlohmann::json::array())) {
        if (v.is_string())
          r.values.push_back(v.get<std::string>());
      }
      std::sort(r.values.begin(), r.values.end());
      r.values.erase(std::unique(r.values.begin(), r.values.end()), r.values.end());
      out.requirements_.push_back(std::move(r));
    }
  }
  std::stable_sort(out.requirements_.begin(), out.requirements_.end(),
                   [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

bool LabelSelector::matches(const nlohmann::json& labels) const {
  return std::all_of(requirements_.begin(), requirements_.end(),
                     [&](const LabelRequirement& r) { return r.matches(labels); });
}

std::string LabelSelector::to_string() const {
  std::vector<std::string> parts;
  for (const auto& r : requirements_) {
    using Op = LabelRequirement::Op;
    std::string s = (r.op == Op::DoesNotExist ? "!" : "") + r.key;
    const std::string values = join(r.values, ",");
    switch (r.op) {
      case Op::Equals:
        s += "=" + values;
        break;
      case Op::DoubleEquals:
        s += "==" + values;
        break;
      case Op::NotEquals:
        s += "!=" + values;
        break;
      case Op::In:
        s += " in (" + values + ")";
        break;
      case Op::NotIn:
        s += " notin (" + values + ")";
        break;
      case Op::Greater:
        s += ">" + values;
        break;
      case Op::Less:
        s += "<" + values;
        break;
      case Op::Exists:
      case Op::DoesNotExist:
        break;
    }
    parts.push_back(std::move(s));
  }
  return join(parts, ",");
}

// ---------------------------------------------------------------------------------------------
// Field selectors

namespace {

// Splits on commas not escaped by a backslash (fields.splitTerms).
std::vector<std::string_view> split_terms(std::string_view s) {
  std::vector<std::string_view> terms;
  if (s.empty())
    return terms;
  std::size_t start = 0;
  bool in_slash = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (in_slash)
      in_slash = false;
    else if (s[i] == '\\')
      in_slash = true;
    else if (s[i] == ',') {
      terms.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  terms.push_back(s.substr(start));
  return terms;
}

std::string unescape_field_value(std::string_view s) {
  std::string out;
  bool in_slash = false;
  for (char c : s) {
    if (in_slash) {
      if (c != '\\' && c != ',' && c != '=') {
        reject_selector(fmt::format("invalid field selector: invalid escape sequence: \\{}",
                                    std::string(1, c)));
      }
      out += c;
      in_slash = false;
      continue;
    }
    if (c == '\\') {
      in_slash = true;
    } else if (c == ',' || c == '=') {
      // Go prints the rune with %v, i.e. as its number.
      reject_selector(fmt::format("invalid field selector: unescaped character in value: {}",
                                  static_cast<int>(static_cast<unsigned char>(c))));
    } else {
      out += c;
    }
  }
  if (in_slash)
    reject_selector("invalid field selector: invalid escape sequence: \\");
  return out;
}

const nlohmann::json* walk(const nlohmann::json& object, std::string_view path) {
  const nlohmann::json* at = &object;
  while (true) {
    if (!at->is_object())
      return nullptr;
    const auto dot = path.find('.');
    auto it = at->find(std::string(path.substr(0, dot)));
    if (it == at->end())
      return nullptr;
    at = &*it;
    if (dot == std::string_view::npos)
      return at;
    path.remove_prefix(dot + 1);
  }
}

std::string scalar_text(const nlohmann::json* v) {
  if (!v || v->is_null())
    return "";
  if (v->is_string())
    return v->get<std::string>();
  if (v->is_boolean())
    return v->get<bool>() ? "true" : "false";
  if (v->is_number())
    return v->dump();
  return "";
}

}  // namespace

std::string field_value(const nlohmann::json& object, std::string_view field) {
  if (field == "spec.host")
    field = "spec.nodeName";
  if (field == "spec.hostNetwork" || field == "spec.unschedulable") {
    const auto* v = walk(object, field);
    return v && v->is_boolean() && v->get<bool>() ? "true" : "false";
  }
  if (field == "status.podIP" || field == "status.podIPs") {
    std::vector<std::string> ips;
    if (const auto* list = walk(object, "status.podIPs"); list && list->is_array()) {
      for (const auto& entry : *list)
        ips.push_back(scalar_text(walk(entry, "ip")));
    }
    if (ips.empty())
      return scalar_text(walk(object, "status.podIP"));
    return field == "status.podIP" ? ips.front() : join(ips, ",");
  }
  if (field == "status.successful") {
    const std::string n = scalar_text(walk(object, "status.succeeded"));
    return n.empty() ? "0" : n;
  }
  if (field == "status.replicas") {
    const std::string n = scalar_text(walk(object, "status.replicas"));
    return n.empty() ? "0" : n;
  }
  if (field == "source") {
    const auto* v = walk(object, "source.component");
    return scalar_text(v);
  }
  if (field == "reportingComponent" && !object.contains("reportingComponent"))
    return scalar_text(walk(object, "reportingController"));
  if (field.substr(0, 15) == "involvedObject." && !object.contains("involvedObject") &&
      object.contains("regarding")) {
    return scalar_text(walk(object, "regarding." + std::string(field.substr(15))));
  }
  return scalar_text(walk(object, field));
}

FieldSelector FieldSelector::parse(std::string_view text) {
  FieldSelector selector;
  for (std::string_view part : split_terms(text)) {
    if (part.empty())
      continue;
    std::optional<FieldRequirement> requirement;
    for (std::size_t i = 0; i < part.size() && !requirement; ++i) {
      const auto rest = part.substr(i);
      for (std::string_view op : {"!=", "==", "="}) {
        if (rest.substr(0, op.size()) == op) {
          requirement = FieldRequirement{std::string(part.substr(0, i)),
                                         unescape_field_value(rest.substr(op.size())), op == "!="};
          break;
        }
      }
    }
    if (!requirement)
      reject_selector(fmt::format("invalid selector: '{}'; can't understand '{}'", text, part));
    selector.requirements_.push_back(std::move(*requirement));
  }
  return selector;
}

bool FieldSelector::matches(const nlohmann::json& object) const {
  return std::all_of(requirements_.begin(), requirements_.end(), [&](const FieldRequirement& r) {
    return (field_value(object, r.field) == r.value) != r.negated;
  });
}

std::string FieldSelector::single_namespace() const {
  for (const auto& r : requirements_) {
    if (r.field == "metadata.namespace" && !r.negated)
      return r.value;
  }
  return "";
}

void FieldSelector::check_supported(const std::string& group_resource, bool namespaced) const {
  const StrategyPtr builtin = builtin_strategy(group_resource);
  const std::vector<std::string> typed =
      builtin ? builtin->field_labels() : std::vector<std::string>();
  const auto dot = group_resource.find('.');
  const std::string group = dot == std::string::npos ? "" : group_resource.substr(dot + 1);
  for (const auto& r : requirements_) {
    const std::string& f = r.field;
    if (!typed.empty()) {
      if (std::find(typed.begin(), typed.end(), f) == typed.end())
        reject_selector("field label not supported: " + f);
    } else if (!is_builtin_group(group)) {
      if (f != "metadata.name" && !(namespaced && f == "metadata.namespace"))
        reject_selector("field label not supported: " + f);
    } else if (f != "metadata.name" && f != "metadata.namespace") {
      reject_selector(fmt::format(
          "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
          api::names::go_quote(f)));
    }
  }
}

bool is_builtin_group(std::string_view group) {
  static const std::set<std::string_view> kGroups = {
      "",
      "admissionregistration.k8s.io",
      "apiextensions.k8s.io",
      "apiregistration.k8s.io",
      "apps",
      "authentication.k8s.io",
      "authorization.k8s.io",
      "autoscaling",
      "batch",
      "certificates.k8s.io",
      "coordination.k8s.io",
      "discovery.k8s.io",
      "events.k8s.io",
      "flowcontrol.apiserver.k8s.io",
      "internal.apiserver.k8s.io",
      "networking.k8s.io",
      "node.k8s.io",
      "policy",
      "rbac.authorization.k8s.io",
      "resource.k8s.io",
      "scheduling.k8s.io",
      "storage.k8s.io",
      "storagemigration.k8s.io",
  };
  return kGroups.count(group) > 0;
}

}  // namespace trainctl::sandbox
