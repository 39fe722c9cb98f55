#include "api/validation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>

#include "api/job.h"
#include "api/names.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxNameLength = 63;
/// What the API server appends to a generateName.
constexpr std::size_t kGeneratedSuffixLength = 5;

constexpr std::array<std::string_view, 4> kRestartPolicies = {"Always", "OnFailure", "Never",
                                                              "ExitCode"};
constexpr std::array<std::string_view, 3> kCleanPodPolicies = {"None", "Running", "All"};
constexpr std::array<std::string_view, 3> kMPIImplementations = {"OpenMPI", "Intel", "MPICH"};
constexpr std::array<std::string_view, 2> kLauncherCreationPolicies = {"AtStartup",
                                                                       "WaitForWorkersReady"};

/// The problems found so far, each tied to a field path and so to a line.
class Problems {
 public:
  explicit Problems(const SourceMap& source) : source_(source) {}

  void add(std::string_view path, std::string message) { add_at(path, path, std::move(message)); }

  /// A problem reported against `path` but found at `where`, a field under it.
  void add_at(std::string_view where, std::string_view path, std::string message) {
    found_.push_back({source_.line_of(where), std::string(path), std::move(message)});
  }

  /// Throws the whole list, in file order, when there is anything in it.
  void throw_if_any() {
    if (found_.empty())
      return;
    std::stable_sort(found_.begin(), found_.end(),
                     [](const Problem& a, const Problem& b) { return a.line < b.line; });
    std::string message;
    for (const auto& p : found_) {
      if (!message.empty())
        message += '\n';
      message += fmt::format("{}:{}: {}: {}", source_.file, p.line, p.path, p.message);
    }
    throw Error(ErrorKind::Validation, message);
  }

 private:
  struct Problem {
    int line;
    std::string path;
    std::string message;
  };
  const SourceMap& source_;
  std::vector<Problem> found_;
};

template <std::size_t N>
bool one_of(const std::array<std::string_view, N>& values, std::string_view value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

/// `v` as an integer when it is one (1.0 and "1" are not, as the API server's schema says).
std::optional<std::int64_t> integer(const json& v) {
  if (v.is_number_integer())
    return v.get<std::int64_t>();
  return std::nullopt;
}

/// Checks an optional integer field is a whole number >= 0; returns it when it is.
std::optional<std::int64_t> check_non_negative(const json& obj, const char* key,
                                               const std::string& parent, Problems& problems) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null())
    return std::nullopt;
  const std::string path = field_path(parent, key);
  const auto value = integer(obj[key]);
  if (!value) {
    problems.add(path, fmt::format("must be an integer, got {}", obj[key].dump()));
    return std::nullopt;
  }
  if (*value < 0) {
    problems.add(path, "must be >= 0");
    return std::nullopt;
  }
  return value;
}

template <std::size_t N>
void check_enum(const json& obj, const char* key, const std::string& parent,
                const std::array<std::string_view, N>& allowed, Problems& problems) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null())
    return;
  const json& v = obj[key];
  if (v.is_string() && one_of(allowed, v.get_ref<const std::string&>()))
    return;
  problems.add(field_path(parent, key), fmt::format("unsupported value {}: must be one of {}",
                                                    v.dump(), fmt::join(allowed, ", ")));
}

/// Parses a resource list's quantities; returns the valid ones in thousandths.
std::map<std::string, std::int64_t> check_quantities(const json& list, const std::string& path,
                                                     Problems& problems) {
  std::map<std::string, std::int64_t> parsed;
  if (list.is_null())
    return parsed;
  if (!list.is_object()) {
    problems.add(path, "must be a map of resource names to quantities");
    return parsed;
  }
  for (const auto& [name, value] : list.items()) {
    const std::string field = field_path(path, name);
    try {
      const std::int64_t milli = quantity_milli(value);
      if (milli < 0)
        problems.add(field,
                     fmt::format("must be greater than or equal to 0, got {}", value.dump()));
      else if (is_extended_resource(name) && milli % 1000 != 0)
        problems.add(field, fmt::format("must be a whole number, got {}: {} is counted in whole "
                                        "devices",
                                        value.dump(), name));
      else
        parsed[name] = milli;
    } catch (const Error&) {
      problems.add(field, fmt::format("invalid quantity {}: use a number with an optional suffix "
                                      "such as 100m, 1.5, 2Gi or 500M",
                                      value.dump()));
    }
  }
  return parsed;
}

