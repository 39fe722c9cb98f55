#include "render/value_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "api/quantity.h"
#include "error.h"
#include "render/render.h"
#include "text.h"

namespace trainctl::render {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 4> kRestartPolicies = {"Always", "OnFailure", "Never",
                                                              "ExitCode"};
constexpr std::array<std::string_view, 3> kPullPolicies = {"Always", "IfNotPresent", "Never"};
constexpr std::array<std::string_view, 3> kCleanPodPolicies = {"None", "Running", "All"};
constexpr std::array<std::string_view, 3> kMpiImplementations = {"OpenMPI", "Intel", "MPICH"};

/// The settings of one replica role's container, at the top level for every role and under
/// `<role>.` for one (render.h: roles.<r>).
constexpr std::array<ValueSpec, 10> kRoleValues = {{
    {.key = "image", .type = ValueType::String, .flag = "image"},
    {.key = "cpu", .type = ValueType::Quantity, .flag = "cpu"},
    {.key = "memory", .type = ValueType::Quantity, .flag = "memory"},
    {.key = "gpus", .type = ValueType::Integer, .flag = "gpus"},
    {.key = "imagePullPolicy", .type = ValueType::OneOf, .allowed = kPullPolicies},
    {.key = "command", .type = ValueType::StringList},
    {.key = "args", .type = ValueType::StringList},
    {.key = "env", .type = ValueType::EnvList},
    {.key = "workingDir", .type = ValueType::String},
    {.key = "restartPolicy", .type = ValueType::OneOf, .allowed = kRestartPolicies},
}};

/// The flags of the role settings when given for every replica (--image, not --worker-image).
constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kTopLevelFlags = {{
    {"image", "--image"},
    {"cpu", "--cpu"},
    {"memory", "--memory"},
    {"gpus", "--gpus"},
    {"env", "--env"},
    {"workingDir", "--working-dir"},
    {"restartPolicy", "--restart-policy"},
}};

std::string_view top_level_flag(std::string_view key) {
  for (const auto& [k, flag] : kTopLevelFlags) {
    if (k == key)
      return flag;
  }
  return {};
}

/// What every built-in template reads besides its roles, `workers` and its own kind's values.
std::vector<ValueSpec> common_values() {
  std::vector<ValueSpec> values = {
      {.key = "name", .type = ValueType::String, .flag = "--name"},
      {.key = "namespace", .type = ValueType::String, .flag = "--namespace"},
      {.key = "volumes", .type = ValueType::Volumes, .flag = "--volume"},
      {.key = "labels", .type = ValueType::StringMap, .flag = "--label"},
      {.key = "annotations", .type = ValueType::StringMap, .flag = "--annotation"},
      {.key = "nodeSelector", .type = ValueType::StringMap, .flag = "--node-selector"},
      {.key = "tolerations", .type = ValueType::Tolerations, .flag = "--toleration"},
      {.key = "hostNetwork", .type = ValueType::Boolean, .flag = "--host-network"},
      {.key = "imagePullSecrets", .type = ValueType::PullSecrets, .flag = "--image-pull-secret"},
      {.key = "cleanPodPolicy",
       .type = ValueType::OneOf,
       .flag = "--clean-pod-policy",
       .allowed = kCleanPodPolicies},
      {.key = "backoffLimit", .type = ValueType::Integer, .flag = "--backoff-limit"},
      {.key = "activeDeadlineSeconds", .type = ValueType::Integer, .flag = "--active-deadline"},
      {.key = "ttlSecondsAfterFinished", .type = ValueType::Integer, .flag = "--ttl"},
      {.key = "queue", .type = ValueType::String, .flag = "--queue"},
      {.key = "minAvailable", .type = ValueType::Integer, .flag = "--min-available"},
      {.key = "priorityClass", .type = ValueType::String, .flag = "--priority-class"},
  };
  for (const ValueSpec& v : kRoleValues) {
    ValueSpec top = v;
    top.flag = top_level_flag(v.key);
    values.push_back(top);
  }
  return values;
}

ValueSchema make_schema(api::JobKind kind) {
  ValueSchema s{.kind = kind, .values = common_values(), .role_values = kRoleValues};
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  switch (kind) {
    case api::JobKind::TFJob:
      s.template_name = "tfjob";
      s.values.push_back({.key = "workers", .type = ValueType::Integer, .flag = "--workers"});
      s.roles = {
          {.name = "chief", .has_replicas = true, .count_flag = "--chief", .max_replicas = 1},
          {.name = "ps", .has_replicas = true, .count_flag = "--ps"},
          {.name = "worker", .has_replicas = true},
          {.name = "evaluator", .has_replicas = true, .count_flag = "--evaluator"}};
      break;
    case api::JobKind::PyTorchJob:
      s.template_name = "pytorchjob";
      s.values.push_back(
          {.key = "workers", .type = ValueType::Integer, .flag = "--workers", .min = 1});
      s.values.push_back(
          {.key = "nprocPerNode", .type = ValueType::NprocPerNode, .flag = "--nproc-per-node"});
      s.values.push_back({.key = "elasticPolicy", .type = ValueType::Object});
      s.roles = {{.name = "master"},
                 {.name = "worker", .has_replicas = true, .min_replicas = 1, .max_replicas = kMax}};
      break;
    case api::JobKind::MPIJob:
      s.template_name = "mpijob";
      s.values.push_back(
          {.key = "workers", .type = ValueType::Integer, .flag = "--workers", .min = 1});
      s.values.push_back({.key = "slotsPerWorker",
                          .type = ValueType::Integer,
                          .flag = "--slots-per-worker",
                          .min = 1});
      s.values.push_back({.key = "mpiImplementation",
                          .type = ValueType::OneOf,
                          .flag = "--mpi-implementation",
                          .allowed = kMpiImplementations});
      s.roles = {{.name = "launcher"},
                 {.name = "worker", .has_replicas = true, .min_replicas = 1, .max_replicas = kMax}};
      break;
  }
  return s;
}

std::string quoted_list(std::span<const std::string_view> items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i)
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == items.size() ? " or " : ", ", items[i]);
  return out;
}

