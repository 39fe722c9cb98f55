#include "sandbox/cluster.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "error.h"
#include "sandbox/store.h"
#include "tests/support/fake_clock.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

/// A container spec: `python train.py --epochs 3` unless told otherwise. Its GPUs are limits
/// too, as the API server requires of a resource that cannot be overcommitted.
json container(const std::string& name, json requests = json::object()) {
  json resources = {{"requests", requests}};
  if (requests.contains("nvidia.com/gpu"))
    resources["limits"] = {{"nvidia.com/gpu", requests["nvidia.com/gpu"]}};
  return {{"name", name},
          {"image", "registry.example/train:1.0"},
          {"command", {"python", "train.py"}},
          {"args", {"--epochs", "3"}},
          {"resources", std::move(resources)}};
}

json pod_manifest(const std::string& name, json requests = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"containers", json::array({container("main", std::move(requests))})}}}};
}

const json* condition(const json& object, const std::string& type) {
  auto status = object.find("status");
  if (status == object.end() || !status->contains("conditions"))
    return nullptr;
  for (const auto& c : (*status)["conditions"]) {
    if (c.value("type", "") == type)
      return &c;
  }
  return nullptr;
}

std::string condition_text(const json& pod, const std::string& type) {
  const json* c = condition(pod, type);
  if (!c)
    return "<none>";
  return c->value("status", "") + "/" + c->value("reason", "") + "/" + c->value("message", "");
}

class ClusterTest : public ::testing::Test {
 protected:
  ClusterTest() {
    for (const ResourceInfo& info :
         {ResourceInfo{"", "v1", "namespaces", "Namespace", false, true},
          ResourceInfo{"", "v1", "pods", "Pod", true, true},
          ResourceInfo{"", "v1", "nodes", "Node", false, true},
          ResourceInfo{"", "v1", "configmaps", "ConfigMap", true, false}}) {
      if (!store_.resource(info.group_resource()))
        store_.register_resource(info);
    }
    try {
      store_.create(
          "namespaces",
          {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "default"}}}});
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AlreadyExists)
        throw;
    }
    options_.nodes = 2;
    options_.node_cpu = "8";
    options_.node_memory = "32Gi";
    options_.node_gpus = 4;
    options_.kubelet.start_delay = milliseconds(0);
    options_.kubelet.restart_backoff = seconds(1);
  }

  SimulatedCluster& cluster() {
    if (!cluster_)
      cluster_ = std::make_unique<SimulatedCluster>(store_, options_, clock_);
    return *cluster_;
  }

  json create(json pod) { return store_.create("pods", std::move(pod)); }
  json pod(const std::string& name) { return store_.get("pods", "default", name); }
  std::string phase(const std::string& name) { return pod(name)["status"].value("phase", ""); }
  std::string node_of(const std::string& name) { return pod(name)["spec"].value("nodeName", ""); }

  /// Creates `p`, lets the kubelet start it, deletes it and lets the kubelet see the deletion.
  void start_then_delete(json p) {
    const std::string name = p["metadata"]["name"];
    create(std::move(p));
    cluster().step();
    store_.remove("pods", "default", name);
    cluster().step();
  }
  /// The state of the pod's first app container.
  json main_state(const std::string& name) {
    return pod(name)["status"]["containerStatuses"][0]["state"];
  }

  /// Moves the fake clock and runs one pass.
  void advance(milliseconds d) {
    clock_.advance(d);
    cluster().step();
  }

  void label_node(const std::string& node, const std::string& key, const std::string& value) {
    store_.modify("nodes", "", node, WritePart::Main,
                  [&](json& object) { object["metadata"]["labels"][key] = value; });
  }

  Store store_;
  testing::FakeClock clock_;
  ClusterOptions options_;
  std::unique_ptr<SimulatedCluster> cluster_;
};

// ---- nodes ----

