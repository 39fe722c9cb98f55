#include "controller/job_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "api/status.h"
#include "api/well_known.h"
#include "controller/replica_network.h"
#include "controller/replica_pod.h"
#include "error.h"
#include "tests/support/expect_error.h"
#include "tests/support/plan_fixture.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace plan_testing;  // NOLINT(google-build-using-namespace)

json tf_job(const json& spec_patch = json::object()) {
  json job = json::parse(R"({
    "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
    "metadata": {"name": "mnist", "namespace": "team", "uid": "uid-1", "resourceVersion": "7"},
    "spec": {"tfReplicaSpecs": {
      "PS": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "tf:2"}]}}},
      "Worker": {"replicas": 2, "template": {
        "metadata": {"labels": {"team": "a", "training.kubeflow.org/replica-index": "9"}},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2",
                                 "env": [{"name": "USER", "value": "1"}]},
                                {"name": "sidecar", "image": "busybox"}]}}}
    }}
  })");
  job["spec"].merge_patch(spec_patch);
  return job;
}

// --- pods and services -------------------------------------------------------------------------

TEST(JobPlanTest, TFJobCreatesOnePodAndHeadlessServicePerReplica) {
  const Plan plan = plan_job(tf_job(), {}, options());
  EXPECT_THAT(names(plan, Action::Type::Create, "pods"),
              ElementsAre("mnist-ps-0", "mnist-worker-0", "mnist-worker-1"));
  EXPECT_THAT(names(plan, Action::Type::Create, "services"),
              ElementsAre("mnist-ps-0", "mnist-worker-0", "mnist-worker-1"));

  const json& pod = created(plan, "mnist-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "team");
  EXPECT_EQ(pod["metadata"]["labels"],
            json({{"team", "a"},
                  {"training.kubeflow.org/operator-name", "tfjob-controller"},
                  {"training.kubeflow.org/job-name", "mnist"},
                  {"training.kubeflow.org/replica-type", "worker"},
                  {"training.kubeflow.org/replica-index", "1"}}));
  EXPECT_EQ(pod["metadata"]["ownerReferences"],
            json::parse(R"([{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist",
                "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])"));
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["containers"][0]["ports"],
            json::parse(R"([{"name": "tfjob-port", "containerPort": 2222}])"));
  // No gang scheduler, no Istio: no decorations.
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));

  // Worker 0 is the master role when there is no Chief or Master.
  EXPECT_EQ(created(plan, "mnist-worker-0")["metadata"]["labels"]["training.kubeflow.org/job-role"],
            "master");
  EXPECT_FALSE(pod["metadata"]["labels"].contains("training.kubeflow.org/job-role"));

  const json& service = created(plan, "mnist-ps-0", "services");
  EXPECT_EQ(service["kind"], "Service");
  EXPECT_EQ(service["spec"]["clusterIP"], "None");
  EXPECT_EQ(service["spec"]["ports"], json::parse(R"([{"name": "tfjob-port", "port": 2222}])"));
  EXPECT_EQ(service["spec"]["selector"],
            json({{"training.kubeflow.org/operator-name", "tfjob-controller"},
                  {"training.kubeflow.org/job-name", "mnist"},
                  {"training.kubeflow.org/replica-type", "ps"},
                  {"training.kubeflow.org/replica-index", "0"}}));
  EXPECT_EQ(service["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_TRUE(has_event(plan, "SuccessfulCreatePod"));
  EXPECT_TRUE(has_event(plan, "SuccessfulCreateService"));
}

// What the controller checks after each reconcile (job_reconciler.cc): the state its writes leave
// plans nothing more, so the events of those writes need no plan.
TEST(JobPlanTest, ApplyPlanShowsWhatThePlansWritesLeaveAndPlanningOnItGivesNothing) {
  const json job = tf_job();
  const Plan plan = plan_job(job, {}, options());
  json after_job = job;
  Observed after;
  ASSERT_TRUE(apply_plan(plan, after_job, after));
  ASSERT_EQ(after.pods.size(), 3u);
  for (const json& pod : after.pods)
    EXPECT_EQ(pod["status"], json({{"phase", "Pending"}})) << "as the API server creates a pod";
  EXPECT_EQ(after.services.size(), 3u);
  EXPECT_EQ(condition_status(after_job, "Created"), "True");
  EXPECT_EQ(names(plan, Action::Type::Create, "pods").size(), 3u) << "the plan passed was a copy";
  const Plan next = plan_job(after_job, after, options(seconds(1)));
  EXPECT_TRUE(next.actions.empty());
  EXPECT_TRUE(next.events.empty());
  EXPECT_FALSE(next.requeue_after.has_value());

  // What it cannot follow: the job deleted, a write no planner makes.
  const auto one = [](Action action) { return Plan{.actions = {std::move(action)}}; };
  EXPECT_FALSE(apply_plan(one({.type = Action::Type::Delete,
                               .resource = kube::resources::job(api::JobKind::TFJob),
                               .name = "mnist"}),
                          after_job, after));
  EXPECT_FALSE(apply_plan(one({.type = Action::Type::Patch,
                               .resource = kube::resources::pods(),
                               .name = "mnist-ps-0",
                               .patch = "{}"}),
                          after_job, after));
  EXPECT_FALSE(apply_plan(one({.type = Action::Type::Create, .resource = kube::resources::nodes()}),
                          after_job, after));
}

TEST(JobPlanTest, ChiefIsTheMasterRole) {
  const Plan plan = plan_job(
      tf_job({{"tfReplicaSpecs",
               {{"Chief",
                 {{"template", {{"spec", {{"containers", {{{"name", "tensorflow"}}}}}}}}}}}}}),
      {}, options());
  EXPECT_EQ(created(plan, "mnist-chief-0")["metadata"]["labels"]["training.kubeflow.org/job-role"],
            "master");
  EXPECT_FALSE(created(plan, "mnist-worker-0")["metadata"]["labels"].contains(
      "training.kubeflow.org/job-role"));
}

TEST(JobPlanTest, TFConfigIsTheOperatorsJsonOnTheTensorflowContainerOnly) {
  json job = tf_job();
  job["spec"]["tfReplicaSpecs"]["Evaluator"] = job["spec"]["tfReplicaSpecs"]["PS"];
  const Plan plan = plan_job(job, {}, options());
  const json& pod = created(plan, "mnist-worker-1");
  EXPECT_EQ(
      env_value(pod["spec"]["containers"][0], "TF_CONFIG"),
      R"({"cluster":{"evaluator":["mnist-evaluator-0.team.svc:2222"],"ps":["mnist-ps-0.team.svc:2222"],)"
      R"("worker":["mnist-worker-0.team.svc:2222","mnist-worker-1.team.svc:2222"]},)"
      R"("task":{"type":"worker","index":1},"environment":"cloud"})");
  EXPECT_EQ(env_value(pod["spec"]["containers"][0], "USER"), "1");
  EXPECT_EQ(env_value(pod["spec"]["containers"][1], "TF_CONFIG"), "<unset>");
}

TEST(JobPlanTest, TFConfigUsesTheClusterDomain) {
  PlanOptions o = options();
  o.cluster_domain = "cluster.local";
  const Plan plan = plan_job(tf_job(), {}, o);
  EXPECT_THAT(env_value(created(plan, "mnist-ps-0")["spec"]["containers"][0], "TF_CONFIG"),
              HasSubstr(R"("ps":["mnist-ps-0.team.svc.cluster.local:2222"])"));
}

TEST(JobPlanTest, SingleReplicaTFJobGetsNoTFConfig) {
  json job = tf_job();
  job["spec"]["tfReplicaSpecs"].erase("PS");
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1;
  const Plan plan = plan_job(job, {}, options());
  EXPECT_EQ(env_value(created(plan, "mnist-worker-0")["spec"]["containers"][0], "TF_CONFIG"),
            "<unset>");
}

// Upstream: tensorflow/tensorflow.go genTFConfigJSONStr + convertClusterSpecToSparseClusterSpec
// (SparseClusterSpec{Worker map[int32]string; PS []string}, no Environment field).
TEST(JobPlanTest, DynamicWorkersGetTheOperatorsSparseTFConfig) {
  json job = tf_job({{"enableDynamicWorker", true}});
  job["spec"]["tfReplicaSpecs"]["Chief"] = job["spec"]["tfReplicaSpecs"]["PS"];
  const Plan plan = plan_job(job, {}, options());
  const auto tf_config = [&](const std::string& pod) {
    return env_value(created(plan, pod)["spec"]["containers"][0], "TF_CONFIG");
  };
  EXPECT_EQ(tf_config("mnist-worker-1"),
            R"({"cluster":{"worker":{"1":"mnist-worker-1.team.svc:2222"},)"
            R"("ps":["mnist-ps-0.team.svc:2222"]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(tf_config("mnist-ps-0"),
            R"({"cluster":{"worker":{},"ps":["mnist-ps-0.team.svc:2222"]},)"
            R"("task":{"type":"ps","index":0}})");
  EXPECT_EQ(tf_config("mnist-chief-0"),
            R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}})");

  // Without PS a worker's ps is Go's nil slice.
  job["spec"]["tfReplicaSpecs"].erase("PS");
  EXPECT_EQ(
      env_value(created(plan_job(job, {}, options()), "mnist-worker-0")["spec"]["containers"][0],
                "TF_CONFIG"),
      R"({"cluster":{"worker":{"0":"mnist-worker-0.team.svc:2222"},"ps":null},)"
      R"("task":{"type":"worker","index":0}})");
}

