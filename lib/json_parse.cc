#include "json_parse.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

#include "json_access.h"
#include "text.h"

namespace trainctl {
namespace {

using nlohmann::json;

/// Deeper documents go to nlohmann's parser, whose stack is on the heap.
constexpr int kMaxDepth = 256;

/// Recursive descent over JSON text; each function returns false where the fast path gives up
/// (the document then goes to nlohmann::json::parse), never on anything it takes differently.
class FastParser {
 public:
  explicit FastParser(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  bool document(json& out) {
    skip_space();
    if (!value(out, 0))
      return false;
    skip_space();
    return p_ == end_;
  }

 private:
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t'))
      ++p_;
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0)
      return false;
    p_ += word.size();
    return true;
  }

  bool value(json& out, int depth) {
    if (p_ == end_)
      return false;
    switch (*p_) {
      case '{':
        return object(out, depth + 1);
      case '[':
        return array(out, depth + 1);
      case '"': {
        std::string text;
        if (!string(text))
          return false;
        out = std::move(text);
        return true;
      }
      case 't':
        out = true;
        return literal("true");
      case 'f':
        out = false;
        return literal("false");
      case 'n':
        out = nullptr;
        return literal("null");
      default:
        return number(out);
    }
  }

  // Duplicate keys: the last one's value, as nlohmann's DOM parser assigns each in turn.
  bool object(json& out, int depth) {
    if (depth > kMaxDepth)
      return false;
    ++p_;
    out = json::object();
    auto& members = out.get_ref<json::object_t&>();
    if (closes('}'))
      return true;
    for (bool more = true; more;) {
      if (p_ == end_ || *p_ != '"')
        return false;
      std::string key;
      if (!string(key))
        return false;
      skip_space();
      if (p_ == end_ || *p_ != ':')
        return false;
      ++p_;
      skip_space();
      if (!value(member_in_order(members, std::move(key)), depth) || !separator('}', more))
        return false;
    }
    return true;
  }

  bool array(json& out, int depth) {
    if (depth > kMaxDepth)
      return false;
    ++p_;
    out = json::array();
    auto& items = out.get_ref<json::array_t&>();
    if (closes(']'))
      return true;
    for (bool more = true; more;) {
      if (!value(items.emplace_back(), depth) || !separator(']', more))
        return false;
    }
    return true;
  }

  // Right after an object's or array's opening: whether `close` follows (taken), empty.
  bool closes(char close) {
    skip_space();
    if (p_ == end_ || *p_ != close)
      return false;
    ++p_;
    return true;
  }

  // After a member or an item: a ',' (more follow) or `close` (taken); false for anything else.
  bool separator(char close, bool& more) {
    skip_space();
    if (p_ == end_ || (*p_ != ',' && *p_ != close))
      return false;
    more = *p_++ == ',';
    skip_space();
    return true;
  }

  // ASCII only: a byte outside it gives up (nlohmann checks UTF-8 sequences; the API server's
  // objects are ASCII nearly always).
  bool string(std::string& out) {
    ++p_;
    while (true) {
      const char* start = p_;
      while (p_ != end_) {
        const auto c = static_cast<unsigned char>(*p_);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
          break;
        ++p_;
      }
      out.append(start, p_);
      if (p_ == end_)
        return false;
      if (*p_ == '"') {
        ++p_;
        return true;
      }
      if (*p_ != '\\' || ++p_ == end_)
        return false;
      switch (*p_++) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          if (!unicode_escape(out))
            return false;
          break;
        default:
          return false;
      }
    }
  }

  bool hex4(char32_t& code) {
    if (end_ - p_ < 4)
      return false;
    code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = *p_++;
      code <<= 4;
      if (is_ascii_digit(c))
        code |= static_cast<char32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        code |= static_cast<char32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        code |= static_cast<char32_t>(c - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  // \uXXXX, a surrogate pair as one code point, written as UTF-8.
  bool unicode_escape(std::string& out) {
    char32_t code = 0;
    if (!hex4(code) || (code >= 0xDC00 && code <= 0xDFFF))
      return false;
    if (code >= 0xD800 && code <= 0xDBFF) {
      char32_t low = 0;
      if (!literal("\\u") || !hex4(low) || low < 0xDC00 || low > 0xDFFF)
        return false;
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
    return true;
  }

  // nlohmann's types: unsigned for a non-negative integer, signed for a negative one, double
  // with a fraction or an exponent. Out of range (which nlohmann turns into a double, or an
  // error) gives up.
  bool number(json& out) {
    const char* start = p_;
    if (*p_ == '-')
      ++p_;
    if (p_ == end_)
      return false;
    if (*p_ == '0') {
      ++p_;
    } else if (is_ascii_digit(*p_)) {
      while (p_ != end_ && is_ascii_digit(*p_))
        ++p_;
    } else {
      return false;
    }
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (p_ == end_ || !is_ascii_digit(*p_))
        return false;
      while (p_ != end_ && is_ascii_digit(*p_))
        ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-'))
        ++p_;
      if (p_ == end_ || !is_ascii_digit(*p_))
        return false;
      while (p_ != end_ && is_ascii_digit(*p_))
        ++p_;
    }
    if (integer && *start == '-')
      return convert<std::int64_t>(start, out);
    if (integer)
      return convert<std::uint64_t>(start, out);
    return convert<double>(start, out);
  }

  template <class T>
  bool convert(const char* start, json& out) {
    T number{};
    const auto [end, error] = std::from_chars(start, p_, number);
    if (error != std::errc() || end != p_)
      return false;
    out = number;
    return true;
  }

  const char* p_;
  const char* end_;
};

}  // namespace

nlohmann::json parse_json(std::string_view text, bool allow_exceptions) {
  json out;
  if (FastParser(text).document(out))
    return out;
  return json::parse(text, nullptr, allow_exceptions);
}

}  // namespace trainctl
