#include "controller/mpi.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>

#include "api/job.h"
#include "api/job_view.h"
#include "api/well_known.h"
#include "controller/objects.h"
#include "controller/replica_pod.h"
#include "error.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::controller::mpi {
namespace {

using nlohmann::json;

constexpr api::JobKind kKind = api::JobKind::MPIJob;
constexpr std::string_view kConfigMountPath = "/etc/mpi";
constexpr std::string_view kRootSshPath = "/root/.ssh";
constexpr std::string_view kConfigVolume = "mpi-job-config";
constexpr std::string_view kSshVolume = "ssh-auth";
constexpr int kSecretMode = 0600;
constexpr int kHostfileMode = 0444;
constexpr int kScriptMode = 0555;

enum class Implementation { OpenMPI, Intel, MPICH };

/// The MPIJob fields the builders read, with the MPI Operator's defaults for absent ones.
struct MpiSpec {
  std::string name;
  std::string namespace_;
  int slots_per_worker = 1;
  bool run_launcher_as_worker = false;
  std::string ssh_auth_mount_path;
  Implementation implementation = Implementation::OpenMPI;
  bool wait_for_workers_ready = false;
  int worker_replicas = 0;
};

Implementation parse_implementation(const MpiSpec& spec, std::string_view value) {
  if (value == "OpenMPI")
    return Implementation::OpenMPI;
  if (value == "Intel")
    return Implementation::Intel;
  if (value == "MPICH")
    return Implementation::MPICH;
  throw Error(
      ErrorKind::Validation,
      fmt::format("MPIJob {}/{}: spec.mpiImplementation: unsupported value \"{}\" (OpenMPI, "
                  "Intel or MPICH)",
                  spec.namespace_, spec.name, value));
}

MpiSpec read_spec(const json& job) {
  const json& meta = object_member(job, "metadata");
  const json& spec = object_member(job, "spec");
  MpiSpec result;
  result.name = meta.value("name", "");
  result.namespace_ = meta.value("namespace", "default");
  result.slots_per_worker = spec.value("slotsPerWorker", 1);
  result.run_launcher_as_worker = spec.value("runLauncherAsWorker", false);
  result.ssh_auth_mount_path = spec.value("sshAuthMountPath", std::string(kRootSshPath));
  result.implementation = parse_implementation(result, spec.value("mpiImplementation", "OpenMPI"));
  result.wait_for_workers_ready =
      spec.value("launcherCreationPolicy", "AtStartup") == "WaitForWorkersReady";
  result.worker_replicas = api::JobView(job).replica_count("Worker");
  return result;
}

std::string launcher_name(const MpiSpec& spec) {
  return spec.name + "-launcher";
}

/// `<host>.<job>.<ns>.svc[.<domain>]`: a pod's name under the job's headless Service.
std::string host_fqdn(const MpiSpec& spec, std::string_view host, const PlanOptions& options) {
  std::string fqdn = fmt::format("{}.{}.{}.svc", host, spec.name, spec.namespace_);
  if (!options.cluster_domain.empty())
    fqdn += "." + options.cluster_domain;
  return fqdn;
}

std::string hostfile_line(const MpiSpec& spec, std::string_view host, const PlanOptions& options) {
  const std::string fqdn = host_fqdn(spec, host, options);
  if (spec.implementation == Implementation::OpenMPI)
    return fmt::format("{} slots={}\n", fqdn, spec.slots_per_worker);
  return fmt::format("{}:{}\n", fqdn, spec.slots_per_worker);
}

/// The metadata of the job's ConfigMap, Secret, Service and launcher Job: the MPI Operator's
/// `app: <job>` (mpi_job_controller.go newConfigMap, newService, newSSHAuthSecret,
/// newLauncherJob) plus the label the controller's informers select on, controller owner.
json object_meta(const json& job, const MpiSpec& spec, std::string name) {
  json labels = managed_labels(spec.name);
  labels["app"] = spec.name;
  return {{"name", std::move(name)},
          {"namespace", spec.namespace_},
          {"labels", std::move(labels)},
          {"ownerReferences", json::array({controller_reference(job)})}};
}

/// A copy of the replica's pod template; throws when it has no container to configure.
json pod_template(const json& job, const MpiSpec& spec, const std::string& type) {
  json tmpl = api::JobView(job).replica_spec(type).value("template", json::object());
  const json& containers = object_member(tmpl, "spec").value("containers", json::array());
  if (!containers.is_array() || containers.empty() || !containers[0].is_object()) {
    throw Error(ErrorKind::Validation,
                fmt::format("MPIJob {}/{}: spec.mpiReplicaSpecs.{}.template.spec.containers: at "
                            "least one container is required",
                            spec.namespace_, spec.name, type));
  }
  return tmpl;
}

/// The template's labels with the MPI Operator's (which win; mpi_job_controller.go defaultLabels):
/// operator-name, job-name and job-role; workers also get replica-index, the launcher nothing
/// more (no replica-type on either).
void set_pod_labels(json& tmpl, const MpiSpec& spec, const std::string& type,
                    std::optional<int> index) {
  json& pod_labels = tmpl["metadata"]["labels"];
  if (!pod_labels.is_object())
    pod_labels = json::object();
  pod_labels.update(job_labels(kKind, spec.name));
  pod_labels[std::string(api::labels::job_role)] = to_lower(type);
  if (index)
    pod_labels[std::string(api::labels::replica_index)] = std::to_string(*index);
}

/// restartPolicy from the replica spec (ExitCode runs pods with Never and restarts them itself).
void set_restart_policy(json& pod_spec, const json& job, const std::string& type) {
  std::string policy = api::JobView(job).replica_spec(type).value(
      "restartPolicy", std::string(api::default_restart_policy(kKind, type)));
  pod_spec["restartPolicy"] = policy == "ExitCode" ? "Never" : policy;
}

/// Hostname and subdomain so the pod resolves under the job's Service.
void set_host_identity(json& pod_spec, const MpiSpec& spec, const std::string& hostname) {
  pod_spec["hostname"] = hostname;
  pod_spec["subdomain"] = spec.name;
  if (pod_spec.value("hostNetwork", false))
    pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet";
}

json env_var(std::string_view name, std::string_view value) {
  return {{"name", name}, {"value", value}};
}

void append(json& container, const char* field, json item) {
  json& list = container[field];
  if (!list.is_array())
    list = json::array();
  list.push_back(std::move(item));
}

/// The Secret volume with the key pair as ssh expects the files, mounted in the first container.
void mount_ssh_keys(json& pod_spec, const MpiSpec& spec) {
  json secret = {{"secretName", spec.name + "-ssh"},
                 {"items",
                  {{{"key", "ssh-privatekey"}, {"path", "id_rsa"}},
                   {{"key", "ssh-publickey"}, {"path", "id_rsa.pub"}},
                   {{"key", "ssh-publickey"}, {"path", "authorized_keys"}}}}};
  // sshd refuses keys that others can read; other mount paths keep the API default, as the
  // operator does, for images whose ssh user is not root.
  if (spec.ssh_auth_mount_path == kRootSshPath)
    secret["defaultMode"] = kSecretMode;
  append(pod_spec, "volumes", {{"name", kSshVolume}, {"secret", std::move(secret)}});
  append(pod_spec["containers"][0], "volumeMounts",
         {{"name", kSshVolume}, {"mountPath", spec.ssh_auth_mount_path}});
}

/// The environment that points the MPI implementation at /etc/mpi/hostfile and sets slots.
std::vector<json> implementation_env(const MpiSpec& spec) {
  const std::string hostfile_path = std::string(kConfigMountPath) + "/hostfile";
  const std::string slots = std::to_string(spec.slots_per_worker);
  constexpr std::string_view kSshArgs = "-o ConnectionAttempts=10";
  switch (spec.implementation) {
    case Implementation::OpenMPI:
      return {env_var("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
              env_var("OMPI_MCA_orte_default_hostfile", hostfile_path),
              env_var("OMPI_MCA_plm_rsh_args", kSshArgs),
              env_var("OMPI_MCA_orte_set_default_slots", slots)};
    case Implementation::Intel:
      return {env_var("I_MPI_HYDRA_HOST_FILE", hostfile_path),
              env_var("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", kSshArgs),
              env_var("I_MPI_PERHOST", slots)};
    case Implementation::MPICH:
      return {env_var("HYDRA_HOST_FILE", hostfile_path),
              env_var("HYDRA_LAUNCH_EXTRA_ARGS", kSshArgs)};
  }
  return {};
}

/// The ConfigMap volume at /etc/mpi in the launcher's first container.
void mount_config(json& pod_spec, const MpiSpec& spec) {
  json items = {
      {{"key", "hostfile"}, {"path", "hostfile"}, {"mode", kHostfileMode}},
      {{"key", "discover_hosts.sh"}, {"path", "discover_hosts.sh"}, {"mode", kScriptMode}}};
  append(pod_spec, "volumes",
         {{"name", kConfigVolume},
          {"configMap", {{"name", spec.name + "-config"}, {"items", std::move(items)}}}});
  append(pod_spec["containers"][0], "volumeMounts",
         {{"name", kConfigVolume}, {"mountPath", kConfigMountPath}});
}

std::string pod_phase(const json& pod) {
  return object_member(pod, "status").value("phase", "");
}

}  // namespace

std::string hostfile(const json& job, const PlanOptions& options) {
  const MpiSpec spec = read_spec(job);
  std::string out;
  if (spec.run_launcher_as_worker)
    out += hostfile_line(spec, launcher_name(spec), options);
  for (int i = 0; i < spec.worker_replicas; ++i)
    out += hostfile_line(spec, replica_name(spec.name, "Worker", i), options);
  return out;
}

std::string discover_hosts_script(const json& job, const std::vector<json>& worker_pods,
                                  const PlanOptions& options) {
  const MpiSpec spec = read_spec(job);
  std::vector<const json*> running;
  for (const json& pod : worker_pods) {
    if (pod_phase(pod) == "Running")
      running.push_back(&pod);
  }
  // By name, as the MPI Operator's updateDiscoverHostsInConfigMap: worker-10 before worker-2.
  std::sort(running.begin(), running.end(),
            [](const json* a, const json* b) { return name_of(*a) < name_of(*b); });
  std::string out = "#!/bin/sh\n";
  if (spec.run_launcher_as_worker)
    out += fmt::format("echo {}\n", host_fqdn(spec, launcher_name(spec), options));
  for (const json* pod : running)
    out += fmt::format("echo {}\n", host_fqdn(spec, (*pod)["metadata"].value("name", ""), options));
  return out;
}

json config_map(const json& job, const std::vector<json>& worker_pods, const PlanOptions& options) {
  const MpiSpec spec = read_spec(job);
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", object_meta(job, spec, spec.name + "-config")},
          {"data",
           {{"hostfile", hostfile(job, options)},
            {"discover_hosts.sh", discover_hosts_script(job, worker_pods, options)}}}};
}