// Upstream: tensorflow/tfjob_controller.go UpdateJobStatus ("continues regardless %d Worker
// replica(s) failed as enableDynamicWorker is set true"); a failed PS still fails the job.
TEST(JobPlanTest, DynamicWorkersMayFailWithoutFailingTheJob) {
  json job = tf_job({{"enableDynamicWorker", true}});
  job["spec"]["tfReplicaSpecs"]["Chief"] = job["spec"]["tfReplicaSpecs"]["PS"];
  FakeCluster cluster = running_cluster(job);
  cluster.step(options(seconds(1)));
  cluster.set_phase("mnist-worker-1", "Failed", 1);
  const Plan plan = cluster.step(options(seconds(2)));
  EXPECT_EQ(api::job_status(cluster.job), "Running");
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Worker"]["failed"], 1);
  EXPECT_FALSE(has_event(plan, "TFJobFailed"));
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());

  cluster.set_phase("mnist-ps-0", "Failed", 1);
  cluster.step(options(seconds(3)));
  EXPECT_EQ((*condition_of(cluster.job, "Failed"))["message"],
            "TFJob team/mnist has failed because 1 PS replica(s) failed.");
}

TEST(JobPlanTest, PyTorchEnvironmentOnEveryContainer) {
  json job = pytorch_job();
  job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].push_back(
      {{"name", "helper"}});
  const Plan plan = plan_job(job, {}, options());
  const json& worker = created(plan, "ddp-worker-1");
  for (const json& container : worker["spec"]["containers"]) {
    EXPECT_EQ(env_value(container, "PYTHONUNBUFFERED"), "1");
    EXPECT_EQ(env_value(container, "MASTER_ADDR"), "ddp-master-0");
    EXPECT_EQ(env_value(container, "MASTER_PORT"), "23456");
    EXPECT_EQ(env_value(container, "PET_MASTER_ADDR"), "ddp-master-0");
    EXPECT_EQ(env_value(container, "PET_MASTER_PORT"), "23456");
    EXPECT_EQ(env_value(container, "WORLD_SIZE"), "12");
    EXPECT_EQ(env_value(container, "RANK"), "2");
    EXPECT_EQ(env_value(container, "PET_NODE_RANK"), "2");
    EXPECT_EQ(env_value(container, "PET_NPROC_PER_NODE"), "4");
    EXPECT_EQ(env_value(container, "PET_NNODES"), "3");
  }
  const json& master = created(plan, "ddp-master-0");
  EXPECT_EQ(env_value(master["spec"]["containers"][0], "RANK"), "0");
  EXPECT_EQ(master["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  EXPECT_EQ(master["spec"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(master["spec"]["containers"][0]["ports"][0]["containerPort"], 23456);
}

// Upstream: pytorch/initcontainer.go setInitContainer + initContainerTemplate: workers of a job
// with a Master only; off in trainctl unless asked for.
TEST(JobPlanTest, PyTorchInitContainerWaitsForTheMasterOnWorkersWhenAskedFor) {
  EXPECT_FALSE(created(plan_job(pytorch_job(), {}, options()), "ddp-worker-0")["spec"].contains(
      "initContainers"));
  PlanOptions o = options();
  o.pytorch_init_container = {.image = "alpine:3.10", .max_tries = 100};
  const Plan plan = plan_job(pytorch_job(), {}, o);
  EXPECT_FALSE(created(plan, "ddp-master-0")["spec"].contains("initContainers"));
  EXPECT_EQ(created(plan, "ddp-worker-1")["spec"]["initContainers"], json::parse(R"([{
      "name": "init-pytorch", "image": "alpine:3.10", "imagePullPolicy": "IfNotPresent",
      "resources": {"limits": {"cpu": "100m", "memory": "20Mi"},
                    "requests": {"cpu": "50m", "memory": "10Mi"}},
      "command": ["sh", "-c", "err=1;for i in $(seq 100); do if nslookup ddp-master-0; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err"]}])"));
  json worker_only = pytorch_job();
  worker_only["spec"]["pytorchReplicaSpecs"].erase("Master");
  EXPECT_FALSE(
      created(plan_job(worker_only, {}, o), "ddp-worker-0")["spec"].contains("initContainers"));
}

TEST(JobPlanTest, PyTorchWorldSizeCountsNonNumericNprocAsOne) {
  const Plan plan = plan_job(pytorch_job({{"nprocPerNode", "auto"}}), {}, options());
  EXPECT_EQ(env_value(created(plan, "ddp-worker-0")["spec"]["containers"][0], "WORLD_SIZE"), "3");
  EXPECT_EQ(env_value(created(plan, "ddp-worker-0")["spec"]["containers"][0], "PET_NPROC_PER_NODE"),
            "auto");
}