/// A value as the user would have typed it: strings quoted, everything else as JSON.
std::string shown(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// " (quote it, or use --set-string)" when a scalar that should be text was typed as a number or
/// a boolean, which YAML and --set do for `2` or `true`.
std::string string_hint(const json& v) {
  return v.is_number() || v.is_boolean() ? " (quote it, or use --set-string)" : "";
}

/// Problems found in one layer: a key path and what is wrong with its value.
struct Problem {
  std::string path;
  std::string flag;  // the flag that sets the value, when known
  std::string message;
};

class LayerChecker {
 public:
  LayerChecker(const ValueSchema& schema, const ValueOrigin& origin)
      : schema_(schema), origin_(origin) {}

  void check(const json& layer) {
    if (!layer.is_object())
      return;
    for (const auto& [key, value] : layer.items()) {
      if (const ValueSpec* spec = schema_.find(key)) {
        check_value(*spec, key, spec->flag, value);
      } else if (const RoleSpec* role = schema_.find_role(key)) {
        check_role(*role, value);
      } else {
        unknown(key);
      }
    }
  }

  /// Throws the problems found, one per line, naming the flag or the origin and key.
  void finish() const {
    if (problems_.empty())
      return;
    std::string message;
    for (const auto& p : problems_) {
      if (!message.empty())
        message += '\n';
      if (origin_.flags && !p.flag.empty())
        message += fmt::format("{}: {}", p.flag, p.message);
      else if (origin_.flags)
        message += fmt::format("{}: {}", p.path, p.message);
      else
        message += fmt::format("{}: {}: {}", origin_.label, p.path, p.message);
    }
    if (unknown_)
      message += fmt::format(
          "\n(`trainctl template show {}` lists the values the built-in template reads; a "
          "template of your own, given with --template, takes any)",
          schema_.template_name);
    throw Error(ErrorKind::Usage, message);
  }

 private:
  void add(std::string path, std::string_view flag, std::string message) {
    problems_.push_back({std::move(path), std::string(flag), std::move(message)});
  }

  void unknown(const std::string& key) {
    for (const auto kind : {api::JobKind::TFJob, api::JobKind::PyTorchJob, api::JobKind::MPIJob}) {
      const ValueSchema& other = builtin_schema(kind);
      if (kind == schema_.kind || (!other.find(key) && !other.find_role(key)))
        continue;
      if (!origin_.shared) {
        add(key, "",
            fmt::format("the {} template does not read it (the {} template does)",
                        schema_.template_name, other.template_name));
      }
      return;
    }
    std::vector<std::string> candidates;
    for (const auto& v : schema_.values)
      candidates.emplace_back(v.key);
    for (const auto& r : schema_.roles)
      candidates.emplace_back(r.name);
    add_unknown(key, candidates, "");
  }

  void add_unknown(const std::string& key, const std::vector<std::string>& candidates,
                   const std::string& prefix) {
    unknown_ = true;
    const auto guess = closest_match(key, candidates);
    add(prefix + key, "",
        guess ? fmt::format("unknown value (did you mean \"{}{}\"?)", prefix, *guess)
              : std::string("unknown value"));
  }

  void check_role(const RoleSpec& role, const json& value) {
    const std::string name(role.name);
    if (value.is_null())
      return;
    if (!role.count_flag.empty() && !value.is_object()) {
      check_count(role, name, role.count_flag, value);
      return;
    }
    if (!value.is_object()) {
      add(name, "",
          fmt::format("must be the {} replicas' settings, e.g. {{image: ..., cpu: ...}}, got {}",
                      name, shown(value)));
      return;
    }
    for (const auto& [key, v] : value.items()) {
      const std::string path = name + "." + key;
      if (key == "replicas" && role.has_replicas) {
        check_count(role, path, "", v);
      } else if (const ValueSpec* spec = schema_.find_role_value(key)) {
        const std::string flag =
            spec->flag.empty() ? std::string() : fmt::format("--{}-{}", name, spec->flag);
        check_value(*spec, path, flag, v);
      } else {
        std::vector<std::string> candidates;
        for (const auto& s : schema_.role_values)
          candidates.emplace_back(s.key);
        if (role.has_replicas)
          candidates.emplace_back("replicas");
        add_unknown(key, candidates, name + ".");
      }
    }
  }

  void check_count(const RoleSpec& role, const std::string& path, std::string_view flag,
                   const json& v) {
    const ValueSpec count{.key = role.name,
                          .type = ValueType::Integer,
                          .min = role.min_replicas,
                          .max = role.max_replicas};
    check_value(count, path, flag, v);
  }

  void check_value(const ValueSpec& spec, const std::string& path, std::string_view flag,
                   const json& v) {
    if (v.is_null())
      return;
    if (auto why = problem(spec, path, v))
      add(path, flag, *why);
  }

  /// What is wrong with `v` as a value of `spec`, or nullopt. Nested problems (a list item, a
  /// map member) are recorded under their own path and the value itself passes.
  std::optional<std::string> problem(const ValueSpec& spec, const std::string& path,
                                     const json& v) {
    switch (spec.type) {
      case ValueType::String:
        if (!v.is_string())
          return fmt::format("must be a string, got {}{}", shown(v), string_hint(v));
        return std::nullopt;
      case ValueType::OneOf:
        if (!v.is_string() || std::find(spec.allowed.begin(), spec.allowed.end(),
                                        v.get_ref<const std::string&>()) == spec.allowed.end())
          return fmt::format("must be one of {}, got {}", quoted_list(spec.allowed), shown(v));
        return std::nullopt;
      case ValueType::Integer:
        return integer_problem(spec, v);
      case ValueType::Boolean:
        if (!v.is_boolean())
          return fmt::format("must be true or false, got {}", shown(v));
        return std::nullopt;
      case ValueType::Quantity:
        return quantity_problem(v);
      case ValueType::StringList:
        return list_problem(
            path, v, "a list of strings", [&](const std::string& at, const json& item) {
              if (!item.is_string())
                add(at, "",
                    fmt::format("must be a string, got {}{}", shown(item), string_hint(item)));
            });
      case ValueType::StringMap:
        if (!v.is_object())
          return fmt::format("must be a map of key: value, got {}", shown(v));
        for (const auto& [k, item] : v.items()) {
          if (!item.is_string())
            add(path + "." + k, "",
                fmt::format("must be a string, got {}{}", shown(item), string_hint(item)));
        }
        return std::nullopt;
      case ValueType::EnvList:
        return env_problem(path, v);
      case ValueType::Volumes:
        return list_problem(path, v, "a list of PVC:PATH[:ro|:rw] or {pvc, mount, readOnly}",
                            [&](const std::string& at, const json& item) { volume(at, item); });
      case ValueType::Tolerations:
        return list_problem(
            path, v, "a list of tolerations", [&](const std::string& at, const json& item) {
              if (!item.is_object())
                add(at, "",
                    fmt::format("must be a toleration {{key, operator, value, effect}}, got {}",
                                shown(item)));
            });
      case ValueType::PullSecrets:
        return list_problem(
            path, v, "a list of secret names", [&](const std::string& at, const json& item) {
              const bool named =
                  item.is_object() && item.contains("name") && item["name"].is_string();
              if (!item.is_string() && !named)
                add(at, "", fmt::format("must be a secret name, got {}", shown(item)));
            });
      case ValueType::NprocPerNode: {
        const bool ok =
            (v.is_string() && api::is_nproc_per_node(v.get_ref<const std::string&>())) ||
            (v.is_number_integer() && v.get<std::int64_t>() > 0);
        if (!ok)
          return fmt::format("must be auto, cpu, gpu or a positive integer, got {}", shown(v));
        return std::nullopt;
      }
      case ValueType::Object:
        if (!v.is_object())
          return fmt::format("must be a map, got {}", shown(v));
        return std::nullopt;
    }
    return std::nullopt;
  }

  static std::optional<std::string> integer_problem(const ValueSpec& spec, const json& v) {
    if (!v.is_number_integer())
      return fmt::format("must be an integer, got {}", shown(v));
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return fmt::format("must be at most {}, got {}", spec.max, shown(v));
    const std::int64_t n = v.get<std::int64_t>();
    if (n < spec.min)
      return fmt::format("must be at least {}, got {}", spec.min, n);
    if (n > spec.max)
      return fmt::format("must be at most {}, got {}", spec.max, n);
    return std::nullopt;
  }

  static std::optional<std::string> quantity_problem(const json& v) {
    constexpr std::string_view kExpected = "must be a quantity such as 4, 500m or 16Gi";
    if (v.is_number()) {
      if (v.get<double>() < 0)
        return fmt::format("{}, not negative, got {}", kExpected, shown(v));
      return std::nullopt;
    }
    if (!v.is_string())
      return fmt::format("{}, got {}", kExpected, shown(v));
    try {
      if (api::parse_quantity_milli(v.get_ref<const std::string&>()) < 0)
        return fmt::format("{}, not negative, got {}", kExpected, shown(v));
    } catch (const Error&) {
      return fmt::format("{}, got {}", kExpected, shown(v));
    }
    return std::nullopt;
  }

  template <typename CheckItem>
  std::optional<std::string> list_problem(const std::string& path, const json& v,
                                          std::string_view what, CheckItem&& check_item) {
    if (!v.is_array())
      return fmt::format("must be {}, got {}", what, shown(v));
    for (std::size_t i = 0; i < v.size(); ++i)
      check_item(fmt::format("{}[{}]", path, i), v[i]);
    return std::nullopt;
  }

  std::optional<std::string> env_problem(const std::string& path, const json& v) {
    if (v.is_object()) {
      for (const auto& [name, value] : v.items()) {
        if (value.is_structured())
          add(path + "." + name, "",
              fmt::format("must be a string, number or boolean, got {}", shown(value)));
      }
      return std::nullopt;
    }
    return list_problem(
        path, v, "a list of {name, value} or a map of NAME: value",
        [&](const std::string& at, const json& item) {
          const bool named = item.is_object() && item.contains("name") &&
                             item["name"].is_string() &&
                             !item["name"].get_ref<const std::string&>().empty();
          if (!named)
            add(at, "", fmt::format("must be {{name, value}} with a name, got {}", shown(item)));
        });
  }

  void volume(const std::string& path, const json& item) {
    if (item.is_string()) {
      try {
        parse_volume(item.get_ref<const std::string&>());
      } catch (const Error& e) {
        add(path, "", e.message());
      }
      return;
    }
    if (!item.is_object()) {
      add(path, "",
          fmt::format("must be PVC:PATH[:ro|:rw] or {{pvc, mount, readOnly}}, got {}",
                      shown(item)));
      return;
    }
    const json pvc = item.value("pvc", json());
    const json mount = item.value("mount", json());
    if (!pvc.is_string() || pvc.get_ref<const std::string&>().empty())
      add(path + ".pvc", "", fmt::format("must be the claim's name, got {}", shown(pvc)));
    if (!mount.is_string() || !mount.get_ref<const std::string&>().starts_with('/'))
      add(path + ".mount", "", fmt::format("must be an absolute path, got {}", shown(mount)));
    if (item.contains("readOnly") && !item["readOnly"].is_boolean())
      add(path + ".readOnly", "",
          fmt::format("must be true or false, got {}", shown(item["readOnly"])));
    for (const auto& [key, unused] : item.items()) {
      if (key != "pvc" && key != "mount" && key != "readOnly")
        add_unknown(key, {"pvc", "mount", "readOnly"}, path + ".");
    }
  }

  const ValueSchema& schema_;
  const ValueOrigin& origin_;
  std::vector<Problem> problems_;
  bool unknown_ = false;
};

}  // namespace

