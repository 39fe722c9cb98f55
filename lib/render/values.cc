#include "render/values.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "error.h"
#include "text.h"
#include "yaml_json.h"

extern char** environ;

namespace trainctl::render {
namespace {

/// One step of a `--set` path: an object key or an array index.
struct PathStep {
  std::string key;
  long index = -1;  // >= 0 for an array index
};

/// The largest list index a --set path may name.
constexpr long kMaxSetIndex = 65536;

[[noreturn]] void bad_assignment(std::string_view assignment, std::string_view why) {
  throw Error(ErrorKind::Usage, fmt::format("--set {}: {}", assignment, why));
}

nlohmann::json typed_value(const std::string& text) {
  // A plain YAML scalar node reads as the core schema types it; yaml_to_json applies them.
  return yaml_to_json(YAML::Node(text));
}

/// Splits `a.b[0]\.c=v` into steps and the raw value text.
std::vector<PathStep> parse_path(std::string_view assignment, std::string& value) {
  std::vector<PathStep> steps;
  std::string key;
  bool key_open = true;  // a key is being read (possibly empty so far)
  size_t i = 0;
  auto close_key = [&] {
    if (key.empty())
      bad_assignment(assignment, "empty key in path");
    steps.push_back({std::move(key), -1});
    key.clear();
    key_open = false;
  };
  for (; i < assignment.size(); ++i) {
    char c = assignment[i];
    if (c == '\\') {
      if (i + 1 == assignment.size())
        bad_assignment(assignment, "trailing backslash");
      if (!key_open)
        bad_assignment(assignment, "expected '.', '[' or '=' after ']'");
      key.push_back(assignment[++i]);
    } else if (c == '=') {
      break;
    } else if (c == '.') {
      if (key_open)
        close_key();
      key_open = true;
    } else if (c == '[') {
      if (key_open)
        close_key();
      size_t end = assignment.find(']', i);
      if (end == std::string_view::npos)
        bad_assignment(assignment, "missing ']'");
      std::string_view digits = assignment.substr(i + 1, end - i - 1);
      if (digits.empty() || digits.size() > 6 ||
          !std::all_of(digits.begin(), digits.end(), [](char d) { return std::isdigit(d); }))
        bad_assignment(assignment, fmt::format("bad array index '[{}]'", digits));
      const long index = std::stol(std::string(digits));
      // Helm's --set has the same bound (strvals.MaxIndex): an index pads the list with nulls,
      // and [999999] in a few assignments made a million-element list each (found by
      // fuzz_set_value: one input took over 10 s).
      if (index > kMaxSetIndex)
        bad_assignment(assignment, fmt::format("index {} is greater than the largest allowed, {}",
                                               index, kMaxSetIndex));
      steps.push_back({"", index});
      i = end;
    } else {
      if (!key_open)
        bad_assignment(assignment, "expected '.', '[' or '=' after ']'");
      key.push_back(c);
    }
  }
  if (i == assignment.size())
    bad_assignment(assignment, "expected PATH=VALUE");
  if (key_open)
    close_key();
  value = std::string(assignment.substr(i + 1));
  return steps;
}

std::string camel_segment(std::string_view segment) {
  std::string out;
  bool upper_next = false;
  for (char c : segment) {
    if (c == '_') {
      upper_next = !out.empty();
      continue;
    }
    char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(upper_next ? static_cast<char>(std::toupper(static_cast<unsigned char>(lower)))
                             : lower);
    upper_next = false;
  }
  return out;
}

bool is_reserved_env(std::string_view rest) {
  return rest == "TEMPLATE_PATH" || rest == "CONFIG" || rest == "BINARY" ||
         rest.starts_with("TEST_");
}

/// Merges a values file; `shared` for the configuration files, which hold defaults for every
/// template.
void merge_file(nlohmann::json& values, const std::filesystem::path& path, bool shared,
                const LayerCheck& check) {
  if (path.empty())
    return;
  std::error_code ec;
  if (shared && !std::filesystem::exists(path, ec))
    return;
  const nlohmann::json layer = load_values_file(path);
  if (check)
    check(layer, {.label = path.string(), .shared = shared});
  deep_merge(values, layer);
}

std::string env_or_empty(const std::map<std::string, std::string>& environ_map,
                         const std::string& name) {
  auto it = environ_map.find(name);
  return it == environ_map.end() ? std::string() : it->second;
}

}  // namespace

nlohmann::json load_values_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Validation, fmt::format("{}: cannot read values file", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node doc;
  try {
    doc = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    throw Error(ErrorKind::Validation, fmt::format("{}:{}:{}: {}", path.string(), e.mark.line + 1,
                                                   e.mark.column + 1, e.msg));
  }
  if (!doc.IsDefined() || doc.IsNull())
    return nlohmann::json::object();
  if (!doc.IsMap())
    throw Error(ErrorKind::Validation,
                fmt::format("{}:{}:{}: values must be a mapping", path.string(),
                            doc.Mark().line + 1, doc.Mark().column + 1));
  return yaml_to_json(doc);
}

void set_value(nlohmann::json& values, std::string_view assignment, bool force_string) {
  std::string text;
  std::vector<PathStep> steps = parse_path(assignment, text);
  if (!values.is_object())
    values = nlohmann::json::object();
  nlohmann::json* node = &values;
  for (const PathStep& step : steps) {
    if (step.index >= 0) {
      if (!node->is_array())
        *node = nlohmann::json::array();
      while (node->size() <= static_cast<size_t>(step.index))
        node->push_back(nullptr);
      node = &(*node)[step.index];
    } else {
      if (!node->is_object())
        *node = nlohmann::json::object();
      node = &(*node)[step.key];
    }
  }
  *node = force_string ? nlohmann::json(text) : typed_value(text);
}

void set_checked_value(nlohmann::json& values, std::string_view assignment, bool force_string,
                       const LayerCheck& check) {
  set_value(values, assignment, force_string);
  if (!check)
    return;
  nlohmann::json alone = nlohmann::json::object();
  set_value(alone, assignment, force_string);
  const std::string key = alone.begin().key();
  check(nlohmann::json{{key, values[key]}},
        {.label = fmt::format("{} {}", force_string ? "--set-string" : "--set", assignment)});
}

void deep_merge(nlohmann::json& base, const nlohmann::json& overlay) {
  if (!base.is_object() || !overlay.is_object()) {
    base = overlay;
    return;
  }
  for (const auto& [key, value] : overlay.items()) {
    if (value.is_object() && base.contains(key) && base[key].is_object())
      deep_merge(base[key], value);
    else
      base[key] = value;
  }
}

nlohmann::json env_values(const std::map<std::string, std::string>& env) {
  nlohmann::json values = nlohmann::json::object();
  constexpr std::string_view prefix = "TRAINCTL_";
  for (const auto& [name, value] : env) {
    if (!std::string_view(name).starts_with(prefix))
      continue;
    std::string_view rest = std::string_view(name).substr(prefix.size());
    if (rest.empty() || is_reserved_env(rest))
      continue;
    nlohmann::json* node = &values;
    bool usable = true;
    size_t start = 0;
    std::vector<std::string> path;
    while (start <= rest.size()) {
      size_t end = rest.find("__", start);
      std::string seg = camel_segment(
          rest.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
      if (seg.empty())
        usable = false;
      path.push_back(std::move(seg));
      if (end == std::string_view::npos)
        break;
      start = end + 2;
    }
    if (!usable)
      continue;
    for (const std::string& seg : path) {
      if (!node->is_object())
        *node = nlohmann::json::object();
      node = &(*node)[seg];
    }
    *node = typed_value(value);
  }
  return values;
}

std::filesystem::path user_config_dir(const std::map<std::string, std::string>& environ_map) {
  std::string xdg = env_or_empty(environ_map, "XDG_CONFIG_HOME");
  if (!xdg.empty())
    return std::filesystem::path(xdg) / "trainctl";
  std::string home = env_or_empty(environ_map, "HOME");
  if (!home.empty())
    return std::filesystem::path(home) / ".config" / "trainctl";
  return {};
}

ValueSources discover_value_sources(const std::filesystem::path& cwd,
                                    const std::map<std::string, std::string>& environ_map) {
  ValueSources sources;
  std::error_code ec;
  for (std::filesystem::path dir = cwd;; dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / ".trainctl.yaml", ec)) {
      sources.repo_config = dir / ".trainctl.yaml";
      break;
    }
    if (std::filesystem::exists(dir / ".git", ec) || dir == dir.parent_path() || dir.empty())
      break;
  }
  std::filesystem::path config_dir = user_config_dir(environ_map);
  if (!config_dir.empty())
    sources.user_config = config_dir / "config.yaml";
  for (const auto& [name, value] : environ_map)
    if (name.starts_with("TRAINCTL_"))
      sources.env.emplace(name, value);
  return sources;
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string_view::npos)
      out.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