TEST(JobPlanTest, PyTorchElasticEnvironment) {
  json job = pytorch_job(
      {{"elasticPolicy", {{"minReplicas", 1}, {"maxReplicas", 3}, {"maxRestarts", 5}}}});
  job["spec"]["pytorchReplicaSpecs"].erase("Master");
  const Plan plan = plan_job(job, {}, options());
  const json& container = created(plan, "ddp-worker-1")["spec"]["containers"][0];
  EXPECT_EQ(env_value(container, "PET_RDZV_ENDPOINT"), "ddp-worker-0:23456");
  EXPECT_EQ(env_value(container, "PET_RDZV_BACKEND"), "c10d");
  EXPECT_EQ(env_value(container, "PET_NNODES"), "1:3");
  EXPECT_EQ(env_value(container, "PET_MAX_RESTARTS"), "5");
  EXPECT_EQ(env_value(container, "MASTER_ADDR"), "<unset>");
  EXPECT_EQ(env_value(container, "WORLD_SIZE"), "<unset>");
  // Master or not, upstream's setPodEnv (pkg/controller.v1/pytorch/envvar.go) sets it from
  // spec.nprocPerNode: torchrun starts that many processes per node.
  EXPECT_EQ(env_value(container, "PET_NPROC_PER_NODE"), "4");
}

TEST(JobPlanTest, PyTorchWorkerOnlyJobsGetNprocPerNodeOnceDefaultingToAuto) {
  // Upstream defaults spec.nprocPerNode to "auto" (kubeflow.org/v1 pytorch defaults) and its
  // setPodEnv writes PET_NPROC_PER_NODE from it whether or not there is a Master.
  json job = pytorch_job({{"elasticPolicy", {{"minReplicas", 1}, {"maxReplicas", 2}}}});
  job["spec"].erase("nprocPerNode");
  job["spec"]["pytorchReplicaSpecs"].erase("Master");
  const json env =
      created(plan_job(job, {}, options()), "ddp-worker-0")["spec"]["containers"][0].value(
          "env", json::array());
  EXPECT_EQ(
      std::count_if(env.begin(), env.end(),
                    [](const json& e) { return e.value("name", "") == "PET_NPROC_PER_NODE"; }),
      1);
  EXPECT_EQ(
      env_value(created(plan_job(job, {}, options()), "ddp-worker-0")["spec"]["containers"][0],
                "PET_NPROC_PER_NODE"),
      "auto");
  // The deprecated elasticPolicy.nProcPerNode stands in when only it is given.
  job["spec"]["elasticPolicy"]["nProcPerNode"] = 8;
  EXPECT_EQ(
      env_value(created(plan_job(job, {}, options()), "ddp-worker-1")["spec"]["containers"][0],
                "PET_NPROC_PER_NODE"),
      "8");
}

TEST(JobPlanTest, HostNetworkModeUsesAStableHostPort) {
  json job = tf_job();
  job["metadata"]["annotations"] = {{"kubedl.io/network-mode", "host"}};
  const Plan plan = plan_job(job, {}, options());
  const json& pod = created(plan, "mnist-worker-1");
  const int port = host_port(job, "Worker", 1);
  EXPECT_GE(port, 20000);
  EXPECT_LT(port, 30000);
  EXPECT_EQ(pod["spec"]["hostNetwork"], true);
  EXPECT_EQ(pod["spec"]["dnsPolicy"], "ClusterFirstWithHostNet");
  EXPECT_EQ(pod["spec"]["containers"][0]["ports"][0],
            json({{"name", "tfjob-port"}, {"containerPort", port}, {"hostPort", port}}));
  EXPECT_THAT(env_value(pod["spec"]["containers"][0], "TF_CONFIG"),
              HasSubstr(R"("worker":["mnist-worker-0.team.svc:2222","mnist-worker-1.team.svc:)" +
                        std::to_string(port) + "\"]"));
  const json& service = created(plan, "mnist-worker-1", "services");
  EXPECT_FALSE(service["spec"].contains("clusterIP"));
  EXPECT_EQ(service["spec"]["ports"][0],
            json({{"name", "tfjob-port"}, {"port", 2222}, {"targetPort", port}}));
  // Replanning picks the same port.
  EXPECT_EQ(objects(plan_job(job, {}, options())), objects(plan));
}

TEST(JobPlanTest, VolcanoAndIstioDecorations) {
  PlanOptions o = options();
  o.gang_scheduler = GangScheduler::Volcano;
  o.istio_namespace = IstioNamespace::Injected;
  FakeCluster cluster{.job = tf_job()};
  EXPECT_EQ(names(cluster.step(o), Action::Type::Create, "podgroups"),
            std::vector<std::string>{"mnist"});
  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Inqueue"}}}});  // Volcano's
  const Plan plan = cluster.step(o);
  const json& pod = created(plan, "mnist-worker-0");
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "mnist");
  EXPECT_EQ(pod["metadata"]["annotations"]["volcano.sh/task-spec"], "worker");
  EXPECT_EQ(pod["metadata"]["annotations"]["proxy.istio.io/config"],
            R"({"holdApplicationUntilProxyStarts": true})");
}

PlanOptions builtin_gang() {
  PlanOptions o = options();
  o.gang_scheduler = GangScheduler::Builtin;
  return o;
}

/// `job` planned under `o` (builtin gangs), its PodGroup admitted and every pod Running.
FakeCluster admitted_and_running(json job, const PlanOptions& o) {
  FakeCluster cluster{.job = std::move(job)};
  cluster.step(o);
  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Inqueue"}}}});
  cluster.step(o);
  cluster.set_all("Running");
  cluster.step(o);
  return cluster;
}

TEST(JobPlanTest, BuiltinGangCreatesPodsOnlyOnceThePodGroupIsAdmitted) {
  const PlanOptions o = builtin_gang();
  FakeCluster cluster{.job = tf_job()};
  Plan plan = cluster.step(o);
  EXPECT_EQ(names(plan, Action::Type::Create, "podgroups"), std::vector<std::string>{"mnist"});
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());
  EXPECT_FALSE(cluster.job["status"].contains("startTime"));

  EXPECT_TRUE(cluster.step(o).actions.empty());  // Pending: wait for admission

  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Inqueue"}}}});
  plan = cluster.step(o);
  EXPECT_EQ(names(plan, Action::Type::Create, "pods").size(), 3u);
  EXPECT_EQ(created(plan, "mnist-ps-0")["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
            "mnist");
  EXPECT_FALSE(created(plan, "mnist-ps-0")["spec"].contains("schedulerName"));
  EXPECT_EQ(cluster.job["status"]["startTime"], api::format_timestamp(kStart));
}

// A pass whose caches show the job unfinished, its pods done and no PodGroup (the last pass wrote
// the end and deleted the group and the job's cache is behind, or a user deleted the group) ends
// the job without creating a group that admission would give room to until the next pass
// (LaggingCacheTest saw a gang admitted a third time in CI). The status write still comes before
// the clean-up, on a limit too; a job that goes on running gets its group again.
TEST(JobPlanTest, AJobThatEndsInThePassThatFindsItsPodGroupGoneCreatesNone) {
  const PlanOptions o = builtin_gang();
  FakeCluster ending = admitted_and_running(tf_job(), o);
  ending.observed.pod_group.reset();
  ending.set_all("Succeeded");
  Plan plan = ending.step(o);
  EXPECT_EQ(api::job_status(ending.job), "Succeeded");
  EXPECT_TRUE(names(plan, Action::Type::Create, "podgroups").empty());
  EXPECT_FALSE(has_event(plan, "SuccessfulCreatePodGroup"));
  EXPECT_FALSE(ending.observed.pod_group.has_value());

  FakeCluster limited = admitted_and_running(
      tf_job({{"runPolicy", {{"activeDeadlineSeconds", 60}, {"cleanPodPolicy", "None"}}}}), o);
  limited.observed.pod_group.reset();
  PlanOptions late = o;
  late.now = kStart + seconds(60);
  plan = limited.step(late);
  EXPECT_EQ(api::job_status(limited.job), "Failed");
  EXPECT_TRUE(names(plan, Action::Type::Create, "podgroups").empty());
  EXPECT_FALSE(has_event(plan, "SuccessfulCreatePodGroup"));
  ASSERT_FALSE(plan.actions.empty());
  EXPECT_EQ(plan.actions.front().type, Action::Type::UpdateStatus) << "the end before the deletes";
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods").size(), 3u);

  FakeCluster running = admitted_and_running(tf_job(), o);
  running.observed.pod_group.reset();
  plan = running.step(o);
  EXPECT_EQ(names(plan, Action::Type::Create, "podgroups"), std::vector<std::string>{"mnist"});
  EXPECT_TRUE(has_event(plan, "SuccessfulCreatePodGroup"));
  EXPECT_EQ(api::job_status(running.job), "Running");
}

