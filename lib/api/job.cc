#include "api/job.h"

#include <array>

#include "text.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 5> kTFReplicaTypes = {"Chief", "Master", "PS", "Worker",
                                                             "Evaluator"};
constexpr std::array<std::string_view, 2> kPyTorchReplicaTypes = {"Master", "Worker"};
constexpr std::array<std::string_view, 2> kMPIReplicaTypes = {"Launcher", "Worker"};

const std::array<JobKindInfo, 3> kKinds = {{
    {JobKind::TFJob, "TFJob", "kubeflow.org/v1", "tfjobs", "tfReplicaSpecs", "tensorflow",
     "tfjob-port", 2222, kTFReplicaTypes},
    {JobKind::PyTorchJob, "PyTorchJob", "kubeflow.org/v1", "pytorchjobs", "pytorchReplicaSpecs",
     "pytorch", "pytorchjob-port", 23456, kPyTorchReplicaTypes},
    {JobKind::MPIJob, "MPIJob", "kubeflow.org/v2beta1", "mpijobs", "mpiReplicaSpecs", "", "", 0,
     kMPIReplicaTypes},
}};

/// Sets `obj[key] = value` unless the key is already there.
void set_default(json& obj, const char* key, json value) {
  if (!obj.contains(key))
    obj[key] = std::move(value);
}

/// Renames case variants of the kind's replica types to their CamelCase spelling, as the
/// operators' setTypeNameToCamelCase does. A variant whose CamelCase key already exists stays,
/// so validation can report the duplicate.
void normalise_replica_types(JobKind kind, json& specs) {
  std::vector<std::pair<std::string, std::string>> renames;
  for (const auto& [key, value] : specs.items()) {
    auto canonical = canonical_replica_type(kind, key);
    if (canonical && *canonical != key && !specs.contains(std::string(*canonical)))
      renames.emplace_back(key, std::string(*canonical));
  }
  for (auto& [from, to] : renames) {
    if (specs.contains(to))
      continue;  // two variants of one type: keep the second for validation to report
    specs[to] = std::move(specs[from]);
    specs.erase(from);
  }
}

/// Adds the kind's port to its default container (or the first container when none has the
/// default name) unless a port of that name is there already.
void default_port(const JobKindInfo& info, json& replica) {
  if (info.default_port_name.empty() || !replica.contains("template"))
    return;
  json& pod = replica["template"];
  if (!pod.is_object() || !pod.contains("spec") || !pod["spec"].is_object())
    return;
  json& containers = pod["spec"]["containers"];
  if (!containers.is_array() || containers.empty())
    return;
  std::size_t index = 0;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].is_object() &&
        containers[i].value("name", json()) == info.default_container) {
      index = i;
      break;
    }
  }
  json& container = containers[index];
  if (!container.is_object())
    return;
  json& ports = container["ports"];
  if (ports.is_null())
    ports = json::array();
  if (!ports.is_array())
    return;
  for (const auto& port : ports) {
    if (port.is_object() && port.value("name", json()) == info.default_port_name)
      return;
  }
  ports.push_back({{"name", info.default_port_name}, {"containerPort", info.default_port}});
}

void default_replica(const JobKindInfo& info, const std::string& type, json& replica) {
  if (!replica.is_object())
    return;
  const int replicas = info.kind == JobKind::MPIJob && type == "Worker" ? 0 : 1;
  set_default(replica, "replicas", replicas);
  set_default(replica, "restartPolicy", default_restart_policy(info.kind, type));
  default_port(info, replica);
}

void default_pytorch(json& spec) {
  json* elastic = spec.contains("elasticPolicy") && spec["elasticPolicy"].is_object()
                      ? &spec["elasticPolicy"]
                      : nullptr;
  if (elastic) {
    json& e = *elastic;
    const bool has_min = e.contains("minReplicas");
    const bool has_max = e.contains("maxReplicas");
    if (has_max && !has_min) {
      e["minReplicas"] = e["maxReplicas"];
    } else if (has_min && !has_max) {
      e["maxReplicas"] = e["minReplicas"];
    } else if (!has_min && !has_max) {
      const json& specs = spec["pytorchReplicaSpecs"];
      if (specs.is_object() && specs.contains("Worker") && specs["Worker"].is_object() &&
          specs["Worker"].contains("replicas")) {
        e["minReplicas"] = specs["Worker"]["replicas"];
        e["maxReplicas"] = specs["Worker"]["replicas"];
      }
    }
  }
  if (!elastic || !elastic->contains("nProcPerNode"))
    set_default(spec, "nprocPerNode", "auto");
}

void default_mpi(json& spec) {
  set_default(spec, "slotsPerWorker", 1);
  set_default(spec, "sshAuthMountPath", "/root/.ssh");
  set_default(spec, "mpiImplementation", "OpenMPI");
  set_default(spec, "launcherCreationPolicy", "AtStartup");
}

}  // namespace

const JobKindInfo& job_kind_info(JobKind kind) {
  return kKinds[static_cast<std::size_t>(kind)];
}

std::span<const JobKindInfo> job_kinds() {
  return kKinds;
}

std::optional<JobKind> job_kind_from_name(std::string_view name) {
  for (const auto& info : kKinds) {
    if (info.name == name)
      return info.kind;
  }
  return std::nullopt;
}

std::optional<std::string_view> canonical_replica_type(JobKind kind, std::string_view key) {
  const std::string lower = to_lower(key);
  for (std::string_view type : job_kind_info(kind).replica_types) {
    if (to_lower(type) == lower)
      return type;
  }
  return std::nullopt;
}

bool is_nproc_per_node(std::string_view text) {
  if (text == "auto" || text == "cpu" || text == "gpu")
    return true;
  return !text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == text.npos &&
         text.find_first_not_of('0') != text.npos;
}

std::string_view default_restart_policy(JobKind kind, std::string_view replica_type) {
  switch (kind) {
    case JobKind::TFJob:
      return "Never";
    case JobKind::PyTorchJob:
      return "OnFailure";
    case JobKind::MPIJob:
      return replica_type == "Launcher" ? "OnFailure" : "Never";
  }
  return "Never";
}

void apply_defaults(json& job) {
  if (!job.is_object() || !job.contains("kind") || !job["kind"].is_string())
    return;
  const auto kind = job_kind_from_name(job["kind"].get_ref<const std::string&>());
  if (!kind)
    return;
  const JobKindInfo& info = job_kind_info(*kind);
  json& spec = job["spec"];
  if (spec.is_null())
    spec = json::object();
  if (!spec.is_object())
    return;
  json& run_policy = spec["runPolicy"];
  if (run_policy.is_null())
    run_policy = json::object();
  if (run_policy.is_object())
    set_default(run_policy, "cleanPodPolicy", "None");

  const std::string field(info.replica_specs_field);
  if (spec.contains(field) && spec[field].is_object()) {
    json& specs = spec[field];
    normalise_replica_types(*kind, specs);
    for (auto& [type, replica] : specs.items())
      default_replica(info, type, replica);
  }
  if (*kind == JobKind::PyTorchJob)
    default_pytorch(spec);
  if (*kind == JobKind::MPIJob)
    default_mpi(spec);
}

}  // namespace trainctl::api