TEST_F(ClusterTest, RegistersNodesWithCapacityConditionsAndLabels) {
  cluster().step();
  ASSERT_EQ(cluster().node_names(), (std::vector<std::string>{"sandbox-node-0", "sandbox-node-1"}));
  const json node = store_.get("nodes", "", "sandbox-node-1");
  EXPECT_EQ(node["status"]["capacity"]["nvidia.com/gpu"], "4");
  EXPECT_EQ(node["status"]["allocatable"]["cpu"], "8");
  EXPECT_EQ(node["status"]["allocatable"]["memory"], "32Gi");
  EXPECT_EQ(node["status"]["allocatable"]["pods"], "110");
  EXPECT_EQ(node["metadata"]["labels"]["kubernetes.io/hostname"], "sandbox-node-1");
  EXPECT_EQ(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
  EXPECT_EQ(node["metadata"]["labels"]["node.kubernetes.io/instance-type"], "sandbox-standard");
  EXPECT_EQ(node["status"]["addresses"][0],
            (json{{"type", "InternalIP"}, {"address", "10.244.1.1"}}));
  EXPECT_EQ(condition_text(node, "Ready"), "True/KubeletReady/kubelet is posting ready status");
  EXPECT_EQ((*condition(node, "Ready"))["lastHeartbeatTime"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(node["status"]["nodeInfo"]["kubeletVersion"], "v1.30.0");

  advance(seconds(61));
  const json later = store_.get("nodes", "", "sandbox-node-1");
  EXPECT_EQ((*condition(later, "Ready"))["lastHeartbeatTime"], "2027-01-15T08:01:01Z");
  EXPECT_EQ((*condition(later, "Ready"))["lastTransitionTime"], "2027-01-15T08:00:00Z");
}

TEST_F(ClusterTest, NodesBeyond256GetPodRangesInTheNextOctet) {
  options_.nodes = 300;
  cluster().step();
  const json node = store_.get("nodes", "", "sandbox-node-299");
  EXPECT_EQ(node["spec"]["podCIDR"], "10.245.43.0/24");
  EXPECT_EQ(node["status"]["addresses"][0]["address"], "10.245.43.1");
}

TEST_F(ClusterTest, RejectsImpossibleShapes) {
  options_.nodes = kMaxNodes + 1;
  EXPECT_THROW(SimulatedCluster(store_, options_, clock_), Error);
  options_.nodes = 2;
  options_.node_memory = "lots";
  try {
    SimulatedCluster bad(store_, options_, clock_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Validation);
    EXPECT_NE(e.message().find("node memory \"lots\""), std::string::npos) << e.message();
  }
}

// ---- scheduler ----

TEST_F(ClusterTest, SpreadsGpuPodsAndReportsWhyTheLastDoesNotFit) {
  create(pod_manifest("a", {{"nvidia.com/gpu", "3"}}));
  cluster().step();
  create(pod_manifest("b", {{"nvidia.com/gpu", "3"}}));
  cluster().step();
  create(pod_manifest("c", {{"nvidia.com/gpu", "2"}}));
  cluster().step();
  EXPECT_EQ(node_of("a"), "sandbox-node-0");
  EXPECT_EQ(node_of("b"), "sandbox-node-1");  // the emptier node
  EXPECT_EQ(condition_text(pod("a"), "PodScheduled"), "True//");
  EXPECT_EQ(node_of("c"), "");
  EXPECT_EQ(condition_text(pod("c"), "PodScheduled"),
            "False/Unschedulable/0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
  EXPECT_EQ(phase("c"), "Pending");
}

TEST_F(ClusterTest, FitsCpuMemoryFromLimitsAndPodCount) {
  options_.nodes = 1;
  options_.pods_per_node = 3;
  json big = pod_manifest("big", {{"cpu", "6"}});
  create(big);
  json from_limits = pod_manifest("limits");
  from_limits["spec"]["containers"][0]["resources"] = {{"limits", {{"memory", "30Gi"}}}};
  create(from_limits);
  create(pod_manifest("more-cpu", {{"cpu", "2500m"}, {"memory", "4Gi"}}));
  cluster().step();
  EXPECT_EQ(node_of("big"), "sandbox-node-0");
  EXPECT_EQ(node_of("limits"), "sandbox-node-0");
  EXPECT_EQ(condition_text(pod("more-cpu"), "PodScheduled"),
            "False/Unschedulable/0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient "
            "memory.");
  create(pod_manifest("small"));
  cluster().step();
  create(pod_manifest("one-too-many"));
  cluster().step();
  EXPECT_EQ(node_of("small"), "sandbox-node-0");
  EXPECT_EQ(condition_text(pod("one-too-many"), "PodScheduled"),
            "False/Unschedulable/0/1 nodes are available: 1 Too many pods.");
}

TEST_F(ClusterTest, InitContainersCountAsTheirPeakNotTheirSum) {
  options_.nodes = 1;
  json p = pod_manifest("init", {{"cpu", "2"}});
  p["spec"]["initContainers"] = {container("prepare", {{"cpu", "7"}})};
  create(p);
  json q = pod_manifest("next", {{"cpu", "2"}});
  create(q);
  cluster().step();
  // init holds max(7, 2) = 7 of 8 cpus, so the second pod cannot fit beside it.
  EXPECT_EQ(node_of("init"), "sandbox-node-0");
  EXPECT_EQ(condition_text(pod("next"), "PodScheduled"),
            "False/Unschedulable/0/1 nodes are available: 1 Insufficient cpu.");
}

TEST_F(ClusterTest, NodeSelectorWaitsForAMatchingNode) {
  json p = pod_manifest("picky");
  p["spec"]["nodeSelector"] = {{"gpu-type", "a100"}};
  create(p);
  cluster().step();
  EXPECT_EQ(condition_text(pod("picky"), "PodScheduled"),
            "False/Unschedulable/0/2 nodes are available: 2 node(s) didn't match Pod's node "
            "affinity/selector.");
  label_node("sandbox-node-1", "gpu-type", "a100");
  cluster().step();
  EXPECT_EQ(node_of("picky"), "sandbox-node-1");
}

TEST_F(ClusterTest, RequiredNodeAffinityIsHonoured) {
  cluster().step();
  label_node("sandbox-node-0", "zone", "a");
  label_node("sandbox-node-1", "zone", "b");
  json in_b = pod_manifest("in-b");
  in_b["spec"]["affinity"] = json::parse(R"({"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "c"]}]}]}}})");
  create(in_b);
  json by_name = pod_manifest("by-name");
  by_name["spec"]["affinity"] = json::parse(R"({"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In",
                          "values": ["sandbox-node-0"]}]}]}}})");
  create(by_name);
  json nowhere = pod_manifest("nowhere");
  nowhere["spec"]["affinity"] = json::parse(R"({"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a", "b"]}]}]}}})");
  create(nowhere);
  cluster().step();
  EXPECT_EQ(node_of("in-b"), "sandbox-node-1");
  EXPECT_EQ(node_of("by-name"), "sandbox-node-0");
  EXPECT_EQ(condition_text(pod("nowhere"), "PodScheduled"),
            "False/Unschedulable/0/2 nodes are available: 2 node(s) didn't match Pod's node "
            "affinity/selector.");
}