namespace {

/// The flags layer over `values`, keeping a role's count and its section together whichever
/// layer gave which.
void merge_flags(nlohmann::json& values, nlohmann::json flags) {
  for (const char* role : {"ps", "chief", "evaluator"}) {
    if (!flags.contains(role) || !values.contains(role))
      continue;
    if (flags[role].is_object() && values[role].is_number() && !flags[role].contains("replicas"))
      flags[role]["replicas"] = values[role];
    else if (flags[role].is_number() && values[role].is_object())
      flags[role] = nlohmann::json{{"replicas", flags[role]}};
  }
  deep_merge(values, flags);
}

}  // namespace

nlohmann::json layered_values(const ValueLayers& layers, const LayerCheck& check) {
  nlohmann::json values = nlohmann::json::object();
  merge_file(values, layers.sources.repo_config, true, check);
  merge_file(values, layers.sources.user_config, true, check);
  for (const auto& variable : layers.sources.env) {  // one at a time, so a bad one is named
    const nlohmann::json layer = env_values({variable});
    if (check)
      check(layer, {.label = variable.first, .shared = true});
    deep_merge(values, layer);
  }
  for (const auto& file : layers.values_files)
    merge_file(values, file, false, check);
  merge_flags(values, layers.flags);
  for (const auto& assignment : layers.sets)
    set_checked_value(values, assignment, false, check);
  for (const auto& assignment : layers.set_strings)
    set_checked_value(values, assignment, true, check);
  return values;
}

