// The controller against the sandbox: whole job lifecycles through the real client, informers
// and executor, as it runs in a cluster.
#include "controller/controller.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "api/status.h"
#include "api/well_known.h"
#include "controller/event_recorder.h"
#include "controller/executor.h"
#include "controller/objects.h"
#include "json_access.h"
#include "tests/support/rbac_policy.h"
#include "tests/support/sandbox_fixture.h"
#include "yaml_json.h"

namespace trainctl {
namespace {

using nlohmann::json;
using testing::wait_until;

json yaml(const std::string& text) {
  return yaml_to_json(YAML::Load(text));
}

/// A TFJob of `workers` workers no node takes (their pods stay Pending), with spec.runPolicy
/// `run_policy` (a YAML flow mapping) when one is given.
std::string pending_tfjob(const std::string& name, int workers,
                          const std::string& run_policy = "") {
  return fmt::format(R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {{name: {}}}
spec:{}
  tfReplicaSpecs:
    Worker:
      replicas: {}
      template:
        spec:
          nodeSelector: {{trainctl.io/test: no-such-node}}
          containers: [{{name: tensorflow, image: tf:2}}]
)",
                     name, run_policy.empty() ? "" : "\n  runPolicy: " + run_policy, workers);
}

/// The controller's identity here is the packaged ServiceAccount's (a bearer token), and every
/// request it makes is checked against packaging/rbac.yaml as kube-apiserver's RBAC authorizer
/// would: a call the packaged policy denies fails the test that made it.
class ApiCalls {
 public:
  static constexpr const char* kToken = "trainctl-controller-token";

  ApiCalls()
      : user_(testing::RbacPolicy::user_name("trainctl-system", "trainctl-controller")),
        policy_(testing::RbacPolicy::for_service_account(
            std::filesystem::path(TRAINCTL_SOURCE_DIR) / "packaging" / "rbac.yaml",
            "trainctl-system", "trainctl-controller")) {}

  /// Gives the sandbox the ServiceAccount's token (beside the admin's) and this recorder.
  void install(sandbox::SandboxOptions& options) {
    std::filesystem::create_directories(options.data_dir);
    std::ofstream(options.data_dir / "tokens.csv")
        << "admin-token,trainctl-admin,trainctl-admin,\"system:masters\"\n"
        << kToken << ',' << user_
        << ",sa-uid,\"system:serviceaccounts,system:serviceaccounts:trainctl-system\"\n";
    options.audit = [this](const sandbox::RequestAttributes& r) { record(r); };
  }

  void record(const sandbox::RequestAttributes& r) {
    if (r.user != user_)
      return;
    std::lock_guard lock(mu_);
    used_.insert(testing::RbacPolicy::key(r));
    if (!policy_.allows(r))
      denied_.insert(testing::RbacPolicy::key(r) + " in namespace \"" + r.ns + "\"");
  }

  std::set<std::string> used() const {
    std::lock_guard lock(mu_);
    return used_;
  }
  std::set<std::string> denied() const {
    std::lock_guard lock(mu_);
    return denied_;
  }
  const testing::RbacPolicy& policy() const { return policy_; }

 private:
  const std::string user_;
  const testing::RbacPolicy policy_;
  mutable std::mutex mu_;
  std::set<std::string> used_;    // "verb group/resource[/subresource]"
  std::set<std::string> denied_;  // the same, with the namespace
};

/// The simulated nodes of a test's sandbox.
struct ClusterShape {
  int nodes = 4;
  int gpus_per_node = 8;
};

class ControllerTest : public ::testing::Test {
 protected:
  /// `log_verbosity`: what the controller log printed on a failure holds (-v).
  explicit ControllerTest(ClusterShape shape = {}, int log_verbosity = 0)
      : log_(log_text_, LogFormat::Text, log_verbosity),
        local_([this, shape](sandbox::SandboxOptions& o) {
          calls_.install(o);
          o.cluster.nodes = shape.nodes;
          o.cluster.node_gpus = shape.gpus_per_node;
          // The sandbox's scheduler also plays Volcano's (whole gangs of enqueued PodGroups only).
          o.cluster.scheduler_names.insert("volcano");
        }) {}

  void SetUp() override {
    testing::install_training_crds(local_.client());
    controller_client_ = std::make_unique<kube::Client>(local_.token_config(ApiCalls::kToken));
  }

  void start(controller::GangScheduler gang = controller::GangScheduler::None,
             controller::ManagerOptions manager = {}, controller::AdmissionOptions admission = {},
             std::chrono::milliseconds pod_update_batch =
                 controller::ControllerOptions{}.pod_update_batch) {
    controller::ControllerOptions options{
        .workers = 2, .pod_update_batch = pod_update_batch, .admission = admission};
    options.plan.gang_scheduler = gang;
    controller::declare_controller_metrics(metrics_);
    manager_ = std::make_unique<controller::Manager>(*controller_client_, std::move(manager),
                                                     metrics_, log_);
    controller::add_reconcilers(*manager_, options);
    thread_ = std::jthread([this](std::stop_token stop) { manager_->run(stop); });
    ASSERT_TRUE(wait_until([&] { return manager_->synced(); }));
  }

  void TearDown() override {
    thread_ = {};  // requests stop and joins
    EXPECT_THAT(calls_.denied(), ::testing::IsEmpty())
        << "the controller made requests packaging/rbac.yaml does not allow";
    if (HasFailure())  // what the controller did, for a failure seen only in CI
      std::cerr << "controller log:\n" << log_text_.str();
  }

  kube::Client& client() { return local_.client(); }

  json create(const kube::Resource& r, const std::string& manifest) {
    return client().create(r, "default", yaml(manifest));
  }

  json job(const kube::Resource& r, const std::string& name) {
    return client().get(r, "default", name);
  }

  std::string status_of(const kube::Resource& r, const std::string& name) {
    return api::job_status(job(r, name));
  }

  bool wait_status(const kube::Resource& r, const std::string& name, const std::string& status,
                   std::chrono::seconds timeout = std::chrono::seconds(20)) {
    return wait_until([&] { return status_of(r, name) == status; }, timeout);
  }

  /// Whether object `name` of `resource` exists in "default" now.
  bool exists(const kube::Resource& resource, const std::string& name) {
    try {
      client().get(resource, "default", name);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  /// PriorityClasses "low" (value 10) and "high" (1000).
  void create_priority_classes() {
    for (const auto& [name, value] : {std::pair{"low", 10}, std::pair{"high", 1000}}) {
      json pc = yaml("{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass}");
      pc["metadata"]["name"] = name;
      pc["value"] = value;
      client().create(kube::resources::priority_classes(), "", pc);
    }
  }

  std::vector<json> pods_of(const std::string& job_name) {
    return client()
        .list_all(kube::resources::pods(), "default",
                  {.label_selector = "training.kubeflow.org/job-name=" + job_name})["items"]
        .get<std::vector<json>>();
  }

  std::ostringstream log_text_;
  Logger log_;
  ApiCalls calls_;  // before the sandbox: it reports to it until it stops
  testing::LocalSandbox local_;
  std::unique_ptr<kube::Client> controller_client_;
  controller::MetricsRegistry metrics_;
  std::unique_ptr<controller::Manager> manager_;
  std::jthread thread_;
};

constexpr const char* kTfJob = R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  tfReplicaSpecs:
    PS:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: tensorflow, image: tf:2}]}
    Worker:
      replicas: 2
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.3"}}
        spec: {containers: [{name: tensorflow, image: tf:2}]}
)";

// A job's pods change at about the same moment (scheduled, started, ended): changes within
// the batch period cost the job one reconcile, not one per pod (the Job controller's
// syncJobBatchPeriod); a pod created or deleted still enqueues it at once.
TEST_F(ControllerTest, ChangesToAJobsPodsWithinTheBatchPeriodCostItOneReconcile) {
  start(controller::GangScheduler::None, {}, {}, std::chrono::seconds(1));
  create(kube::resources::job(api::JobKind::TFJob), pending_tfjob("batched", 4));
  ASSERT_TRUE(wait_until([&] { return pods_of("batched").size() == 4; }));
  const auto reconciles = [&] {
    return metrics_.value("trainctl_reconcile_total", {"TFJob", "success"});
  };
  // Settled: the creates' reconciles done, the pods' Unschedulable conditions past their batch.
  double before = reconciles();
  ASSERT_TRUE(wait_until(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1300));
        const double now = reconciles();
        return std::exchange(before, now) == now;
      },
      std::chrono::seconds(20)));
  const auto patched = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i)
    client().patch(kube::resources::pods(), "default", fmt::format("batched-worker-{}", i),
                   kube::PatchType::Merge, {{"metadata", {{"labels", {{"touched", "yes"}}}}}});
  ASSERT_LT(std::chrono::steady_clock::now() - patched, std::chrono::seconds(1))
      << "the patches took longer than the batch period";
  ASSERT_TRUE(wait_until([&] { return reconciles() > before; }, std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - patched, std::chrono::milliseconds(700))
      << "reconciled before the batch period ended";
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_EQ(reconciles(), before + 1) << "four pod changes in one batch period";
}

TEST_F(ControllerTest, TfJobRunsToSuccessWithOperatorNamesLabelsAndTfConfig) {
  start();
  create(kube::resources::job(api::JobKind::TFJob), kTfJob);
  ASSERT_TRUE(wait_until([&] { return pods_of("mnist").size() == 3; }));
  const json worker = client().get(kube::resources::pods(), "default", "mnist-worker-1");
  const json& labels = worker["metadata"]["labels"];
  EXPECT_EQ(labels["training.kubeflow.org/operator-name"], "tfjob-controller");
  EXPECT_EQ(labels["training.kubeflow.org/replica-type"], "worker");
  EXPECT_EQ(labels["training.kubeflow.org/replica-index"], "1");
  EXPECT_EQ(worker["metadata"]["ownerReferences"][0]["kind"], "TFJob");
  json tf_config;
  for (const auto& env : worker["spec"]["containers"][0]["env"]) {
    if (env["name"] == "TF_CONFIG")
      tf_config = json::parse(env["value"].get<std::string>());
  }
  EXPECT_EQ(tf_config["task"], (json{{"type", "worker"}, {"index", 1}}));
  EXPECT_EQ(tf_config["cluster"]["ps"], json::array({"mnist-ps-0.default.svc:2222"}));
  // Creates go out concurrently (slow-start batches): a replica's service may follow its pod.
  ASSERT_TRUE(wait_until([&] { return exists(kube::resources::services(), "mnist-ps-0"); }));
  const json service = client().get(kube::resources::services(), "default", "mnist-ps-0");
  EXPECT_EQ(service["spec"]["clusterIP"], "None");

  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Succeeded"));
  const json done = job(kube::resources::job(api::JobKind::TFJob), "mnist");
  EXPECT_TRUE(done["status"].contains("completionTime"));
  EXPECT_EQ(done["status"]["replicaStatuses"]["Worker"].value("succeeded", 0), 2);
  std::vector<std::string> types;
  for (const auto& c : done["status"]["conditions"])
    types.push_back(c["type"].get<std::string>() + "=" + c["status"].get<std::string>());
  EXPECT_EQ(types, (std::vector<std::string>{"Created=True", "Running=False", "Succeeded=True"}));
  // Writes stay bounded: a finished job is not rewritten on every resync.
  const double writes = metrics_.value("trainctl_api_writes_total", {"update_status", "tfjobs"});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(metrics_.value("trainctl_api_writes_total", {"update_status", "tfjobs"}), writes);
}