TEST_F(ClusterTest, TaintsNeedTolerations) {
  options_.node_taints = {
      {{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}}};
  create(pod_manifest("intolerant"));
  json equal_wrong = pod_manifest("wrong-value");
  equal_wrong["spec"]["tolerations"] = {
      {{"key", "nvidia.com/gpu"}, {"operator", "Equal"}, {"value", "absent"}}};
  create(equal_wrong);
  json exists = pod_manifest("exists");
  exists["spec"]["tolerations"] = {
      {{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}};
  create(exists);
  json everything = pod_manifest("everything");
  everything["spec"]["tolerations"] = {{{"operator", "Exists"}}};
  create(everything);
  cluster().step();
  const std::string refused =
      "False/Unschedulable/0/2 nodes are available: 2 node(s) had untolerated taint "
      "{nvidia.com/gpu: present}.";
  EXPECT_EQ(condition_text(pod("intolerant"), "PodScheduled"), refused);
  EXPECT_EQ(condition_text(pod("wrong-value"), "PodScheduled"), refused);
  EXPECT_NE(node_of("exists"), "");
  EXPECT_NE(node_of("everything"), "");
}

TEST_F(ClusterTest, CountsDifferentReasonsPerNode) {
  cluster().step();
  store_.modify("nodes", "", "sandbox-node-0", WritePart::Main,
                [](json& node) { node["spec"]["unschedulable"] = true; });
  create(pod_manifest("huge", {{"nvidia.com/gpu", "8"}}));
  cluster().step();
  EXPECT_EQ(condition_text(pod("huge"), "PodScheduled"),
            "False/Unschedulable/0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 "
            "node(s) were unschedulable.");
}

// As kube-scheduler records them: a Warning FailedScheduling Event once per new message (not on
// every pass), a Normal Scheduled one on binding; nothing for a gated pod.
TEST_F(ClusterTest, TheSchedulerRecordsFailedSchedulingOnceAndScheduled) {
  const auto events = [&] {
    std::vector<std::string> out;
    for (const json& e : store_.list("events", {.ns = "default"}).items)
      out.push_back(fmt::format("{} {} {} {} {} {}", e["involvedObject"]["name"].get<std::string>(),
                                e["type"].get<std::string>(), e["reason"].get<std::string>(),
                                e["action"].get<std::string>(),
                                e["reportingComponent"].get<std::string>(),
                                e["message"].get<std::string>()));
    return out;
  };
  create(pod_manifest("huge", {{"nvidia.com/gpu", "64"}}));
  json gated = pod_manifest("gated");
  gated["spec"]["schedulingGates"] = {{{"name", "example.com/quota"}}};
  create(gated);
  for (int pass = 0; pass < 3; ++pass)
    cluster().step();
  EXPECT_THAT(events(),
              ::testing::ElementsAre("huge Warning FailedScheduling Scheduling default-scheduler "
                                     "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."));
  create(pod_manifest("fits"));
  cluster().step();
  EXPECT_THAT(events(),
              ::testing::Contains("fits Normal Scheduled Binding default-scheduler Successfully "
                                  "assigned default/fits to sandbox-node-0"));
  EXPECT_EQ(events().size(), 2u);
  const std::vector<json> items = store_.list("events", {.ns = "default"}).items;
  const json event = *std::find_if(items.begin(), items.end(), [](const json& e) {
    return e["involvedObject"]["name"] == "huge";
  });
  EXPECT_EQ(event["metadata"]["name"].get<std::string>().rfind("huge.", 0), 0u);
  EXPECT_EQ(event["involvedObject"]["uid"], pod("huge")["metadata"]["uid"]);
  EXPECT_TRUE(event["eventTime"].is_string());
}

TEST_F(ClusterTest, SchedulingGatesHoldAPodUntilRemoved) {
  json p = pod_manifest("gated");
  p["spec"]["schedulingGates"] = {{{"name", "example.com/quota"}}};
  create(p);
  cluster().step();
  EXPECT_EQ(node_of("gated"), "");
  EXPECT_EQ(condition_text(pod("gated"), "PodScheduled"),
            "False/SchedulingGated/Scheduling is blocked due to non-empty scheduling gates");
  store_.modify("pods", "default", "gated", WritePart::Main,
                [](json& object) { object["spec"].erase("schedulingGates"); });
  cluster().step();
  EXPECT_EQ(node_of("gated"), "sandbox-node-0");
  EXPECT_EQ(condition_text(pod("gated"), "PodScheduled"), "True//");
}

TEST_F(ClusterTest, LeavesOtherSchedulersPodsAloneUnlessAsked) {
  json p = pod_manifest("gang");
  p["spec"]["schedulerName"] = "volcano";
  create(p);
  cluster().step();
  EXPECT_EQ(node_of("gang"), "");
  EXPECT_EQ(condition(pod("gang"), "PodScheduled"), nullptr);

  options_.scheduler_names.insert("volcano");
  cluster_.reset();
  cluster().step();
  EXPECT_EQ(node_of("gang"), "sandbox-node-0");
}

// Volcano's scheduler with its gang plugin (actions/allocate/allocate.go: a job whose PodGroup is
// Pending is skipped; a job's allocations are committed only when JobReady, minMember tasks
// placed or running, else discarded; JobInfo.FitError words the pods' condition).
class VolcanoGangTest : public ClusterTest {
 protected:
  VolcanoGangTest() {
    options_.scheduler_names.insert("volcano");
    store_.register_resource(
        ResourceInfo{"scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", true, false});
  }

  void create_member(const std::string& name, const std::string& gpus) {
    json p = pod_manifest(name, {{"nvidia.com/gpu", gpus}});
    p["metadata"]["annotations"] = {{"scheduling.k8s.io/group-name", "train"}};
    p["spec"]["schedulerName"] = "volcano";
    create(std::move(p));
  }

  void create_group(int min_member, const std::string& phase) {
    json group = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                  {"kind", "PodGroup"},
                  {"metadata", {{"name", "train"}, {"namespace", "default"}}},
                  {"spec", {{"minMember", min_member}}}};
    if (!phase.empty())
      group["status"] = {{"phase", phase}};
    store_.create("podgroups.scheduling.volcano.sh", std::move(group));
  }

  void set_group(const json& patch) {
    store_.modify("podgroups.scheduling.volcano.sh", "default", "train", WritePart::Main,
                  [&](json& object) { object.merge_patch(patch); });
  }
};

TEST_F(VolcanoGangTest, NothingIsBoundBeforeThePodGroupIsEnqueued) {
  for (const char* name : {"train-0", "train-1", "train-2"})
    create_member(name, "2");
  cluster().step();
  EXPECT_EQ(node_of("train-0"), "");  // no PodGroup: Volcano's cache leaves the pods alone
  EXPECT_EQ(condition(pod("train-0"), "PodScheduled"), nullptr);

  create_group(3, "");
  cluster().step();
  set_group({{"status", {{"phase", "Pending"}}}});
  cluster().step();
  for (const char* name : {"train-0", "train-1", "train-2"}) {
    EXPECT_EQ(node_of(name), "") << name;
    EXPECT_EQ(condition_text(pod(name), "PodScheduled"),
              "False/Unschedulable/pod group is not ready, 3 Pending, 3 minAvailable; Pending: 3 "
              "Undetermined");
  }

  set_group({{"status", {{"phase", "Inqueue"}}}});
  cluster().step();
  EXPECT_EQ(node_of("train-0"), "sandbox-node-0");
  EXPECT_EQ(node_of("train-1"), "sandbox-node-1");
  EXPECT_EQ(node_of("train-2"), "sandbox-node-0");
  EXPECT_EQ(condition_text(pod("train-2"), "PodScheduled"), "True//");
}

