#include "render/mustache.h"

#include <fmt/format.h>

#include <optional>

#include "json_access.h"

namespace trainctl::render {
namespace {

using nlohmann::json;

/// std::isspace in the C locale, which kainjow trims and checks delimiters with.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_space(s.back()))
    s.remove_suffix(1);
  return s;
}

/// A set-delimiter tag's contents ("=<% %>="): the new delimiters, when they are valid (no
/// whitespace or "=" in them, one run of spaces between).
bool set_delimiters(std::string_view contents, std::string& begin, std::string& end) {
  if (contents.size() < 5 || contents.back() != '=')
    return false;
  const std::string_view inner = trim(contents.substr(1, contents.size() - 2));
  const std::size_t space = inner.find(' ');
  if (space == std::string_view::npos)
    return false;
  const std::size_t next = inner.find_first_not_of(' ', space + 1);
  if (next == std::string_view::npos)
    return false;
  const std::string_view opening = inner.substr(0, space), closing = inner.substr(next);
  const auto valid = [](std::string_view d) {
    return std::none_of(d.begin(), d.end(), [](char c) { return c == '=' || is_space(c); });
  };
  if (!valid(opening) || !valid(closing))
    return false;
  begin = opening;
  end = closing;
  return true;
}

/// A dotted name's parts as kainjow splits it (std::getline on '.': no empty last part).
std::vector<std::string_view> parts_of(std::string_view name) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0; start < name.size();) {
    const std::size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) {
      parts.push_back(name.substr(start));
      break;
    }
    parts.push_back(name.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

void append_flow(std::string& out, const json& v) {
  if (v.is_object()) {
    out += '{';
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it != v.begin())
        out += ", ";
      append_json_string(out, it.key());
      out += ": ";
      append_flow(out, it.value());
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0)
        out += ", ";
      append_flow(out, v[i]);
    }
    out += ']';
  } else if (v.is_string()) {
    append_json_string(out, v.get_ref<const std::string&>());
  } else {
    out += v.dump();
  }
}

/// Sections within sections, and partials within partials, deeper than these are errors: the
/// parser, the renderer and the tree's destruction recurse once per level (kainjow ran out of
/// stack, or took minutes, at 100,000 nested sections; it recursed for ever on a value that names
/// itself as a partial). Together they bound the renderer's recursion to 4,096 levels.
constexpr std::size_t kMaxSectionDepth = 256;
constexpr int kMaxPartialDepth = 16;

}  // namespace

bool falsy(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v == 0) ||
         (v.is_string() && v.get_ref<const std::string&>().empty()) ||
         (v.is_structured() && v.empty());
}

std::string flow(const json& v) {
  std::string out;
  append_flow(out, v);
  return out;
}

Mustache::Mustache(std::string_view text) {
  parse(text);
}