/// A PyTorchJob whose one pod fails with a retryable exit code (137) after 0.1 s, every time,
/// restarted up to its backoffLimit of 2.
constexpr const char* kFlakyJob = R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: flaky}
spec:
  runPolicy: {backoffLimit: 2}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: ExitCode
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.1", sandbox.trainctl.io/exit-code: "137"}}
        spec: {containers: [{name: pytorch, image: pt:2}]}
)";

TEST_F(ControllerTest, RetryableExitCodeRecreatesPodsUntilBackoffLimit) {
  start();
  create(kube::resources::job(api::JobKind::PyTorchJob), kFlakyJob);
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::PyTorchJob), "flaky", "Failed"));
  const json failed = job(kube::resources::job(api::JobKind::PyTorchJob), "flaky");
  const std::string message = failed["status"]["conditions"].back().value("message", "");
  EXPECT_NE(message.find("backoff"), std::string::npos) << message;
}

TEST_F(ControllerTest, PermanentExitCodeFailsTheJobWithoutRestart) {
  start();
  create(kube::resources::job(api::JobKind::PyTorchJob), R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: broken}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: ExitCode
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.1", sandbox.trainctl.io/exit-code: "1"}}
        spec: {containers: [{name: pytorch, image: pt:2}]}
)");
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::PyTorchJob), "broken", "Failed"));
  const auto pods = pods_of("broken");
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0]["status"]["phase"], "Failed");
}

TEST_F(ControllerTest, CleanPodPolicyRunningDeletesTheStillRunningPs) {
  start();
  json manifest = yaml(kTfJob);
  manifest["spec"]["runPolicy"]["cleanPodPolicy"] = "Running";
  client().create(kube::resources::job(api::JobKind::TFJob), "default", manifest);
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Succeeded"));
  // Worker 0's success ends the job; whatever still runs then (the PS, maybe worker 1) goes.
  ASSERT_TRUE(wait_until([&] {
    for (const auto& pod : pods_of("mnist")) {
      if (pod["status"].value("phase", "") != "Succeeded" &&
          !pod["metadata"].contains("deletionTimestamp"))
        return false;
    }
    return true;
  }));
  ASSERT_TRUE(wait_until([&] {
    for (const auto& pod : pods_of("mnist")) {
      if (pod["metadata"]["name"] == "mnist-ps-0")
        return false;
    }
    return true;
  }));
  bool worker0_kept = false;
  for (const auto& pod : pods_of("mnist"))
    worker0_kept |= pod["metadata"]["name"] == "mnist-worker-0";
  EXPECT_TRUE(worker0_kept) << "succeeded pods stay under cleanPodPolicy Running";
}

TEST_F(ControllerTest, TtlAfterFinishedDeletesTheJob) {
  start();
  json manifest = yaml(kTfJob);
  manifest["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 0;
  manifest["spec"]["tfReplicaSpecs"].erase("PS");
  client().create(kube::resources::job(api::JobKind::TFJob), "default", manifest);
  ASSERT_TRUE(wait_until(
      [&] {
        try {
          job(kube::resources::job(api::JobKind::TFJob), "mnist");
          return false;
        } catch (const Error& e) {
          return e.kind() == ErrorKind::NotFound;
        }
      },
      std::chrono::seconds(20)));
}

TEST_F(ControllerTest, SuspendDeletesPodsAndResumeRecreatesThem) {
  start();
  json manifest = yaml(kTfJob);
  manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
          ["sandbox.trainctl.io/run-seconds"] = "forever";
  client().create(kube::resources::job(api::JobKind::TFJob), "default", manifest);
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Running"));
  client().patch(kube::resources::job(api::JobKind::TFJob), "default", "mnist",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Suspended"));
  ASSERT_TRUE(wait_until([&] { return pods_of("mnist").empty(); }));
  client().patch(kube::resources::job(api::JobKind::TFJob), "default", "mnist",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(wait_until([&] { return pods_of("mnist").size() == 3; }));
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Running"));
}

// The events a reconcile's own writes cause (its status write, its creates) make the job due
// again, but planning would find nothing to do: that reconcile checked (apply_plan) and the next
// one skips planning. Anything else that changes (the job's spec, a pod deleted by a user) is
// planned for as before.
TEST_F(ControllerTest, ReconcilesCausedOnlyByItsOwnWritesPlanNothingAndOtherChangesStillCount) {
  start();
  const auto unchanged = [&] {
    return metrics_.value("trainctl_reconcile_unchanged_total", {"TFJob"});
  };
  create(kube::resources::job(api::JobKind::TFJob), pending_tfjob("settled", 2, "{suspend: true}"));
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "settled", "Suspended"));
  // The status write's event: reconciled without a plan.
  ASSERT_TRUE(wait_until([&] { return unchanged() == 1; })) << unchanged();
  EXPECT_TRUE(pods_of("settled").empty());

  client().patch(kube::resources::job(api::JobKind::TFJob), "default", "settled",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  ASSERT_TRUE(wait_until([&] { return pods_of("settled").size() == 2; }));
  client().remove(kube::resources::pods(), "default", "settled-worker-1");
  ASSERT_TRUE(wait_until([&] {
    for (const json& pod : pods_of("settled")) {
      if (pod["metadata"]["name"] == "settled-worker-1" &&
          !pod["metadata"].contains("deletionTimestamp"))
        return true;
    }
    return false;
  })) << "a pod deleted by somebody else is created again";
}

TEST_F(ControllerTest, JobsManagedByAnotherControllerAreLeftAlone) {
  start();
  json manifest = yaml(kTfJob);
  manifest["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue";
  client().create(kube::resources::job(api::JobKind::TFJob), "default", manifest);
  create(kube::resources::job(api::JobKind::TFJob), R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: ours}
spec:
  tfReplicaSpecs:
    Worker:
      template: {spec: {containers: [{name: tensorflow, image: tf:2}]}}
)");
  // Once the job created after it has pods, the first one has certainly been seen.
  ASSERT_TRUE(wait_until([&] { return pods_of("ours").size() == 1; }));
  EXPECT_TRUE(pods_of("mnist").empty());
  EXPECT_FALSE(job(kube::resources::job(api::JobKind::TFJob), "mnist").contains("status"));
}

constexpr const char* kElasticPyTorchJob = R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: elastic}
spec:
  elasticPolicy:
    minReplicas: 1
    maxReplicas: 3
    metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: pytorch, image: pt:2}]}
)";

// elasticPolicy.metrics: the controller creates the job's HPA (pytorch/hpa.go); scaling the job
// through its scale subresource, as the HPA controller does, adds a worker.
TEST_F(ControllerTest, PyTorchMetricsGetAnAutoscalerAndScalingAddsWorkers) {
  start();
  create(kube::resources::job(api::JobKind::PyTorchJob), kElasticPyTorchJob);
  ASSERT_TRUE(wait_until([&] { return pods_of("elastic").size() == 2; }));
  ASSERT_TRUE(
      wait_until([&] { return exists(kube::resources::horizontalpodautoscalers(), "elastic"); }));
  const json hpa = client().get(kube::resources::horizontalpodautoscalers(), "default", "elastic");
  EXPECT_EQ(hpa["spec"]["scaleTargetRef"]["kind"], "PyTorchJob");
  EXPECT_EQ(hpa["spec"]["maxReplicas"], 3);
  EXPECT_EQ(hpa["metadata"]["ownerReferences"][0]["name"], "elastic");

  client().patch(kube::resources::job(api::JobKind::PyTorchJob), "default", "elastic",
                 kube::PatchType::Merge, {{"spec", {{"replicas", 3}}}}, {.subresource = "scale"});
  ASSERT_TRUE(wait_until([&] { return pods_of("elastic").size() == 3; }));
  // The selector comes with the status write, which may land after the pods (a write that
  // raced the scale patch is retried).
  const std::string selector =
      "training.kubeflow.org/job-name=elastic,training.kubeflow.org/operator-name="
      "pytorchjob-controller,training.kubeflow.org/replica-type=worker";
  EXPECT_TRUE(wait_until([&] {
    return client().get(kube::resources::job(api::JobKind::PyTorchJob), "default", "elastic",
                        "scale")["status"]["selector"] == selector;
  }));
}

TEST_F(ControllerTest, MpiJobLauncherWaitsForWorkersAndCompletes) {
  start();
  create(kube::resources::job(api::JobKind::MPIJob), R"(
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: hvd}
spec:
  slotsPerWorker: 2
  launcherCreationPolicy: WaitForWorkersReady
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.3"}}
        spec: {containers: [{name: launcher, image: hvd:1, command: [mpirun, python, train.py]}]}
    Worker:
      replicas: 2
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: worker, image: hvd:1}]}
)");
  ASSERT_TRUE(wait_until([&] { return exists(kube::resources::jobs(), "hvd-launcher"); },
                         std::chrono::seconds(15)));
  // The launcher exists only once both workers run.
  for (const auto& name : {"hvd-worker-0", "hvd-worker-1"}) {
    EXPECT_EQ(client().get(kube::resources::pods(), "default", name)["status"]["phase"], "Running");
  }
  const json config = client().get(kube::resources::configmaps(), "default", "hvd-config");
  EXPECT_EQ(config["data"]["hostfile"],
            "hvd-worker-0.hvd.default.svc slots=2\nhvd-worker-1.hvd.default.svc slots=2\n");
  const json secret = client().get(kube::resources::secrets(), "default", "hvd-ssh");
  EXPECT_EQ(secret["type"], "kubernetes.io/ssh-auth");
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::MPIJob), "hvd", "Succeeded"));
}

