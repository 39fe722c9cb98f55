#include "controller/mpi.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "error.h"
#include "tests/support/expect_error.h"
#include "text.h"

namespace trainctl::controller::mpi {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json make_job(const json& spec_patch = json::object()) {
  json job = json::parse(R"({
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi", "namespace": "team", "uid": "uid-1"},
    "spec": {
      "slotsPerWorker": 2,
      "runPolicy": {"cleanPodPolicy": "Running"},
      "mpiReplicaSpecs": {
        "Launcher": {
          "replicas": 1,
          "template": {"spec": {"containers": [
            {"name": "launcher", "image": "mpi:1", "command": ["mpirun", "/pi"],
             "env": [{"name": "USER_VAR", "value": "1"}]}]}}
        },
        "Worker": {
          "replicas": 2,
          "template": {
            "metadata": {"labels": {"team": "a", "training.kubeflow.org/job-name": "wrong"},
                         "annotations": {"note": "kept"}},
            "spec": {"containers": [{"name": "worker", "image": "mpi:1"}]}
          }
        }
      }
    }
  })");
  job["spec"].merge_patch(spec_patch);
  return job;
}

json make_pod(const std::string& name, int index, const std::string& phase, bool ready = false) {
  json pod = {{"metadata",
               {{"name", name},
                {"namespace", "team"},
                {"labels", {{"training.kubeflow.org/replica-index", std::to_string(index)}}}}},
              {"status", {{"phase", phase}}}};
  if (ready)
    pod["status"]["conditions"] = {{{"type", "Ready"}, {"status", "True"}}};
  return pod;
}

PlanOptions options(std::string cluster_domain = "") {
  PlanOptions result;
  result.cluster_domain = std::move(cluster_domain);
  return result;
}

/// The value of env var `name` in the first container of a pod spec; "<unset>" when absent.
std::string env_of(const json& pod_spec, const std::string& name) {
  std::string value = "<unset>";
  for (const auto& var : pod_spec["containers"][0].value("env", json::array())) {
    if (var["name"] == name)
      value = var.value("value", "");
  }
  return value;
}

const json& volume(const json& pod_spec, const std::string& name) {
  for (const auto& v : pod_spec["volumes"]) {
    if (v["name"] == name)
      return v;
  }
  static const json none;
  ADD_FAILURE() << "no volume " << name;
  return none;
}

void expect_owned_by_job(const json& object) {
  const json& refs = object["metadata"]["ownerReferences"];
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0], json::parse(R"({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
      "name": "pi", "uid": "uid-1", "controller": true, "blockOwnerDeletion": true})"));
}

TEST(MpiHostfileTest, OpenMpiListsEveryWorkerWithSlots) {
  EXPECT_EQ(hostfile(make_job(), options()),
            "pi-worker-0.pi.team.svc slots=2\n"
            "pi-worker-1.pi.team.svc slots=2\n");
}

TEST(MpiHostfileTest, IntelAndMpichUseHostColonSlotsAndTheClusterDomain) {
  const std::string expected =
      "pi-worker-0.pi.team.svc.cluster.local:2\n"
      "pi-worker-1.pi.team.svc.cluster.local:2\n";
  EXPECT_EQ(hostfile(make_job({{"mpiImplementation", "Intel"}}), options("cluster.local")),
            expected);
  EXPECT_EQ(hostfile(make_job({{"mpiImplementation", "MPICH"}}), options("cluster.local")),
            expected);
}

TEST(MpiHostfileTest, LauncherRunningAsWorkerComesFirst) {
  EXPECT_EQ(hostfile(make_job({{"runLauncherAsWorker", true}, {"slotsPerWorker", 1}}), options()),
            "pi-launcher.pi.team.svc slots=1\n"
            "pi-worker-0.pi.team.svc slots=1\n"
            "pi-worker-1.pi.team.svc slots=1\n");
}

TEST(MpiHostfileTest, UnknownImplementationIsAValidationError) {
  const Error e = testing::expect_error([] {
    hostfile(make_job({{"mpiImplementation", "LAM"}}), options());
  });
  EXPECT_EQ(e.kind(), ErrorKind::Validation);
  EXPECT_THAT(e.message(), HasSubstr("team/pi: spec.mpiImplementation"));
}

