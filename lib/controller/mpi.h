#pragma once

// The objects an MPIJob (kubeflow.org/v2beta1) runs as, built the way the Kubeflow MPI Operator
// builds them: a headless Service `<job>` over the launcher and the workers, a ConfigMap
// `<job>-config` with the hostfile and discover_hosts.sh, a Secret `<job>-ssh` with the SSH key
// pair, worker pods `<job>-worker-<i>` running sshd, and a batch/v1 Job `<job>-launcher` that
// runs mpirun. Pure functions of the (defaulted, see api::apply_defaults) job and what the caches
// hold; the reconciler decides when to create or update each object.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controller/plan.h"
#include "controller/ssh_keys.h"

namespace trainctl::controller::mpi {

/// The hostfile mpirun reads: one line per worker, `<job>-worker-<i>.<job>.<ns>.svc[.<domain>]`
/// followed by ` slots=N` (OpenMPI) or `:N` (Intel, MPICH), N = spec.slotsPerWorker. With
/// runLauncherAsWorker the launcher comes first.
std::string hostfile(const nlohmann::json& job, const PlanOptions& options);

/// discover_hosts.sh for Horovod elastic: `#!/bin/sh`, then `echo <host>` for the launcher when
/// it runs as a worker and for each Running pod of `worker_pods`, ordered by pod name as the MPI
/// Operator orders them (worker-10 before worker-2).
std::string discover_hosts_script(const nlohmann::json& job,
                                  const std::vector<nlohmann::json>& worker_pods,
                                  const PlanOptions& options);

/// ConfigMap `<job>-config` holding `hostfile` and `discover_hosts.sh`.
nlohmann::json config_map(const nlohmann::json& job, const std::vector<nlohmann::json>& worker_pods,
                          const PlanOptions& options);

/// Secret `<job>-ssh` of type kubernetes.io/ssh-auth: `ssh-privatekey` and `ssh-publickey`.
nlohmann::json ssh_secret(const nlohmann::json& job, const SshKeyPair& keys);

/// Headless Service `<job>` selecting every pod of the job (launcher and workers), so that each
/// pod with subdomain `<job>` resolves as `<hostname>.<job>.<ns>.svc`.
nlohmann::json service(const nlohmann::json& job);

/// Worker pod `<job>-worker-<index>` from spec.mpiReplicaSpecs.Worker.template. Throws
/// Error(Validation) naming the field when the job has no Worker template with a container.
nlohmann::json worker_pod(const nlohmann::json& job, int index, const PlanOptions& options);

/// batch/v1 Job `<job>-launcher` from spec.mpiReplicaSpecs.Launcher.template, with the MPI
/// implementation's environment, /etc/mpi and the SSH key mounted. Throws Error(Validation)
/// naming the field when the job has no Launcher template with a container.
nlohmann::json launcher_job(const nlohmann::json& job, const PlanOptions& options);

/// Whether the launcher may be created now: always under launcherCreationPolicy AtStartup; under
/// WaitForWorkersReady once every one of spec Worker replicas exists, Running and Ready.
bool launcher_may_start(const nlohmann::json& job, const std::vector<nlohmann::json>& worker_pods);

/// Where an MPIJob stands, judged as the MPI Operator does from its launcher Job and workers.
struct MpiOutcome {
  enum class Phase { Created, Running, Succeeded, Failed };
  Phase phase = Phase::Created;
  std::string reason;   // MPIJobRunning, MPIJobSucceeded, MPIJobEvicted, the launcher's reason
  std::string message;  // what a person reads in the condition
  /// The launcher's status.completionTime when it finished; "" otherwise.
  std::string completion_time;

  bool operator==(const MpiOutcome&) const = default;
};

/// Succeeded when the launcher Job has a True Complete condition; Failed when it has a True
/// Failed condition (its reason and message, e.g. BackoffLimitExceeded) or when any worker was
/// Evicted; Running when the launcher has an active pod and every worker is Running; Created
/// otherwise. `launcher` is null while the Job does not exist.
MpiOutcome launcher_outcome(const nlohmann::json& job, const nlohmann::json* launcher,
                            const std::vector<nlohmann::json>& worker_pods);

}  // namespace trainctl::controller::mpi