TEST_F(VolcanoGangTest, APartialGangIsNeverBound) {
  create_group(3, "Inqueue");
  for (const char* name : {"train-0", "train-1", "train-2"})
    create_member(name, "3");  // room for two: one per node
  create(pod_manifest("other", {{"nvidia.com/gpu", "1"}}));
  cluster().step();
  for (const char* name : {"train-0", "train-1", "train-2"}) {
    EXPECT_EQ(node_of(name), "") << name;
    EXPECT_EQ(condition_text(pod(name), "PodScheduled"),
              "False/Unschedulable/pod group is not ready, 3 Pending, 3 minAvailable; Pending: 1 "
              "Unschedulable, 2 Schedulable");
  }
  EXPECT_EQ(node_of("other"), "sandbox-node-0");  // the refused gang holds nothing back

  // minMember 2 of 3: two are bound together, the third waits with the scheduler's reason.
  set_group({{"spec", {{"minMember", 2}}}});
  cluster().step();
  EXPECT_EQ(node_of("train-0"), "sandbox-node-1");
  EXPECT_EQ(node_of("train-1"), "sandbox-node-0");
  EXPECT_EQ(node_of("train-2"), "");
  EXPECT_EQ(condition_text(pod("train-2"), "PodScheduled"),
            "False/Unschedulable/0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");

  // A member lost: the one still bound and the waiting one make minMember together.
  store_.remove("pods", "default", "train-1");
  cluster().step();
  EXPECT_EQ(node_of("train-2"), "sandbox-node-0");
}

TEST_F(ClusterTest, FinishedPodsFreeTheirGpusForWaitingOnes) {
  options_.nodes = 1;
  json first = pod_manifest("first", {{"nvidia.com/gpu", "4"}});
  first["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "5"}};
  create(first);
  cluster().step();
  create(pod_manifest("second", {{"nvidia.com/gpu", "4"}}));
  cluster().step();
  EXPECT_EQ(node_of("second"), "");
  advance(seconds(5));
  EXPECT_EQ(phase("first"), "Succeeded");
  EXPECT_EQ(node_of("second"), "sandbox-node-0");
  EXPECT_EQ(phase("second"), "Running");
}

// ---- kubelet ----

TEST_F(ClusterTest, PodGoesPendingRunningSucceeded) {
  options_.kubelet.start_delay = milliseconds(500);
  create(pod_manifest("train"));
  cluster().step();
  json p = pod("train");
  EXPECT_EQ(p["status"]["phase"], "Pending");
  EXPECT_EQ(p["status"]["hostIP"], "10.244.0.1");
  EXPECT_EQ(p["status"]["startTime"], "2027-01-15T08:00:00Z");
  EXPECT_FALSE(p["status"].contains("podIP"));
  EXPECT_EQ(p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating");
  EXPECT_EQ(condition_text(p, "Ready"),
            "False/ContainersNotReady/containers with unready status: [main]");

  advance(milliseconds(500));
  p = pod("train");
  EXPECT_EQ(p["status"]["phase"], "Running");
  EXPECT_EQ(p["status"]["podIP"], "10.244.0.2");
  const json& running = p["status"]["containerStatuses"][0];
  EXPECT_EQ(running["state"]["running"]["startedAt"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(running["containerID"],
            "sandbox://" + p["metadata"]["uid"].get<std::string>() + "-main");
  EXPECT_EQ(running["image"], "registry.example/train:1.0");
  EXPECT_TRUE(running["imageID"].get<std::string>().starts_with("registry.example/train@sha256:"));
  EXPECT_TRUE(running["ready"]);
  EXPECT_TRUE(running["started"]);
  EXPECT_EQ(running["restartCount"], 0);
  for (const char* type : {"Initialized", "ContainersReady", "Ready", "PodScheduled"})
    EXPECT_EQ(condition_text(p, type), "True//") << type;

  advance(milliseconds(4999));
  EXPECT_EQ(phase("train"), "Running");  // default run: 5 s
  advance(milliseconds(1));
  p = pod("train");
  EXPECT_EQ(p["status"]["phase"], "Succeeded");
  const json& done = p["status"]["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(done["exitCode"], 0);
  EXPECT_EQ(done["reason"], "Completed");
  EXPECT_EQ(done["finishedAt"], "2027-01-15T08:00:05Z");
  EXPECT_EQ(condition_text(p, "Ready"), "False/PodCompleted/");
  advance(milliseconds(1000));  // later passes keep the finished pod's address
  EXPECT_EQ(pod("train")["status"]["podIP"], "10.244.0.2");
}

TEST_F(ClusterTest, ExitCodeAnnotationFailsThePod) {
  json p = pod_manifest("crash");
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "2"},
                                  {"sandbox.trainctl.io/exit-code", "3"}};
  create(p);
  cluster().step();
  advance(seconds(2));
  const json got = pod("crash");
  EXPECT_EQ(got["status"]["phase"], "Failed");
  EXPECT_EQ(got["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
  EXPECT_EQ(got["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Error");
}

TEST_F(ClusterTest, PerContainerOverridesAndEnvScriptEachContainer) {
  json p = pod_manifest("two");
  json helper = container("helper");
  helper["env"] = {{{"name", "SANDBOX_RUN_SECONDS"}, {"value", "3"}},
                   {{"name", "SANDBOX_EXIT_CODE"}, {"value", "1"}}};
  p["spec"]["containers"].push_back(helper);
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "10"},
                                  {"sandbox.trainctl.io/run-seconds.main", "1"}};
  create(p);
  cluster().step();
  advance(seconds(1));
  json got = pod("two");
  EXPECT_EQ(got["status"]["phase"], "Running");
  EXPECT_EQ(got["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0);
  EXPECT_TRUE(got["status"]["containerStatuses"][1]["state"].contains("running"));
  advance(seconds(2));
  got = pod("two");
  EXPECT_EQ(got["status"]["phase"], "Failed");
  EXPECT_EQ(got["status"]["containerStatuses"][1]["state"]["terminated"]["exitCode"], 1);
}

TEST_F(ClusterTest, OnFailureRestartsFailuresOnly) {
  json p = pod_manifest("flaky");
  p["spec"]["restartPolicy"] = "OnFailure";
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "2"},
                                  {"sandbox.trainctl.io/exit-code", "1"}};
  create(p);
  cluster().step();
  advance(seconds(2));
  json status = pod("flaky")["status"]["containerStatuses"][0];
  EXPECT_EQ(pod("flaky")["status"]["phase"], "Running");
  EXPECT_EQ(status["state"]["waiting"]["reason"], "CrashLoopBackOff");
  EXPECT_EQ(status["lastState"]["terminated"]["exitCode"], 1);
  EXPECT_EQ(status["restartCount"], 0);
  advance(seconds(1));  // the back-off
  status = pod("flaky")["status"]["containerStatuses"][0];
  EXPECT_TRUE(status["state"].contains("running"));
  EXPECT_EQ(status["restartCount"], 1);
  EXPECT_EQ(status["lastState"]["terminated"]["finishedAt"], "2027-01-15T08:00:02Z");

  json ok = pod_manifest("fine");
  ok["spec"]["restartPolicy"] = "OnFailure";
  ok["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "1"}};
  create(ok);
  cluster().step();
  advance(seconds(1));
  EXPECT_EQ(phase("fine"), "Succeeded");
  EXPECT_EQ(pod("fine")["status"]["containerStatuses"][0]["restartCount"], 0);
}

TEST_F(ClusterTest, AlwaysRestartsEvenSuccessWithGrowingBackoff) {
  json p = pod_manifest("server");
  p["spec"]["restartPolicy"] = "Always";
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "1"}};
  create(p);
  cluster().step();
  // Runs 1 s, waits 1 s, runs 1 s, waits 2 s, runs 1 s, waits 4 s ...
  advance(seconds(10));
  const json got = pod("server");
  EXPECT_EQ(got["status"]["phase"], "Running");
  EXPECT_EQ(got["status"]["containerStatuses"][0]["restartCount"], 3);
  EXPECT_EQ(got["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 0);
}

TEST_F(ClusterTest, IstioProxyKeepsThePodRunningUntilQuitByExec) {
  json p = pod_manifest("meshed");
  p["spec"]["restartPolicy"] = "OnFailure";
  p["spec"]["containers"].push_back(
      {{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}, {"args", {"proxy", "sidecar"}}});
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "2"}};
  create(p);
  cluster().step();
  advance(seconds(60));
  json got = pod("meshed");
  EXPECT_EQ(got["status"]["phase"], "Running");
  EXPECT_TRUE(got["status"]["containerStatuses"][0]["state"].contains("terminated"));
  EXPECT_TRUE(got["status"]["containerStatuses"][1]["state"].contains("running"));

  const ExecResult result = cluster().exec("default", "meshed", "istio-proxy",
                                           {"pilot-agent", "request", "POST", "quitquitquit"});
  EXPECT_EQ(result.exit_code, 0);
  got = pod("meshed");
  EXPECT_EQ(got["status"]["phase"], "Succeeded");
  EXPECT_EQ(got["status"]["containerStatuses"][1]["state"]["terminated"]["exitCode"], 0);
  EXPECT_EQ(got["status"]["containerStatuses"][1]["state"]["terminated"]["finishedAt"],
            "2027-01-15T08:01:00Z");
}

TEST_F(ClusterTest, IstioQuitByCurlAndDirectCall) {
  for (const char* name : {"by-curl", "by-call"}) {
    json p = pod_manifest(name);
    p["spec"]["containers"].push_back({{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}});
    p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "1"}};
    create(p);
  }
  cluster().step();
  advance(seconds(1));
  // Only the proxy answers on localhost:15020, and only to POST.
  ExecResult get = cluster().exec("default", "by-curl", "istio-proxy",
                                  {"curl", "-s", "localhost:15020/quitquitquit"});
  EXPECT_EQ(phase("by-curl"), "Running");
  ExecResult post =
      cluster().exec("default", "by-curl", "istio-proxy",
                     {"curl", "-sf", "-XPOST", "http://localhost:15000/quitquitquit"});
  EXPECT_EQ(post.exit_code, 0);
  EXPECT_EQ(phase("by-curl"), "Succeeded");

  cluster().quit_istio_proxy("default", "by-call");
  EXPECT_EQ(phase("by-call"), "Succeeded");
  try {
    cluster().quit_istio_proxy("default", "by-call");
    FAIL() << "quit a proxy that has already ended";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
  }
}

TEST_F(ClusterTest, NativeSidecarEndsWithTheMainContainer) {
  json p = pod_manifest("with-sidecar");
  json shipper = container("log-shipper");
  shipper["restartPolicy"] = "Always";
  p["spec"]["initContainers"] = {shipper};
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "3"}};
  create(p);
  cluster().step();
  json got = pod("with-sidecar");
  EXPECT_EQ(got["status"]["phase"], "Running");
  EXPECT_TRUE(got["status"]["initContainerStatuses"][0]["state"].contains("running"));
  EXPECT_EQ(condition_text(got, "Initialized"), "True//");
  advance(seconds(3));
  got = pod("with-sidecar");
  EXPECT_EQ(got["status"]["phase"], "Succeeded");
  const json& sidecar = got["status"]["initContainerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(sidecar["exitCode"], 0);
  EXPECT_EQ(sidecar["finishedAt"], "2027-01-15T08:00:03Z");
}