// Upstream: mpi-operator v0.6 mpi_job_controller.go updateDiscoverHostsInConfigMap sorts the
// running pods by name.
TEST(MpiDiscoverHostsTest, ListsOnlyRunningWorkersInNameOrder) {
  const std::vector<json> pods = {
      make_pod("pi-worker-10", 10, "Running"), make_pod("pi-worker-1", 1, "Running"),
      make_pod("pi-worker-0", 0, "Pending"),   make_pod("pi-worker-3", 3, "Failed"),
      make_pod("pi-worker-2", 2, "Running"),
  };
  EXPECT_EQ(discover_hosts_script(make_job(), pods, options()),
            "#!/bin/sh\n"
            "echo pi-worker-1.pi.team.svc\n"
            "echo pi-worker-10.pi.team.svc\n"
            "echo pi-worker-2.pi.team.svc\n");
}

TEST(MpiDiscoverHostsTest, LauncherAsWorkerIsAlwaysListed) {
  EXPECT_EQ(discover_hosts_script(make_job({{"runLauncherAsWorker", true}}), {}, options("c.io")),
            "#!/bin/sh\necho pi-launcher.pi.team.svc.c.io\n");
}

// Upstream: mpi_job_controller.go newConfigMap labels it `app: <job>`; the job-name label is
// trainctl's, for its informers' selector.
TEST(MpiConfigMapTest, HoldsHostfileAndScriptWithJobLabelsAndOwner) {
  const json cm = config_map(make_job(), {make_pod("pi-worker-0", 0, "Running")}, options());
  EXPECT_EQ(cm["kind"], "ConfigMap");
  EXPECT_EQ(cm["metadata"]["name"], "pi-config");
  EXPECT_EQ(cm["metadata"]["namespace"], "team");
  EXPECT_EQ(cm["metadata"]["labels"],
            json({{"training.kubeflow.org/job-name", "pi"}, {"app", "pi"}}));
  expect_owned_by_job(cm);
  EXPECT_EQ(cm["data"]["hostfile"], hostfile(make_job(), options()));
  EXPECT_EQ(cm["data"]["discover_hosts.sh"], "#!/bin/sh\necho pi-worker-0.pi.team.svc\n");
}

TEST(MpiSecretTest, IsAnSshAuthSecretWithBase64Keys) {
  const json secret = ssh_secret(
      make_job(), {.private_key_pem = "PRIVATE\n", .public_key = "ecdsa-sha2-nistp521 AAAA\n"});
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["metadata"]["name"], "pi-ssh");
  EXPECT_EQ(secret["type"], "kubernetes.io/ssh-auth");
  EXPECT_EQ(secret["metadata"]["labels"]["app"], "pi");  // upstream newSSHAuthSecret
  expect_owned_by_job(secret);
  ASSERT_EQ(secret["data"].size(), 2u);
  EXPECT_EQ(base64_decode(secret["data"]["ssh-privatekey"].get<std::string>()), "PRIVATE\n");
  EXPECT_EQ(base64_decode(secret["data"]["ssh-publickey"].get<std::string>()),
            "ecdsa-sha2-nistp521 AAAA\n");
}

// Upstream: mpi_job_controller.go newJobService / newService.
TEST(MpiServiceTest, HeadlessServiceSelectsEveryPodOfTheJob) {
  const json svc = service(make_job());
  EXPECT_EQ(svc["metadata"]["name"], "pi");
  EXPECT_EQ(svc["metadata"]["labels"]["app"], "pi");
  expect_owned_by_job(svc);
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["selector"], json({{"training.kubeflow.org/operator-name", "mpi-operator"},
                                           {"training.kubeflow.org/job-name", "pi"}}));
}