void Mustache::parse(std::string_view input) {
  std::string begin = "{{", end = "}}";
  bool braces = true;               // the default delimiters: {{{name}}} is a tag
  std::vector<Node*> open{&root_};  // the sections the next node goes into, innermost last
  std::string text;
  std::size_t text_at = 0;
  const auto add = [&](Node node) { open.back()->children.push_back(std::move(node)); };
  const auto end_text = [&] {
    if (!text.empty())
      add({.type = Node::Type::Text, .text = std::move(text), .position = text_at});
    text.clear();
  };
  std::size_t at = 0;
  while (at < input.size()) {
    if (input.compare(at, begin.size(), begin) != 0) {
      if (input[at] == '\n' || input[at] == '\r') {
        end_text();
        const std::size_t length = input.compare(at, 2, "\r\n") == 0 ? 2 : 1;
        add({.type = Node::Type::Newline,
             .text = std::string(input.substr(at, length)),
             .position = at});
        at += length;
        continue;
      }
      // Up to the next character that may start a tag or a line break.
      const char stops[] = {begin[0], '\n', '\r', '\0'};
      std::size_t next = input.find_first_of(std::string_view(stops, 3), at + 1);
      if (next == std::string_view::npos)
        next = input.size();
      if (text.empty())
        text_at = at;
      text.append(input.substr(at, next - at));
      at = next;
      continue;
    }
    end_text();
    const std::size_t tag_at = at;
    std::size_t contents_at = tag_at + begin.size();
    const bool triple = braces && tag_at != input.size() - 2 && input[contents_at] == '{';
    const std::string_view closing = triple ? std::string_view("}}}") : std::string_view(end);
    contents_at += triple ? 1 : 0;
    const std::size_t tag_end = input.find(closing, contents_at);
    if (tag_end == std::string_view::npos) {
      error_ = fmt::format("Unclosed tag at {}", tag_at);
      return;
    }
    const std::string_view contents = trim(input.substr(contents_at, tag_end - contents_at));
    at = tag_end + closing.size();
    Node node{.type = Node::Type::Variable, .position = tag_at};
    if (!contents.empty() && contents[0] == '=') {
      if (!set_delimiters(contents, begin, end)) {
        error_ = fmt::format("Invalid set delimiter tag at {}", tag_at);
        return;
      }
      braces = begin == "{{" && end == "}}";
      node.type = Node::Type::Other;
    } else if (triple || contents.empty()) {
      node.text = contents;
    } else {
      const std::string_view sigils = "#^/>&!";
      const std::size_t sigil = sigils.find(contents[0]);
      constexpr Node::Type kTypes[] = {Node::Type::Section,    Node::Type::Inverted,
                                       Node::Type::SectionEnd, Node::Type::Partial,
                                       Node::Type::Variable,   Node::Type::Other};
      node.type = sigil == std::string_view::npos ? Node::Type::Variable : kTypes[sigil];
      node.text = sigil == std::string_view::npos ? contents : trim(contents.substr(1));
    }
    const Node::Type type = node.type;
    add(std::move(node));
    if (type == Node::Type::Section || type == Node::Type::Inverted) {
      if (open.size() > kMaxSectionDepth) {
        error_ = fmt::format("Sections nested deeper than {} at {}", kMaxSectionDepth, tag_at);
        return;
      }
      // Nodes go into it until its end: its parent's children do not move meanwhile.
      open.push_back(&open.back()->children.back());
    } else if (type == Node::Type::SectionEnd) {
      if (open.size() == 1) {
        error_ =
            fmt::format("Unopened section \"{}\" at {}", open.back()->children.back().text, tag_at);
        return;
      }
      open.pop_back();
    }
  }
  end_text();
  // Every section ends with the end tag of its name (which is then dropped), checked in the
  // order of the text: the first that does not is the error.
  const auto check = [this](const auto& self, Node& parent) -> bool {
    for (Node& n : parent.children) {
      if (n.type != Node::Type::Section && n.type != Node::Type::Inverted)
        continue;
      if (n.children.empty() || n.children.back().type != Node::Type::SectionEnd ||
          n.children.back().text != n.text) {
        error_ = fmt::format("Unclosed section \"{}\" at {}", n.text, n.position);
        return false;
      }
      n.children.pop_back();
      if (!self(self, n))
        return false;
    }
    return true;
  };
  check(check, root_);
}

/// One rendering: the context stack, the line being made, what was written.
class Mustache::Renderer {
 public:
  explicit Renderer(std::string& error) : error_(error) {}

  std::string render(const std::vector<Node>& nodes, const json& context) {
    stack_.push_back({.kind = Value::Kind::Object, .node = &context});
    walk(nodes);
    end_line(nullptr);
    return std::move(out_);
  }

 private:
  /// A context value as render.h spells the JSON for templates.
  struct Value {
    enum class Kind { Object, List, String, True, False };
    Kind kind;
    const json* node = nullptr;  // Object, List
    std::string text;            // String
  };

  /// A member of an object, spelled: null is absent, falsy is false, a scalar its JSON text.
  static Value spelled(const json& v) {
    if (falsy(v))
      return {.kind = Value::Kind::False};
    if (v.is_boolean())
      return {.kind = Value::Kind::True};
    return element(v);
  }

  /// An item of a list: objects and lists as they are, any scalar its JSON text.
  static Value element(const json& v) {
    if (v.is_object())
      return {.kind = Value::Kind::Object, .node = &v};
    if (v.is_array())
      return {.kind = Value::Kind::List, .node = &v};
    return {.kind = Value::Kind::String, .text = v.dump()};
  }

  /// `name` in `of` (an object): the member, or for `json:KEY` the member KEY's flow text. Where
  /// the object has both a member `json:KEY` and a member KEY, the one later in key order wins,
  /// as when kainjow's copy of the context was filled member by member.
  static std::optional<Value> member(const Value& of, std::string_view name) {
    if (of.kind != Value::Kind::Object)
      return std::nullopt;
    const auto& members = of.node->get_ref<const json::object_t&>();
    const auto present = [&](std::string_view key) -> const json* {
      const auto it = members.find(key);
      return it == members.end() || it->second.is_null() ? nullptr : &it->second;
    };
    const json* written = present(name);
    const std::string_view key = name.substr(name.starts_with("json:") ? 5 : name.size());
    const json* flowed = key.size() < name.size() ? present(key) : nullptr;
    if (flowed != nullptr && (written == nullptr || key > name))
      return Value{.kind = Value::Kind::String, .text = flow(*flowed)};
    if (written != nullptr)
      return spelled(*written);
    return std::nullopt;
  }

