#pragma once

// The three Kubeflow job kinds trainctl runs, and the defaults their operators apply.

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace trainctl::api {

enum class JobKind { TFJob, PyTorchJob, MPIJob };

/// What the Kubeflow operators fix for one job kind: names, where replicas live, defaults.
struct JobKindInfo {
  JobKind kind;
  std::string_view name;                 // "TFJob"
  std::string_view api_version;          // "kubeflow.org/v1"
  std::string_view plural;               // "tfjobs"
  std::string_view replica_specs_field;  // "tfReplicaSpecs"
  /// The container the operator configures (ports, env); empty for MPIJob, which has none.
  std::string_view default_container;
  std::string_view default_port_name;  // empty for MPIJob
  int default_port;                    // 0 for MPIJob
  /// Replica types in the operator's order, CamelCase as the API spells them.
  std::span<const std::string_view> replica_types;
};

const JobKindInfo& job_kind_info(JobKind kind);
/// All kinds, in the order TFJob, PyTorchJob, MPIJob.
std::span<const JobKindInfo> job_kinds();
/// The kind whose `kind` field is `name` (exact spelling), or nullopt.
std::optional<JobKind> job_kind_from_name(std::string_view name);

/// The CamelCase replica type that `key` names in any letter case ("ps" -> "PS"), or nullopt when
/// the kind has no such replica type.
std::optional<std::string_view> canonical_replica_type(JobKind kind, std::string_view key);

/// Whether `text` is a value PyTorchJob's spec.nprocPerNode (torchrun's --nproc-per-node) takes:
/// "auto", "cpu", "gpu" or a positive integer such as "4".
bool is_nproc_per_node(std::string_view text);

/// The restart policy a replica gets when it names none: TFJob Never, PyTorchJob OnFailure,
/// MPIJob Launcher OnFailure and Worker Never.
std::string_view default_restart_policy(JobKind kind, std::string_view replica_type);

/// Fills in what the Kubeflow operators default, in place: replica-type keys to CamelCase,
/// replicas, restartPolicy, the default container's port, runPolicy.cleanPodPolicy and the
/// kind's own fields (PyTorch nprocPerNode and elasticPolicy bounds; MPI slotsPerWorker,
/// sshAuthMountPath, mpiImplementation, launcherCreationPolicy). Everything else, pod templates
/// included, is left as it is. Never throws: a malformed object is left for validate_job to
/// report, and an unknown kind is left alone. Idempotent.
void apply_defaults(nlohmann::json& job);

}  // namespace trainctl::api
