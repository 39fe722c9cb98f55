#include "yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace trainctl {
namespace {

bool is_null_scalar(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> bool_scalar(std::string_view s) {
  if (s == "true" || s == "True" || s == "TRUE")
    return true;
  if (s == "false" || s == "False" || s == "FALSE")
    return false;
  return std::nullopt;
}

/// Moves `i` past the digits at s[i], and says how many there were.
std::size_t skip_digits(std::string_view s, std::size_t& i) {
  const std::size_t start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9')
    ++i;
  return i - start;
}

/// Moves `i` past a '+' or '-' at s[i].
void skip_sign(std::string_view s, std::size_t& i) {
  if (i < s.size() && (s[i] == '+' || s[i] == '-'))
    ++i;
}

/// The YAML 1.2 core schema's int, in decimal: [-+]?[0-9]+. (Written out: std::regex took a
/// quarter of a millisecond to compile both patterns in every process that reads YAML.)
bool is_int_scalar(std::string_view s) {
  std::size_t i = 0;
  skip_sign(s, i);
  return skip_digits(s, i) > 0 && i == s.size();
}

/// The core schema's float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float_scalar(std::string_view s) {
  std::size_t i = 0;
  skip_sign(s, i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (skip_digits(s, i) == 0)
      return false;
  } else {
    if (skip_digits(s, i) == 0)
      return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      skip_digits(s, i);
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    skip_sign(s, i);
    if (skip_digits(s, i) == 0)
      return false;
  }
  return i == s.size();
}

nlohmann::json typed_scalar(const std::string& s) {
  if (is_null_scalar(s))
    return nullptr;
  if (auto b = bool_scalar(s))
    return *b;
  if (is_int_scalar(s)) {
    long long v = 0;
    const char* begin = s.data() + (s[0] == '+' ? 1 : 0);
    auto [ptr, ec] = std::from_chars(begin, s.data() + s.size(), v);
    if (ec == std::errc() && ptr == s.data() + s.size())
      return v;
  }
  if (is_float_scalar(s)) {
    // Go's YAML (sigs.k8s.io/yaml over go-yaml) keeps a float that overflows a double as a
    // string (strconv.ParseFloat's ErrRange); one that underflows reads as 0. std::stod threw
    // out_of_range past every caller here (found by fuzz_set_value).
    errno = 0;
    const double v = std::strtod(s.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(v))
      return s;
    return v;
  }
  return s;
}

// --- Emitting: block YAML byte for byte as yaml-cpp 0.7's Emitter writes it (indent 2, block maps
// and sequences, empty ones in flow) wherever that reads back as the document (see `plain`); its
// deciding plain or quoted for every string with regular expressions run per character was 13 %
// of `trainctl render`. yaml_json_test reads random documents back and compares the two.

bool null_word(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

/// A blank or a line break at s[i] ("\r" only before "\n").
bool blank_or_break_at(std::string_view s, std::size_t i) {
  if (i >= s.size())
    return false;
  const char c = s[i];
  return c == ' ' || c == '\t' || c == '\n' || (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n');
}

/// Not c-printable (YAML 1.2, 5.1) at s[i], as yaml-cpp's emitter tells it: C0 controls but tab
/// and line breaks, DEL, C1 controls but NEL.
bool not_printable_at(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c <= 0x08 || c == 0x0B || c == 0x0C || (c >= 0x0E && c <= 0x1F) || c == 0x7F)
    return true;
  if (c != 0xC2 || i + 1 >= s.size())
    return false;
  const auto next = static_cast<unsigned char>(s[i + 1]);
  return (next >= 0x80 && next <= 0x84) || (next >= 0x86 && next <= 0x9F);
}

/// Whether `s` may be written as a plain scalar in block context (yaml-cpp's IsValidPlainScalar):
/// not a null word, no indicator or blank first, no trailing space, no ": ", " #", line break,
/// tab, byte order mark or unprintable character. Where yaml-cpp's did not read back, more: a
/// carriage return (a line break to YAML: "a\rb" read "a b", "\r" null), U+FFFE and U+FFFF
/// (not printable), and, at a line's start, a document marker ("--- x: 1", a document "---": the
/// document ends there).
enum class Place { Inline, KeyAtLineStart, Document };
bool plain(std::string_view s, Place place) {
  if (null_word(s) || blank_or_break_at(s, 0) ||
      std::string_view(",[]{}#&*!|>'\"%@`").find(s[0]) != std::string_view::npos)
    return false;
  if (place != Place::Inline && (s.starts_with("---") || s.starts_with("...")) &&
      (s.size() == 3 ? place == Place::Document : blank_or_break_at(s, 3)))
    return false;
  if ((s[0] == '-' || s[0] == '?' || s[0] == ':') && (s.size() == 1 || blank_or_break_at(s, 1)))
    return false;
  if (s.back() == ' ')
    return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\n' || c == '\r' || c == '\t' || not_printable_at(s, i) ||
        s.substr(i, 3) == "\xEF\xBB\xBF" || s.substr(i, 3) == "\xEF\xBF\xBE" ||
        s.substr(i, 3) == "\xEF\xBF\xBF")
      return false;
    if (c == ':' && (i + 1 == s.size() || blank_or_break_at(s, i + 1)))
      return false;
    if ((c == ' ' || c == '\t') && i + 1 < s.size() && s[i + 1] == '#')
      return false;
  }
  return true;
}