TEST_F(ControllerTest, BuiltinGangAdmissionHoldsAJobThatDoesNotFitTheQueue) {
  start(controller::GangScheduler::Builtin);
  client().create(kube::resources::queues(), "", yaml(R"(
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: team-a}
spec: {weight: 1, capability: {nvidia.com/gpu: "8"}}
)"));
  const auto gpu_job = [&](const std::string& name) {
    client().create(kube::resources::job(api::JobKind::PyTorchJob), "default", yaml(R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: )" + name + R"(}
spec:
  runPolicy: {schedulingPolicy: {queue: team-a}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: pytorch, image: pt:2, resources: {limits: {nvidia.com/gpu: "3"}}}]}
    Worker:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: pytorch, image: pt:2, resources: {limits: {nvidia.com/gpu: "3"}}}]}
)"));
  };
  gpu_job("first");
  ASSERT_TRUE(wait_until([&] { return pods_of("first").size() == 2; }));
  gpu_job("second");
  ASSERT_TRUE(wait_until([&] {
    try {
      const json group = client().get(kube::resources::podgroups(), "default", "second");
      return group.contains("status") &&
             !group["status"].value("conditions", json::array()).empty();
    } catch (const Error&) {
      return false;  // not created yet
    }
  }));
  EXPECT_EQ(client().get(kube::resources::podgroups(), "default", "second")["status"]["phase"],
            "Pending");
  EXPECT_TRUE(pods_of("second").empty());  // all or none: not even the master
  client().remove(kube::resources::job(api::JobKind::PyTorchJob), "default", "first");
  ASSERT_TRUE(wait_until([&] { return pods_of("second").size() == 2; }, std::chrono::seconds(20)));
}

// A PodGroup in the cache when the builtin admission first runs, on a cluster without the
// default queue (a newcomer's: the demo submits as the controller starts): the pass that creates
// the queue admits nothing, and the next, once the cache has the queue, admits the gang. No
// Warning "queue default not found" (the demo printed one).
TEST_F(ControllerTest, TheDefaultQueueIsCreatedBeforeAnyGangIsWeighedAgainstIt) {
  const json job = create(kube::resources::job(api::JobKind::TFJob), kTfJob);
  client().create(kube::resources::podgroups(), "default",
                  yaml(fmt::format(R"(
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: mnist
  ownerReferences:
  - {{apiVersion: kubeflow.org/v1, kind: TFJob, name: mnist, uid: {}, controller: true}}
spec: {{minMember: 3}}
)",
                                   uid_of(job))));
  ASSERT_FALSE(exists(kube::resources::queues(), "default"));
  start(controller::GangScheduler::Builtin);
  ASSERT_TRUE(wait_until([&] { return pods_of("mnist").size() == 3; }));
  EXPECT_TRUE(exists(kube::resources::queues(), "default"));
  EXPECT_EQ(metrics_.value("trainctl_events_total", {"Warning", "Unschedulable"}), 0)
      << "a gang weighed against a queue the cache did not have yet";
  // Recorded once the admission's writes returned, which the pods may come before.
  EXPECT_TRUE(wait_until([&] {
    return metrics_.value("trainctl_events_total", {"Normal", "Enqueued"}) == 1;
  }));
}

// --gang-scheduler volcano: the controller creates the Volcano PodGroup and nothing else until
// Volcano's enqueue action (played here) marks it Inqueue; the sandbox's scheduler then binds the
// gang whole, as Volcano's allocate action would.
TEST_F(ControllerTest, VolcanoModeCreatesPodsOnlyOnceVolcanoEnqueuesTheGroup) {
  start(controller::GangScheduler::Volcano);
  sandbox::Store& store = local_.sandbox().store();
  const auto pod_events =
      store.watch("pods", {.resource_version = store.current_resource_version()});
  create(kube::resources::job(api::JobKind::TFJob), kTfJob);
  ASSERT_TRUE(wait_until([&] { return exists(kube::resources::podgroups(), "mnist"); }));
  const json group = client().get(kube::resources::podgroups(), "default", "mnist");
  EXPECT_EQ(group["spec"]["minMember"], 3);
  EXPECT_EQ(group["spec"]["queue"], "default");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["kind"], "TFJob");
  EXPECT_FALSE(group.contains("status") && group["status"].contains("phase"))
      << "trainctl never admits in volcano mode";
  // The job's own reconciles after its group appeared: still no pod, and no request for one.
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Created"));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(pods_of("mnist").empty());
  EXPECT_FALSE(calls_.used().contains("create /pods"));

  const json enqueued =
      client().patch(kube::resources::podgroups(), "default", "mnist", kube::PatchType::Merge,
                     {{"status", {{"phase", "Inqueue"}}}});
  ASSERT_TRUE(wait_until([&] { return pods_of("mnist").size() == 3; }));
  const auto first_pod = pod_events->next(std::chrono::seconds(5));
  ASSERT_TRUE(first_pod.has_value());
  EXPECT_GT(std::stoull(first_pod->object["metadata"].value("resourceVersion", "0")),
            std::stoull(enqueued["metadata"].value("resourceVersion", "0")))
      << "a pod was created before the group was Inqueue";
  for (const json& pod : pods_of("mnist")) {
    EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
    EXPECT_EQ(annotation_of(pod, api::annotations::group_name), "mnist");
    EXPECT_EQ(annotation_of(pod, api::annotations::volcano_task_spec),
              pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]);
  }
  // Bound as one gang by the sandbox's Volcano, run, and cleaned up with the job's end.
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::TFJob), "mnist", "Succeeded"));
  ASSERT_TRUE(wait_until([&] { return !exists(kube::resources::podgroups(), "mnist"); }))
      << "the finished job's PodGroup is deleted";
}

// Builtin admission, live: a gang admitted whose pods are never bound (held by a scheduling gate)
// is taken back when its schedule timeout passes: PodGroup Pending with the reason and the
// unbound pods named, the pods deleted, and none created again during the back-off (deleted in
// the same round as the status write, the job reconciler used to recreate them).
TEST_F(ControllerTest, AGangNotBoundWithinItsScheduleTimeoutIsTakenBackAndNotRecreated) {
  start(controller::GangScheduler::Builtin);
  create(kube::resources::job(api::JobKind::PyTorchJob), R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: gated}
spec:
  runPolicy: {schedulingPolicy: {scheduleTimeoutSeconds: 2}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulingGates: [{name: example.com/hold}]
          containers: [{name: pytorch, image: pt:2, resources: {requests: {cpu: "1"}}}]
)");
  ASSERT_TRUE(wait_until([&] { return pods_of("gated").size() == 1; })) << "admitted";
  const auto group = [&] { return client().get(kube::resources::podgroups(), "default", "gated"); };
  ASSERT_TRUE(wait_until([&] {
    const json status = group().value("status", json::object());
    return status.value("phase", "") == "Pending" && status.contains("conditions") &&
           status["conditions"].back().value("reason", "") == "ScheduleTimeout";
  }));
  // Why, on the PodGroup's Warning Event (its condition says "its pods are being deleted" once
  // the next pass deletes them, which may come before this test reads it).
  const auto timeout_message = [&]() -> std::string {
    const json events = client().list_all(kube::resources::events(), "default");
    for (const json& event : events["items"]) {
      if (event.value("reason", "") == "ScheduleTimeout" &&
          event["involvedObject"].value("name", "") == "gated")
        return event.value("message", "");
    }
    return "";
  };
  ASSERT_TRUE(wait_until([&] { return !timeout_message().empty(); }));
  EXPECT_THAT(timeout_message(),
              ::testing::StartsWith("1 of 1 pods not bound within 2s: gated-master-0"));
  ASSERT_TRUE(wait_until([&] { return pods_of("gated").empty(); })) << "its pods are deleted";
  // The back-off is a minute: nothing is created again meanwhile.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_THAT(pods_of("gated"), ::testing::IsEmpty());
  EXPECT_EQ(group()["status"]["phase"], "Pending");
}

/// A PyTorchJob for scheduler-plugins: 3 pods, 2 of them a gang, a 90 s schedule timeout.
constexpr const char* kCoscheduledJob = R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: cosched}
spec:
  runPolicy: {schedulingPolicy: {minAvailable: 2, queue: team-a, scheduleTimeoutSeconds: 90}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec: {containers: [{name: pytorch, image: pt:2, resources: {requests: {cpu: "1"}}}]}
    Worker:
      replicas: 2
      template:
        spec: {containers: [{name: pytorch, image: pt:2, resources: {requests: {cpu: "1"}}}]}
)";

// --gang-scheduler scheduler-plugins: scheduler-plugins' own PodGroup type, and pods created at
// once for the coscheduling scheduler (which holds them at Permit; the sandbox runs none, so they
// stay unbound).
TEST_F(ControllerTest, SchedulerPluginsModeCreatesItsPodGroupAndLabelledPodsAtOnce) {
  start(controller::GangScheduler::SchedulerPlugins);
  create(kube::resources::job(api::JobKind::PyTorchJob), kCoscheduledJob);
  const kube::Resource groups = kube::resources::scheduler_plugins_podgroups();
  ASSERT_TRUE(
      wait_until([&] { return exists(groups, "cosched") && pods_of("cosched").size() == 3; }));
  const json group = client().get(groups, "default", "cosched");
  EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(
      group["spec"],
      json({{"minMember", 2}, {"minResources", {{"cpu", "2"}}}, {"scheduleTimeoutSeconds", 90}}));
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["kind"], "PyTorchJob");
  EXPECT_FALSE(exists(kube::resources::podgroups(), "cosched")) << "no Volcano PodGroup";
  for (const json& pod : pods_of("cosched")) {
    EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins-scheduler");
    EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "cosched");
    EXPECT_EQ(annotation_of(pod, api::annotations::group_name), "");
    EXPECT_EQ(pod["spec"].value("nodeName", ""), "");
  }

  client().patch(kube::resources::job(api::JobKind::PyTorchJob), "default", "cosched",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(wait_until([&] { return !exists(groups, "cosched") && pods_of("cosched").empty(); }))
      << "suspending deletes the pods and the PodGroup";
}