void check_resources(const json& container, const std::string& path, Problems& problems) {
  if (!container.contains("resources"))
    return;
  const json& resources = container["resources"];
  const std::string resources_path = field_path(path, "resources");
  if (!resources.is_object()) {
    problems.add(resources_path, "must be an object with requests and limits");
    return;
  }
  const auto requests = check_quantities(resources.value("requests", json()),
                                         field_path(resources_path, "requests"), problems);
  const auto limits = check_quantities(resources.value("limits", json()),
                                       field_path(resources_path, "limits"), problems);
  for (const auto& [name, request] : requests) {
    const std::string field = field_path(field_path(resources_path, "requests"), name);
    auto limit = limits.find(name);
    if (limit == limits.end()) {
      if (!overcommit_allowed(name) && member(member(resources, "limits"), name).is_null())
        problems.add(field, fmt::format("needs limits.{0} as well, of the same amount: Kubernetes "
                                        "refuses a {0} request without a limit (setting the "
                                        "limit alone is enough)",
                                        name));
    } else if (request != limit->second && !overcommit_allowed(name)) {
      problems.add(field, fmt::format("must equal the {} limit ({}): Kubernetes does not "
                                      "overcommit it",
                                      name, resources["limits"][name].dump()));
    } else if (request > limit->second) {
      problems.add(field, fmt::format("must be less than or equal to the {} limit ({})", name,
                                      resources["limits"][name].dump()));
    }
  }
}

void check_env(const json& container, const std::string& path, Problems& problems) {
  const json& env = member(container, "env");
  for (std::size_t i = 0; env.is_array() && i < env.size(); ++i) {
    const json& name = member(env[i], "name");
    if (name.is_string() && !is_env_var_name(name.get_ref<const std::string&>()))
      problems.add(field_path(field_path(field_path(path, "env"), i), "name"),
                   fmt::format("{} is not a valid environment variable name: use letters, "
                               "digits, '_', '-' or '.', not starting with a digit",
                               name.dump()));
  }
}

/// Checks one list of containers; returns whether one of them is named `wanted`.
bool check_containers(const json& containers, const std::string& path, std::string_view wanted,
                      Problems& problems) {
  bool found = false;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const json& c = containers[i];
    const std::string item = field_path(path, i);
    if (!c.is_object()) {
      problems.add(item, "must be a container object");
      continue;
    }
    const json name = c.value("name", json());
    if (!name.is_string() || name.get_ref<const std::string&>().empty())
      problems.add(field_path(item, "name"), "required");
    else if (name == wanted)
      found = true;
    const json image = c.value("image", json());
    if (!image.is_string() || image.get_ref<const std::string&>().empty())
      problems.add(field_path(item, "image"), "required: every container needs an image");
    check_env(c, item, problems);
    check_resources(c, item, problems);
  }
  return found;
}

/// Labels and annotations the API server would refuse, with its words; the job's at once, a pod
/// template's only when the controller creates the pods, so both are checked here.
void check_metadata(const json& metadata, const std::string& path, Problems& problems) {
  // A label or annotation value YAML reads as a number or a boolean (`version: 1`, `gpu: true`):
  // the server's decoder refuses the whole object ("cannot unmarshal number into Go struct field
  // ObjectMeta.metadata.labels of type string"), a pod template's only when the pods are created.
  for (const char* map : {"labels", "annotations"}) {
    const std::string map_path = field_path(path, map);
    for (const auto& [key, value] : object_member(metadata, map).items()) {
      if (value.is_string() || value.is_null())
        continue;
      const std::string got = value.is_number()    ? "a number"
                              : value.is_boolean() ? "a boolean"
                              : value.is_array()   ? "a list"
                                                   : "a map";
      problems.add_at(field_path(map_path, key), map_path,
                      value.is_primitive()
                          ? fmt::format("{}: must be a string, not {}: quote it (\"{}\")", key, got,
                                        value.dump())
                          : fmt::format("{}: must be a string, not {}", key, got));
    }
  }
  const std::string labels = field_path(path, "labels");
  for (const auto& e : names::label_errors(member(metadata, "labels")))
    problems.add_at(field_path(labels, e.key), labels, e.body);
  const std::string annotations = field_path(path, "annotations");
  for (const auto& e : names::annotation_errors(member(metadata, "annotations")))
    problems.add_at(field_path(annotations, e.key), annotations, e.body);
}