json ssh_secret(const json& job, const SshKeyPair& keys) {
  const MpiSpec spec = read_spec(job);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", object_meta(job, spec, spec.name + "-ssh")},
          {"type", "kubernetes.io/ssh-auth"},
          {"data",
           {{"ssh-privatekey", base64_encode(keys.private_key_pem)},
            {"ssh-publickey", base64_encode(keys.public_key)}}}};
}

json service(const json& job) {
  const MpiSpec spec = read_spec(job);
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", object_meta(job, spec, spec.name)},
          {"spec", {{"clusterIP", "None"}, {"selector", job_labels(kKind, spec.name)}}}};
}

json worker_pod(const json& job, int index, const PlanOptions& options) {
  const MpiSpec spec = read_spec(job);
  const std::string type = "Worker";
  const std::string name = replica_name(spec.name, type, index);
  json tmpl = pod_template(job, spec, type);
  set_pod_labels(tmpl, spec, type, index);
  decorate_pod_template(tmpl, spec.name, type, options);
  json& pod_spec = tmpl["spec"];
  set_host_identity(pod_spec, spec, name);
  // Intel MPI and MPICH workers reach the launcher by its short hostname.
  const std::string domain =
      options.cluster_domain.empty() ? std::string("cluster.local") : options.cluster_domain;
  append(pod_spec["dnsConfig"], "searches",
         fmt::format("{}.{}.svc.{}", spec.name, spec.namespace_, domain));
  set_restart_policy(pod_spec, job, type);
  json& container = pod_spec["containers"][0];
  if (!container.contains("command") && !container.contains("args"))
    container["command"] = {"/usr/sbin/sshd", "-De"};
  append(container, "env", env_var("K_MPI_JOB_ROLE", "worker"));
  mount_ssh_keys(pod_spec, spec);

  json meta = object_meta(job, spec, name);
  meta["labels"] = tmpl["metadata"]["labels"];
  if (tmpl["metadata"].contains("annotations"))
    meta["annotations"] = tmpl["metadata"]["annotations"];
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", std::move(meta)},
          {"spec", std::move(pod_spec)}};
}