// Issue 14: deleting running and queued jobs (foreground, as `trainctl delete` does, and
// background) must not leave children whose owner is gone — a re-created PodGroup held the
// queue's quota forever. The controller must never create a child once its job is being deleted
// (its caches may still show the job then), orphans must not exist, and the queue must empty so
// a job that needs all of it starts.
TEST_F(ControllerTest, DeletingRunningAndQueuedJobsLeavesNoOrphansAndFreesTheQueue) {
  start(controller::GangScheduler::Builtin);
  client().create(kube::resources::queues(), "", yaml(R"(
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: quota}
spec: {weight: 1, capability: {nvidia.com/gpu: "4"}}
)"));
  // Every child the store ever held, and when each job started going away.
  const std::vector<std::string> children = {"pods", "services", "configmaps",
                                             "podgroups.scheduling.volcano.sh"};
  sandbox::Store& store = local_.sandbox().store();
  const std::string start_rv = store.current_resource_version();
  std::vector<std::pair<std::string, std::shared_ptr<sandbox::WatchStream>>> watches;
  for (const auto& resource : children)
    watches.emplace_back(resource, store.watch(resource, {.resource_version = start_rv}));
  const auto jobs_watch = store.watch("pytorchjobs.kubeflow.org", {.resource_version = start_rv});

  const auto submit = [&](const std::string& name, int gpus_per_pod) {
    json replica = yaml(R"(
replicas: 1
template:
  metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
  spec: {containers: [{name: pytorch, image: pt:2}]}
)");
    replica["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        std::to_string(gpus_per_pod);
    json job = yaml(R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
spec: {runPolicy: {schedulingPolicy: {queue: quota}}}
)");
    job["metadata"]["name"] = name;
    job["spec"]["pytorchReplicaSpecs"] = {{"Master", replica}, {"Worker", replica}};
    return client().create(kube::resources::job(api::JobKind::PyTorchJob), "default", job);
  };
  const auto group_phase = [&](const std::string& name) -> std::string {
    try {
      const json group = client().get(kube::resources::podgroups(), "default", name);
      if (group.value("status", json::object()).value("conditions", json::array()).empty())
        return "";  // admission has not looked at it yet
      return group["status"].value("phase", "");
    } catch (const Error&) {
      return "";
    }
  };
  const auto remove = [&](const std::string& name, const std::string& policy) {
    client().remove(kube::resources::job(api::JobKind::PyTorchJob), "default", name,
                    {.propagation_policy = policy});
  };

  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    const std::string prefix = "r" + std::to_string(round) + "-";
    // Two jobs fill the queue (2 GPUs each), two wait in it.
    for (const char* name : {"run-a", "run-b", "queued-a", "queued-b"}) {
      submit(prefix + name, 1);
      if (std::string_view(name).starts_with("run")) {
        ASSERT_TRUE(wait_until([&] { return pods_of(prefix + name).size() == 2; }))
            << prefix << name;
      }
    }
    for (const char* name : {"queued-a", "queued-b"})
      ASSERT_TRUE(wait_until([&] { return group_phase(prefix + name) == "Pending"; }))
          << prefix << name;
    // Queued first, so deleting a running job admits nothing that is about to be deleted.
    remove(prefix + "queued-a", "Foreground");
    remove(prefix + "queued-b", "Background");
    remove(prefix + "run-a", "Foreground");
    remove(prefix + "run-b", "Background");
  }

  // A job that needs the whole queue runs, under the name of the job deleted last (the caches
  // may still hold that one: its children are not the new job's).
  const std::string reused = "r" + std::to_string(kRounds - 1) + "-run-b";
  const std::string reused_uid = submit(reused, 2)["metadata"]["uid"];
  ASSERT_TRUE(wait_until(
      [&] {
        const std::vector<json> pods = pods_of(reused);
        return pods.size() == 2 && std::all_of(pods.begin(), pods.end(), [&](const json& pod) {
                 return trainctl::controller_uid(pod) == reused_uid;
               });
      },
      std::chrono::seconds(20)))
      << "the queue stayed full: "
      << client().get(kube::resources::queues(), "", "quota")["status"].dump();

  // No child was created once its job was going away (deletionTimestamp or gone).
  std::map<std::string, std::uint64_t> leaving;  // job uid -> rv it started going away
  const auto rv_of = [](const json& object) {
    return std::stoull(object["metadata"]["resourceVersion"].get<std::string>());
  };
  while (auto event = jobs_watch->next(std::chrono::milliseconds(0))) {
    const json& meta = event->object["metadata"];
    if (event->type == kube::WatchEventType::Deleted || meta.contains("deletionTimestamp"))
      leaving.try_emplace(meta["uid"].get<std::string>(), rv_of(event->object));
  }
  EXPECT_EQ(leaving.size(), 4u * kRounds);
  std::vector<std::string> late;
  for (auto& [resource, watch] : watches) {
    while (auto event = watch->next(std::chrono::milliseconds(0))) {
      if (event->type != kube::WatchEventType::Added)
        continue;
      const std::string owner = trainctl::controller_uid(event->object);
      const auto left = leaving.find(owner);
      if (left != leaving.end() && rv_of(event->object) > left->second)
        late.push_back(resource + "/" + event->object["metadata"]["name"].get<std::string>());
    }
  }
  EXPECT_THAT(late, ::testing::IsEmpty()) << "children created for a job being deleted";

  // Nothing is left whose owner is gone (once the garbage collector's deletions are through: pods
  // end gracefully, as the kubelet stops them), and the queue holds only the new job.
  const auto orphans = [&] {
    std::set<std::string> live_jobs;
    // Each list is held in a variable: a range-for over a member of a temporary reads freed
    // memory.
    const json jobs = client().list_all(kube::resources::job(api::JobKind::PyTorchJob), "default");
    for (const json& job : jobs["items"])
      live_jobs.insert(job["metadata"]["uid"].get<std::string>());
    std::vector<std::string> left;
    for (const auto& resource : {kube::resources::pods(), kube::resources::services(),
                                 kube::resources::configmaps(), kube::resources::podgroups()}) {
      const json objects = client().list_all(resource, "default");
      for (const json& object : objects["items"]) {
        const std::string owner = trainctl::controller_uid(object);
        if (!owner.empty() && !live_jobs.contains(owner))
          left.push_back(resource.plural + "/" + object["metadata"]["name"].get<std::string>());
      }
    }
    return left;
  };
  EXPECT_TRUE(wait_until([&] { return orphans().empty(); }, std::chrono::seconds(20)))
      << "outlived their jobs: " << ::testing::PrintToString(orphans());
  EXPECT_TRUE(wait_until([&] {
    const json status = client().get(kube::resources::queues(), "", "quota")["status"];
    return status.value("allocated", json::object()) == json{{"nvidia.com/gpu", "4"}};
  })) << client().get(kube::resources::queues(), "", "quota")["status"].dump();
}

// Creates go out in slow-start batches (1, 2, 4, ...) as the Kubernetes Job controller sends
// them, each batch concurrently: a template the server rejects costs one request, a batch with an
// error is the last one sent, and a good plan creates everything.
// A namespace being deleted takes no new objects (403, cause NamespaceTerminating) and never will:
// as kube's job controller, the executor counts such a create as done rather than failing the
// reconcile and retrying it until the namespace is gone (seen on the real control plane: a job
// left in a namespace being deleted logged an error for every retry).
TEST_F(ControllerTest, ExecutorDropsCreatesInANamespaceBeingDeleted) {
  controller::declare_executor_metrics(metrics_);
  controller::Executor executor(*controller_client_, metrics_, log_, "test-controller");
  client().create(
      kube::resources::namespaces(), "",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "doomed"}}}});
  // A ConfigMap with a finalizer keeps the namespace terminating.
  client().create(kube::resources::configmaps(), "doomed",
                  {{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata", {{"name", "held"}, {"finalizers", {"example.com/hold"}}}}});
  client().remove(kube::resources::namespaces(), "", "doomed");
  const auto pod = [](const std::string& name) {
    return json{{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}}},
                {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  };
  controller::Plan plan;
  plan.actions.push_back({.type = controller::Action::Type::Create,
                          .resource = kube::resources::pods(),
                          .namespace_ = "doomed",
                          .object = pod("late")});
  const std::vector<json> results = executor.apply(plan);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].is_null()) << "done: nothing was created";
  EXPECT_EQ(client().list_all(kube::resources::pods(), "doomed")["items"].size(), 0u);

  // Any other refusal still fails the write.
  plan.actions[0].namespace_ = "no-such-namespace";
  EXPECT_THROW(executor.apply(plan), Error);
}

TEST_F(ControllerTest, ExecutorSendsCreatesInSlowStartBatchesAndStopsAtTheFirstError) {
  controller::declare_executor_metrics(metrics_);
  controller::Executor executor(*controller_client_, metrics_, log_, "test-controller");
  // Eight pods; those from index `first_bad` on have no containers, which the server refuses.
  const auto creates = [](const std::string& prefix, int first_bad) {
    controller::Plan plan;
    for (int i = 0; i < 8; ++i) {
      const json containers =
          i < first_bad ? json::array({{{"name", "c"}, {"image", "busybox"}}}) : json::array();
      plan.actions.push_back({.type = controller::Action::Type::Create,
                              .resource = kube::resources::pods(),
                              .namespace_ = "default",
                              .object = {{"apiVersion", "v1"},
                                         {"kind", "Pod"},
                                         {"metadata", {{"name", prefix + std::to_string(i)}}},
                                         {"spec", {{"containers", containers}}}}});
    }
    return plan;
  };
  const auto sent = [&] { return metrics_.value("trainctl_api_writes_total", {"create", "pods"}); };
  EXPECT_THROW(executor.apply(creates("bad-", 0)), Error);
  EXPECT_EQ(sent(), 1);
  // Batches {0}, {1, 2}, {3, 4, 5, 6}: pod 3 fails, so pod 7 is never sent. The error carries
  // what went through: pods 0-2.
  try {
    executor.apply(creates("late-", 3));
    ADD_FAILURE() << "pod late-3 has no containers and must fail";
  } catch (const controller::ApplyError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Invalid) << e.what();
    ASSERT_EQ(e.results().size(), 8u);
    // A create's result says it went through (its answer is not decoded); the pod is there.
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(e.results()[i].is_null(), i >= 3) << i;
      if (i < 3) {
        EXPECT_NO_THROW(
            client().get(kube::resources::pods(), "default", fmt::format("late-{}", i)));
      }
    }
  }
  EXPECT_EQ(sent(), 1 + 7);
  const std::vector<json> results = executor.apply(creates("good-", 8));
  EXPECT_EQ(sent(), 1 + 7 + 8);
  ASSERT_EQ(results.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_FALSE(results[i].is_null()) << i;
    EXPECT_NO_THROW(client().get(kube::resources::pods(), "default", fmt::format("good-{}", i)));
  }
}