void check_template(const JobKindInfo& info, const json& replica, const std::string& path,
                    Problems& problems) {
  const std::string template_path = field_path(path, "template");
  const json& pod = replica.value("template", json());
  if (!pod.is_object()) {
    problems.add(template_path, "required: a pod template with spec.containers");
    return;
  }
  check_metadata(member(pod, "metadata"), field_path(template_path, "metadata"), problems);
  const std::string containers_path = field_path(field_path(template_path, "spec"), "containers");
  const json& pod_spec = pod.value("spec", json());
  const json containers = pod_spec.is_object() ? pod_spec.value("containers", json()) : json();
  if (!containers.is_array() || containers.empty()) {
    problems.add(containers_path, "at least one container is required");
    return;
  }
  const bool named =
      check_containers(containers, containers_path, info.default_container, problems);
  if (!info.default_container.empty() && !named) {
    problems.add(containers_path,
                 fmt::format("no container named \"{}\": the {} operator runs the container of "
                             "that name",
                             info.default_container, info.name));
  }
  if (pod_spec.contains("initContainers") && pod_spec["initContainers"].is_array())
    check_containers(pod_spec["initContainers"],
                     field_path(field_path(template_path, "spec"), "initContainers"), "", problems);
}

/// The largest replica index each type will have, for the name-length check.
using MaxIndexes = std::vector<std::pair<std::string, std::int64_t>>;

MaxIndexes check_replica_specs(const JobKindInfo& info, const json& spec, Problems& problems) {
  MaxIndexes indexes;
  const std::string field(info.replica_specs_field);
  const std::string specs_path = field_path("spec", field);
  const json specs = spec.is_object() ? spec.value(field, json()) : json();
  if (!specs.is_object() || specs.empty()) {
    problems.add(specs_path, fmt::format("required: at least one replica spec ({})",
                                         fmt::join(info.replica_types, ", ")));
    return indexes;
  }
  for (const auto& [type, replica] : specs.items()) {
    const std::string path = field_path(specs_path, type);
    const auto canonical = canonical_replica_type(info.kind, type);
    if (!canonical) {
      problems.add(path, fmt::format("unknown replica type \"{}\": {} allows {}", type, info.name,
                                     fmt::join(info.replica_types, ", ")));
      continue;
    }
    if (*canonical != type) {
      problems.add(path,
                   fmt::format("duplicates {}: replica types are case-insensitive", *canonical));
      continue;
    }
    if (!replica.is_object()) {
      problems.add(path, "must be a replica spec object (replicas, restartPolicy, template)");
      continue;
    }
    if (const auto replicas = check_non_negative(replica, "replicas", path, problems);
        replicas && *replicas > 0)
      indexes.emplace_back(type, *replicas - 1);
    check_enum(replica, "restartPolicy", path, kRestartPolicies, problems);
    check_template(info, replica, path, problems);
  }
  return indexes;
}

std::int64_t replicas_of(const json& specs, const char* type) {
  if (!specs.is_object() || !specs.contains(type) || !specs[type].is_object())
    return -1;
  return integer(specs[type].value("replicas", json())).value_or(-1);
}