  /// `name` looked up from the innermost context out; a dotted name whole in each.
  std::optional<Value> get(std::string_view name) const {
    if (name == ".")
      return stack_.back();
    const bool dotted = name.find('.') != std::string_view::npos;
    const std::vector<std::string_view> parts =
        dotted ? parts_of(name) : std::vector<std::string_view>{name};
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      std::optional<Value> v = *it;
      for (const std::string_view part : parts) {
        v = member(*v, part);
        if (!v)
          break;
      }
      if (v)
        return v;
    }
    return std::nullopt;
  }

  /// `name` without dots: a partial's.
  std::optional<Value> get_partial(std::string_view name) const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it)
      if (auto v = member(*it, name))
        return v;
    return std::nullopt;
  }

  static bool shows_false(const std::optional<Value>& v) {
    return !v || v->kind == Value::Kind::False ||
           (v->kind == Value::Kind::List && v->node->empty());
  }

  /// Renders `nodes` until one stops the rendering (a partial with an error): false then. As
  /// kainjow, a stop ends only the nodes of the section item it happened in.
  bool walk(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) {
      switch (n.type) {
        case Node::Type::Text:
          line_ += n.text;
          break;
        case Node::Type::Newline:
          end_line(&n.text);
          break;
        case Node::Type::Variable:
          if (const auto v = get(n.text); v && v->kind == Value::Kind::String)
            line_ += v->text;
          break;
        case Node::Type::Section:
          if (const auto v = get(n.text); !shows_false(v))
            section(n, &*v);
          break;
        case Node::Type::Inverted:
          if (const auto v = get(n.text); shows_false(v))
            section(n, v ? &*v : nullptr);
          break;
        case Node::Type::Partial:
          if (!partial(n))
            return false;
          break;
        case Node::Type::SectionEnd:
        case Node::Type::Other:
          break;
      }
    }
    return true;
  }

  void section(const Node& n, const Value* v) {
    if (v != nullptr && v->kind == Value::Kind::List && !v->node->empty()) {
      for (const json& item : *v->node) {
        section_on_line_ = true;
        stack_.push_back(element(item));
        walk(n.children);
        stack_.pop_back();
        section_on_line_ = true;
      }
      return;
    }
    section_on_line_ = true;
    if (v != nullptr)
      stack_.push_back(*v);
    walk(n.children);
    if (v != nullptr)
      stack_.pop_back();
    section_on_line_ = true;
  }

  /// A string value rendered as a template here (fresh delimiters, this line and context).
  bool partial(const Node& n) {
    const auto v = get_partial(n.text);
    if (!v || v->kind != Value::Kind::String)
      return true;
    Mustache inner(v->text);
    if (!inner.error().empty())
      return fail(inner.error());
    if (depth_ == kMaxPartialDepth)
      return fail(fmt::format("Partial \"{}\" nested deeper than {} at {}", n.text,
                              kMaxPartialDepth, n.position));
    const int before = errors_;
    ++depth_;
    const bool finished = walk(inner.root_.children);
    --depth_;
    return finished && errors_ == before;
  }

  bool fail(std::string message) {
    error_ = std::move(message);
    ++errors_;
    return false;
  }

  /// Ends the line being made with `newline` (none at the end of the text); a line a section
  /// was rendered on that holds only spaces and tabs is dropped.
  void end_line(const std::string* newline) {
    const bool blank = line_.find_first_not_of(" \t") == std::string::npos;
    if (!(section_on_line_ && blank)) {
      out_ += line_;
      if (newline != nullptr)
        out_ += *newline;
    }
    line_.clear();
    section_on_line_ = false;
  }

  std::string& error_;
  std::vector<Value> stack_;  // innermost last
  std::string out_, line_;
  bool section_on_line_ = false;
  int depth_ = 0;   // partials within partials
  int errors_ = 0;  // how often error_ was set
};

std::string Mustache::render(const json& context) {
  if (!error_.empty())
    return {};
  return Renderer(error_).render(root_.children, context);
}

}  // namespace trainctl::render