/// The code point of the UTF-8 sequence at s[i] (i moved past it); U+FFFD for one that does not
/// decode (a bad or cut sequence, a surrogate, past U+10FFFF).
unsigned next_code_point(std::string_view s, std::size_t& i) {
  constexpr unsigned kReplacement = 0xFFFD;
  const auto lead = static_cast<unsigned char>(s[i++]);
  const int length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (length == 0)
    return kReplacement;  // a continuation byte first
  unsigned cp = lead & (0xFFu >> (length + 1));
  if (length == 1)
    return lead;
  for (int left = length - 1; left > 0; --left, ++i) {
    if (i >= s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80)
      return kReplacement;
    cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  }
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return kReplacement;
  return cp;
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp <= 0x7F) {
    out += static_cast<char>(cp);
    return;
  }
  const int length = cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4;
  out += static_cast<char>((0xF00u >> length) | (cp >> (6 * (length - 1))));
  for (int shift = 6 * (length - 2); shift >= 0; shift -= 6)
    out += static_cast<char>(0x80 | ((cp >> shift) & 0x3F));
}

/// `s` double-quoted: C escapes for quote, backslash and \n \t \r \b \f, \xNN for other
/// controls, C1 and no-break space, \uNNNN for a byte order mark, U+FFFE and U+FFFF; the rest as
/// UTF-8 (yaml-cpp wrote U+FFFD for every noncharacter, which lost them), a sequence that does
/// not decode as U+FFFD.
void append_double_quoted(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const unsigned cp = next_code_point(s, i);
    const std::string_view escape = cp == '"'    ? "\\\""
                                    : cp == '\\' ? "\\\\"
                                    : cp == '\n' ? "\\n"
                                    : cp == '\t' ? "\\t"
                                    : cp == '\r' ? "\\r"
                                    : cp == '\b' ? "\\b"
                                    : cp == '\f' ? "\\f"
                                                 : "";
    if (!escape.empty()) {
      out += escape;
    } else if (cp < 0x20 || (cp >= 0x80 && cp <= 0xA0) || cp == 0xFEFF || cp == 0xFFFE ||
               cp == 0xFFFF) {
      const int digits = cp < 0xFF ? 2 : 4;
      out += cp < 0xFF ? "\\x" : "\\u";
      for (int d = digits - 1; d >= 0; --d)
        out += kHex[(cp >> (4 * d)) & 0xF];
    } else {
      append_utf8(out, cp);
    }
  }
  out += '"';
}

class YamlWriter {
 public:
  std::string take() && { return std::move(out_); }

  void document(const nlohmann::json& doc) {
    if (inline_value(doc))
      scalar(doc);
    else if (doc.is_object())
      map(doc, 0);
    else
      seq(doc, 0);
    if (out_.empty() || out_.back() != '\n')
      out_ += '\n';
  }