// Upstream: mpi_job_controller.go newWorker (defaultLabels + replica-index, no replica-type).
TEST(MpiWorkerPodTest, RunsSshdUnderTheJobServiceWithTheKeyMounted) {
  const json pod = worker_pod(make_job(), 1, options());
  EXPECT_EQ(pod["metadata"]["name"], "pi-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "team");
  expect_owned_by_job(pod);
  const json& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels["team"], "a");
  EXPECT_EQ(labels["training.kubeflow.org/job-name"], "pi");  // generated labels win
  EXPECT_EQ(labels["training.kubeflow.org/operator-name"], "mpi-operator");
  EXPECT_FALSE(labels.contains("training.kubeflow.org/replica-type"));
  EXPECT_EQ(labels["training.kubeflow.org/replica-index"], "1");
  EXPECT_EQ(labels["training.kubeflow.org/job-role"], "worker");
  EXPECT_EQ(pod["metadata"]["annotations"]["note"], "kept");

  const json& spec = pod["spec"];
  EXPECT_EQ(spec["hostname"], "pi-worker-1");
  EXPECT_EQ(spec["subdomain"], "pi");
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["dnsConfig"]["searches"], json({"pi.team.svc.cluster.local"}));
  EXPECT_FALSE(spec.contains("schedulerName"));
  EXPECT_EQ(spec["containers"][0]["command"], json({"/usr/sbin/sshd", "-De"}));
  EXPECT_EQ(env_of(spec, "K_MPI_JOB_ROLE"), "worker");
  EXPECT_EQ(volume(spec, "ssh-auth"), json::parse(R"({"name": "ssh-auth", "secret": {
      "secretName": "pi-ssh", "defaultMode": 384, "items": [
        {"key": "ssh-privatekey", "path": "id_rsa"},
        {"key": "ssh-publickey", "path": "id_rsa.pub"},
        {"key": "ssh-publickey", "path": "authorized_keys"}]}})"));
  EXPECT_EQ(spec["containers"][0]["volumeMounts"],
            json::parse(R"([{"name": "ssh-auth", "mountPath": "/root/.ssh"}])"));
}

TEST(MpiWorkerPodTest, KeepsTheUsersCommandAndMountPath) {
  json job = make_job({{"sshAuthMountPath", "/home/mpiuser/.ssh"}});
  job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = {"x"};
  job["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode";
  const json pod = worker_pod(job, 0, options("example.org"));
  const json& spec = pod["spec"];
  EXPECT_FALSE(spec["containers"][0].contains("command"));
  EXPECT_EQ(spec["containers"][0]["volumeMounts"][0]["mountPath"], "/home/mpiuser/.ssh");
  EXPECT_FALSE(volume(spec, "ssh-auth")["secret"].contains("defaultMode"));
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["dnsConfig"]["searches"], json({"pi.team.svc.example.org"}));
}

TEST(MpiWorkerPodTest, GangSchedulerDecidesSchedulerNameAndGroup) {
  PlanOptions volcano = options();
  volcano.gang_scheduler = GangScheduler::Volcano;
  json pod = worker_pod(make_job(), 0, volcano);
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "pi");

  PlanOptions builtin = options();
  pod = worker_pod(make_job(), 0, builtin);
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "pi");

  PlanOptions none = options();
  none.gang_scheduler = GangScheduler::None;
  none.istio_namespace = IstioNamespace::Injected;
  pod = worker_pod(make_job(), 0, none);
  EXPECT_FALSE(pod["metadata"]["annotations"].contains("scheduling.k8s.io/group-name"));
  EXPECT_EQ(pod["metadata"]["annotations"]["proxy.istio.io/config"],
            R"({"holdApplicationUntilProxyStarts": true})");
}

TEST(MpiWorkerPodTest, MissingTemplateNamesTheField) {
  json job = make_job();
  job["spec"]["mpiReplicaSpecs"].erase("Worker");
  const Error e = testing::expect_error([&] { worker_pod(job, 0, options()); });
  EXPECT_EQ(e.kind(), ErrorKind::Validation);
  EXPECT_THAT(e.message(), HasSubstr("spec.mpiReplicaSpecs.Worker.template.spec.containers"));
}

