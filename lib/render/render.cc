#include "render/render.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <regex>

#include "error.h"
#include "json_access.h"
#include "render/mustache.h"
#include "render/value_schema.h"
#include "render/values.h"

namespace trainctl::render {
namespace {

constexpr std::array kRoles = {"chief", "master", "ps", "worker", "evaluator", "launcher"};
constexpr std::array kRoleKeys = {
    "image", "imagePullPolicy", "command",    "args",         "env", "gpus",
    "cpu",   "memory",          "workingDir", "restartPolicy"};
constexpr std::array kRunPolicyKeys = {"cleanPodPolicy", "ttlSecondsAfterFinished",
                                       "activeDeadlineSeconds", "backoffLimit"};
constexpr std::array kSchedulingKeys = {"queue", "minAvailable", "priorityClass"};

bool is_set(const nlohmann::json& values, const char* key) {
  return values.is_object() && values.contains(key) && !values[key].is_null();
}

nlohmann::json env_list(const nlohmann::json& env) {
  nlohmann::json out = nlohmann::json::array();
  auto as_text = [](const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : v.dump();
  };
  if (env.is_object()) {
    for (const auto& [name, value] : env.items())  // nlohmann objects iterate sorted
      out.push_back({{"name", name}, {"value", as_text(value)}});
    return out;
  }
  if (!env.is_array())
    return out;
  for (const auto& item : env) {
    if (!item.is_object())
      continue;
    nlohmann::json entry = item;
    if (entry.contains("value"))
      entry["value"] = as_text(entry["value"]);
    out.push_back(std::move(entry));
  }
  return out;
}

/// Each `volumes` entry as {pvc, mount, readOnly?}; "PVC:PATH[:ro|:rw]" strings are parsed
/// (Error(Validation) naming the entry when malformed).
std::vector<nlohmann::json> volume_entries(const nlohmann::json& values) {
  std::vector<nlohmann::json> out;
  if (!is_set(values, "volumes") || !values["volumes"].is_array())
    return out;
  const nlohmann::json& volumes = values["volumes"];
  for (size_t i = 0; i < volumes.size(); ++i) {
    if (volumes[i].is_string()) {
      try {
        out.push_back(parse_volume(volumes[i].get_ref<const std::string&>()));
      } catch (const Error& e) {
        throw Error(ErrorKind::Validation, fmt::format("volumes[{}]: {}", i, e.message()));
      }
    } else if (volumes[i].is_object()) {
      out.push_back(volumes[i]);
    }
  }
  return out;
}

/// A CPU or memory value as Kubernetes spells a quantity: a string. Numbers from `--set` or a
/// values file (`cpu: 4`, `memory: 1.5`) become their decimal text; the validator parses it.
nlohmann::json quantity_text(const nlohmann::json& v) {
  return v.is_string() ? v : nlohmann::json(v.dump());
}

/// The `nvidia.com/gpu` count as device plugins take it: an integer. 2, 2.0 and "2" all give 2;
/// anything else is Error(Validation) naming `field`.
long long gpu_count(const nlohmann::json& v, std::string_view field) {
  double n = -1;
  if (v.is_number()) {
    n = v.get<double>();
  } else if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    if (!text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == text.npos)
      n = std::stod(text);
  }
  if (n >= 0 && n < 1e9 && n == std::floor(n))
    return static_cast<long long>(n);
  throw Error(
      ErrorKind::Validation,
      fmt::format("{}: {} is not a whole number of GPUs (nvidia.com/gpu)", field, v.dump()));
}

nlohmann::json role_settings(const nlohmann::json& values, const std::string& role,
                             const std::vector<nlohmann::json>& volumes) {
  nlohmann::json eff = nlohmann::json::object();
  for (const char* key : kRoleKeys)
    if (is_set(values, key) && !(role == "launcher" && std::string_view(key) == "gpus"))
      eff[key] = values[key];
  if (values.contains(role) && values[role].is_object())
    for (const char* key : kRoleKeys)
      if (values[role].contains(key))
        eff[key] = values[role][key];
  if (eff.contains("env"))
    eff["env"] = env_list(eff["env"]);
  nlohmann::json resources = nlohmann::json::object();
  for (const char* key : {"cpu", "memory"}) {
    if (is_set(eff, key)) {
      resources["limits"][key] = quantity_text(eff[key]);
      resources["requests"][key] = quantity_text(eff[key]);
    }
  }
  if (is_set(eff, "gpus")) {
    const bool own =
        values.contains(role) && values[role].is_object() && values[role].contains("gpus");
    const long long gpus = gpu_count(eff["gpus"], own ? role + ".gpus" : "gpus");
    if (gpus > 0)
      resources["limits"]["nvidia.com/gpu"] = gpus;
  }
  if (!resources.empty())
    eff["resources"] = resources;
  nlohmann::json mounts = nlohmann::json::array();
  for (size_t i = 0; i < volumes.size(); ++i) {
    nlohmann::json mount = {{"name", fmt::format("vol-{}", i)},
                            {"mountPath", volumes[i].value("mount", "")}};
    if (volumes[i].value("readOnly", false))
      mount["readOnly"] = true;
    mounts.push_back(std::move(mount));
  }
  if (!mounts.empty())
    eff["volumeMounts"] = mounts;
  return eff;
}

/// A role's count: `<role>` itself when a number, else `<role>.replicas`, else `fallback`.
long long replica_count(const nlohmann::json& values, const char* role, long long fallback) {
  if (!is_set(values, role))
    return fallback;
  const nlohmann::json& v = values[role];
  if (v.is_number_integer())
    return v.get<long long>();
  if (v.is_object() && v.contains("replicas") && v["replicas"].is_number_integer())
    return v["replicas"].get<long long>();
  return fallback;
}

nlohmann::json derived_settings(const nlohmann::json& values,
                                const std::vector<nlohmann::json>& volumes) {
  nlohmann::json d = nlohmann::json::object();
  long long workers = replica_count(values, "worker", 1);
  if (is_set(values, "workers") && values["workers"].is_number_integer())
    workers = values["workers"].get<long long>();
  d["workers"] = workers;
  d["chiefReplicas"] = replica_count(values, "chief", 0);
  d["psReplicas"] = replica_count(values, "ps", 0);
  d["evaluatorReplicas"] = replica_count(values, "evaluator", 0);
  bool elastic = is_set(values, "elasticPolicy");
  d["masterReplicas"] = elastic ? 0 : 1;
  d["pytorchWorkers"] = elastic ? workers : std::max(0LL, workers - 1);
  nlohmann::json pod_volumes = nlohmann::json::array();
  for (size_t i = 0; i < volumes.size(); ++i) {
    nlohmann::json claim = {{"claimName", volumes[i].value("pvc", "")}};
    if (volumes[i].value("readOnly", false))
      claim["readOnly"] = true;
    pod_volumes.push_back({{"name", fmt::format("vol-{}", i)}, {"persistentVolumeClaim", claim}});
  }
  if (!pod_volumes.empty())
    d["volumes"] = pod_volumes;
  if (is_set(values, "imagePullSecrets") && values["imagePullSecrets"].is_array()) {
    nlohmann::json secrets = nlohmann::json::array();
    for (const auto& s : values["imagePullSecrets"])
      secrets.push_back(s.is_object() ? s : nlohmann::json{{"name", s}});
    d["imagePullSecrets"] = secrets;
  }
  if (is_set(values, "slotsPerWorker"))
    d["slotsPerWorker"] = values["slotsPerWorker"];
  else if (is_set(values, "gpus") && gpu_count(values["gpus"], "gpus") > 0)
    d["slotsPerWorker"] = gpu_count(values["gpus"], "gpus");
  bool scheduling = false;
  for (const char* key : kSchedulingKeys)
    scheduling = scheduling || is_set(values, key);
  bool run_policy = scheduling;
  for (const char* key : kRunPolicyKeys)
    run_policy = run_policy || is_set(values, key);
  d["hasSchedulingPolicy"] = scheduling;
  d["hasRunPolicy"] = run_policy;
  return d;
}

int line_of_offset(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

[[noreturn]] void template_error(std::string_view text, std::string_view name,
                                 const std::string& message) {
  static const std::regex at_re(R"((.*) at ([0-9]+)$)");
  std::smatch m;
  if (std::regex_match(message, m, at_re))
    throw Error(ErrorKind::Validation,
                fmt::format("template {}:{}: {}", name,
                            line_of_offset(text, std::stoul(m[2].str())), m[1].str()));
  throw Error(ErrorKind::Validation, fmt::format("template {}: {}", name, message));
}

/// Drops the line breaks after lines that hold only a section, inverted-section, end or comment
/// tag (comments may span lines), as the mustache spec's "standalone tags" rule asks; kainjow
/// leaves them as blank lines. The tags stay, so the rendered YAML is otherwise unchanged.
std::string strip_standalone_lines(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    size_t end = eol == std::string::npos ? text.size() : eol;
    std::string_view line(text.data() + pos, end - pos);
    size_t first = line.find_first_not_of(" \t");
    bool tag_start = first != std::string_view::npos && line.substr(first).starts_with("{{") &&
                     line.size() > first + 2 &&
                     std::string_view("#^/!").find(line[first + 2]) != std::string_view::npos;
    if (tag_start && line[first + 2] == '!' && line.find("}}") == std::string_view::npos) {
      size_t close = text.find("}}", end);  // a comment spanning lines
      size_t close_eol = close == std::string::npos ? std::string::npos : text.find('\n', close);
      if (close != std::string::npos && close_eol != std::string::npos &&
          text.find_first_not_of(" \t", close + 2) == close_eol) {
        out.append(text, pos + first, close + 2 - (pos + first));
        pos = close_eol + 1;
        continue;
      }
    }
    size_t close = line.find("}}");
    bool standalone = tag_start && close != std::string_view::npos &&
                      line.find("{{", first + 2) == std::string_view::npos &&
                      line.find_first_not_of(" \t", close + 2) == std::string_view::npos;
    if (standalone && eol != std::string::npos) {
      out.append(line.substr(first, close + 2 - first));
      pos = eol + 1;
      continue;
    }
    out.append(text, pos, eol == std::string::npos ? std::string::npos : eol + 1 - pos);
    pos = eol == std::string::npos ? text.size() : eol + 1;
  }
  return out;
}

}  // namespace