// A create the server refuses is a Warning FailedCreate Event on the object's controller, in the
// server's words, as Kubernetes' pod control records it: a job whose pods the API server rejects
// says why it has none (it stayed "Created" with nothing but the controller's log to say why). An
// object without a controller gets none.
TEST_F(ControllerTest, ExecutorRecordsACreateTheServerRefusesOnTheObjectsController) {
  controller::declare_executor_metrics(metrics_);
  const json owner = {{"apiVersion", "kubeflow.org/v1"},
                      {"kind", "TFJob"},
                      {"name", "refused"},
                      {"uid", "uid-refused"},
                      {"controller", true}};
  const auto pod = [&](const std::string& name, bool owned) {
    json p = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}}},
              {"spec", {{"containers", json::array()}}}};  // none: the server refuses it
    if (owned)
      p["metadata"]["ownerReferences"] = json::array({owner});
    return p;
  };
  {
    controller::Executor executor(*controller_client_, metrics_, log_, "test-controller");
    for (const auto& [name, owned] : {std::pair{"refused-worker-0", true}, {"orphan-0", false}}) {
      controller::Plan plan;
      plan.actions.push_back({.type = controller::Action::Type::Create,
                              .resource = kube::resources::pods(),
                              .namespace_ = "default",
                              .object = pod(name, owned)});
      EXPECT_THROW(executor.apply(plan), controller::ApplyError);
    }
  }  // its events sent
  std::vector<json> events =
      client().list_all(kube::resources::events(), "default")["items"].get<std::vector<json>>();
  std::erase_if(events, [](const json& e) { return e["reason"] != "FailedCreate"; });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["involvedObject"]["kind"], "TFJob");
  EXPECT_EQ(events[0]["involvedObject"]["name"], "refused");
  EXPECT_EQ(events[0]["involvedObject"]["uid"], "uid-refused");
  EXPECT_THAT(events[0]["message"].get<std::string>(),
              ::testing::StartsWith("Error creating: Pod \"refused-worker-0\" is invalid: "));
  EXPECT_THAT(events[0]["message"].get<std::string>(),
              ::testing::Not(::testing::HasSubstr("HTTP")));
}

// Two writes of one batch fail (pods 3 and 5 of the batch {3, 4, 5, 6}): the error is the first
// in action order whichever answer came first, the batch's other writes went through and are in
// the results at their own places, and nothing after the batch is sent. Workers sharing the
// executor (and its threads) each get their own plan's answers, in their plan's order.
TEST_F(ControllerTest, ExecutorReportsTheFirstFailureInActionOrderAndKeepsEachPlansResults) {
  controller::declare_executor_metrics(metrics_);
  controller::Executor executor(*controller_client_, metrics_, log_, "test-controller");
  const auto pod = [](const std::string& name, bool valid) {
    return json{{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"containers",
                   valid ? json::array({{{"name", "c"}, {"image", "busybox"}}}) : json::array()}}}};
  };
  const auto creates = [&](const std::string& prefix) {
    controller::Plan plan;
    for (int i = 0; i < 8; ++i) {
      plan.actions.push_back({.type = controller::Action::Type::Create,
                              .resource = kube::resources::pods(),
                              .namespace_ = i == 5 ? "no-such-namespace" : "default",
                              .object = pod(prefix + std::to_string(i), i != 3)});
    }
    return plan;
  };
  try {
    executor.apply(creates("mixed-"));
    ADD_FAILURE() << "pods mixed-3 and mixed-5 must fail";
  } catch (const controller::ApplyError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Invalid) << "pod 3's error, not pod 5's: " << e.what();
    ASSERT_EQ(e.results().size(), 8u);
    // Each result in its action's place: what went through is not null (a create's answer is
    // not decoded), the rest is.
    for (int i : {0, 1, 2, 4, 6}) {
      EXPECT_FALSE(e.results()[i].is_null()) << i;
      EXPECT_NO_THROW(client().get(kube::resources::pods(), "default", fmt::format("mixed-{}", i)));
    }
    for (int i : {3, 5, 7})
      EXPECT_TRUE(e.results()[i].is_null()) << i;
  }
  EXPECT_EQ(metrics_.value("trainctl_api_writes_total", {"create", "pods"}), 7);
  EXPECT_THROW(client().get(kube::resources::pods(), "default", "mixed-7"), Error);

  // Eight workers apply plans of eight creates each at once.
  std::vector<std::vector<json>> results(8);
  {
    std::vector<std::jthread> workers;
    for (int w = 0; w < 8; ++w) {
      workers.emplace_back([&, w] {
        controller::Plan plan;
        for (int i = 0; i < 8; ++i) {
          plan.actions.push_back({.type = controller::Action::Type::Create,
                                  .resource = kube::resources::pods(),
                                  .namespace_ = "default",
                                  .object = pod(fmt::format("w{}-{}", w, i), true)});
        }
        results[w] = executor.apply(plan);
      });
    }
  }
  for (int w = 0; w < 8; ++w) {
    ASSERT_EQ(results[w].size(), 8u) << w;
    for (int i = 0; i < 8; ++i) {
      EXPECT_FALSE(results[w][i].is_null()) << w << " " << i;
      EXPECT_NO_THROW(
          client().get(kube::resources::pods(), "default", fmt::format("w{}-{}", w, i)));
    }
  }
}

// Events leave the reconcile path: record() returns at once, flush() waits until they are sent,
// in order; past the queue's capacity they are dropped and counted, never blocking a worker.
TEST_F(ControllerTest, EventRecorderSendsInOrderOffTheCallersThreadAndDropsPastItsCapacity) {
  controller::declare_executor_metrics(metrics_);
  // Twenty objects: events on different objects are never aggregated.
  const auto event = [](int i) {
    return controller::EventRecord{
        .type = "Normal",
        .reason = "Tick",
        .message = "tick " + std::to_string(i),
        .involved_object = {
            .kind = "TFJob", .namespace_ = "default", .name = "clock-" + std::to_string(i)}};
  };
  {
    controller::EventRecorder recorder(controller_client_->config(), metrics_, log_,
                                       "test-controller");
    for (int i = 0; i < 20; ++i)
      recorder.record(event(i));
    recorder.flush();
  }
  std::vector<json> events =
      client().list_all(kube::resources::events(), "default")["items"].get<std::vector<json>>();
  std::erase_if(events, [](const json& e) { return e["reason"] != "Tick"; });
  ASSERT_EQ(events.size(), 20u);
  const auto version = [](const json& e) {
    return std::stoll(e["metadata"]["resourceVersion"].get<std::string>());
  };
  std::sort(events.begin(), events.end(),
            [&](const json& a, const json& b) { return version(a) < version(b); });
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(events[i]["message"], "tick " + std::to_string(i));  // created in order
  EXPECT_EQ(metrics_.value("trainctl_events_total", {"Normal", "Tick"}), 20);

  controller::EventRecorder full(controller_client_->config(), metrics_, log_, "test-controller",
                                 /*capacity=*/0);
  full.record(event(99));
  full.flush();
  EXPECT_EQ(metrics_.value("trainctl_events_dropped_total", {"Normal", "Tick"}), 1);
  EXPECT_EQ(metrics_.value("trainctl_events_total", {"Normal", "Tick"}), 20);
}

// client-go's EventCorrelator: events on one object with one type and reason are one Event with a
// count. Those queued together are merged; a later one patches the Event (count, lastTimestamp,
// message) instead of creating another; differing messages are marked combined; an Event that is
// gone (expired) is created again. So a job's 16 "Created pod/service" events cost 2 POSTs.
TEST_F(ControllerTest, EventRecorderAggregatesEventsOnOneObjectAndReasonIntoOneCountedEvent) {
  controller::declare_executor_metrics(metrics_);
  const controller::ObjectReference job = {
      .kind = "TFJob", .namespace_ = "default", .name = "agg", .uid = "uid-agg"};
  const auto event = [&](std::string reason, std::string message) {
    return controller::EventRecord{.type = "Normal",
                                   .reason = std::move(reason),
                                   .message = std::move(message),
                                   .involved_object = job};
  };
  const auto events_of = [&](const std::string& reason) {
    std::vector<json> events =
        client().list_all(kube::resources::events(), "default")["items"].get<std::vector<json>>();
    std::erase_if(events, [&](const json& e) {
      return e["reason"] != reason || e["involvedObject"]["name"] != "agg";
    });
    return events;
  };
  const auto writes = [&](const std::string& verb) {
    return metrics_.value("trainctl_api_writes_total", {verb, "events"});
  };
  controller::EventRecorder recorder(controller_client_->config(), metrics_, log_,
                                     "test-controller");
  for (int i = 0; i < 16; ++i)
    recorder.record(event("SuccessfulCreatePod", "Created pod: agg-worker-" + std::to_string(i)));
  for (int i = 0; i < 3; ++i)
    recorder.record(event("SuccessfulCreateService", "Created service: agg-worker-0"));
  recorder.flush();

  std::vector<json> pods = events_of("SuccessfulCreatePod");
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0]["count"], 16);
  EXPECT_EQ(pods[0]["message"], "(combined from similar events): Created pod: agg-worker-15");
  std::vector<json> services = events_of("SuccessfulCreateService");
  ASSERT_EQ(services.size(), 1u);
  EXPECT_EQ(services[0]["count"], 3);
  EXPECT_EQ(services[0]["message"], "Created service: agg-worker-0");  // all alike: as it is
  EXPECT_EQ(metrics_.value("trainctl_events_total", {"Normal", "SuccessfulCreatePod"}), 16);
  // The sender may take the first pod event before the others are queued: then one patch more.
  EXPECT_EQ(writes("create"), 2);
  EXPECT_LE(writes("patch"), 2);

  // Later: a patch of the same Event, not a new one.
  const double patches = writes("patch");
  recorder.record(event("SuccessfulCreateService", "Created service: agg-worker-0"));
  recorder.flush();
  services = events_of("SuccessfulCreateService");
  ASSERT_EQ(services.size(), 1u);
  EXPECT_EQ(services[0]["count"], 4);
  EXPECT_EQ(services[0]["message"], "Created service: agg-worker-0");
  EXPECT_EQ(writes("create"), 2);
  EXPECT_EQ(writes("patch"), patches + 1);

  // Expired: the next one creates a new Event with its own count.
  client().remove(kube::resources::events(), "default",
                  services[0]["metadata"]["name"].get<std::string>());
  recorder.record(event("SuccessfulCreateService", "Created service: agg-worker-1"));
  recorder.flush();
  services = events_of("SuccessfulCreateService");
  ASSERT_EQ(services.size(), 1u);
  EXPECT_EQ(services[0]["count"], 1);
  EXPECT_EQ(writes("create"), 3);
}