// A pod that fails for good takes its gang below minMember, and admission sets the PodGroup back
// to Pending (Volcano's rule). The job must still fail from its pods, without starting any pod
// (found by chaos_bench: the job stayed Running and its other pods held their queue for ever).
TEST(JobPlanTest, AStartedJobWhoseGangWentBackToPendingStillEndsButStartsNothing) {
  const PlanOptions o = builtin_gang();
  FakeCluster cluster = admitted_and_running(tf_job(), o);
  ASSERT_EQ(api::job_status(cluster.job), "Running");

  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Pending"}}}});
  cluster.set_phase("mnist-worker-1", "Failed", 1);  // restartPolicy Never
  const Plan plan = cluster.step(o);
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Worker"]["failed"], 1);
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());

  // Not yet failed, nothing to restart: a Pending gang's job neither creates nor restarts pods.
  FakeCluster waiting = admitted_and_running(tf_job(), o);
  waiting.observed.pod_group->merge_patch({{"status", {{"phase", "Pending"}}}});
  waiting.observed.pods.erase(waiting.observed.pods.begin());  // one pod gone (evicted)
  const Plan held = waiting.step(o);
  EXPECT_TRUE(names(held, Action::Type::Create, "pods").empty());
  EXPECT_EQ(api::job_status(waiting.job), "Running");
}

// A gang taken back after a schedule timeout is counted in the job's status (admission keeps the
// count on the PodGroup): condition Requeued, which is not a status of its own.
TEST(JobPlanTest, ScheduleTimeoutsOfTheGangAreCountedInTheJobsStatus) {
  const PlanOptions o = builtin_gang();
  FakeCluster cluster{.job = tf_job()};
  cluster.step(o);
  EXPECT_FALSE(condition_of(cluster.job, "Requeued"));
  cluster.observed.pod_group->merge_patch(
      {{"metadata", {{"annotations", {{"trainctl.io/schedule-timeouts", "1"}}}}}});
  cluster.step(o);
  const auto requeued = [&] { return *condition_of(cluster.job, "Requeued"); };
  EXPECT_EQ(requeued()["status"], "True");
  EXPECT_EQ(requeued()["reason"], "TFJobScheduleTimeout");
  EXPECT_EQ(requeued()["message"],
            "1 schedule timeout: its gang was taken back and requeued, as its pods were not all "
            "bound in time");
  EXPECT_EQ(api::job_status(cluster.job), "Created");  // not a status
  EXPECT_TRUE(cluster.step(o).actions.empty());        // counted once
  cluster.observed.pod_group->merge_patch(
      {{"metadata", {{"annotations", {{"trainctl.io/schedule-timeouts", "2"}}}}}});
  cluster.step(o);
  EXPECT_THAT(requeued()["message"].get<std::string>(),
              ::testing::StartsWith("2 schedule timeouts:"));
}

// --- lifecycle ---------------------------------------------------------------------------------

TEST(JobPlanTest, WholeLifecycleWritesStatusOnlyWhenItChanges) {
  FakeCluster cluster{
      .job =
          tf_job({{"tfReplicaSpecs",
                   {{"Chief",
                     {{"template", {{"spec", {{"containers", {{{"name", "tensorflow"}}}}}}}}}}}}})};
  Plan plan = cluster.step(options());
  EXPECT_EQ(names(plan, Action::Type::Create, "pods").size(), 4u);
  EXPECT_EQ(condition_status(cluster.job, "Created"), "True");
  EXPECT_EQ((*condition_of(cluster.job, "Created"))["reason"], "TFJobCreated");
  EXPECT_EQ((*condition_of(cluster.job, "Created"))["message"], "TFJob team/mnist is created.");
  EXPECT_EQ(cluster.job["status"]["startTime"], api::format_timestamp(kStart));

  // Reconciling the result again changes nothing.
  EXPECT_TRUE(cluster.step(options(seconds(5))).actions.empty());

  cluster.set_all("Running");
  plan = cluster.step(options(seconds(10)));
  ASSERT_EQ(plan.actions.size(), 1u);
  EXPECT_EQ(plan.actions[0].type, Action::Type::UpdateStatus);
  EXPECT_EQ(plan.actions[0].object["metadata"]["resourceVersion"], "7");
  // The uid is the write's precondition: a job re-created under the name refuses it (gone).
  EXPECT_EQ(plan.actions[0].object["metadata"]["uid"], "uid-1");
  EXPECT_EQ(condition_status(cluster.job, "Running"), "True");
  EXPECT_EQ((*condition_of(cluster.job, "Running"))["reason"], "TFJobRunning");
  EXPECT_EQ((*condition_of(cluster.job, "Running"))["lastTransitionTime"],
            api::format_timestamp(kStart + seconds(10)));
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Worker"], json({{"active", 2}}));
  EXPECT_EQ(cluster.job["status"]["lastReconcileTime"],
            api::format_timestamp(kStart + seconds(10)));
  EXPECT_EQ(api::job_status(cluster.job), "Running");
  EXPECT_TRUE(cluster.step(options(seconds(20))).actions.empty());

  cluster.set_phase("mnist-chief-0", "Succeeded", 0);
  plan = cluster.step(options(seconds(30)));
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
  EXPECT_EQ(condition_status(cluster.job, "Running"), "False");
  EXPECT_EQ((*condition_of(cluster.job, "Succeeded"))["message"],
            "TFJob team/mnist successfully completed.");
  EXPECT_EQ(cluster.job["status"]["completionTime"], api::format_timestamp(kStart + seconds(30)));
  // Still-running replicas count as succeeded once the job has.
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Worker"], json({{"succeeded", 2}}));
  EXPECT_TRUE(has_event(plan, "TFJobSucceeded"));
  // cleanPodPolicy defaults to None: nothing deleted.
  EXPECT_TRUE(names(plan, Action::Type::Delete, "pods").empty());
  EXPECT_TRUE(cluster.step(options(seconds(40))).actions.empty());
}

TEST(JobPlanTest, TFWithoutChiefSucceedsWhenWorkerZeroExitsZero) {
  FakeCluster cluster = running_cluster(tf_job());
  cluster.set_phase("mnist-worker-0", "Succeeded", 0);
  cluster.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
}