nlohmann::json render_context(const nlohmann::json& values) {
  nlohmann::json ctx = values.is_object() ? values : nlohmann::json::object();
  // spec.nprocPerNode is a string in the API ("4"); --set and YAML type a count as a number.
  if (ctx.contains("nprocPerNode") && ctx["nprocPerNode"].is_number_integer())
    ctx["nprocPerNode"] = ctx["nprocPerNode"].dump();
  std::vector<nlohmann::json> volumes = volume_entries(ctx);
  nlohmann::json roles = nlohmann::json::object();
  for (const char* role : kRoles)
    roles[role] = role_settings(ctx, role, volumes);
  nlohmann::json derived = derived_settings(ctx, volumes);
  ctx["roles"] = std::move(roles);
  ctx["derived"] = std::move(derived);
  return ctx;
}

std::string render_template(std::string_view template_text, const nlohmann::json& values,
                            std::string_view template_name) {
  std::string text(template_text);
  Mustache tmpl(strip_standalone_lines(text));
  if (!tmpl.error().empty()) {
    // The text as written says where, in the author's lines (stripping moved the offsets).
    const Mustache as_written(text);
    template_error(text, template_name,
                   as_written.error().empty() ? tmpl.error() : as_written.error());
  }
  require_printable(values);  // the values are dumped as JSON, which takes nothing else
  std::string out = tmpl.render(render_context(values));
  if (!tmpl.error().empty())
    template_error(text, template_name, tmpl.error());
  return out;
}

}  // namespace trainctl::render