/// A Normal event with `reason` on the TFJob default/`name`.
controller::EventRecord job_event(std::string reason, std::string name) {
  return {.type = "Normal",
          .reason = std::move(reason),
          .message = "one",
          .involved_object = {.kind = "TFJob", .namespace_ = "default", .name = std::move(name)}};
}

// Events have a budget of their own (25/s, bursts of 50) even when the controller's client is
// unlimited, so they cannot crowd out pod creates: 60 Events on 60 objects take at least the
// 10 / 25 s that the ten past the burst wait. (A lower bound: a busy machine only adds to it.)
TEST_F(ControllerTest, EventRecorderSendsWithinItsOwnBudgetWhenTheClientIsUnlimited) {
  controller::declare_executor_metrics(metrics_);
  kube::RestConfig unlimited = controller_client_->config();
  unlimited.qps = 0;
  controller::EventRecorder recorder(unlimited, metrics_, log_, "test-controller");
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 60; ++i)
    recorder.record(job_event("Budget", "budget-" + std::to_string(i)));
  recorder.flush();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(390));
  EXPECT_EQ(metrics_.value("trainctl_events_total", {"Normal", "Budget"}), 60);
}

// The controller's informers keep no managedFields: a real API server records every writer's
// fields there (~40 % of a pod the controller made), no reconciler reads them, and every
// reconcile decodes its job's pods and services from the cache. (The sandbox records them for
// server-side apply.)
TEST_F(ControllerTest, ManagerInformersDropManagedFields) {
  controller::declare_controller_metrics(metrics_);
  manager_ = std::make_unique<controller::Manager>(*controller_client_,
                                                   controller::ManagerOptions{}, metrics_, log_);
  kube::cache::Informer& config_maps = manager_->informer(kube::resources::configmaps());
  struct Idle : controller::Runnable {  // keeps the manager (and its informers) running
    void run(std::stop_token stop) override {
      std::mutex mu;
      std::condition_variable_any stopped;
      std::unique_lock lock(mu);
      stopped.wait(lock, stop, [] { return false; });
    }
  };
  manager_->add(std::make_unique<Idle>());
  thread_ = std::jthread([this](std::stop_token stop) { manager_->run(stop); });
  ASSERT_TRUE(wait_until([&] { return manager_->synced(); }));
  const json applied =
      client().patch(kube::resources::configmaps(), "default", "fields", kube::PatchType::Apply,
                     {{"apiVersion", "v1"},
                      {"kind", "ConfigMap"},
                      {"metadata", {{"name", "fields"}}},
                      {"data", {{"a", "1"}}}});
  ASSERT_FALSE(applied["metadata"].value("managedFields", json::array()).empty());
  std::optional<json> cached;
  ASSERT_TRUE(wait_until([&] { return (cached = config_maps.get("default/fields")).has_value(); }));
  EXPECT_EQ((*cached)["data"], json({{"a", "1"}}));
  EXPECT_FALSE((*cached)["metadata"].contains("managedFields")) << cached->dump();
}

// A stopping controller sends what is queued for its stop grace at most, then drops the rest
// (counted, logged): 25 Events/s would keep a full queue's controller up for minutes after it
// said "stopped", until its pod's grace period ended in a SIGKILL.
TEST_F(ControllerTest, EventRecorderStopsWithinItsGraceAndCountsWhatItDidNotSend) {
  controller::declare_executor_metrics(metrics_);
  const auto start = std::chrono::steady_clock::now();
  {
    controller::EventRecorder recorder(controller_client_->config(), metrics_, log_,
                                       "test-controller", /*capacity=*/10'000,
                                       /*stop_grace=*/std::chrono::milliseconds(300));
    // 50 go at once (the burst), the other 150 would take 6 s at 25/s.
    for (int i = 0; i < 200; ++i)
      recorder.record(job_event("Stopping", "stopping-" + std::to_string(i)));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  const double sent = metrics_.value("trainctl_events_total", {"Normal", "Stopping"});
  const double dropped = metrics_.value("trainctl_events_dropped_total", {"Normal", "Stopping"});
  EXPECT_GE(sent, 1);
  EXPECT_GE(dropped, 100);
  EXPECT_EQ(sent + dropped, 200);
  EXPECT_THAT(log_text_.str(), ::testing::HasSubstr("events not sent within the stop grace"));
}

// A finished job's PodGroup may be deleted (and re-created) while admission still holds the old
// object: writes carrying its uid then fail NotFound or with a uid-precondition Conflict. The
// object they meant is gone, so they count as done; a stale resourceVersion still fails.
TEST_F(ControllerTest, ExecutorCountsWritesToAnObjectThatIsGoneAsDone) {
  controller::declare_executor_metrics(metrics_);
  // The executor's semantics, not the controller's calls: it writes as the admin, since the
  // controller never writes a PodGroup's status subresource.
  controller::Executor executor(client(), metrics_, log_, "test-controller");
  const std::string manifest = R"(
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: pg}
spec: {minMember: 2}
)";
  const json old = create(kube::resources::podgroups(), manifest);
  json updated = old;
  updated["status"] = {{"phase", "Inqueue"}};
  const auto update = [&](const json& object) {
    return controller::Plan{.actions = {{.type = controller::Action::Type::Update,
                                         .resource = kube::resources::podgroups(),
                                         .namespace_ = "default",
                                         .name = "pg",
                                         .object = object}}};
  };
  const auto status_update = [&](const json& object) {
    controller::Plan plan = update(object);
    plan.actions[0].type = controller::Action::Type::UpdateStatus;
    return plan;
  };

  client().remove(kube::resources::podgroups(), "default", "pg");
  std::vector<json> results;
  ASSERT_NO_THROW(results = executor.apply(update(updated)));
  EXPECT_EQ(results, std::vector<json>{nullptr});
  ASSERT_NO_THROW(executor.apply(status_update(updated)));

  // Re-created under the same name: the server refuses the old uid, and the new object stays.
  const json replacement = create(kube::resources::podgroups(), manifest);
  updated["metadata"]["resourceVersion"] = replacement["metadata"]["resourceVersion"];
  ASSERT_NO_THROW(results = executor.apply(update(updated)));
  EXPECT_EQ(results, std::vector<json>{nullptr});
  ASSERT_NO_THROW(executor.apply(status_update(updated)));
  const json now = client().get(kube::resources::podgroups(), "default", "pg");
  EXPECT_EQ(now["metadata"]["uid"], replacement["metadata"]["uid"]);
  EXPECT_FALSE(now.contains("status") && now["status"].value("phase", "") == "Inqueue");

  // The same object at another version is a real conflict: the caller must retry.
  json stale = replacement;
  stale["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"];
  try {
    executor.apply(update(stale));
    ADD_FAILURE() << "a stale resourceVersion must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Conflict) << e.what();
  }
}

}  // namespace
}  // namespace trainctl

namespace trainctl {
namespace {

// The packaged RBAC is exactly what the controller uses. Every test here fails on a request
// packaging/rbac.yaml denies (see ApiCalls); this one takes the controller through every kind of
// work it does (leader election, a queue's gangs, each job kind with TTL and cleanup, an
// autoscaled PyTorchJob, an MPIJob scaled and suspended, an Istio proxy, then scheduler-plugins'
// PodGroups) and fails on any rule it never used, so the policy grants nothing the controller
// does not need.
TEST_F(ControllerTest, EveryRuleOfThePackagedRbacIsUsed) {
  client().create(kube::resources::namespaces(), "", {{"metadata", {{"name", "trainctl-system"}}}});
  client().patch(kube::resources::namespaces(), "", "default", kube::PatchType::Merge,
                 {{"metadata", {{"labels", {{"istio-injection", "enabled"}}}}}});
  controller::ManagerOptions manager;
  manager.leader_election = kube::cache::LeaderElectionConfig{
      .namespace_ = "trainctl-system", .name = "trainctl-controller", .identity = "tour"};
  start(controller::GangScheduler::Builtin, std::move(manager));

  // TFJobs: one whose PS cleanup deletes and whose TTL is 0; one with meshed workers, whose
  // proxies are asked to quit once their training containers are done.
  json tf = yaml(kTfJob);
  tf["spec"]["runPolicy"] = {{"cleanPodPolicy", "Running"}, {"ttlSecondsAfterFinished", 0}};
  client().create(kube::resources::job(api::JobKind::TFJob), "default", tf);
  json meshed = yaml(kTfJob);
  meshed["metadata"]["name"] = "meshed";
  meshed["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].push_back(
      {{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}});
  client().create(kube::resources::job(api::JobKind::TFJob), "default", meshed);
  ASSERT_TRUE(wait_until(
      [&] {
        return exists(kube::resources::pods(), "meshed-worker-0") &&
               !annotation_of(client().get(kube::resources::pods(), "default", "meshed-worker-0"),
                              api::annotations::sidecar_stop_requested)
                    .empty();
      },
      std::chrono::seconds(30)))
      << "the meshed worker's proxy was asked to quit";

  // PyTorchJob with metrics: its HPA is created, changed with the job, and deleted on suspend.
  json elastic = yaml(kElasticPyTorchJob);
  elastic["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1;
  client().create(kube::resources::job(api::JobKind::PyTorchJob), "default", elastic);
  ASSERT_TRUE(
      wait_until([&] { return exists(kube::resources::horizontalpodautoscalers(), "elastic"); }));
  client().patch(kube::resources::job(api::JobKind::PyTorchJob), "default", "elastic",
                 kube::PatchType::Merge, {{"spec", {{"elasticPolicy", {{"maxReplicas", 4}}}}}});
  ASSERT_TRUE(wait_until([&] {
    return client().get(kube::resources::horizontalpodautoscalers(), "default",
                        "elastic")["spec"]["maxReplicas"] == 4;
  }));

  // MPIJob: launcher Job, hostfile ConfigMap (rewritten when a worker is added), SSH Secret.
  create(kube::resources::job(api::JobKind::MPIJob), R"(
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: hvd}
spec:
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: launcher, image: hvd:1}]}
    Worker:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: worker, image: hvd:1}]}
)");
  ASSERT_TRUE(wait_until([&] { return exists(kube::resources::jobs(), "hvd-launcher"); },
                         std::chrono::seconds(15)));
  client().patch(kube::resources::job(api::JobKind::MPIJob), "default", "hvd",
                 kube::PatchType::Merge,
                 {{"spec", {{"mpiReplicaSpecs", {{"Worker", {{"replicas", 2}}}}}}}});
  ASSERT_TRUE(wait_until([&] {
    return client()
               .get(kube::resources::configmaps(), "default", "hvd-config")["data"]["hostfile"]
               .get<std::string>()
               .find("hvd-worker-1") != std::string::npos;
  }));

  // A retryable exit: the pod is recreated and the restart counted on the job.
  create(kube::resources::job(api::JobKind::PyTorchJob), R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: flaky}