// A regular istio-proxy that has not quit (yet) does not hold the job: its outcome is the training
// containers', and cleanPodPolicy Running then removes the pod that is still Running.
TEST(JobPlanTest, AProxyStillRunningDoesNotHoldTheJob) {
  FakeCluster cluster = running_cluster(tf_job({{"runPolicy", {{"cleanPodPolicy", "Running"}}}}));
  json& pod = cluster.pod("mnist-worker-0");
  pod["spec"]["containers"].push_back({{"name", "istio-proxy"}, {"image", "istio/proxyv2"}});
  pod["status"]["containerStatuses"] = {
      {{"name", "tensorflow"}, {"state", {{"terminated", {{"exitCode", 0}}}}}},
      {{"name", "sidecar"}, {"state", {{"terminated", {{"exitCode", 0}}}}}},
      {{"name", "istio-proxy"}, {"state", {{"running", json::object()}}}}};
  const Plan plan = cluster.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
  EXPECT_THAT(names(plan, Action::Type::Delete, "pods"), ::testing::Contains("mnist-worker-0"));
}

// A template whose proxy.istio.io/config does not parse is created as it is, with a Warning.
TEST(JobPlanTest, UnparsableProxyConfigIsLeftAloneWithAWarning) {
  PlanOptions o = options();
  o.istio_namespace = IstioNamespace::Injected;
  const Plan plan = plan_job(
      tf_job(
          {{"tfReplicaSpecs",
            {{"PS",
              {{"template",
                {{"metadata", {{"annotations", {{"proxy.istio.io/config", "[unclosed"}}}}}}}}}}}}),
      {}, o);
  EXPECT_EQ(created(plan, "mnist-ps-0")["metadata"]["annotations"]["proxy.istio.io/config"],
            "[unclosed");
  EXPECT_EQ(created(plan, "mnist-worker-0")["metadata"]["annotations"]["proxy.istio.io/config"],
            R"({"holdApplicationUntilProxyStarts": true})");
  EXPECT_TRUE(has_event(plan, "InvalidProxyConfig"));
  const auto bad = std::find_if(plan.events.begin(), plan.events.end(), [](const EventRecord& e) {
    return e.reason == "InvalidProxyConfig";
  });
  ASSERT_NE(bad, plan.events.end());
  EXPECT_EQ(bad->type, "Warning");
  EXPECT_THAT(bad->message,
              ::testing::HasSubstr("pod mnist-ps-0: proxy.istio.io/config left as it is"));
  EXPECT_EQ(std::count_if(plan.events.begin(), plan.events.end(),
                          [](const EventRecord& e) { return e.reason == "InvalidProxyConfig"; }),
            1);
}

// A controller killed after creating only some pods: the pass that sees worker 0's success
// still creates the missing replicas first (ReconcilePods before UpdateJobStatus upstream).
TEST(JobPlanTest, MissingReplicasAreCreatedInThePassThatEndsTheJob) {
  FakeCluster cluster = running_cluster(tf_job());
  std::erase_if(cluster.observed.pods,
                [](const json& pod) { return pod["metadata"]["name"] == "mnist-worker-1"; });
  cluster.set_phase("mnist-worker-0", "Succeeded", 0);
  const Plan plan = cluster.step(options(seconds(1)));
  EXPECT_EQ(names(plan, Action::Type::Create, "pods"), std::vector<std::string>{"mnist-worker-1"});
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
}

TEST(JobPlanTest, TFAllWorkersSuccessPolicyWaitsForEveryWorker) {
  FakeCluster cluster = running_cluster(tf_job({{"successPolicy", "AllWorkers"}}));
  cluster.set_phase("mnist-worker-0", "Succeeded", 0);
  cluster.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(cluster.job), "Running");
  cluster.set_phase("mnist-worker-1", "Succeeded", 0);
  cluster.step(options(seconds(2)));
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
}

TEST(JobPlanTest, PyTorchSucceedsWithTheMasterOrAnyElasticWorker) {
  FakeCluster with_master = running_cluster(pytorch_job());
  with_master.set_phase("ddp-worker-0", "Succeeded", 0);
  with_master.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(with_master.job), "Running");
  with_master.set_phase("ddp-master-0", "Succeeded", 0);
  with_master.step(options(seconds(2)));
  EXPECT_EQ(api::job_status(with_master.job), "Succeeded");
  EXPECT_EQ((*condition_of(with_master.job, "Succeeded"))["reason"], "PyTorchJobSucceeded");

  json elastic_job = pytorch_job({{"elasticPolicy", {{"minReplicas", 1}, {"maxReplicas", 2}}}});
  elastic_job["spec"]["pytorchReplicaSpecs"].erase("Master");
  FakeCluster elastic = running_cluster(elastic_job);
  elastic.set_phase("ddp-worker-1", "Succeeded", 0);
  elastic.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(elastic.job), "Succeeded");
}

TEST(JobPlanTest, ExitCodeRestartsRetryableExitsAndFailsOnPermanentOnes) {
  json job = tf_job();
  job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode";
  FakeCluster cluster{.job = job};
  Plan plan = cluster.step(options());
  EXPECT_EQ(created(plan, "mnist-worker-0")["spec"]["restartPolicy"], "Never");
  cluster.set_all("Running");
  cluster.step(options(seconds(1)));

  cluster.set_phase("mnist-worker-1", "Failed", 137);
  plan = cluster.step(options(seconds(2)));
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods"), std::vector<std::string>{"mnist-worker-1"});
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());
  EXPECT_EQ(api::job_status(cluster.job), "Restarting");
  EXPECT_EQ((*condition_of(cluster.job, "Restarting"))["reason"], "TFJobRestarting");
  EXPECT_EQ(condition_of(cluster.job, "Running"), nullptr);
  EXPECT_EQ(cluster.job["metadata"]["annotations"][std::string(api::annotations::restarts)], "1");
  EXPECT_TRUE(has_event(plan, "ExitedWithCode"));
  EXPECT_TRUE(std::any_of(plan.events.begin(), plan.events.end(), [](const EventRecord& e) {
    return e.message == "Pod: team.mnist-worker-1 exited with code 137";
  }));

  // The pod is gone: it comes back, and Running replaces Restarting once it runs.
  plan = cluster.step(options(seconds(3)));
  EXPECT_EQ(names(plan, Action::Type::Create, "pods"), std::vector<std::string>{"mnist-worker-1"});
  cluster.set_all("Running");
  cluster.step(options(seconds(4)));
  EXPECT_EQ(api::job_status(cluster.job), "Running");
  EXPECT_EQ(condition_of(cluster.job, "Restarting"), nullptr);

  cluster.set_phase("mnist-worker-1", "Failed", 1);
  plan = cluster.step(options(seconds(5)));
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
  EXPECT_EQ((*condition_of(cluster.job, "Failed"))["message"],
            "TFJob team/mnist has failed because 1 Worker replica(s) failed.");
  EXPECT_TRUE(has_event(plan, "TFJobFailed"));
  // Failed is final.
  cluster.set_all("Running");
  cluster.step(options(seconds(6)));
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
}

TEST(JobPlanTest, NeverRestartPolicyFailsTheJobOnAFailedPod) {
  FakeCluster cluster = running_cluster(tf_job());
  cluster.set_phase("mnist-ps-0", "Failed", 137);
  cluster.step(options(seconds(1)));
  EXPECT_EQ((*condition_of(cluster.job, "Failed"))["message"],
            "TFJob team/mnist has failed because 1 PS replica(s) failed.");
}