const ValueSpec* ValueSchema::find(std::string_view key) const {
  const auto it =
      std::find_if(values.begin(), values.end(), [&](const ValueSpec& v) { return v.key == key; });
  return it == values.end() ? nullptr : &*it;
}

const RoleSpec* ValueSchema::find_role(std::string_view name) const {
  const auto it =
      std::find_if(roles.begin(), roles.end(), [&](const RoleSpec& r) { return r.name == name; });
  return it == roles.end() ? nullptr : &*it;
}

const ValueSpec* ValueSchema::find_role_value(std::string_view key) const {
  const auto it = std::find_if(role_values.begin(), role_values.end(),
                               [&](const ValueSpec& v) { return v.key == key; });
  return it == role_values.end() ? nullptr : &*it;
}

const ValueSchema& builtin_schema(api::JobKind kind) {
  static const std::array<ValueSchema, 3> schemas = {make_schema(api::JobKind::TFJob),
                                                     make_schema(api::JobKind::PyTorchJob),
                                                     make_schema(api::JobKind::MPIJob)};
  return schemas[static_cast<std::size_t>(kind)];
}

void check_values(const json& layer, const ValueSchema& schema, const ValueOrigin& origin) {
  LayerChecker checker(schema, origin);
  checker.check(layer);
  checker.finish();
}

