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

bool reads_as_other_type(const std::string& s) {
  return !typed_scalar(s).is_string();
}

void emit(YAML::Emitter& out, const nlohmann::json& doc) {
  switch (doc.type()) {
    case nlohmann::json::value_t::object:
      if (doc.empty())
        out << YAML::Flow;  // `{}` on the key's line, as kubectl prints it
      out << YAML::BeginMap;
      for (const auto& [k, v] : doc.items()) {
        out << YAML::Key << k << YAML::Value;
        emit(out, v);
      }
      out << YAML::EndMap;
      break;
    case nlohmann::json::value_t::array:
      if (doc.empty())
        out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& v : doc)
        emit(out, v);
      out << YAML::EndSeq;
      break;
    case nlohmann::json::value_t::string: {
      const auto& s = doc.get_ref<const std::string&>();
      if (reads_as_other_type(s))
        out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case nlohmann::json::value_t::boolean:
      out << (doc.get<bool>() ? "true" : "false");
      break;
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      out << YAML::Null;
      break;
    default:
      out << doc.dump();  // numbers keep their JSON spelling
      break;
  }
}

}  // namespace

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
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  out.SetMapFormat(YAML::Block);
  emit(out, doc);
  std::string s = out.c_str();
  if (!s.empty() && s.back() != '\n')
    s.push_back('\n');
  return s;
}

std::string string_at(const nlohmann::json& object, const nlohmann::json::json_pointer& path) {
  if (!object.contains(path))
    return "";
  const nlohmann::json& value = object.at(path);
  return value.is_string() ? value.get<std::string>() : value.is_null() ? "" : value.dump();
}

}  // namespace trainctl