TEST(JobPlanTest, BackoffLimitCountsContainerRestartsAndRecreatedPods) {
  FakeCluster cluster = running_cluster(pytorch_job({{"runPolicy", {{"backoffLimit", 2}}}}));
  cluster.pod("ddp-worker-0")["status"]["containerStatuses"] = {
      {{"name", "pytorch"}, {"restartCount", 1}}};
  cluster.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(cluster.job), "Running");

  // backoffLimit 2 allows two retries, as `--backoff-limit`'s help and a batch/v1 Job say.
  cluster.pod("ddp-worker-0")["status"]["containerStatuses"][0]["restartCount"] = 2;
  cluster.step(options(seconds(2)));
  EXPECT_EQ(api::job_status(cluster.job), "Running");

  cluster.pod("ddp-worker-0")["status"]["containerStatuses"][0]["restartCount"] = 3;
  const Plan plan = cluster.step(options(seconds(3)));
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
  EXPECT_EQ((*condition_of(cluster.job, "Failed"))["message"],
            "PyTorchJob team/ddp has failed because it has reached the specified backoff limit");
  // A limit deletes every pod and service whatever the cleanPodPolicy.
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods").size(), 3u);
  EXPECT_EQ(names(plan, Action::Type::Delete, "services").size(), 3u);
  EXPECT_TRUE(cluster.observed.pods.empty());
}

/// A TFJob whose workers restart on a retryable exit code, with `backoff_limit`, its pods created
/// and worker-0 just failed with 143 (SIGTERM: retryable).
FakeCluster job_with_a_failed_retryable_worker(int backoff_limit) {
  json job = tf_job({{"runPolicy", {{"backoffLimit", backoff_limit}}}});
  job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode";
  FakeCluster cluster{.job = job};
  cluster.step(options());
  cluster.set_phase("mnist-worker-0", "Failed", 143);
  cluster.step(options(seconds(1)));
  return cluster;
}

TEST(JobPlanTest, BackoffLimitStopsRecreatingFailedPods) {
  FakeCluster cluster = job_with_a_failed_retryable_worker(2);
  EXPECT_EQ(api::job_status(cluster.job), "Restarting");
  cluster.step(options(seconds(2)));  // recreated: retry 1
  cluster.set_phase("mnist-worker-0", "Failed", 143);
  cluster.step(options(seconds(3)));
  EXPECT_EQ(api::job_status(cluster.job), "Restarting");
  cluster.step(options(seconds(4)));  // recreated: retry 2, the last backoffLimit 2 allows
  EXPECT_EQ(api::job_status(cluster.job), "Restarting");
  cluster.set_phase("mnist-worker-0", "Failed", 143);
  cluster.step(options(seconds(5)));
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
  EXPECT_THAT((*condition_of(cluster.job, "Failed"))["message"].get<std::string>(),
              HasSubstr("backoff limit"));
}

TEST(JobPlanTest, BackoffLimitZeroFailsOnTheFirstRestart) {
  EXPECT_EQ(api::job_status(job_with_a_failed_retryable_worker(0).job), "Failed");
}