void require_image(const json& values, const ValueSchema& schema) {
  auto has_image = [](const json& v) {
    return v.is_object() && v.contains("image") && v["image"].is_string() &&
           !v["image"].get_ref<const std::string&>().empty();
  };
  if (has_image(values))
    return;
  const json derived = render_context(values)["derived"];
  auto replicas = [&](std::string_view role) -> std::int64_t {
    if (role == "chief")
      return derived.value("chiefReplicas", 0);
    if (role == "ps")
      return derived.value("psReplicas", 0);
    if (role == "evaluator")
      return derived.value("evaluatorReplicas", 0);
    if (role == "master")
      return derived.value("masterReplicas", 0);
    if (role == "launcher")
      return 1;
    if (schema.kind == api::JobKind::PyTorchJob)
      return derived.value("pytorchWorkers", 0);
    return derived.value("workers", 0);
  };
  std::vector<std::string> missing;
  for (const RoleSpec& role : schema.roles) {
    const std::string name(role.name);
    if (replicas(role.name) > 0 && !(values.contains(name) && has_image(values[name])))
      missing.push_back(fmt::format("--{}-image", name));
  }
  if (missing.empty())
    return;
  throw Error(ErrorKind::Usage,
              fmt::format("--image is required (the container image of every replica; per role: "
                          "{})",
                          fmt::join(missing, ", ")));
}

json parse_volume(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    throw Error(ErrorKind::Usage,
                fmt::format("expected PVC:MOUNT_PATH[:ro|:rw], got \"{}\"", text));
  }
  json v = {{"pvc", std::string(text.substr(0, colon))}};
  std::string_view mount = text.substr(colon + 1);
  if (const auto mode = mount.find(':'); mode != std::string_view::npos) {
    const std::string_view flag = mount.substr(mode + 1);
    if (flag != "ro" && flag != "rw") {
      throw Error(ErrorKind::Usage,
                  fmt::format("mode \"{}\" in \"{}\" is not ro or rw", flag, text));
    }
    v["readOnly"] = flag == "ro";
    mount = mount.substr(0, mode);
  }
  if (!mount.starts_with('/')) {
    throw Error(ErrorKind::Usage,
                fmt::format("mount path \"{}\" in \"{}\" must be absolute", mount, text));
  }
  v["mount"] = std::string(mount);
  return v;
}

}  // namespace trainctl::render