void require_printable(const nlohmann::json& values, const std::string& path) {
  auto check = [&path](const std::string& text) {
    const std::string where = path.empty() ? "<top>" : path;
    if (const auto offset = invalid_utf8_offset(text)) {
      throw Error(ErrorKind::Usage,
                  fmt::format("value {}: invalid UTF-8 byte {:#04x} at offset {}", where,
                              static_cast<unsigned char>(text[*offset]), *offset));
    }
    // As YAML (and so the rendered manifest) allows: no control character but tab, LF and CR.
    const auto control = std::find_if(text.begin(), text.end(), [](char c) {
      const auto byte = static_cast<unsigned char>(c);
      return (byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7f;
    });
    if (control != text.end()) {
      throw Error(ErrorKind::Usage,
                  fmt::format("value {}: control character {:#04x} at offset {}", where,
                              static_cast<unsigned char>(*control), control - text.begin()));
    }
  };
  if (values.is_string()) {
    check(values.get_ref<const std::string&>());
  } else if (values.is_object()) {
    for (const auto& [key, child] : values.items()) {
      check(key);
      require_printable(child, path.empty() ? key : path + "." + key);
    }
  } else if (values.is_array()) {
    for (std::size_t i = 0; i < values.size(); ++i)
      require_printable(values[i], fmt::format("{}[{}]", path, i));
  }
}

}  // namespace trainctl::render