void check_kind_rules(const JobKindInfo& info, const json& spec, Problems& problems) {
  if (!spec.is_object())
    return;
  const std::string specs_path = field_path("spec", info.replica_specs_field);
  const json specs = spec.value(std::string(info.replica_specs_field), json());
  const auto path_of = [&](const char* type, const char* field) {
    return field_path(field_path(specs_path, type), field);
  };
  switch (info.kind) {
    case JobKind::TFJob:
      if (specs.is_object() && specs.contains("Chief") && specs.contains("Master")) {
        problems.add(field_path(specs_path, "Master"),
                     "Chief and Master cannot both be set: a TFJob has at most one chief");
      }
      for (const char* type : {"Chief", "Master"}) {
        if (replicas_of(specs, type) > 1)
          problems.add(path_of(type, "replicas"), "must be 0 or 1: a TFJob has at most one chief");
      }
      break;
    case JobKind::PyTorchJob: {
      const auto master = replicas_of(specs, "Master");
      if (master >= 0 && master != 1)
        problems.add(path_of("Master", "replicas"),
                     "must be 1: a PyTorchJob has exactly one master");
      if (spec.contains("nprocPerNode") &&
          (!spec["nprocPerNode"].is_string() ||
           !is_nproc_per_node(spec["nprocPerNode"].get_ref<const std::string&>()))) {
        problems.add("spec.nprocPerNode",
                     fmt::format("must be a string (\"auto\", \"cpu\", \"gpu\" or a count such as "
                                 "\"4\"), got {}",
                                 spec["nprocPerNode"].dump()));
      }
      const json elastic = spec.value("elasticPolicy", json());
      if (spec.contains("nprocPerNode") && elastic.is_object() &&
          elastic.contains("nProcPerNode")) {
        problems.add("spec.elasticPolicy.nProcPerNode",
                     "deprecated and conflicts with spec.nprocPerNode: set only spec.nprocPerNode");
      }
      break;
    }
    case JobKind::MPIJob: {
      const auto launcher = replicas_of(specs, "Launcher");
      if (specs.is_object() && !specs.contains("Launcher"))
        problems.add(field_path(specs_path, "Launcher"),
                     "required: an MPIJob needs exactly one launcher");
      else if (launcher >= 0 && launcher != 1)
        problems.add(path_of("Launcher", "replicas"),
                     "must be 1: an MPIJob has exactly one launcher");
      check_non_negative(spec, "slotsPerWorker", "spec", problems);
      check_enum(spec, "mpiImplementation", "spec", kMPIImplementations, problems);
      check_enum(spec, "launcherCreationPolicy", "spec", kLauncherCreationPolicies, problems);
      break;
    }
  }
}

void check_run_policy(const json& spec, Problems& problems) {
  const json policy = spec.is_object() ? spec.value("runPolicy", json()) : json();
  if (policy.is_null())
    return;
  if (!policy.is_object()) {
    problems.add("spec.runPolicy", "must be an object");
    return;
  }
  const std::string path = "spec.runPolicy";
  check_enum(policy, "cleanPodPolicy", path, kCleanPodPolicies, problems);
  for (const char* key : {"ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"})
    check_non_negative(policy, key, path, problems);
  const json scheduling = policy.value("schedulingPolicy", json());
  const std::string scheduling_path = field_path(path, "schedulingPolicy");
  if (scheduling.is_null())
    return;
  if (!scheduling.is_object()) {
    problems.add(scheduling_path, "must be an object");
    return;
  }
  check_non_negative(scheduling, "minAvailable", scheduling_path, problems);
  check_non_negative(scheduling, "scheduleTimeoutSeconds", scheduling_path, problems);
  check_quantities(scheduling.value("minResources", json()),
                   field_path(scheduling_path, "minResources"), problems);
}