 private:
  /// Written on the line of its key or dash: a scalar, or an empty map or sequence.
  static bool inline_value(const nlohmann::json& v) {
    return !(v.is_object() || v.is_array()) || v.empty();
  }

  /// `s` plain where that reads back as `s` (not `quoted`: it would read as another type), else
  /// double-quoted; `place`: whether it begins a line (a top-level key, or the document).
  void string(const std::string& s, bool quoted, Place place) {
    if (!quoted && plain(s, place))
      out_ += s;
    else
      append_double_quoted(out_, s);
  }

  void scalar(const nlohmann::json& v) {
    switch (v.type()) {
      case nlohmann::json::value_t::string: {
        const auto& s = v.get_ref<const std::string&>();
        string(s, reads_as_other_type(s), out_.empty() ? Place::Document : Place::Inline);
        break;
      }
      case nlohmann::json::value_t::boolean:
        out_ += v.get<bool>() ? "true" : "false";
        break;
      case nlohmann::json::value_t::null:
      case nlohmann::json::value_t::discarded:
        out_ += '~';
        break;
      case nlohmann::json::value_t::object:
        out_ += "{}";  // empty: on the key's line, as kubectl prints it
        break;
      case nlohmann::json::value_t::array:
        out_ += "[]";
        break;
      default:
        out_ += v.dump();  // numbers keep their JSON spelling
        break;
    }
  }

  /// After the key's ':' or the dash: the value, or a block on the next lines at `indent`.
  void value(const nlohmann::json& v, std::size_t indent, bool block_on_this_line) {
    if (inline_value(v)) {
      out_ += ' ';
      scalar(v);
    } else if (v.is_object() && block_on_this_line) {
      out_ += ' ';
      map(v, indent);
    } else {
      out_ += '\n';
      out_.append(indent, ' ');
      v.is_object() ? map(v, indent) : seq(v, indent);
    }
  }

  /// A block map whose first key goes where the line stands; the next ones at `indent`.
  void map(const nlohmann::json& m, std::size_t indent) {
    bool first = true;
    for (const auto& [k, v] : m.items()) {
      if (!first) {
        out_ += '\n';
        out_.append(indent, ' ');
      }
      first = false;
      if (k.size() > 1024) {  // a long key: "? key", then ": value" on a line of its own
        out_ += "? ";
        string(k, false, Place::Inline);
        out_ += '\n';
        out_.append(indent, ' ');
        out_ += ": ";
        if (inline_value(v))
          scalar(v);
        else
          v.is_object() ? map(v, indent + 2) : seq(v, indent + 2);
        continue;
      }
      string(k, false, indent == 0 ? Place::KeyAtLineStart : Place::Inline);
      out_ += ':';
      value(v, indent + 2, false);
    }
  }

  /// A block sequence whose first dash goes where the line stands; the next ones at `indent`. A
  /// map item starts on its dash's line, a sequence item on the next.
  void seq(const nlohmann::json& a, std::size_t indent) {
    bool first = true;
    for (const auto& v : a) {
      if (!first) {
        out_ += '\n';
        out_.append(indent, ' ');
      }
      first = false;
      out_ += '-';
      value(v, indent + 2, true);
    }
  }

  std::string out_;
};

}  // namespace

bool reads_as_other_type(const std::string& s) {
  return !typed_scalar(s).is_string();
}

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& kv : node)
        obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& item : node)
        arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Scalar:
      return yaml_scalar_to_json(node);
    default:
      return nullptr;
  }
}

nlohmann::json yaml_scalar_to_json(const YAML::Node& scalar) {
  // A "!" tag marks a quoted scalar: it is a string whatever it spells.
  if (scalar.Tag() == "!")
    return scalar.Scalar();
  return typed_scalar(scalar.Scalar());
}

std::string json_to_yaml(const nlohmann::json& doc) {
  YamlWriter writer;
  writer.document(doc);
  return std::move(writer).take();
}

std::string string_at(const nlohmann::json& object, const nlohmann::json::json_pointer& path) {
  if (!object.contains(path))
    return "";
  const nlohmann::json& value = object.at(path);
  return value.is_string() ? value.get<std::string>() : value.is_null() ? "" : value.dump();
}

}  // namespace trainctl