spec:
  runPolicy: {backoffLimit: 1}
  pytorchReplicaSpecs:
    Master:
      restartPolicy: ExitCode
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.1", sandbox.trainctl.io/exit-code: "137"}}
        spec: {containers: [{name: pytorch, image: pt:2}]}
)");
  ASSERT_TRUE(wait_status(kube::resources::job(api::JobKind::PyTorchJob), "flaky", "Failed"));

  // Suspending takes the PyTorchJob's HPA and the MPIJob's launcher with the pods.
  for (const api::JobKind kind : {api::JobKind::PyTorchJob, api::JobKind::MPIJob}) {
    const std::string name = kind == api::JobKind::MPIJob ? "hvd" : "elastic";
    client().patch(kube::resources::job(kind), "default", name, kube::PatchType::Merge,
                   {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
    // Past the controller's 30 s expectation timeout: a lost event delays, never blocks.
    ASSERT_TRUE(
        wait_status(kube::resources::job(kind), name, "Suspended", std::chrono::seconds(45)))
        << name << " is " << status_of(kube::resources::job(kind), name) << ": "
        << job(kube::resources::job(kind), name).value("status", json()).dump();
  }
  ASSERT_TRUE(
      wait_until([&] { return !exists(kube::resources::job(api::JobKind::TFJob), "mnist"); },
                 std::chrono::seconds(20)))
      << "the TFJob's TTL";
  for (const api::JobKind kind : {api::JobKind::PyTorchJob, api::JobKind::MPIJob})
    client().remove(kube::resources::job(kind), "default",
                    kind == api::JobKind::MPIJob ? "hvd" : "elastic");
  thread_ = {};  // the Lease is released on the way out

  // --gang-scheduler scheduler-plugins: its own PodGroup type, created with a job and deleted
  // when the job is suspended.
  start(controller::GangScheduler::SchedulerPlugins);
  create(kube::resources::job(api::JobKind::PyTorchJob), kCoscheduledJob);
  const kube::Resource groups = kube::resources::scheduler_plugins_podgroups();
  ASSERT_TRUE(wait_until([&] { return exists(groups, "cosched"); }));
  client().patch(kube::resources::job(api::JobKind::PyTorchJob), "default", "cosched",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  ASSERT_TRUE(wait_until([&] { return !exists(groups, "cosched"); }, std::chrono::seconds(45)));
  thread_ = {};

  // Never requested: the finalizers subresources are what the OwnerReferencesPermissionEnforcement
  // admission plugin checks for blockOwnerDeletion; servers from 1.30 on authorize an exec's
  // WebSocket upgrade as "create" on pods/exec (the sandbox, as 1.26, as "get").
  const std::set<std::string> exempt = {"update tfjobs/finalizers", "update pytorchjobs/finalizers",
                                        "update mpijobs/finalizers", "create pods/exec"};
  EXPECT_THAT(calls_.policy().unused(calls_.used(), exempt), ::testing::IsEmpty())
      << "granted by packaging/rbac.yaml, never used";
}

/// A PyTorchJob of `pods` pods (a master and workers) of `gpus` GPUs each, running for
/// `run_seconds`, in `queue` at `priority_class` (none when empty), each pod on `node` when given.
json gpu_job(const std::string& name, int pods, int gpus, const std::string& run_seconds,
             const std::string& queue = "default", const std::string& priority_class = "") {
  json replica = yaml(R"(
replicas: 1
template:
  spec: {containers: [{name: pytorch, image: pt:2}]}
)");
  replica["template"]["metadata"]["annotations"]["sandbox.trainctl.io/run-seconds"] = run_seconds;
  replica["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
      std::to_string(gpus);
  json job = yaml("{apiVersion: kubeflow.org/v1, kind: PyTorchJob}");
  job["metadata"]["name"] = name;
  job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = queue;
  if (!priority_class.empty())
    job["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] = priority_class;
  job["spec"]["pytorchReplicaSpecs"]["Master"] = replica;
  if (pods > 1) {
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = replica;
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = pods - 1;
  }
  return job;
}

/// The message of PodGroup `name`'s True Unschedulable condition; "" when it has none (yet).
std::string unschedulable_message(kube::Client& client, const std::string& name) {
  try {
    const json group = client.get(kube::resources::podgroups(), "default", name);
    const json* c = find_condition(object_member(group, "status"), "Unschedulable");
    return c != nullptr && string_member(*c, "status") == "True" ? string_member(*c, "message")
                                                                 : "";
  } catch (const Error&) {
    return "";  // not created yet
  }
}

class SeedDeadlockTest : public ControllerTest {
 protected:
  SeedDeadlockTest() : ControllerTest({.nodes = 4, .gpus_per_node = 1}) {}
};

/// The unfinished pods of a job.
std::size_t unfinished(const std::vector<json>& pods) {
  return std::count_if(pods.begin(), pods.end(), [](const json& pod) {
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    return phase != "Succeeded" && phase != "Failed";
  });
}

// Issue 9's seed deadlock, live: 4 nodes x 1 GPU, two jobs of 4 one-GPU pods created at once.
// Exactly one runs; the other holds no pod and says why; it runs once the first has finished; at
// no sample are both partly running. The metrics show the waiting gang and time every pass.
TEST_F(SeedDeadlockTest, ExactlyOneOfTwoGangsRunsAndTheOtherWaitsWithoutPodsThenRuns) {
  start(controller::GangScheduler::Builtin);
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  client().create(pytorch, "default", gpu_job("alpha", 4, 1, "3"));
  client().create(pytorch, "default", gpu_job("beta", 4, 1, "3"));
  std::string first, second, why;
  double most_pending = 0;  // the metric, while the second gang waits
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (
      std::chrono::steady_clock::now() < deadline &&
      !(status_of(pytorch, "alpha") == "Succeeded" && status_of(pytorch, "beta") == "Succeeded")) {
    const std::size_t a = unfinished(pods_of("alpha")), b = unfinished(pods_of("beta"));
    ASSERT_FALSE(a > 0 && b > 0) << "both partly running: alpha " << a << ", beta " << b;
    if (first.empty() && (a == 4 || b == 4)) {
      first = a == 4 ? "alpha" : "beta";
      second = a == 4 ? "beta" : "alpha";
    }
    if (!first.empty() && (first == "alpha" ? b : a) == 0) {  // the second one waits
      most_pending = std::max(most_pending,
                              metrics_.value("trainctl_queue_podgroups", {"default", "Pending"}));
      if (why.empty()) {
        why = unschedulable_message(client(), second);
        if (!why.empty()) {
          EXPECT_EQ(pods_of(second).size(), 0u);  // holds nothing while it waits
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(first.empty()) << "neither gang ran";
  EXPECT_EQ(status_of(pytorch, first), "Succeeded");
  EXPECT_EQ(status_of(pytorch, second), "Succeeded") << "the second gang never ran";
  EXPECT_THAT(why, ::testing::HasSubstr("nvidia.com/gpu 4 requested"));
  // Every pass was timed.
  EXPECT_THAT(metrics_.render(),
              ::testing::ContainsRegex("trainctl_admission_pass_duration_seconds_count [1-9]"));
  EXPECT_EQ(most_pending, 1) << "trainctl_queue_podgroups{queue=\"default\",phase=\"Pending\"}";
}

class FragmentedClusterTest : public ControllerTest {
 protected:
  FragmentedClusterTest() : ControllerTest({.nodes = 4, .gpus_per_node = 4}) {}
};

// 4 nodes x 4 GPUs with 2 taken on each: 8 GPUs free in total, but a gang of 2 x 4-GPU pods fits
// no node. It is not admitted, creates no pod, and its PodGroup names the largest free node; the
// queue's metrics show it pending and what the queue holds.
TEST_F(FragmentedClusterTest, AGangThatFitsOnlyInTotalWaitsNamingTheLargestFreeNode) {
  start(controller::GangScheduler::Builtin);
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  for (int i = 0; i < 4; ++i) {
    json filler = gpu_job(fmt::format("filler-{}", i), 1, 2, "forever");
    filler["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {
        {"kubernetes.io/hostname", fmt::format("sandbox-node-{}", i)}};
    client().create(pytorch, "default", filler);
  }
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(wait_status(pytorch, fmt::format("filler-{}", i), "Running"));
  client().create(pytorch, "default", gpu_job("big", 2, 4, "forever"));
  std::string why;
  ASSERT_TRUE(wait_until([&] { return !(why = unschedulable_message(client(), "big")).empty(); },
                         std::chrono::seconds(20)));
  EXPECT_EQ(why,
            "no node fits pod big-master-0: needs 4 nvidia.com/gpu, largest free on one node is 2 "
            "(sandbox-node-0)");
  EXPECT_TRUE(pods_of("big").empty());
  EXPECT_TRUE(wait_until([&] {
    return metrics_.value("trainctl_queue_podgroups", {"default", "Pending"}) == 1 &&
           metrics_.value("trainctl_queue_allocated", {"default", "nvidia.com/gpu"}) == 8;
  })) << metrics_.render();
  EXPECT_EQ(metrics_.value("trainctl_queue_capability", {"default", "nvidia.com/gpu"}),
            std::numeric_limits<double>::infinity());
}

class PreemptionTest : public ControllerTest {
 protected:
  PreemptionTest() : ControllerTest({.nodes = 1, .gpus_per_node = 4}) {}
};

// --preemption within-queue, live: a gang of higher priority evicts a running lower-priority
// gang whole (every pod), with an Event on both jobs and the reason on the victim's PodGroup;
// it then runs, and the victim waits without pods.
TEST_F(PreemptionTest, AHigherPriorityJobEvictsAWholeLowerPriorityJobOfItsQueue) {
  create_priority_classes();
  start(controller::GangScheduler::Builtin, {},
        {.preemption = controller::Preemption::WithinQueue});
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  client().create(pytorch, "default", gpu_job("batch", 2, 2, "forever", "default", "low"));
  ASSERT_TRUE(wait_status(pytorch, "batch", "Running"));
  client().create(pytorch, "default", gpu_job("urgent", 1, 4, "forever", "default", "high"));
  ASSERT_TRUE(wait_status(pytorch, "urgent", "Running", std::chrono::seconds(30)))
      << client().get(kube::resources::podgroups(), "default", "urgent").dump();
  EXPECT_TRUE(wait_until([&] { return pods_of("batch").empty(); }));
  const json victim = client().get(kube::resources::podgroups(), "default", "batch");
  EXPECT_EQ(victim["status"]["phase"], "Pending");
  const json* preempted = find_condition(victim["status"], "Unschedulable");
  ASSERT_NE(preempted, nullptr) << victim.dump();
  EXPECT_EQ((*preempted)["reason"], "Preempted");
  EXPECT_THAT((*preempted)["message"].get<std::string>(),
              ::testing::StartsWith("preempted by default/urgent (priority 1000 over 10)"));
  const auto events = [&](const std::string& name) {
    std::set<std::string> reasons;
    const json list = client().list_all(kube::resources::events(), "default");
    for (const json& e : list["items"])
      if (e["involvedObject"].value("name", "") == name &&
          e["involvedObject"].value("kind", "") == "PyTorchJob")
        reasons.insert(e.value("reason", ""));
    return reasons;
  };
  EXPECT_TRUE(wait_until([&] {
    return events("batch").contains("Preempted") && events("urgent").contains("Preempting");
  })) << ::testing::PrintToString(events("batch"));
  EXPECT_EQ(metrics_.value("trainctl_gang_preemptions_total", {"default"}), 1);
  EXPECT_THAT(pods_of("urgent"), ::testing::SizeIs(1));
}

/// 4 nodes x 1 GPU, and every watch of the sandbox lags its store (a watch cache behind etcd): each
/// informer learns of a write, the controller's own included, only a while after it was made.
class LaggingCacheTest : public ControllerTest {
 protected:
  static constexpr std::chrono::milliseconds kWatchDelay{600};

  // Verbosity 3: a failure, seen only under CI's load, prints every plan the controller wrote.
  LaggingCacheTest() : ControllerTest({.nodes = 4, .gpus_per_node = 1}, 3) {
    local_.sandbox().api().set_faults({.watch_delay = kWatchDelay});
  }

  /// The requests the controller sent to `verb` objects of `plural` (AlreadyExists included).
  double writes(const std::string& verb, const std::string& plural) {
    return metrics_.value("trainctl_api_writes_total", {verb, plural});
  }

  /// Each PodGroup's phase, as the server has it now ("" for none yet).
  std::map<std::string, std::string> pod_group_phases() {
    std::map<std::string, std::string> phases;
    // The list is kept while its items are read: a range over list_all(...)["items"] would read
    // a destroyed temporary (AddressSanitizer found it).
    const json list = client().list_all(kube::resources::podgroups(), "default");
    for (const json& g : list["items"])
      phases[name_of(g)] = g.value("status", json::object()).value("phase", "");
    return phases;
  }
};

/// Whether a PodGroup in `phase` holds room in its queue and on the nodes.
bool holds_room(const std::string& phase) {
  return phase == "Inqueue" || phase == "Running";
}

// Two gangs of 4 one-GPU pods on 4 one-GPU nodes while every informer shows writes 600 ms late:
// "train", then half a lag later "hotfix" of higher priority, so that hotfix's PodGroup is likely
// to reach the cache while train's admission is still on its way back to it. A pass planned then
// sees train Pending and the nodes free, and admits hotfix (first by priority) beside it: its
// update goes first (by name) and succeeds, and train's, planned from a stale resourceVersion,
// fails only after it.
// Sampled from the server throughout (PodGroups first, then pods: a gang admitted means the
// other's pods had finished before that read): never are both groups Inqueue, never does one hold
// room while the other has unfinished pods, never are both partly running. The second runs once
// the first has finished, each gang is admitted once, and each PodGroup and pod is created once.
TEST_F(LaggingCacheTest, OfTwoGangsWithRoomForOneOnlyOneIsEverAdmittedAtATime) {
  create_priority_classes();
  start(controller::GangScheduler::Builtin);
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  client().create(pytorch, "default", gpu_job("train", 4, 1, "2", "default", "low"));
  std::this_thread::sleep_for(kWatchDelay / 2);
  client().create(pytorch, "default", gpu_job("hotfix", 4, 1, "2", "default", "high"));
  std::string first;  // the gang whose pods appeared first
  int samples = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         !(status_of(pytorch, "train") == "Succeeded" &&
           status_of(pytorch, "hotfix") == "Succeeded")) {
    std::map<std::string, std::string> phase = pod_group_phases();
    const std::size_t t = unfinished(pods_of("train")), h = unfinished(pods_of("hotfix"));
    ++samples;
    ASSERT_FALSE(phase["train"] == "Inqueue" && phase["hotfix"] == "Inqueue") << "both admitted";
    ASSERT_FALSE(holds_room(phase["train"]) && h > 0)
        << "train admitted (" << phase["train"] << ") while hotfix has " << h << " pods";
    ASSERT_FALSE(holds_room(phase["hotfix"]) && t > 0)
        << "hotfix admitted (" << phase["hotfix"] << ") while train has " << t << " pods";
    ASSERT_FALSE(t > 0 && h > 0) << "both partly running: train " << t << ", hotfix " << h;
    if (first.empty() && (t > 0 || h > 0))
      first = t > 0 ? "train" : "hotfix";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(first.empty()) << "neither gang ran";
  EXPECT_EQ(status_of(pytorch, "train"), "Succeeded");
  EXPECT_EQ(status_of(pytorch, "hotfix"), "Succeeded") << "the second gang never ran";
  EXPECT_GT(samples, 20);
  EXPECT_EQ(metrics_.value("trainctl_events_total", {"Normal", "Enqueued"}), 2)
      << "each gang admitted once";
  EXPECT_EQ(metrics_.value("trainctl_reconcile_total", {"controller", "error"}), 0)
      << "an admission pass failed: a write planned from a cache behind its own writes";
  EXPECT_EQ(writes("create", "podgroups"), 2);
  EXPECT_EQ(writes("create", "pods"), 8) << "a pod created again while the cache lacked it";
}

// A job of 6 pods that start, run and finish while every informer shows each change 600 ms late:
// the reconciles in between plan from a cache that lacks the pods just created, or shows them in
// an older phase, and the job in its old status. The expectations hold them back: each pod is
// created once (trainctl_api_writes_total counts every create sent, those answered AlreadyExists
// too), none is deleted, and the job succeeds.
TEST_F(LaggingCacheTest, NoPodIsCreatedTwiceWhileThePodCacheLags) {
  start();
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  client().create(pytorch, "default", gpu_job("steady", 6, 0, "1.5"));
  ASSERT_TRUE(wait_status(pytorch, "steady", "Succeeded", std::chrono::seconds(60)))
      << job(pytorch, "steady").dump();
  EXPECT_EQ(pods_of("steady").size(), 6u);
  EXPECT_EQ(writes("create", "pods"), 6) << "a pod created again while the cache lacked it";
  EXPECT_EQ(writes("delete", "pods"), 0);
}

// A pod that fails with a retryable exit code is deleted and created again, until the backoff
// limit, while every informer shows each change 600 ms late: between a delete and the cache
// showing it, and between a create and the cache showing it, reconciles see the old pod or none.
// Each delete and create is sent once: every create but the first follows one delete, so the
// creates sent are the deletes sent plus the pod left at the end.
TEST_F(LaggingCacheTest, APodRestartedWhileThePodCacheLagsIsDeletedAndCreatedOnce) {
  start();
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  create(pytorch, kFlakyJob);
  ASSERT_TRUE(wait_status(pytorch, "flaky", "Failed", std::chrono::seconds(60)))
      << job(pytorch, "flaky").dump();
  EXPECT_GE(writes("delete", "pods"), 1) << "the pod was never restarted";
  // The controller may still clean up after the job failed: wait for the sums to settle.
  EXPECT_TRUE(wait_until(
      [&] {
        return writes("create", "pods") ==
               writes("delete", "pods") + static_cast<double>(pods_of("flaky").size());
      },
      std::chrono::seconds(20)))
      << "a restart sent twice while the cache lagged: " << writes("create", "pods") << " creates, "
      << writes("delete", "pods") << " deletes, " << pods_of("flaky").size() << " pods left";
}

// --preemption within-queue while every informer shows writes 600 ms late: "hotfix" (high)
// evicts the running "batch" (low), whose pods are deleted; the job reconciler, whose caches may
// still show batch admitted, does not create them again while hotfix runs (sampled: batch's pods,
// then hotfix's). Once hotfix has finished, batch is admitted again and runs. Pods are created
// once per admission (batch's 4 twice, hotfix's 4 once), and batch's deleted once.
TEST_F(LaggingCacheTest, APreemptedGangIsNotRecreatedWhileItsPreemptorRuns) {
  create_priority_classes();
  start(controller::GangScheduler::Builtin, {},
        {.preemption = controller::Preemption::WithinQueue});
  const kube::Resource pytorch = kube::resources::job(api::JobKind::PyTorchJob);
  client().create(pytorch, "default", gpu_job("batch", 4, 1, "forever", "default", "low"));
  ASSERT_TRUE(wait_status(pytorch, "batch", "Running", std::chrono::seconds(60)));
  client().create(pytorch, "default", gpu_job("hotfix", 4, 1, "2", "default", "high"));
  bool evicted = false;  // batch had no pod left while hotfix was unfinished
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         status_of(pytorch, "hotfix") != "Succeeded") {
    const std::size_t batch = pods_of("batch").size();
    const std::size_t hotfix = unfinished(pods_of("hotfix"));
    ASSERT_FALSE(evicted && batch > 0 && hotfix > 0)
        << "batch's pods created again while hotfix runs";
    evicted = evicted || (batch == 0 && hotfix > 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(status_of(pytorch, "hotfix"), "Succeeded");
  EXPECT_TRUE(evicted) << "batch kept its pods";
  EXPECT_TRUE(
      wait_until([&] { return unfinished(pods_of("batch")) == 4; }, std::chrono::seconds(60)))
      << "batch did not run again";
  EXPECT_EQ(writes("create", "pods"), 12);
  EXPECT_EQ(writes("delete", "pods"), 4) << "an evicted pod deleted again while the cache lagged";
  EXPECT_EQ(metrics_.value("trainctl_reconcile_total", {"controller", "error"}), 0)
      << "an admission pass failed: a write planned from a cache behind its own writes";
}

}  // namespace
}  // namespace trainctl