/// The job name is a DNS-1035 label, and so are the pod and service names made from it.
void check_name(const json& metadata, const MaxIndexes& indexes, Problems& problems) {
  const json name = metadata.is_object() ? metadata.value("name", json()) : json();
  const json generate = metadata.is_object() ? metadata.value("generateName", json()) : json();
  const bool has_name = name.is_string() && !name.get_ref<const std::string&>().empty();
  const bool has_generate = generate.is_string() && !generate.get_ref<const std::string&>().empty();
  if (!has_name && !has_generate) {
    problems.add("metadata.name", "required (or metadata.generateName)");
    return;
  }
  const std::string path = has_name ? "metadata.name" : "metadata.generateName";
  const std::string& value = (has_name ? name : generate).get_ref<const std::string&>();
  // A generateName is a prefix: the server appends five lowercase letters and digits.
  const std::size_t suffix = has_name ? 0 : kGeneratedSuffixLength;
  if (!names::has_dns1035_label_syntax(has_name ? value : value + "x")) {
    problems.add(path, fmt::format("\"{}\" is not a valid DNS-1035 label: use lowercase letters, "
                                   "digits and '-', starting with a letter{}",
                                   value, has_name ? " and ending with a letter or digit" : ""));
    return;
  }
  std::string longest_pod;
  std::size_t longest_tail = 0;  // "-<type>-<index>"
  for (const auto& [type, index] : indexes) {
    std::string tail = fmt::format("-{}-{}", to_lower(type), index);
    if (tail.size() > longest_tail) {
      longest_tail = tail.size();
      longest_pod = fmt::format("{}{}{}", value, has_name ? "" : "xxxxx", tail);
    }
  }
  if (value.size() + suffix + longest_tail <= kMaxNameLength)
    return;
  const std::size_t available =
      kMaxNameLength > suffix + longest_tail ? kMaxNameLength - suffix - longest_tail : 0;
  if (longest_tail == 0) {
    problems.add(
        path, fmt::format("must be no more than {} characters, got {}", available, value.size()));
    return;
  }
  problems.add(path, fmt::format("too long: pod name \"{}\" would have {} characters, over the "
                                 "limit of {}; the name can have at most {} characters",
                                 longest_pod, longest_pod.size(), kMaxNameLength, available));
}

}  // namespace

void validate_job(const Manifest& manifest) {
  json job = manifest.object;
  SourceMap source = manifest.source;
  Problems problems(source);

  const json kind = job.value("kind", json());
  const auto known = kind.is_string() ? job_kind_from_name(kind.get<std::string>()) : std::nullopt;
  if (!known) {
    std::vector<std::string> supported;
    for (const auto& info : job_kinds())
      supported.push_back(fmt::format("{} ({})", info.name, info.api_version));
    problems.add(
        "kind",
        fmt::format("{}; supported kinds: {}",
                    kind.is_null() ? "required" : fmt::format("unsupported kind {}", kind.dump()),
                    fmt::join(supported, ", ")));
    problems.throw_if_any();
  }
  const JobKindInfo& info = job_kind_info(*known);
  const json api_version = job.value("apiVersion", json());
  if (api_version != info.api_version) {
    problems.add("apiVersion", fmt::format("must be {} for {}, got {}", info.api_version, info.name,
                                           api_version.is_null() ? "nothing" : api_version.dump()));
  }

  // Defaulting may rename replica-type keys; their lines move with them.
  const std::string specs_path = field_path("spec", info.replica_specs_field);
  const json original_specs = job.contains("spec") && job["spec"].is_object()
                                  ? job["spec"].value(std::string(info.replica_specs_field), json())
                                  : json();
  apply_defaults(job);
  if (original_specs.is_object()) {
    const json& specs = job["spec"][std::string(info.replica_specs_field)];
    for (const auto& [key, value] : original_specs.items()) {
      const auto canonical = canonical_replica_type(info.kind, key);
      if (canonical && *canonical != key && !specs.contains(key))
        source.rename_prefix(field_path(specs_path, key), field_path(specs_path, *canonical));
    }
  }

  const json& spec = job["spec"];
  if (!spec.is_object())
    problems.add("spec", "must be an object");
  const MaxIndexes indexes = check_replica_specs(info, spec, problems);
  check_kind_rules(info, spec, problems);
  check_run_policy(spec, problems);
  check_name(job.value("metadata", json()), indexes, problems);
  check_metadata(member(job, "metadata"), "metadata", problems);
  problems.throw_if_any();
}

}  // namespace trainctl::api