TEST_F(ClusterTest, InitContainersRunInOrderBeforeTheApp) {
  json p = pod_manifest("staged");
  p["spec"]["initContainers"] = {container("fetch"), container("unpack")};
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds.fetch", "2"},
                                  {"sandbox.trainctl.io/run-seconds.unpack", "1"}};
  create(p);
  cluster().step();
  json got = pod("staged");
  EXPECT_EQ(got["status"]["phase"], "Pending");
  EXPECT_TRUE(got["status"]["initContainerStatuses"][0]["state"].contains("running"));
  EXPECT_EQ(got["status"]["initContainerStatuses"][1]["state"]["waiting"]["reason"],
            "PodInitializing");
  EXPECT_EQ(condition_text(got, "Initialized"),
            "False/ContainersNotInitialized/containers with incomplete status: [fetch unpack]");
  advance(seconds(3));
  got = pod("staged");
  EXPECT_EQ(got["status"]["phase"], "Running");
  EXPECT_EQ(got["status"]["containerStatuses"][0]["state"]["running"]["startedAt"],
            "2027-01-15T08:00:03Z");
}

TEST_F(ClusterTest, FailedInitContainerFailsANeverRestartPod) {
  json p = pod_manifest("bad-init");
  p["spec"]["initContainers"] = {container("migrate")};
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/exit-code.migrate", "2"}};
  create(p);
  cluster().step();
  const json got = pod("bad-init");
  EXPECT_EQ(got["status"]["phase"], "Failed");
  EXPECT_EQ(got["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 2);
  EXPECT_EQ(got["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing");
}

// ---- exec ----

TEST_F(ClusterTest, ExecRunsKnownCommandsAndRefusesOthers) {
  json p = pod_manifest("worker-0");
  p["spec"]["containers"][0]["env"] = {{{"name", "RANK"}, {"value", "3"}}};
  p["spec"]["containers"][0]["volumeMounts"] = {{{"name", "mpi"}, {"mountPath", "/etc/mpi"}}};
  p["spec"]["volumes"] = {
      {{"name", "mpi"},
       {"configMap",
        {{"name", "job-config"}, {"items", {{{"key", "hostfile"}, {"path", "hostfile"}}}}}}}};
  create(p);
  store_.create("configmaps", {{"apiVersion", "v1"},
                               {"kind", "ConfigMap"},
                               {"metadata", {{"name", "job-config"}, {"namespace", "default"}}},
                               {"data", {{"hostfile", "job-worker-0 slots=8\n"}}}});
  cluster().step();

  ExecResult r = cluster().exec("default", "worker-0", "", {"nvidia-smi"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.stderr_text, "sh: nvidia-smi: not found\n");
  r = cluster().exec("default", "worker-0", "main", {"echo", "hello", "world"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_text, "hello world\n");
  EXPECT_EQ(cluster().exec("default", "worker-0", "", {"hostname"}).stdout_text, "worker-0\n");
  EXPECT_EQ(cluster().exec("default", "worker-0", "", {"false"}).exit_code, 1);
  EXPECT_EQ(cluster().exec("default", "worker-0", "", {"cat", "/etc/mpi/hostfile"}).stdout_text,
            "job-worker-0 slots=8\n");
  r = cluster().exec("default", "worker-0", "", {"cat", "/etc/mpi/missing"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.stderr_text, "cat: /etc/mpi/missing: No such file or directory\n");
  r = cluster().exec("default", "worker-0", "",
                     {"sh", "-c", "echo \"rank $RANK\" && false || echo 'fell back'; exit 4"});
  EXPECT_EQ(r.stdout_text, "rank 3\nfell back\n");
  EXPECT_EQ(r.exit_code, 4);
  // pilot-agent exists only in the proxy's image.
  EXPECT_EQ(cluster()
                .exec("default", "worker-0", "", {"pilot-agent", "request", "POST", "quitquitquit"})
                .exit_code,
            127);
}

TEST_F(ClusterTest, ExecErrorsAsTheApiServerWordsThem) {
  json p = pod_manifest("pair");
  p["spec"]["containers"].push_back(container("second"));
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds.second", "1"}};
  create(p);
  cluster().step();
  advance(seconds(1));
  auto message_of = [&](const std::string& pod_name, const std::string& c) {
    try {
      cluster().exec("default", pod_name, c, {"true"});
      return std::string("<no error>");
    } catch (const Error& e) {
      return std::string(to_string(e.kind())) + ": " + e.message();
    }
  };
  EXPECT_EQ(message_of("pair", ""),
            "BadRequest: a container name must be specified for pod pair, choose one of: [main "
            "second]");
  EXPECT_EQ(message_of("pair", "third"), "BadRequest: container third is not valid for pod pair");
  EXPECT_EQ(message_of("pair", "second"),
            "BadRequest: unable to upgrade connection: container not found (\"second\")");
  EXPECT_EQ(message_of("nobody", "main").substr(0, 10), "NotFound: ");
}

// ---- logs ----

TEST_F(ClusterTest, LogsShowTheCommandStepsAndExit) {
  json p = pod_manifest("logger");
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "3"},
                                  {"sandbox.trainctl.io/exit-code", "2"}};
  create(p);
  try {
    cluster().logs("default", "logger", "main");
    FAIL() << "logs of an unscheduled pod";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
  }
  cluster().step();
  advance(milliseconds(1500));
  EXPECT_EQ(cluster().logs("default", "logger", "main"),
            "+ python train.py --epochs 3\nstep 1/3\n");
  LogChunk partial = cluster().read_logs("default", "logger", "main");
  EXPECT_TRUE(partial.running);
  advance(seconds(2));
  EXPECT_EQ(cluster().logs("default", "logger", "main"),
            "+ python train.py --epochs 3\nstep 1/3\nstep 2/3\nstep 3/3\nexited with code 2\n");
  LogChunk rest = cluster().read_logs("default", "logger", "main", {}, partial.next);
  EXPECT_EQ(rest.lines, (std::vector<std::string>{"step 2/3", "step 3/3", "exited with code 2"}));
  EXPECT_FALSE(rest.running);

  LogOptions stamped;
  stamped.timestamps = true;
  stamped.tail_lines = 2;
  EXPECT_EQ(cluster().logs("default", "logger", "main", stamped),
            "2027-01-15T08:00:03Z step 3/3\n2027-01-15T08:00:03Z exited with code 2\n");
  LogOptions previous;
  previous.previous = true;
  try {
    cluster().logs("default", "logger", "main", previous);
    FAIL() << "previous logs without a restart";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "previous terminated container \"main\" in pod \"logger\" not found");
  }
}

// `submit --wait --logs` of a job with cleanPodPolicy All: the controller deletes the pods as
// soon as they finish, and a follower must still get every line (it lost the last ones).
TEST_F(ClusterTest, AFollowerReadsADeletedPodsLogToItsEndAndNeverAnotherPodOfItsName) {
  json p = pod_manifest("logger");
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "3"}};
  create(p);
  cluster().step();
  advance(milliseconds(1500));
  const LogChunk first = cluster().read_logs("default", "logger", "main");
  EXPECT_EQ(first.lines, (std::vector<std::string>{"+ python train.py --epochs 3", "step 1/3"}));
  EXPECT_TRUE(first.running);
  EXPECT_FALSE(first.next.pod_uid.empty());
  advance(seconds(2));
  cluster().step();  // the run ended: the controller deletes the pod before the next read
  store_.remove("pods", "default", "logger", DeleteRequest{.grace_period_seconds = 0});
  cluster().step();
  const LogChunk rest = cluster().read_logs("default", "logger", "main", {}, first.next);
  EXPECT_EQ(rest.lines, (std::vector<std::string>{"step 2/3", "step 3/3", "exited with code 0"}));
  EXPECT_FALSE(rest.running);
  // A pod of the same name made since is another pod: the follower's stream just ends.
  create(pod_manifest("logger"));
  cluster().step();
  advance(seconds(1));
  const LogChunk after = cluster().read_logs("default", "logger", "main", {}, rest.next);
  EXPECT_TRUE(after.lines.empty());
  EXPECT_FALSE(after.running);
  // A pod deleted while it ran: its lines up to the deletion, then the end.
  const LogChunk running = cluster().read_logs("default", "logger", "main");
  ASSERT_TRUE(running.running);
  advance(seconds(1));
  store_.remove("pods", "default", "logger", DeleteRequest{.grace_period_seconds = 0});
  cluster().step();
  const LogChunk stopped = cluster().read_logs("default", "logger", "main", {}, running.next);
  EXPECT_FALSE(stopped.running);
  ASSERT_FALSE(stopped.lines.empty());
  EXPECT_EQ(stopped.lines.back(), "exited with code 143");  // SIGTERM at the deletion
  // Without a cursor, a deleted pod is NotFound as before.
  EXPECT_THROW(cluster().read_logs("default", "logger", "main"), Error);
}

TEST_F(ClusterTest, PreviousLogsAfterARestartAndFractionalTimestamps) {
  json p = pod_manifest("again");
  p["spec"]["restartPolicy"] = "Always";
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "1.5"}};
  create(p);
  cluster().step();
  advance(milliseconds(1500 + 1000 + 200));  // ran, backed off, restarted 0.2 s ago
  LogOptions previous;
  previous.previous = true;
  previous.timestamps = true;
  EXPECT_EQ(cluster().logs("default", "again", "main", previous),
            "2027-01-15T08:00:00Z + python train.py --epochs 3\n"
            "2027-01-15T08:00:01Z step 1/1.5\n"
            "2027-01-15T08:00:01.5Z exited with code 0\n");
  EXPECT_EQ(cluster().logs("default", "again", "main"), "+ python train.py --epochs 3\n");
  EXPECT_TRUE(cluster().container_running("default", "again", "main"));
}