TEST(JobPlanTest, ActiveDeadlineRequeuesThenFails) {
  FakeCluster cluster{.job = tf_job({{"runPolicy", {{"activeDeadlineSeconds", 60}}}})};
  Plan plan = cluster.step(options());
  EXPECT_EQ(plan.requeue_after, std::chrono::milliseconds(60'000));
  cluster.set_all("Running");
  plan = cluster.step(options(seconds(45)));
  EXPECT_EQ(plan.requeue_after, std::chrono::milliseconds(15'000));
  plan = cluster.step(options(seconds(60)));
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
  EXPECT_EQ((*condition_of(cluster.job, "Failed"))["message"],
            "TFJob team/mnist has failed because it was active longer than specified deadline");
  EXPECT_EQ(cluster.job["status"]["completionTime"], api::format_timestamp(kStart + seconds(60)));
  EXPECT_TRUE(cluster.observed.pods.empty());
  EXPECT_FALSE(plan.requeue_after.has_value());
}

struct CleanPodPolicyCase {
  std::string policy;
  std::vector<std::string> deleted;
};

void PrintTo(const CleanPodPolicyCase& c, std::ostream* out) {
  *out << "cleanPodPolicy " << c.policy;
}

class CleanPodPolicyTest : public ::testing::TestWithParam<CleanPodPolicyCase> {};

TEST_P(CleanPodPolicyTest, DeletesPodsAndTheirServicesOnFinish) {
  FakeCluster cluster =
      running_cluster(tf_job({{"runPolicy", {{"cleanPodPolicy", GetParam().policy}}}}));
  cluster.set_phase("mnist-worker-0", "Succeeded", 0);
  const Plan plan = cluster.step(options(seconds(1)));
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods"), GetParam().deleted);
  EXPECT_EQ(names(plan, Action::Type::Delete, "services"), GetParam().deleted);
  EXPECT_TRUE(cluster.step(options(seconds(2))).actions.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Policies, CleanPodPolicyTest,
    ::testing::Values(CleanPodPolicyCase{"None", {}},
                      CleanPodPolicyCase{"Running", {"mnist-ps-0", "mnist-worker-1"}},
                      CleanPodPolicyCase{"All",
                                         {"mnist-ps-0", "mnist-worker-0", "mnist-worker-1"}}),
    [](const auto& info) { return info.param.policy; });

/// The index of the first action of `type` on `plural` in `plan` (plan.actions.size() if none).
std::size_t first_action(const Plan& plan, Action::Type type, std::string_view plural) {
  std::size_t i = 0;
  while (i < plan.actions.size() &&
         !(plan.actions[i].type == type && plan.actions[i].resource.plural == plural))
    ++i;
  return i;
}

/// Checks that `plan` writes the TFJob's status before it deletes its three pods; returns the
/// status write's index.
std::size_t status_before_pod_deletes(const Plan& plan) {
  const std::size_t status = first_action(plan, Action::Type::UpdateStatus, "tfjobs");
  EXPECT_LT(status, plan.actions.size());
  EXPECT_LT(status, first_action(plan, Action::Type::Delete, "pods"));
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods").size(), 3u);
  return status;
}

// A job's pods are the evidence of how it ended, so the status recording the end is written before
// the clean-up deletes them: when that write fails (the executor then sends nothing after it), the
// retry still finds the pods and ends the job again, rather than finding a running job with its
// chief gone and starting the chief again (found by chaos_bench). The Training Operator likewise
// cleans up only once the stored status says the job ended.
TEST(JobPlanTest, TheEndIsRecordedBeforeTheCleanUpDeletesThePods) {
  FakeCluster cluster = running_cluster(tf_job({{"runPolicy", {{"cleanPodPolicy", "All"}}}}));
  cluster.set_phase("mnist-worker-0", "Succeeded", 0);
  const Plan ending = plan_job(cluster.job, cluster.observed, options(seconds(1)));
  const std::size_t status = status_before_pod_deletes(ending);
  ASSERT_LT(status, ending.actions.size());

  // The status write fails: only what came before it went through.
  cluster.apply(Plan{.actions = {ending.actions.begin(),
                                 ending.actions.begin() + static_cast<std::ptrdiff_t>(status)}});
  const Plan retry = cluster.step(options(seconds(2)));
  EXPECT_TRUE(names(retry, Action::Type::Create, "pods").empty());
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
  EXPECT_TRUE(cluster.observed.pods.empty());

  // The same on a limit: the evidence (the failed pod) stays until Failed is recorded.
  json job = tf_job({{"runPolicy", {{"backoffLimit", 0}}}});
  job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode";
  FakeCluster limited{.job = job};
  limited.step(options());
  limited.set_phase("mnist-worker-0", "Failed", 143);
  status_before_pod_deletes(plan_job(limited.job, limited.observed, options(seconds(1))));
}

TEST(JobPlanTest, TtlDeletesTheFinishedJob) {
  FakeCluster cluster{.job = tf_job({{"runPolicy", {{"ttlSecondsAfterFinished", 100}}}})};
  cluster.step(options());
  cluster.set_phase("mnist-worker-0", "Succeeded", 0);
  Plan plan = cluster.step(options(seconds(10)));
  EXPECT_EQ(plan.requeue_after, std::chrono::milliseconds(100'000));
  plan = cluster.step(options(seconds(60)));
  EXPECT_EQ(plan.requeue_after, std::chrono::milliseconds(50'000));
  EXPECT_FALSE(cluster.job_deleted);
  plan = cluster.step(options(seconds(110)));
  ASSERT_FALSE(plan.actions.empty());
  EXPECT_EQ(plan.actions.back().type, Action::Type::Delete);
  EXPECT_EQ(plan.actions.back().resource.plural, "tfjobs");
  EXPECT_EQ(plan.actions.back().uid, "uid-1");
  EXPECT_TRUE(cluster.job_deleted);
}

TEST(JobPlanTest, SuspendDeletesEverythingAndResumeStartsAgain) {
  PlanOptions o = options();
  o.gang_scheduler = GangScheduler::Volcano;
  FakeCluster cluster{.job = tf_job()};
  cluster.step(o);
  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Inqueue"}}}});  // Volcano's
  cluster.step(o);
  cluster.set_all("Running");
  cluster.step(o);
  ASSERT_TRUE(cluster.observed.pod_group.has_value());

  cluster.job["spec"]["runPolicy"]["suspend"] = true;
  o.now = kStart + seconds(100);
  Plan plan = cluster.step(o);
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods").size(), 3u);
  EXPECT_EQ(names(plan, Action::Type::Delete, "services").size(), 3u);
  EXPECT_EQ(names(plan, Action::Type::Delete, "podgroups"), std::vector<std::string>{"mnist"});
  EXPECT_EQ(api::job_status(cluster.job), "Suspended");
  EXPECT_EQ((*condition_of(cluster.job, "Suspended"))["reason"], "TFJobSuspended");
  EXPECT_EQ((*condition_of(cluster.job, "Running"))["status"], "False");
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Worker"], json::object());
  EXPECT_TRUE(has_event(plan, "TFJobSuspended"));
  EXPECT_TRUE(cluster.step(o).actions.empty());

  cluster.job["spec"]["runPolicy"]["suspend"] = false;
  o.now = kStart + seconds(200);
  plan = cluster.step(o);
  // A new PodGroup, which Volcano must enqueue before the pods come back.
  EXPECT_EQ(names(plan, Action::Type::Create, "podgroups"), std::vector<std::string>{"mnist"});
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());
  EXPECT_EQ((*condition_of(cluster.job, "Suspended"))["status"], "False");
  EXPECT_EQ((*condition_of(cluster.job, "Suspended"))["reason"], "TFJobResumed");
  EXPECT_EQ(cluster.job["status"]["startTime"], api::format_timestamp(kStart + seconds(200)));
  EXPECT_TRUE(has_event(plan, "TFJobResumed"));
  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Inqueue"}}}});
  EXPECT_EQ(names(cluster.step(o), Action::Type::Create, "pods").size(), 3u);
}

// Upstream: pytorch/hpa.go ReconcileHPA + desiredHPA; pytorchjob_controller.go UpdateJobStatus
// writes each replica type's selector (GenLabelSelector, printed by FormatLabelSelector).
TEST(JobPlanTest, PyTorchMetricsGetAnAutoscalerThatFollowsTheJob) {
  const json metrics = json::parse(R"([{"type": "Resource", "resource": {"name": "cpu",
      "target": {"type": "Utilization", "averageUtilization": 80}}}])");
  json job = pytorch_job({{"elasticPolicy", {{"minReplicas", 1}, {"maxReplicas", 4}}}});
  job["spec"]["pytorchReplicaSpecs"].erase("Master");
  json with_metrics = job;
  with_metrics["spec"]["elasticPolicy"]["metrics"] = metrics;

  EXPECT_TRUE(names(plan_job(job, {}, options()), Action::Type::Create, "horizontalpodautoscalers")
                  .empty());
  FakeCluster cluster{.job = with_metrics};
  Plan plan = cluster.step(options());
  const json& hpa = created(plan, "ddp", "horizontalpodautoscalers");
  EXPECT_EQ(hpa["apiVersion"], "autoscaling/v2");
  EXPECT_EQ(hpa["metadata"]["namespace"], "team");
  EXPECT_EQ(hpa["metadata"]["ownerReferences"][0]["uid"], "uid-2");
  EXPECT_EQ(hpa["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(hpa["spec"],
            json({{"scaleTargetRef",
                   {{"kind", "PyTorchJob"}, {"name", "ddp"}, {"apiVersion", "kubeflow.org/v1"}}},
                  {"minReplicas", 1},
                  {"maxReplicas", 4},
                  {"metrics", metrics}}));
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Worker"]["selector"],
            "training.kubeflow.org/job-name=ddp,training.kubeflow.org/operator-name="
            "pytorchjob-controller,training.kubeflow.org/replica-type=worker");
  EXPECT_TRUE(
      names(cluster.step(options(seconds(1))), Action::Type::Create, "horizontalpodautoscalers")
          .empty());

  // A new maxReplicas replaces the spec; suspending deletes the autoscaler.
  cluster.job["spec"]["elasticPolicy"]["maxReplicas"] = 8;
  plan = cluster.step(options(seconds(2)));
  ASSERT_EQ(names(plan, Action::Type::Update, "horizontalpodautoscalers"),
            std::vector<std::string>{"ddp"});
  EXPECT_EQ(cluster.observed.autoscalers.at(0)["spec"]["maxReplicas"], 8);
  cluster.job["spec"]["runPolicy"]["suspend"] = true;
  plan = cluster.step(options(seconds(3)));
  EXPECT_EQ(names(plan, Action::Type::Delete, "horizontalpodautoscalers"),
            std::vector<std::string>{"ddp"});
}

TEST(JobPlanTest, SurplusReplicasAndTheirServicesAreDeleted) {
  FakeCluster cluster{.job = tf_job()};
  cluster.step(options());
  cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1;
  const Plan plan = cluster.step(options(seconds(1)));
  EXPECT_EQ(names(plan, Action::Type::Delete, "pods"), std::vector<std::string>{"mnist-worker-1"});
  EXPECT_EQ(names(plan, Action::Type::Delete, "services"),
            std::vector<std::string>{"mnist-worker-1"});
  EXPECT_EQ(plan.actions[0].uid.substr(0, 1), "u");
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());
}

TEST(JobPlanTest, PodsBeingDeletedAreNotCreatedAgainYet) {
  FakeCluster cluster{.job = tf_job()};
  cluster.step(options());
  cluster.pod("mnist-ps-0")["metadata"]["deletionTimestamp"] = api::format_timestamp(kStart);
  EXPECT_TRUE(cluster.step(options()).actions.empty());
}

TEST(JobPlanTest, JobsManagedByAnotherControllerAreLeftAlone) {
  const json job = tf_job({{"runPolicy", {{"managedBy", "kueue.x-k8s.io/multikueue"}}}});
  const Plan plan = plan_job(job, {}, options());
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_TRUE(plan.events.empty());
  EXPECT_FALSE(plan_job(tf_job({{"runPolicy", {{"managedBy", "kubeflow.org/training-operator"}}}}),
                        {}, options())
                   .actions.empty());
}

TEST(JobPlanTest, RejectsWhatIsNotAJob) {
  const Error e = testing::expect_error([] { plan_job({{"kind", "Pod"}}, {}, options()); });
  EXPECT_EQ(e.kind(), ErrorKind::Validation);
  json job = tf_job();
  job["spec"].erase("tfReplicaSpecs");
  EXPECT_THAT(testing::expect_error([&] { plan_job(job, {}, options()); }).message(),
              HasSubstr("TFJob team/mnist: spec.tfReplicaSpecs"));
}

// --- MPIJob ------------------------------------------------------------------------------------

json mpi_job() {
  return json::parse(R"({
    "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
    "metadata": {"name": "pi", "namespace": "team", "uid": "uid-3"},
    "spec": {"mpiReplicaSpecs": {
      "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "launcher", "image": "mpi:1"}]}}},
      "Worker": {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "worker", "image": "mpi:1"}]}}}
    }}
  })");
}