json launcher_job(const json& job, const PlanOptions& options) {
  const MpiSpec spec = read_spec(job);
  const std::string type = "Launcher";
  json tmpl = pod_template(job, spec, type);
  set_pod_labels(tmpl, spec, type, std::nullopt);
  decorate_pod_template(tmpl, spec.name, type, options);
  json& pod_spec = tmpl["spec"];
  set_host_identity(pod_spec, spec, launcher_name(spec));
  set_restart_policy(pod_spec, job, type);
  json& container = pod_spec["containers"][0];
  append(container, "env", env_var("K_MPI_JOB_ROLE", "launcher"));
  for (json& var : implementation_env(spec))
    append(container, "env", std::move(var));
  if (!spec.run_launcher_as_worker) {
    // Empty values keep a launcher that only runs mpirun off the GPUs of its node; Go leaves
    // the empty value out (nvidiaDisableEnvVars).
    append(container, "env", {{"name", "NVIDIA_VISIBLE_DEVICES"}});
    append(container, "env", {{"name", "NVIDIA_DRIVER_CAPABILITIES"}});
  }
  mount_ssh_keys(pod_spec, spec);
  mount_config(pod_spec, spec);
  // newLauncherPodTemplate owns the template by the MPIJob too (the Job's pods are owned by the
  // Job: the Job controller does not copy a template's owner references).
  tmpl["metadata"]["ownerReferences"] = json::array({controller_reference(job)});

  json job_spec = {{"template", std::move(tmpl)}};
  const api::RunPolicy run_policy = api::JobView(job).run_policy();
  for (const auto& [field, value] :
       {std::pair{"backoffLimit", run_policy.backoff_limit},
        {"activeDeadlineSeconds", run_policy.active_deadline_seconds},
        {"ttlSecondsAfterFinished", run_policy.ttl_seconds_after_finished}}) {
    if (value)
      job_spec[field] = *value;
  }
  if (run_policy.suspend)
    job_spec["suspend"] = true;
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", object_meta(job, spec, launcher_name(spec))},
          {"spec", std::move(job_spec)}};
}