// ---- deletion ----

TEST_F(ClusterTest, GracefulDeletionStopsContainersThenRemovesThePod) {
  json p = pod_manifest("doomed");
  p["metadata"]["finalizers"] = {"example.com/hold"};
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "forever"}};
  create(p);
  cluster().step();
  ASSERT_EQ(phase("doomed"), "Running");
  store_.remove("pods", "default", "doomed");  // held by the finalizer: now terminating
  advance(seconds(1));
  const json got = pod("doomed");
  EXPECT_EQ(got["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 143);
  EXPECT_EQ(got["status"]["phase"], "Failed");
  store_.modify("pods", "default", "doomed", WritePart::Main,
                [](json& object) { object["metadata"].erase("finalizers"); });
  cluster().step();
  EXPECT_THROW(pod("doomed"), Error);
  EXPECT_TRUE(store_.get("nodes", "", "sandbox-node-0").is_object());
}

TEST_F(ClusterTest, KubeletStopsADeletedPodsContainersThenDeletesItWithGracePeriodZero) {
  json p = pod_manifest("doomed");
  p["spec"]["restartPolicy"] = "Always";
  p["spec"]["terminationGracePeriodSeconds"] = 30;
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "forever"}};
  create(p);
  cluster().step();
  ASSERT_EQ(phase("doomed"), "Running");
  auto watch = store_.watch("pods", "default", {}, {}, store_.current_resource_version(), false);

  const json deleting = store_.remove("pods", "default", "doomed");
  EXPECT_EQ(deleting["metadata"]["deletionGracePeriodSeconds"], 30);
  EXPECT_EQ(pod("doomed")["metadata"]["deletionGracePeriodSeconds"], 30) << "the pod waits";
  cluster().step();
  EXPECT_EQ(pod("doomed")["metadata"]["deletionGracePeriodSeconds"], 30)
      << "stopped, and removed only at the kubelet's next look a second later";
  clock_.advance(milliseconds(999));
  cluster().step();
  EXPECT_NO_THROW(pod("doomed"));
  clock_.advance(milliseconds(1));
  cluster().step();
  EXPECT_THROW(pod("doomed"), Error);

  std::vector<json> events;
  while (auto e = watch->next(milliseconds(200)))
    events.push_back({{"type", kube::to_string(e->type)}, {"object", e->object}});
  ASSERT_EQ(events.size(), 4u) << json(events).dump();
  EXPECT_EQ(events[0]["type"], "MODIFIED");  // the API server marks it
  EXPECT_EQ(events[0]["object"]["status"]["phase"], "Running");
  // The kubelet stops the containers (SIGTERM: exit 143) and reports them as kubelet 1.26 does:
  // restartPolicy Always keeps the phase Running.
  EXPECT_EQ(events[1]["type"], "MODIFIED");
  const json& stopped = events[1]["object"]["status"]["containerStatuses"][0]["state"];
  EXPECT_EQ(stopped["terminated"]["exitCode"], 143);
  EXPECT_EQ(stopped["terminated"]["reason"], "Error");
  EXPECT_EQ(events[1]["object"]["status"]["phase"], "Running");
  EXPECT_EQ(condition_text(events[1]["object"], "Ready"),
            "False/ContainersNotReady/containers with unready status: [main]");
  // Then its final delete: period 0 (written), then gone.
  EXPECT_EQ(events[2]["type"], "MODIFIED");
  EXPECT_EQ(events[2]["object"]["metadata"]["deletionGracePeriodSeconds"], 0);
  EXPECT_EQ(events[3]["type"], "DELETED");
}