TEST(JobPlanTest, MPIJobCreatesItsObjectsAndFollowsTheLauncher) {
  FakeCluster cluster{.job = mpi_job()};
  Plan plan = cluster.step(options());
  EXPECT_EQ(names(plan, Action::Type::Create, "services"), std::vector<std::string>{"pi"});
  EXPECT_EQ(names(plan, Action::Type::Create, "configmaps"), std::vector<std::string>{"pi-config"});
  EXPECT_EQ(names(plan, Action::Type::Create, "secrets"), std::vector<std::string>{"pi-ssh"});
  // The key pair comes from options.generate_ssh_keys, so plans stay reproducible.
  EXPECT_EQ(created(plan, "pi-ssh", "secrets")["data"]["ssh-privatekey"], base64_encode("PRIVATE"));
  EXPECT_THAT(names(plan, Action::Type::Create, "pods"), ElementsAre("pi-worker-0", "pi-worker-1"));
  EXPECT_EQ(names(plan, Action::Type::Create, "jobs"), std::vector<std::string>{"pi-launcher"});
  EXPECT_TRUE(cluster.step(options(seconds(1))).actions.empty());

  cluster.set_all("Running");
  plan = cluster.step(options(seconds(2)));
  // discover_hosts.sh lists the running workers: the ConfigMap is replaced.
  EXPECT_EQ(names(plan, Action::Type::Update, "configmaps"), std::vector<std::string>{"pi-config"});

  cluster.observed.batch_jobs[0]["status"] = {
      {"succeeded", 1},
      {"completionTime", "2027-01-15T08:30:00Z"},
      {"conditions", {{{"type", "Complete"}, {"status", "True"}}}}};
  cluster.step(options(seconds(3)));
  EXPECT_EQ(api::job_status(cluster.job), "Succeeded");
  EXPECT_EQ(cluster.job["status"]["completionTime"], "2027-01-15T08:30:00Z");
  EXPECT_EQ(cluster.job["status"]["replicaStatuses"]["Launcher"], json({{"succeeded", 1}}));
  EXPECT_TRUE(cluster.step(options(seconds(4))).actions.empty());
}

// The chaos_bench case: an MPIJob's launcher Job failed (backoffLimit 0), its gang dropped below
// minMember and back to Pending; the MPIJob still fails, and nothing is started for it.
TEST(JobPlanTest, MPIJobFollowsAFailedLauncherWhileItsGangIsPending) {
  const PlanOptions o = builtin_gang();
  FakeCluster cluster = admitted_and_running(mpi_job(), o);
  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Pending"}}}});
  cluster.observed.batch_jobs[0]["status"] = {
      {"failed", 1},
      {"conditions",
       {{{"type", "Failed"},
         {"status", "True"},
         {"reason", "BackoffLimitExceeded"},
         {"message", "Job has reached the specified backoff limit"}}}}};
  cluster.observed.pods.erase(cluster.observed.pods.begin());  // a worker gone too
  const Plan plan = cluster.step(o);
  EXPECT_EQ(api::job_status(cluster.job), "Failed");
  EXPECT_EQ((*condition_of(cluster.job, "Failed"))["reason"], "BackoffLimitExceeded");
  EXPECT_TRUE(names(plan, Action::Type::Create, "pods").empty());
  EXPECT_TRUE(names(plan, Action::Type::Create, "jobs").empty());
}

// Upstream: mpi-operator v0.6 mpi_job_controller.go syncHandler aligns the launcher Job's
// spec.suspend with the MPIJob's and deletes the worker pods; Service, ConfigMap and Secret stay.
TEST(JobPlanTest, SuspendedMPIJobKeepsItsLauncherJobSuspended) {
  FakeCluster cluster{.job = mpi_job()};
  cluster.step(options());
  cluster.set_all("Running");
  cluster.step(options(seconds(1)));

  cluster.job["spec"]["runPolicy"]["suspend"] = true;
  Plan plan = cluster.step(options(seconds(2)));
  EXPECT_THAT(names(plan, Action::Type::Delete, "pods"), ElementsAre("pi-worker-0", "pi-worker-1"));
  EXPECT_TRUE(names(plan, Action::Type::Delete, "jobs").empty());
  EXPECT_TRUE(names(plan, Action::Type::Delete, "services").empty());
  EXPECT_EQ(names(plan, Action::Type::Update, "jobs"), std::vector<std::string>{"pi-launcher"});
  EXPECT_EQ(cluster.observed.batch_jobs.at(0)["spec"]["suspend"], true);
  EXPECT_EQ(api::job_status(cluster.job), "Suspended");
  EXPECT_TRUE(names(cluster.step(options(seconds(3))), Action::Type::Update, "jobs").empty());

  cluster.job["spec"]["runPolicy"]["suspend"] = false;
  plan = cluster.step(options(seconds(4)));
  EXPECT_EQ(names(plan, Action::Type::Update, "jobs"), std::vector<std::string>{"pi-launcher"});
  EXPECT_EQ(cluster.observed.batch_jobs.at(0)["spec"]["suspend"], false);
  EXPECT_THAT(names(plan, Action::Type::Create, "pods"), ElementsAre("pi-worker-0", "pi-worker-1"));
  EXPECT_TRUE(names(plan, Action::Type::Create, "jobs").empty());
}

// Issue 14: a job being deleted (foreground: it stays while the garbage collector removes its
// children) gets no writes at all, whatever is missing, so nothing is re-created for it.
TEST(JobPlanTest, AJobBeingDeletedGetsNoWritesEvenWithItsChildrenGone) {
  for (const json& manifest : {tf_job(), pytorch_job(), mpi_job()}) {
    for (const GangScheduler gang : {GangScheduler::Builtin, GangScheduler::None}) {
      PlanOptions o = options();
      o.gang_scheduler = gang;
      FakeCluster cluster{.job = manifest};
      cluster.step(o);
      cluster.set_all("Running");
      json job = cluster.job;
      job["metadata"]["deletionTimestamp"] = api::format_timestamp(kStart);
      const Observed nothing_left;  // what the garbage collector left
      const Plan plan = plan_job(job, nothing_left, o);
      EXPECT_TRUE(plan.actions.empty()) << job["kind"] << ": " << objects(plan).dump();
      EXPECT_TRUE(plan.events.empty()) << job["kind"];
    }
  }
}

}  // namespace
}  // namespace trainctl::controller
