#include "api/names.h"

#include <fmt/format.h>

#include <algorithm>

#include "text.h"

namespace trainctl::api::names {
namespace {

bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool matches_dns1123_label(std::string_view s) {
  if (s.empty() || !is_lower_alnum(s.front()) || !is_lower_alnum(s.back()))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_lower_alnum(c) || c == '-'; });
}

// dns1123 labels joined by '.'
bool matches_dns1123_subdomain(std::string_view s) {
  while (true) {
    const auto dot = s.find('.');
    if (!matches_dns1123_label(s.substr(0, dot)))
      return false;
    if (dot == std::string_view::npos)
      return true;
    s.remove_prefix(dot + 1);
  }
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool matches_qualified_name_part(std::string_view s) {
  if (s.empty() || !is_alnum(s.front()) || !is_alnum(s.back()))
    return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; });
}

std::string max_len_error(int n) {
  return fmt::format("must be no more than {} characters", n);
}

// apimachinery's RegexError: "msg (e.g. 'a',  or 'b', regex used for validation is 're')".
std::string regex_error(std::string_view msg, std::string_view re,
                        std::initializer_list<std::string_view> examples) {
  std::string out(msg);
  if (examples.size() == 0)
    return out + " (regex used for validation is '" + std::string(re) + "')";
  out += " (e.g. ";
  bool first = true;
  for (auto example : examples) {
    if (!first)
      out += " or ";
    first = false;
    out += "'" + std::string(example) + "', ";
  }
  return out + "regex used for validation is '" + std::string(re) + "')";
}

constexpr std::string_view kDns1123LabelFmt = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
constexpr std::string_view kDns1123SubdomainFmt =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
constexpr std::string_view kQualifiedNameFmt = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
constexpr std::string_view kQualifiedNameErrMsg =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character";

}  // namespace

std::vector<std::string> dns1123_label(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 63)
    errs.push_back(max_len_error(63));
  if (!matches_dns1123_label(value)) {
    if (matches_dns1123_subdomain(value)) {
      errs.push_back("must not contain dots");
    } else {
      errs.push_back(regex_error(
          "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
          "and must start and end with an alphanumeric character",
          kDns1123LabelFmt, {"my-name", "123-abc"}));
    }
  }
  return errs;
}

std::vector<std::string> dns1123_subdomain(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 253)
    errs.push_back(max_len_error(253));
  if (!matches_dns1123_subdomain(value)) {
    errs.push_back(regex_error(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character",
        kDns1123SubdomainFmt, {"example.com"}));
  }
  return errs;
}

bool has_dns1035_label_syntax(std::string_view value) {
  return !value.empty() && value.front() >= 'a' && value.front() <= 'z' &&
         matches_dns1123_label(value);
}

std::vector<std::string> dns1035_label(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 63)
    errs.push_back(max_len_error(63));
  if (!has_dns1035_label_syntax(value)) {
    errs.push_back(regex_error(
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
        "an alphabetic character, and end with an alphanumeric character",
        "[a-z]([-a-z0-9]*[a-z0-9])?", {"my-name", "abc-123"}));
  }
  return errs;
}

std::vector<std::string> qualified_name(std::string_view value) {
  std::vector<std::string> errs;
  std::string_view name = value;
  const auto slash = value.find('/');
  if (slash != std::string_view::npos) {
    if (value.find('/', slash + 1) != std::string_view::npos) {
      errs.push_back(
          "a qualified name " +
          regex_error(kQualifiedNameErrMsg, kQualifiedNameFmt, {"MyName", "my.name", "123-abc"}) +
          " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
      return errs;
    }
    const auto prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty()) {
      errs.push_back("prefix part must be non-empty");
    } else {
      for (const auto& msg : dns1123_subdomain(prefix))
        errs.push_back("prefix part " + msg);
    }
  }
  if (name.empty())
    errs.push_back("name part must be non-empty");
  else if (name.size() > 63)
    errs.push_back("name part " + max_len_error(63));
  if (!matches_qualified_name_part(name)) {
    errs.push_back("name part " + regex_error(kQualifiedNameErrMsg, kQualifiedNameFmt,
                                              {"MyName", "my.name", "123-abc"}));
  }
  return errs;
}

std::vector<std::string> label_value(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 63)
    errs.push_back(max_len_error(63));
  if (!value.empty() && !matches_qualified_name_part(value)) {
    errs.push_back(regex_error(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
        "or '.', and must start and end with an alphanumeric character",
        "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", {"MyValue", "my_value", "12345"}));
  }
  return errs;
}

std::vector<std::string> port_name(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 15)
    errs.push_back(max_len_error(15));
  if (value.empty() || !std::all_of(value.begin(), value.end(),
                                    [](char c) { return is_lower_alnum(c) || c == '-'; }))
    errs.push_back("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
  if (std::none_of(value.begin(), value.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
    errs.push_back("must contain at least one letter (a-z)");
  if (value.find("--") != std::string_view::npos)
    errs.push_back("must not contain consecutive hyphens");
  if (!value.empty() && (value.front() == '-' || value.back() == '-'))
    errs.push_back("must not begin or end with a hyphen");
  return errs;
}

std::vector<std::string> port_number(std::int64_t value) {
  if (value >= 1 && value <= 65535)
    return {};
  return {"must be between 1 and 65535, inclusive"};
}

std::string go_quote(std::string_view value) {
  std::string out = "\"";
  // A byte that does not start a well-formed UTF-8 sequence is written \xNN, as strconv.Quote.
  std::size_t bad = invalid_utf8_offset(value).value_or(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (i == bad) {
      out += fmt::format("\\x{:02x}", c);
      bad = i + 1 + invalid_utf8_offset(value.substr(i + 1)).value_or(value.size());
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += fmt::format("\\x{:02x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

namespace {

/// field.Invalid's body.
MetadataError invalid_value(const std::string& key, std::string_view value,
                            const std::string& message) {
  return {key, "FieldValueInvalid", "Invalid value: " + go_quote(value) + ": " + message};
}

/// ValidateAnnotations' limit on keys and values together.
constexpr std::size_t kTotalAnnotationSizeLimit = std::size_t{256} * 1024;

}  // namespace

std::vector<MetadataError> label_errors(const nlohmann::json& labels) {
  std::vector<MetadataError> errs;
  if (!labels.is_object())
    return errs;
  for (const auto& [key, v] : labels.items()) {
    for (const auto& message : qualified_name(key))
      errs.push_back(invalid_value(key, key, message));
    if (!v.is_string())
      continue;
    const std::string& value = v.get_ref<const std::string&>();
    for (const auto& message : label_value(value))
      errs.push_back(invalid_value(key, value, message));
  }
  return errs;
}

std::vector<MetadataError> annotation_errors(const nlohmann::json& annotations) {
  std::vector<MetadataError> errs;
  if (!annotations.is_object())
    return errs;
  std::size_t total = 0;
  for (const auto& [key, v] : annotations.items()) {
    for (const auto& message : qualified_name(to_lower(key)))
      errs.push_back(invalid_value(key, key, message));
    total += key.size() + (v.is_string() ? v.get_ref<const std::string&>().size() : 0);
  }
  if (total > kTotalAnnotationSizeLimit) {
    errs.push_back(
        {"", "FieldValueTooLong",
         fmt::format("Too long: may not be more than {} bytes", kTotalAnnotationSizeLimit)});
  }
  return errs;
}

}  // namespace trainctl::api::names