// A deletion that lands just before the kubelet writes a pod's status comes back in that write's
// answer, and the deletion's own event is then older than what the kubelet holds: the kubelet must
// act on it there, or the pod stays Running and terminating for good (found in CI: a deleted job's
// pods outlived it). Here the deletion lands inside one kubelet pass: the first pod's final delete
// makes the garbage collector delete its dependent, the second pod, just before the kubelet writes
// the second pod's status (its sidecar-like container ends at that moment).
TEST_F(ClusterTest, ADeletionThatArrivesWithTheKubeletsOwnStatusWriteIsActedOn) {
  json owner = pod_manifest("a-owner");
  owner["spec"]["terminationGracePeriodSeconds"] = 30;  // ended by the kubelet's final delete
  owner["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "forever"}};
  const std::string owner_uid = create(owner)["metadata"]["uid"];
  json dependent = pod_manifest("b-dependent");
  dependent["spec"]["terminationGracePeriodSeconds"] = 30;
  dependent["spec"]["containers"].push_back(container("short"));
  dependent["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds.main", "forever"},
                                          {"sandbox.trainctl.io/run-seconds.short", "5"}};
  dependent["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", "a-owner"}, {"uid", owner_uid}}};
  create(dependent);
  cluster().step();
  ASSERT_EQ(phase("b-dependent"), "Running");

  // a-owner's containers stop a second before its removal is due. Then, in one pass: the
  // kubelet's final delete removes it, so the garbage collector deletes b-dependent; then
  // b-dependent's short container ends and the kubelet writes that, its write returning the
  // deletion.
  clock_.advance(seconds(4));
  store_.remove("pods", "default", "a-owner");
  cluster().step();
  clock_.advance(seconds(1));
  cluster().step();
  EXPECT_THROW(pod("a-owner"), Error);
  clock_.advance(seconds(1));  // b-dependent's containers stopped then: its removal is due
  cluster().step();
  EXPECT_THROW(pod("b-dependent"), Error)
      << "the kubelet missed the deletion: " << pod("b-dependent").dump();
}