TEST(MpiLauncherJobTest, OpenMpiEnvironmentVolumesAndRunPolicy) {
  const json job = launcher_job(make_job({{"runPolicy",
                                           {{"backoffLimit", 3},
                                            {"activeDeadlineSeconds", 600},
                                            {"ttlSecondsAfterFinished", 60}}}}),
                                options());
  EXPECT_EQ(job["apiVersion"], "batch/v1");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["metadata"]["name"], "pi-launcher");
  expect_owned_by_job(job);
  EXPECT_EQ(job["spec"]["backoffLimit"], 3);
  EXPECT_EQ(job["spec"]["activeDeadlineSeconds"], 600);
  EXPECT_EQ(job["spec"]["ttlSecondsAfterFinished"], 60);
  EXPECT_FALSE(job["spec"].contains("suspend"));

  const json& tmpl = job["spec"]["template"];
  // Upstream newLauncherPodTemplate: defaultLabels only (no replica-type, no replica-index).
  EXPECT_EQ(job["metadata"]["labels"]["app"], "pi");
  EXPECT_EQ(tmpl["metadata"]["labels"]["training.kubeflow.org/operator-name"], "mpi-operator");
  EXPECT_FALSE(tmpl["metadata"]["labels"].contains("training.kubeflow.org/replica-type"));
  EXPECT_FALSE(tmpl["metadata"]["labels"].contains("training.kubeflow.org/replica-index"));
  EXPECT_EQ(tmpl["metadata"]["labels"]["training.kubeflow.org/job-role"], "launcher");
  const json& spec = tmpl["spec"];
  EXPECT_EQ(spec["hostname"], "pi-launcher");
  EXPECT_EQ(spec["subdomain"], "pi");
  EXPECT_EQ(spec["restartPolicy"], "OnFailure");
  EXPECT_EQ(spec["containers"][0]["command"], json({"mpirun", "/pi"}));
  EXPECT_EQ(spec["containers"][0]["env"], json::parse(R"([
      {"name": "USER_VAR", "value": "1"},
      {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
      {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
      {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
      {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
      {"name": "OMPI_MCA_orte_set_default_slots", "value": "2"},
      {"name": "NVIDIA_VISIBLE_DEVICES"},
      {"name": "NVIDIA_DRIVER_CAPABILITIES"}])"));

  EXPECT_EQ(volume(spec, "mpi-job-config"), json::parse(R"({"name": "mpi-job-config",
      "configMap": {"name": "pi-config", "items": [
        {"key": "hostfile", "path": "hostfile", "mode": 292},
        {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 365}]}})"));
  EXPECT_EQ(volume(spec, "ssh-auth")["secret"]["secretName"], "pi-ssh");
  EXPECT_EQ(spec["containers"][0]["volumeMounts"], json::parse(R"([
      {"name": "ssh-auth", "mountPath": "/root/.ssh"},
      {"name": "mpi-job-config", "mountPath": "/etc/mpi"}])"));
}

TEST(MpiLauncherJobTest, IntelAndMpichEnvironment) {
  json spec = launcher_job(make_job({{"mpiImplementation", "Intel"}}),
                           options())["spec"]["template"]["spec"];
  EXPECT_EQ(env_of(spec, "I_MPI_HYDRA_HOST_FILE"), "/etc/mpi/hostfile");
  EXPECT_EQ(env_of(spec, "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"), "-o ConnectionAttempts=10");
  EXPECT_EQ(env_of(spec, "I_MPI_PERHOST"), "2");
  EXPECT_EQ(env_of(spec, "OMPI_MCA_orte_default_hostfile"), "<unset>");

  spec = launcher_job(make_job({{"mpiImplementation", "MPICH"}, {"runLauncherAsWorker", true}}),
                      options())["spec"]["template"]["spec"];
  EXPECT_EQ(env_of(spec, "HYDRA_HOST_FILE"), "/etc/mpi/hostfile");
  EXPECT_EQ(env_of(spec, "HYDRA_LAUNCH_EXTRA_ARGS"), "-o ConnectionAttempts=10");
  EXPECT_EQ(env_of(spec, "I_MPI_PERHOST"), "<unset>");
  EXPECT_EQ(env_of(spec, "NVIDIA_VISIBLE_DEVICES"), "<unset>");  // the launcher uses its GPUs
}

TEST(MpiLauncherJobTest, SuspendedJobMakesASuspendedLauncher) {
  const json job = launcher_job(make_job({{"runPolicy", {{"suspend", true}}}}), options());
  EXPECT_EQ(job["spec"]["suspend"], true);
  EXPECT_FALSE(job["spec"].contains("backoffLimit"));
}

TEST(MpiLauncherStartTest, AtStartupNeedsNoWorkers) {
  EXPECT_TRUE(launcher_may_start(make_job(), {}));
}

TEST(MpiLauncherStartTest, WaitForWorkersReadyWaitsForEveryWorkerReady) {
  const json job = make_job({{"launcherCreationPolicy", "WaitForWorkersReady"}});
  EXPECT_FALSE(launcher_may_start(job, {}));
  EXPECT_FALSE(launcher_may_start(job, {make_pod("pi-worker-0", 0, "Running", true)}));
  EXPECT_FALSE(launcher_may_start(job, {make_pod("pi-worker-0", 0, "Running", true),
                                        make_pod("pi-worker-1", 1, "Running", false)}));
  EXPECT_TRUE(launcher_may_start(job, {make_pod("pi-worker-0", 0, "Running", true),
                                       make_pod("pi-worker-1", 1, "Running", true)}));
}

json launcher_with(const json& status) {
  return {{"metadata", {{"name", "pi-launcher"}}}, {"status", status}};
}

TEST(MpiOutcomeTest, CompleteLauncherSucceedsWithItsCompletionTime) {
  const json launcher = launcher_with(json::parse(R"({"succeeded": 1,
      "completionTime": "2024-05-01T12:00:00Z",
      "conditions": [{"type": "Complete", "status": "True"}]})"));
  const MpiOutcome outcome = launcher_outcome(make_job(), &launcher, {});
  EXPECT_EQ(outcome.phase, MpiOutcome::Phase::Succeeded);
  EXPECT_EQ(outcome.reason, "MPIJobSucceeded");
  EXPECT_EQ(outcome.message, "MPIJob team/pi successfully completed.");
  EXPECT_EQ(outcome.completion_time, "2024-05-01T12:00:00Z");
}

TEST(MpiOutcomeTest, FailedLauncherFailsWithItsReason) {
  const json launcher = launcher_with(json::parse(R"({"failed": 4, "conditions": [
      {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
       "message": "Job has reached the specified backoff limit"}]})"));
  const MpiOutcome outcome = launcher_outcome(make_job(), &launcher, {});
  EXPECT_EQ(outcome.phase, MpiOutcome::Phase::Failed);
  EXPECT_EQ(outcome.reason, "BackoffLimitExceeded");
  EXPECT_EQ(outcome.message, "Job has reached the specified backoff limit");

  const json bare = launcher_with(json::parse(R"({"conditions": [
      {"type": "Failed", "status": "True"}]})"));
  EXPECT_EQ(launcher_outcome(make_job(), &bare, {}),
            (MpiOutcome{.phase = MpiOutcome::Phase::Failed,
                        .reason = "MPIJobFailed",
                        .message = "MPIJob team/pi has failed",
                        .completion_time = ""}));
}

TEST(MpiOutcomeTest, AnEvictedWorkerFailsTheJob) {
  json evicted = make_pod("pi-worker-1", 1, "Failed");
  evicted["status"]["reason"] = "Evicted";
  const MpiOutcome outcome =
      launcher_outcome(make_job(), nullptr, {make_pod("pi-worker-0", 0, "Running"), evicted});
  EXPECT_EQ(outcome.phase, MpiOutcome::Phase::Failed);
  EXPECT_EQ(outcome.reason, "MPIJobEvicted");
  EXPECT_EQ(outcome.message, "1/2 workers are evicted");
}

TEST(MpiOutcomeTest, RunningOnceTheLauncherAndEveryWorkerRun) {
  const std::vector<json> running = {make_pod("pi-worker-0", 0, "Running"),
                                     make_pod("pi-worker-1", 1, "Running")};
  const json launcher = launcher_with({{"active", 1}, {"ready", 1}});
  EXPECT_EQ(launcher_outcome(make_job(), &launcher, running).phase, MpiOutcome::Phase::Running);
  EXPECT_EQ(launcher_outcome(make_job(), &launcher, running).reason, "MPIJobRunning");

  const json pending = launcher_with({{"active", 1}, {"ready", 0}});
  EXPECT_EQ(launcher_outcome(make_job(), &pending, running).phase, MpiOutcome::Phase::Created);
  EXPECT_EQ(launcher_outcome(make_job(), &launcher, {running[0]}).phase,
            MpiOutcome::Phase::Created);
  EXPECT_EQ(launcher_outcome(make_job(), nullptr, running).phase, MpiOutcome::Phase::Created);
}

}  // namespace
}  // namespace trainctl::controller::mpi