bool launcher_may_start(const json& job, const std::vector<json>& worker_pods) {
  const MpiSpec spec = read_spec(job);
  if (!spec.wait_for_workers_ready)
    return true;
  const auto ready = std::count_if(worker_pods.begin(), worker_pods.end(), [](const json& pod) {
    return pod_phase(pod) == "Running" && condition_true(object_member(pod, "status"), "Ready");
  });
  return ready >= spec.worker_replicas;
}

MpiOutcome launcher_outcome(const json& job, const json* launcher,
                            const std::vector<json>& worker_pods) {
  const MpiSpec spec = read_spec(job);
  const std::string job_ref = spec.namespace_ + "/" + spec.name;
  if (launcher != nullptr && condition_true(object_member(*launcher, "status"), "Complete")) {
    return {.phase = MpiOutcome::Phase::Succeeded,
            .reason = "MPIJobSucceeded",
            .message = fmt::format("MPIJob {} successfully completed.", job_ref),
            .completion_time = object_member(*launcher, "status").value("completionTime", "")};
  }
  if (const json* failed =
          launcher != nullptr && condition_true(object_member(*launcher, "status"), "Failed")
              ? find_condition(object_member(*launcher, "status"), "Failed")
              : nullptr) {
    std::string reason = failed->value("reason", "");
    std::string message = failed->value("message", "");
    return {.phase = MpiOutcome::Phase::Failed,
            .reason = reason.empty() ? "MPIJobFailed" : reason,
            .message = message.empty() ? fmt::format("MPIJob {} has failed", job_ref) : message,
            .completion_time = ""};
  }
  const auto evicted = std::count_if(worker_pods.begin(), worker_pods.end(), [](const json& pod) {
    return pod_phase(pod) == "Failed" &&
           object_member(pod, "status").value("reason", "") == "Evicted";
  });
  if (evicted > 0) {
    return {.phase = MpiOutcome::Phase::Failed,
            .reason = "MPIJobEvicted",
            .message = fmt::format("{}/{} workers are evicted", evicted, worker_pods.size()),
            .completion_time = ""};
  }
  const bool workers_running =
      std::all_of(worker_pods.begin(), worker_pods.end(),
                  [](const json& pod) { return pod_phase(pod) == "Running"; });
  const int launcher_ready =
      launcher != nullptr ? object_member(*launcher, "status").value("ready", 0) : 0;
  if (launcher_ready >= 1 && workers_running &&
      static_cast<int>(worker_pods.size()) >= spec.worker_replicas) {
    return {.phase = MpiOutcome::Phase::Running,
            .reason = "MPIJobRunning",
            .message = fmt::format("MPIJob {} is running.", job_ref),
            .completion_time = ""};
  }
  return {.phase = MpiOutcome::Phase::Created,
          .reason = "MPIJobCreated",
          .message = fmt::format("MPIJob {} is created.", job_ref),
          .completion_time = ""};
}

}  // namespace trainctl::controller::mpi