TEST_F(ClusterTest, ADeletedPodUnderRestartPolicyNeverEndsFailed) {
  json p = pod_manifest("never");
  p["spec"]["terminationGracePeriodSeconds"] = 30;
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "forever"}};
  p["metadata"]["finalizers"] = {"example.com/hold"};  // to look at it once the kubelet is done
  create(p);
  cluster().step();
  store_.remove("pods", "default", "never");
  cluster().step();
  clock_.advance(seconds(1));
  cluster().step();
  const json got = pod("never");
  EXPECT_EQ(got["status"]["phase"], "Failed");
  EXPECT_EQ(got["metadata"]["deletionGracePeriodSeconds"], 0) << "the kubelet's delete came";
}

/// A running pod whose main container runs on `sigterm_seconds` after SIGTERM, held by a
/// finalizer so that it can be looked at after the kubelet's final delete.
json draining_pod(const std::string& name, const std::string& sigterm_seconds, int grace) {
  json p = pod_manifest(name);
  p["spec"]["terminationGracePeriodSeconds"] = grace;
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "forever"},
                                  {"sandbox.trainctl.io/sigterm-seconds.main", sigterm_seconds}};
  p["metadata"]["finalizers"] = {"example.com/hold"};
  return p;
}

TEST_F(ClusterTest, AContainerTrappingSigtermKeepsThePodTerminatingUntilItExits) {
  start_then_delete(draining_pod("draining", "5", 30));
  advance(milliseconds(4900));
  EXPECT_TRUE(main_state("draining").contains("running"));
  EXPECT_EQ(phase("draining"), "Running");
  EXPECT_EQ(pod("draining")["metadata"]["deletionGracePeriodSeconds"], 30) << "no final delete";
  advance(milliseconds(100));
  EXPECT_EQ(main_state("draining")["terminated"]["exitCode"], 143);
  const json got = pod("draining");
  EXPECT_EQ(got["status"]["phase"], "Failed");
  EXPECT_EQ(got["metadata"]["deletionGracePeriodSeconds"], 0) << "the kubelet's delete came";
}

TEST_F(ClusterTest, AContainerIgnoringSigtermIsKilledWhenTheGracePeriodEnds) {
  start_then_delete(draining_pod("stubborn", "forever", 10));
  advance(milliseconds(9900));
  EXPECT_TRUE(main_state("stubborn").contains("running"));
  advance(milliseconds(100));
  EXPECT_EQ(main_state("stubborn")["terminated"]["exitCode"], 137);
  EXPECT_EQ(pod("stubborn")["metadata"]["deletionGracePeriodSeconds"], 0);
}

TEST_F(ClusterTest, AShorterGracePeriodBringsTheKillForward) {
  start_then_delete(draining_pod("hurried", "forever", 30));
  advance(seconds(5));
  store_.remove("pods", "default", "hurried", DeleteRequest{.grace_period_seconds = 2});
  cluster().step();
  advance(milliseconds(1900));
  EXPECT_TRUE(main_state("hurried").contains("running"));
  advance(milliseconds(100));
  EXPECT_EQ(main_state("hurried")["terminated"]["exitCode"], 137);
}

TEST_F(ClusterTest, ADeletedPodOnANodeNoKubeletRunsStaysTerminating) {
  json p = pod_manifest("stranded");
  p["spec"]["nodeName"] = "a-node-that-is-gone";
  p["spec"]["terminationGracePeriodSeconds"] = 30;
  create(p);
  cluster().step();
  store_.remove("pods", "default", "stranded");
  advance(seconds(60));  // past the grace period: nothing but a kubelet ends it
  EXPECT_EQ(pod("stranded")["metadata"]["deletionGracePeriodSeconds"], 30);
}

// ---- the background loop ----

TEST(ClusterLoop, RunsPodsToCompletionOnItsOwn) {
  Store store;
  for (const ResourceInfo& info : {ResourceInfo{"", "v1", "namespaces", "Namespace", false, true},
                                   ResourceInfo{"", "v1", "pods", "Pod", true, true}}) {
    if (!store.resource(info.group_resource()))
      store.register_resource(info);
  }
  try {
    store.create(
        "namespaces",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "default"}}}});
  } catch (const Error&) {
  }
  ClusterOptions options;
  options.nodes = 1;
  options.kubelet.start_delay = milliseconds(0);
  SimulatedCluster cluster(store, options);
  cluster.start();
  EXPECT_TRUE(store.get("nodes", "", "sandbox-node-0").is_object());  // registered by start()
  json p = pod_manifest("quick");
  p["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "0.2"}};
  store.create("pods", p);
  json meshed = pod_manifest("meshed");
  meshed["spec"]["restartPolicy"] = "OnFailure";
  meshed["spec"]["containers"].push_back({{"name", "istio-proxy"}, {"image", "istio/proxyv2"}});
  meshed["metadata"]["annotations"] = {{"sandbox.trainctl.io/run-seconds", "0.1"}};
  store.create("pods", meshed);
  auto wait_for = [&](const std::string& name, auto done) {
    for (int i = 0; i < 100; ++i) {
      if (done(store.get("pods", "default", name)))
        return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  };
  auto phase_is = [](const char* phase) {
    return [phase](const json& p) { return p["status"].value("phase", "") == phase; };
  };
  EXPECT_TRUE(wait_for("quick", phase_is("Succeeded")));
  ASSERT_TRUE(wait_for("meshed", [](const json& p) {
    const json& statuses = p["status"].value("containerStatuses", json::array());
    return statuses.size() == 2 && statuses[0]["state"].contains("terminated");
  }));
  EXPECT_EQ(store.get("pods", "default", "meshed")["status"]["phase"], "Running");
  EXPECT_EQ(cluster
                .exec("default", "meshed", "istio-proxy",
                      {"curl", "-X", "POST", "localhost:15020/quitquitquit"})
                .exit_code,
            0);
  EXPECT_TRUE(wait_for("meshed", phase_is("Succeeded")));
  cluster.stop();
}

}  // namespace
}  // namespace trainctl::sandbox
