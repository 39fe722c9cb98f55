#include "controller/gang.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "api/status.h"
#include "controller/objects.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using trainctl::kube::cache::DecodeFilter;
using trainctl::kube::cache::Versioned;

const auto kNow = *api::parse_timestamp("2024-05-01T12:00:00Z");

json container(const std::string& name, json resources) {
  return {{"name", name}, {"image", "train:1"}, {"resources", std::move(resources)}};
}

json replica(int replicas, json containers) {
  return {{"replicas", replicas},
          {"template", {{"spec", {{"containers", std::move(containers)}}}}}};
}

json tf_job_of(json replica_specs, json scheduling_policy = json()) {
  json job = {{"apiVersion", "kubeflow.org/v1"},
              {"kind", "TFJob"},
              {"metadata", {{"name", "mnist"}, {"namespace", "team-a"}, {"uid", "uid-1"}}},
              {"spec", {{"tfReplicaSpecs", std::move(replica_specs)}}}};
  if (!scheduling_policy.is_null())
    job["spec"]["runPolicy"]["schedulingPolicy"] = std::move(scheduling_policy);
  return job;
}

TEST(PodGroupTest, NamedOwnedAndSizedLikeTheJob) {
  const json gpu_worker = container("tensorflow", {{"limits", {{"nvidia.com/gpu", 8}}}});
  const json group = pod_group(tf_job_of({{"PS", replica(1, {container("tensorflow", json())})},
                                          {"Worker", replica(4, {gpu_worker})}}));
  EXPECT_EQ(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["metadata"]["name"], "mnist");
  EXPECT_EQ(group["metadata"]["namespace"], "team-a");
  EXPECT_EQ(group["metadata"]["labels"]["training.kubeflow.org/job-name"], "mnist");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(group["spec"]["minMember"], 5);
  EXPECT_EQ(group["spec"]["queue"], "default");
  EXPECT_FALSE(group["spec"].contains("priorityClassName"));
  // Limits stand in for requests when a container names none.
  EXPECT_EQ(group["spec"]["minResources"], json({{"nvidia.com/gpu", "32"}}));
}

TEST(PodGroupTest, MinResourcesCountTheFirstMinMemberPodsInReplicaTypeOrder) {
  const json chief = container("tensorflow", {{"requests", {{"cpu", "2"}, {"memory", "4Gi"}}}});
  // Requests win over limits; limits are not merged in when requests are given.
  const json worker = container("tensorflow", {{"requests", {{"cpu", "500m"}}},
                                               {"limits", {{"cpu", "1"}, {"memory", "1Gi"}}}});
  const json sidecar = container("logger", {{"requests", {{"cpu", "250m"}, {"memory", "512Mi"}}}});
  const json group = pod_group(
      tf_job_of({{"Worker", replica(10, {worker, sidecar})}, {"Chief", replica(1, {chief})}},
                {{"minAvailable", 3}, {"queue", "team-a"}, {"priorityClass", "high"}}));
  EXPECT_EQ(group["spec"]["minMember"], 3);
  EXPECT_EQ(group["spec"]["queue"], "team-a");
  EXPECT_EQ(group["spec"]["priorityClassName"], "high");
  // Chief first (2 cpu, 4Gi), then two workers of 750m and 512Mi each.
  EXPECT_EQ(group["spec"]["minResources"], json({{"cpu", "3500m"}, {"memory", "5Gi"}}));
}

TEST(PodGroupTest, SchedulingPolicyMinResourcesAreTakenAsGiven) {
  const json group =
      pod_group(tf_job_of({{"Worker", replica(2, {container("tensorflow", json())})}},
                          {{"minResources", {{"nvidia.com/gpu", "16"}}}}));
  EXPECT_EQ(group["spec"]["minResources"], json({{"nvidia.com/gpu", "16"}}));
  EXPECT_EQ(group["spec"]["minMember"], 2);
}

TEST(PodGroupTest, MpiJobCountsTheLauncherFirst) {
  json job = {{"apiVersion", "kubeflow.org/v2beta1"},
              {"kind", "MPIJob"},
              {"metadata", {{"name", "pi"}, {"namespace", "team-a"}, {"uid", "u"}}},
              {"spec",
               {{"runPolicy", {{"schedulingPolicy", {{"minAvailable", 2}}}}},
                {"mpiReplicaSpecs",
                 {{"Worker", replica(4, {container("w", {{"requests", {{"cpu", "4"}}}})})},
                  {"Launcher", replica(1, {container("l", {{"requests", {{"cpu", "1"}}}})})}}}}}};
  EXPECT_EQ(pod_group(job)["spec"]["minResources"], json({{"cpu", "5"}}));
}

TEST(PodGroupTest, AdmittedMeansInqueueOrLater) {
  EXPECT_FALSE(pod_group_admitted(json::object()));
  EXPECT_FALSE(pod_group_admitted({{"status", {{"phase", "Pending"}}}}));
  EXPECT_TRUE(pod_group_admitted({{"status", {{"phase", "Inqueue"}}}}));
  EXPECT_TRUE(pod_group_admitted({{"status", {{"phase", "Running"}}}}));
}

// ---- admission ----

json group(const std::string& name, const std::string& queue, json min_resources,
           const std::string& created = "2024-05-01T11:00:00Z", const std::string& phase = "",
           int min_member = 2) {
  json g = {
      {"apiVersion", "scheduling.volcano.sh/v1beta1"},
      {"kind", "PodGroup"},
      {"metadata",
       {{"name", name},
        {"namespace", "team-a"},
        {"uid", "uid-" + name},
        {"creationTimestamp", created},
        {"resourceVersion", "7"}}},
      {"spec",
       {{"minMember", min_member}, {"queue", queue}, {"minResources", std::move(min_resources)}}}};
  if (!phase.empty())
    g["status"]["phase"] = phase;
  return g;
}

json queue(const std::string& name, json capability, const std::string& state = "Open") {
  json q = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
            {"kind", "Queue"},
            {"metadata", {{"name", name}, {"resourceVersion", "3"}}},
            {"spec", {{"weight", 1}, {"capability", std::move(capability)}}}};
  if (!state.empty())
    q["status"]["state"] = state;
  return q;
}

json node(const std::string& name, int gpus, bool ready = true) {
  return {{"metadata", {{"name", name}}},
          {"status",
           {{"allocatable", {{"cpu", "32"}, {"memory", "256Gi"}, {"nvidia.com/gpu", gpus}}},
            {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}}}};
}

json pod(const std::string& name, const std::string& group_name, const std::string& node_name,
         const std::string& phase, int gpus) {
  return {{"metadata",
           {{"name", name},
            {"namespace", "team-a"},
            {"annotations", {{"scheduling.k8s.io/group-name", group_name}}}}},
          {"spec",
           {{"nodeName", node_name},
            {"containers", {container("main", {{"limits", {{"nvidia.com/gpu", gpus}}}})}}}},
          {"status", {{"phase", phase}}}};
}

/// One round over these objects, with default options.
AdmissionResult admit(std::vector<json> groups, std::vector<json> queues, std::vector<json> nodes,
                      std::vector<json> pods, JobLookup job,
                      std::chrono::system_clock::time_point now) {
  return controller::admit({.pod_groups = std::move(groups),
                            .queues = std::move(queues),
                            .nodes = std::move(nodes),
                            .pods = std::move(pods),
                            .job = std::move(job),
                            .now = now});
}

/// What an action writes: its object, or a Patch's merge patch.
json written(const Action& a) {
  return a.type == Action::Type::Patch ? json::parse(a.patch) : a.object;
}

/// The merge patch `result` writes to the PodGroup `name`, or null when it writes none.
json written_group(const AdmissionResult& result, const std::string& name) {
  for (const auto& a : result.actions) {
    if (a.resource.plural == "podgroups" && a.name == name) {
      EXPECT_EQ(a.type, Action::Type::Patch);  // the CRD has no status subresource
      EXPECT_EQ(a.namespace_, "team-a");
      return written(a);
    }
  }
  return nullptr;
}

/// The group as the next round reads it: `g` with what `result` wrote merged in.
json after(const AdmissionResult& result, json g) {
  const json written = written_group(result, g["metadata"]["name"]);
  if (!written.is_null())
    g.merge_patch(written);
  return g;
}

json written_queue(const AdmissionResult& result, const std::string& name) {
  for (const auto& a : result.actions) {
    if (a.resource.plural == "queues" && a.name == name) {
      EXPECT_EQ(a.type, Action::Type::UpdateStatus);
      return a.object;
    }
  }
  return nullptr;
}

std::string phase_of(const json& group) {
  return group.is_null() ? "<not written>" : group["status"].value("phase", "");
}

json unschedulable(const json& group) {
  for (const auto& c : group["status"].value("conditions", json::array())) {
    if (c["type"] == "Unschedulable")
      return c;
  }
  return nullptr;
}

TEST(AdmitTest, AdmitsAGangThatFitsItsQuotaAndTheCluster) {
  const AdmissionResult result = admit({group("a", "team-a", {{"nvidia.com/gpu", "8"}})},
                                       {queue("team-a", {{"nvidia.com/gpu", "16"}})},
                                       {node("n1", 8), node("n2", 8)}, {}, {}, kNow);
  const json a = written_group(result, "a");
  EXPECT_EQ(phase_of(a), "Inqueue");
  // A merge patch of the status and annotations, conditional on the version read: the spec and
  // the rest of the object are neither copied nor sent.
  EXPECT_EQ(a["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(a.size(), 2u) << a.dump();
  EXPECT_EQ(a["metadata"]["annotations"].size(), 2u) << a.dump();  // reservation, admitted-at
  EXPECT_EQ(a["status"].size(), 4u) << a.dump();  // phase and the counts: no condition to set
  ASSERT_EQ(result.events.size(), 1u);
  EXPECT_EQ(result.events[0].reason, "Enqueued");
  EXPECT_EQ(result.events[0].involved_object.name, "a");

  // A group read without a resourceVersion (made by hand) is patched without one: an empty one,
  // or a null metadata (which a merge patch takes as "remove"), is never sent.
  json unversioned = group("u", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:00:00Z", "", 2);
  unversioned["metadata"].erase("resourceVersion");
  const json u = written_group(admit({unversioned}, {queue("team-a", json::object())},
                                     {node("n1", 8), node("n2", 8)}, {}, {}, kNow),
                               "u");
  EXPECT_EQ(phase_of(u), "Inqueue");
  EXPECT_FALSE(u["metadata"].contains("resourceVersion")) << u.dump();

  const json q = written_queue(result, "team-a");
  ASSERT_FALSE(q.is_null());
  EXPECT_EQ(q["status"]["state"], "Open");
  EXPECT_EQ(q["status"]["inqueue"], 1);
  EXPECT_EQ(q["status"]["pending"], 0);
  EXPECT_EQ(q["status"]["allocated"], json({{"nvidia.com/gpu", "8"}}));
}

// The reservation annotation is the json text of where the pods went, node by node in name order,
// whatever characters the names hold.
TEST(AdmitTest, TheReservationAnnotationIsTheJsonOfEveryNodesShare) {
  const AdmissionResult result =
      admit({group("a", "team-a", {{"nvidia.com/gpu", "18"}, {"cpu", "3"}}, "2024-05-01T11:00:00Z",
                   "", 3)},
            {queue("team-a", json::object())},
            {node("n1", 8), node("n\"2", 8), node("n\u00e93", 8)}, {}, {}, kNow);
  const json a = written_group(result, "a");
  ASSERT_EQ(phase_of(a), "Inqueue");
  const json each = {{"cpu", "1"}, {"nvidia.com/gpu", "6"}, {"pods", "1"}};
  EXPECT_EQ(a["metadata"]["annotations"]["trainctl.io/node-reservations"],
            json({{"n\"2", each}, {"n1", each}, {"n\u00e93", each}}).dump());
}

// A job created again under the name of one just deleted: its predecessor's pods, terminating
// (deletionTimestamp set, the kubelet still stopping them), carry the same group name. They keep
// their node's room but are no members of the new gang: it is admitted for pods of its own (on
// the other node), and does not pass for Running on pods that are going away.
TEST(AdmitTest, TerminatingPodsKeepTheirNodeButLeaveTheirGang) {
  std::vector<json> old_pods;
  for (const char* name : {"a-worker-0", "a-worker-1"}) {
    json p = pod(name, "a", "n1", "Running", 4);
    p["metadata"]["deletionTimestamp"] = "2024-05-01T11:59:50Z";
    old_pods.push_back(p);
  }
  const AdmissionResult result = admit({group("a", "team-a", {{"nvidia.com/gpu", "8"}})},
                                       {queue("team-a", {{"nvidia.com/gpu", "8"}})},
                                       {node("n1", 8), node("n2", 8)}, old_pods, {}, kNow);
  const json a = written_group(result, "a");
  EXPECT_EQ(phase_of(a), "Inqueue") << a.dump();
  EXPECT_EQ(a["metadata"]["annotations"]["trainctl.io/node-reservations"],
            R"({"n2":{"nvidia.com/gpu":"8","pods":"2"}})")
      << "n1 is still full of the old pods";
  EXPECT_EQ(written_queue(result, "team-a")["status"]["allocated"],
            json({{"nvidia.com/gpu", "8"}}));
}

TEST(AdmitTest, QuotaExhaustionKeepsTheWholeGangPendingWithAMessage) {
  // Group a already holds 12 of the queue's 16 GPUs; b wants 8 and fits the cluster.
  const AdmissionResult result =
      admit({group("a", "team-a", {{"nvidia.com/gpu", "12"}}, "2024-05-01T10:00:00Z", "Inqueue"),
             group("b", "team-a", {{"nvidia.com/gpu", "8"}, {"cpu", "4"}})},
            {queue("team-a", {{"nvidia.com/gpu", "16"}})},
            {node("n1", 8), node("n2", 8), node("n3", 8), node("n4", 8)}, {}, {}, kNow);
  const json b = written_group(result, "b");
  EXPECT_EQ(phase_of(b), "Pending");
  const json c = unschedulable(b);
  ASSERT_FALSE(c.is_null());
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "NotEnoughResources");
  // cpu is not limited by the queue's capability, so only the GPUs are named.
  EXPECT_EQ(c["message"], "queue team-a: nvidia.com/gpu 8 requested, 4 free of capability 16");
  EXPECT_EQ(c["lastTransitionTime"], "2024-05-01T12:00:00Z");
  ASSERT_EQ(result.events.size(), 1u);
  EXPECT_EQ(result.events[0].type, "Warning");
  EXPECT_EQ(result.events[0].reason, "Unschedulable");
  EXPECT_EQ(written_queue(result, "team-a")["status"]["pending"], 1);
}

TEST(AdmitTest, OlderGroupsGoFirstAndALaterSmallerOneStillFits) {
  // 16 GPUs in the cluster: the oldest (12) goes in, the next (8) does not, the newest (4) does.
  const AdmissionResult result =
      admit({group("newest", "default", {{"nvidia.com/gpu", "4"}}, "2024-05-01T11:30:00Z"),
             group("middle", "default", {{"nvidia.com/gpu", "8"}}, "2024-05-01T11:10:00Z"),
             group("oldest", "default", {{"nvidia.com/gpu", "12"}}, "2024-05-01T11:00:00Z")},
            {queue("default", json::object())}, {node("n1", 8), node("n2", 8)}, {}, {}, kNow);
  EXPECT_EQ(phase_of(written_group(result, "oldest")), "Inqueue");
  EXPECT_EQ(phase_of(written_group(result, "newest")), "Inqueue");
  const json middle = written_group(result, "middle");
  EXPECT_EQ(phase_of(middle), "Pending");
  EXPECT_EQ(unschedulable(middle)["message"], "cluster: nvidia.com/gpu 8 requested, 4 free of 16");
}

// Gangs of one shape share their why-not text within a pass only while nothing is admitted in
// between: the last gang below is told what is free after the middle one went in.
TEST(AdmitTest, AWhyNotSaysWhatIsFreeAfterTheAdmissionsBeforeIt) {
  const AdmissionResult cluster =
      admit({group("first", "default", {{"nvidia.com/gpu", "20"}}, "2024-05-01T10:00:00Z"),
             group("fits", "default", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:10:00Z"),
             group("second", "default", {{"nvidia.com/gpu", "20"}}, "2024-05-01T10:20:00Z")},
            {queue("default", json::object())}, {node("n1", 8), node("n2", 8)}, {}, {}, kNow);
  EXPECT_EQ(unschedulable(written_group(cluster, "first"))["message"],
            "cluster: nvidia.com/gpu 20 requested, 16 free of 16");
  EXPECT_EQ(phase_of(written_group(cluster, "fits")), "Inqueue");
  EXPECT_EQ(unschedulable(written_group(cluster, "second"))["message"],
            "cluster: nvidia.com/gpu 20 requested, 8 free of 16");

  const AdmissionResult quota =
      admit({group("first", "team-a", {{"nvidia.com/gpu", "20"}}, "2024-05-01T10:00:00Z"),
             group("fits", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:10:00Z"),
             group("second", "team-a", {{"nvidia.com/gpu", "20"}}, "2024-05-01T10:20:00Z")},
            {queue("team-a", {{"nvidia.com/gpu", "16"}})},
            {node("n1", 8), node("n2", 8), node("n3", 8), node("n4", 8)}, {}, {}, kNow);
  EXPECT_EQ(unschedulable(written_group(quota, "first"))["message"],
            "queue team-a: nvidia.com/gpu 20 requested, 16 free of capability 16");
  EXPECT_EQ(phase_of(written_group(quota, "fits")), "Inqueue");
  EXPECT_EQ(unschedulable(written_group(quota, "second"))["message"],
            "queue team-a: nvidia.com/gpu 20 requested, 8 free of capability 16");
}

TEST(AdmitTest, ClosedOrMissingQueuesAdmitNothing) {
  const AdmissionResult result =
      admit({group("a", "team-a", json::object()), group("b", "nowhere", json::object())},
            {queue("team-a", json::object(), "Closed")}, {node("n1", 8)}, {}, {}, kNow);
  const json a = written_group(result, "a");
  EXPECT_EQ(phase_of(a), "Pending");
  EXPECT_EQ(unschedulable(a)["message"], "queue team-a is Closed");
  EXPECT_EQ(unschedulable(a)["reason"], "QueueNotOpen");
  const json b = written_group(result, "b");
  EXPECT_EQ(unschedulable(b)["message"], "queue nowhere not found");
}

TEST(AdmitTest, NodeCapacityCountsOnlyReadyNodesAndBoundPods) {
  // n2 is not Ready; n1's 8 GPUs are half used by a running pod of another job.
  const json other =
      group("other", "default", json::object(), "2024-05-01T09:00:00Z", "Running", 1);
  const AdmissionResult result = admit(
      {other, group("a", "default", {{"nvidia.com/gpu", "8"}})}, {queue("default", json::object())},
      {node("n1", 8), node("n2", 8, false)},
      {pod("other-0", "other", "n1", "Running", 4), pod("done-0", "other", "n1", "Succeeded", 4)},
      {}, kNow);
  EXPECT_EQ(unschedulable(written_group(result, "a"))["message"],
            "cluster: nvidia.com/gpu 8 requested, 4 free of 8");
}

TEST(AdmitTest, AdmittedGroupsWithoutPodsReserveTheirMinResources) {
  const AdmissionResult result =
      admit({group("a", "default", {{"memory", "192Gi"}}, "2024-05-01T10:00:00Z", "Inqueue"),
             group("b", "default", {{"memory", "128Gi"}})},
            {queue("default", json::object())}, {node("n1", 8)}, {}, {}, kNow);
  EXPECT_EQ(unschedulable(written_group(result, "b"))["message"],
            "cluster: memory 128Gi requested, 64Gi free of 256Gi");
}

TEST(AdmitTest, GroupsRunOnceMinMemberPodsAreBoundAndCompleteWhenTheySucceed) {
  const AdmissionResult result = admit(
      {group("running", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T10:00:00Z", "Inqueue"),
       group("done", "default", json::object(), "2024-05-01T10:00:00Z", "Running")},
      {queue("default", json::object())}, {node("n1", 8)},
      {pod("running-0", "running", "n1", "Running", 1),
       pod("running-1", "running", "n1", "Pending", 1), pod("done-0", "done", "n1", "Succeeded", 0),
       pod("done-1", "done", "n1", "Succeeded", 0)},
      {}, kNow);
  const json running = written_group(result, "running");
  EXPECT_EQ(phase_of(running), "Running");
  EXPECT_EQ(running["status"]["running"], 1);
  EXPECT_EQ(running["status"]["conditions"][0]["type"], "Scheduled");
  EXPECT_EQ(phase_of(written_group(result, "done")), "Completed");
  const json q = written_queue(result, "default");
  EXPECT_EQ(q["status"]["running"], 1);
  EXPECT_EQ(q["status"]["completed"], 1);
  EXPECT_EQ(q["status"]["allocated"], json({{"nvidia.com/gpu", "2"}}));
}

TEST(AdmitTest, ASecondRoundOnTheResultWritesNothing) {
  std::vector<json> groups = {group("a", "team-a", {{"nvidia.com/gpu", "8"}}),
                              group("b", "team-a", {{"nvidia.com/gpu", "12"}})};
  std::vector<json> queues = {queue("team-a", {{"nvidia.com/gpu", "16"}}, "")};
  const std::vector<json> nodes = {node("n1", 8), node("n2", 8)};
  const AdmissionResult first = admit(groups, queues, nodes, {}, {}, kNow);
  for (auto& g : groups)
    g = after(first, g);
  queues[0] = written_queue(first, "team-a");
  EXPECT_EQ(queues[0]["status"]["state"], "Open");  // a new queue opens
  // Within the schedule timeout: nothing changed, nothing to write.
  const AdmissionResult second =
      admit(groups, queues, nodes, {}, {}, kNow + std::chrono::seconds(10));
  EXPECT_THAT(second.actions, IsEmpty());
  EXPECT_THAT(second.events, IsEmpty());
}

// A waiting gang's status is left alone only when it says exactly what the round would write:
// its Unschedulable condition with the same status, reason and message (lastTransitionTime
// kept), and nothing else in that condition.
TEST(AdmitTest, AWaitingGangsStatusIsRewrittenOnlyWhenTheRoundWouldChangeIt) {
  const std::vector<json> queues = {queue("team-a", json::object())};
  const std::vector<json> nodes = {node("n1", 8)};
  json waiting = group("big", "team-a", {{"nvidia.com/gpu", "16"}});
  waiting = after(admit({waiting}, queues, nodes, {}, {}, kNow), waiting);
  ASSERT_EQ(phase_of(waiting), "Pending");
  const json& condition = waiting["status"]["conditions"][0];
  ASSERT_EQ(condition["type"], "Unschedulable");
  const auto later = kNow + std::chrono::seconds(10);
  const auto not_written = Not(Contains(Field(&Action::name, "big")));
  EXPECT_THAT(admit({waiting}, queues, nodes, {}, {}, later).actions, not_written);

  // An older lastTransitionTime is kept: still nothing to write.
  json older = waiting;
  older["status"]["conditions"][0]["lastTransitionTime"] = "2024-05-01T08:00:00Z";
  EXPECT_THAT(admit({older}, queues, nodes, {}, {}, later).actions, not_written);

  // Written whole again: another message, a member the condition does not get, no
  // lastTransitionTime (stamped now), another count of running pods.
  json message = waiting;
  message["status"]["conditions"][0]["message"] = "cluster: something else";
  json extra = waiting;
  extra["status"]["conditions"][0]["lastProbeTime"] = "2024-05-01T08:00:00Z";
  json stamp = waiting;
  stamp["status"]["conditions"][0].erase("lastTransitionTime");
  json running = waiting;
  running["status"]["running"] = 1;
  for (const json& stale : {message, extra, stamp, running}) {
    const json written = written_group(admit({stale}, queues, nodes, {}, {}, later), "big");
    ASSERT_FALSE(written.is_null()) << stale["status"].dump();
    EXPECT_EQ(written["status"]["running"], 0);
    ASSERT_EQ(written["status"]["conditions"].size(), 1);
    const json& rewritten = written["status"]["conditions"][0];
    EXPECT_EQ(rewritten["message"], condition["message"]);
    EXPECT_FALSE(rewritten.contains("lastProbeTime"));
    EXPECT_EQ(
        rewritten["lastTransitionTime"],
        stale["status"]["conditions"][0].value("lastTransitionTime", api::format_timestamp(later)));
  }
}

// The conditions array is written whole (a merge patch replaces arrays): conditions the round
// does not set stay as they were and where they were, the one it sets replaces the first of its
// type, with lastTransitionTime now when its status changes.
TEST(AdmitTest, ConditionsTheRoundDoesNotSetAreKeptInPlace) {
  json waiting = group("a", "team-a", {{"nvidia.com/gpu", "4"}});
  const json other = {{"type", "Other"}, {"status", "True"}, {"lastProbeTime", "x"}};
  waiting["status"] = {{"phase", "Pending"},
                       {"conditions",
                        {other,
                         {{"type", "Unschedulable"},
                          {"status", "True"},
                          {"reason", "NotEnoughResources"},
                          {"message", "cluster: nvidia.com/gpu 4 requested, 0 free of 8"},
                          {"lastTransitionTime", "2024-05-01T08:00:00Z"}},
                         "not a condition",
                         {{"type", "Unschedulable"}, {"status", "True"}}}}};
  const json written = written_group(
      admit({waiting}, {queue("team-a", json::object())}, {node("n1", 8)}, {}, {}, kNow), "a");
  ASSERT_EQ(phase_of(written), "Inqueue");
  const json& conditions = written["status"]["conditions"];
  ASSERT_EQ(conditions.size(), 4) << conditions.dump();
  EXPECT_EQ(conditions[0], other);
  EXPECT_EQ(conditions[1], json({{"type", "Unschedulable"},
                                 {"status", "False"},
                                 {"reason", "Enqueued"},
                                 {"message", "admitted to queue team-a"},
                                 {"lastTransitionTime", api::format_timestamp(kNow)}}));
  EXPECT_EQ(conditions[2], "not a condition");
  EXPECT_EQ(conditions[3], json({{"type", "Unschedulable"}, {"status", "True"}}));
}

// A group whose status is already what the round computes is written only when its annotations
// change: one the round removes, or one whose annotations are not an object, is still written.
TEST(AdmitTest, AGroupWithCurrentStatusIsStillWrittenWhenItsAnnotationsChange) {
  const std::vector<json> nodes = {node("n1", 8)};
  const std::vector<json> pods = {pod("running-0", "running", "n1", "Running", 2)};
  const std::vector<json> queues = {queue("default", json::object())};
  json running =
      group("running", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T10:00:00Z", "Inqueue", 1);
  running = after(admit({running}, queues, nodes, pods, {}, kNow), running);
  ASSERT_EQ(phase_of(running), "Running");
  EXPECT_THAT(admit({running}, queues, nodes, pods, {}, kNow).actions,
              Not(Contains(Field(&Action::name, "running"))));

  // An older controller's reservation left on it: a Running gang holds none.
  json stale = running;
  stale["metadata"]["annotations"]["trainctl.io/node-reservations"] = R"({"n1":{"pods":"1"}})";
  stale["metadata"]["annotations"]["team"] = "a";
  const AdmissionResult cleaning = admit({stale}, queues, nodes, pods, {}, kNow);
  ASSERT_FALSE(written_group(cleaning, "running").is_null());
  EXPECT_FALSE(written_group(cleaning, "running").contains("status"));  // only what changes
  const json cleaned = after(cleaning, stale);
  EXPECT_EQ(cleaned["metadata"]["annotations"], json({{"team", "a"}}));
  EXPECT_EQ(cleaned["status"], running["status"]);

  // Annotations that are not an object become one (the reservation removed from nothing).
  json odd = running;
  odd["metadata"]["annotations"] = nullptr;
  const AdmissionResult fixing = admit({odd}, queues, nodes, pods, {}, kNow);
  ASSERT_FALSE(written_group(fixing, "running").is_null());
  EXPECT_EQ(after(fixing, odd)["metadata"]["annotations"], json::object());
}

// Found live by fairshare_bench: the scheduler bound pods of gangs reserved on n1 on n0 instead,
// and while the pod cache had seen some of those bindings, n1 looked 2 GPUs over-full and n0 2
// GPUs free. The whole cluster is full: the reserved pods need room somewhere, so n0's 2 GPUs are
// not free for another gang (it was admitted, and its pod sat unplaceable).
TEST(AdmitTest, AReservationItsNodeNoLongerHoldsIsCountedAgainstTheOtherNodes) {
  const json gpu2 = {{"nvidia.com/gpu", "2"}};
  std::vector<json> groups, pods;
  for (const auto& [name, node_name] : std::vector<std::pair<std::string, std::string>>{
           {"r0", "n0"}, {"r1", "n0"}, {"r2", "n0"}, {"r3", "n1"}, {"r4", "n1"}, {"r5", "n1"}}) {
    groups.push_back(group(name, "q", gpu2, "2024-05-01T10:00:00Z", "Running", 1));
    pods.push_back(pod(name + "-0", name, node_name, "Running", 2));
  }
  for (const std::string name : {"i0", "i1"}) {
    json g = group(name, "q", gpu2, "2024-05-01T10:00:00Z", "Inqueue", 1);
    g["metadata"]["annotations"]["trainctl.io/node-reservations"] =
        R"({"n1":{"nvidia.com/gpu":"2","pods":"1"}})";
    g["metadata"]["annotations"]["trainctl.io/admitted-at"] = api::format_timestamp(kNow);
    groups.push_back(g);
  }
  groups.push_back(group("late", "q", gpu2, "2024-05-01T11:00:00Z", "Pending", 1));
  const AdmissionResult result =
      admit(groups, {queue("q", json::object())}, {node("n0", 8), node("n1", 8)}, pods, {}, kNow);
  const json late = written_group(result, "late");
  EXPECT_EQ(phase_of(late), "Pending");
  EXPECT_THAT(late.dump(), HasSubstr("cluster: nvidia.com/gpu 2 requested, 0 free of 16"));
}

// As Volcano's queue controller: Closing while any PodGroup names the queue, a Pending or a
// Completed one too; Closed once none does.
TEST(AdmitTest, ClosingQueueClosesOnceNoGroupNamesIt) {
  const json closing = queue("team-a", json::object(), "Closing");
  for (const char* phase : {"Inqueue", "Pending", "Completed"}) {
    const AdmissionResult busy =
        admit({group("a", "team-a", json::object(), "2024-05-01T10:00:00Z", phase)}, {closing},
              {node("n1", 8)}, {}, {}, kNow);
    EXPECT_EQ(written_queue(busy, "team-a")["status"]["state"], "Closing") << phase;
  }
  const AdmissionResult idle = admit({}, {closing}, {node("n1", 8)}, {}, {}, kNow);
  EXPECT_EQ(written_queue(idle, "team-a")["status"]["state"], "Closed");
}

TEST(AdmitTest, ABlockedGroupIsAdmittedOnceItsQueueGrows) {
  json blocked = group("a", "team-a", {{"nvidia.com/gpu", "8"}});
  const std::vector<json> nodes = {node("n1", 8)};
  blocked = after(
      admit({blocked}, {queue("team-a", {{"nvidia.com/gpu", "4"}})}, nodes, {}, {}, kNow), blocked);
  ASSERT_EQ(unschedulable(blocked)["status"], "True");
  const AdmissionResult result =
      admit({blocked}, {queue("team-a", {{"nvidia.com/gpu", "8"}})}, nodes, {}, {}, kNow);
  const json admitted = written_group(result, "a");
  EXPECT_EQ(phase_of(admitted), "Inqueue");
  EXPECT_EQ(unschedulable(admitted)["status"], "False");
  EXPECT_EQ(unschedulable(admitted)["message"], "admitted to queue team-a");
}

/// `g` owned (controller ownerReference) by the `kind` job `name` with `uid`.
json owned_by_job(json g, const std::string& kind, const std::string& name,
                  const std::string& uid) {
  g["metadata"]["ownerReferences"] = {{{"apiVersion", "kubeflow.org/v1"},
                                       {"kind", kind},
                                       {"name", name},
                                       {"uid", uid},
                                       {"controller", true},
                                       {"blockOwnerDeletion", true}}};
  return g;
}

json cached_job(const std::string& kind, const std::string& name, const std::string& uid) {
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", kind},
          {"metadata", {{"name", name}, {"namespace", "team-a"}, {"uid", uid}}}};
}

// Issue 14: a PodGroup left behind by a deleted job (re-created in a race with the deletion, or
// not yet collected) held its queue's quota forever. A group whose job is not cached, or is cached
// under another uid (deleted and re-created under the same name), is the garbage collector's: it
// holds nothing, is not admitted and is not written.
TEST(AdmitTest, GroupsOfJobsThatAreGoneHoldNothingAndAreNotAdmitted) {
  const std::vector<json> groups = {
      owned_by_job(
          group("deleted", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T09:00:00Z", "Inqueue"),
          "PyTorchJob", "deleted", "uid-deleted"),
      owned_by_job(
          group("replaced", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T09:00:00Z", "Running"),
          "TFJob", "replaced", "uid-old"),
      owned_by_job(group("orphan", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T09:30:00Z"),
                   "MPIJob", "orphan", "uid-orphan"),
      owned_by_job(group("live", "team-a", {{"nvidia.com/gpu", "8"}}), "PyTorchJob", "live",
                   "uid-live")};
  const std::vector<json> jobs = {cached_job("TFJob", "replaced", "uid-new"),
                                  cached_job("PyTorchJob", "live", "uid-live"),
                                  // same name and uid, another kind: not the orphan's job
                                  cached_job("PyTorchJob", "orphan", "uid-orphan")};
  const JobLookup job_uid = [&](std::string_view kind, std::string_view ns, std::string_view name,
                                const DecodeFilter& decode) -> std::optional<Versioned> {
    for (const json& job : jobs) {
      if (job["kind"] == kind && job["metadata"]["namespace"] == ns &&
          job["metadata"]["name"] == name)
        return found_job(job, decode);
    }
    return std::nullopt;
  };
  const AdmissionResult result = admit(groups, {queue("team-a", {{"nvidia.com/gpu", "8"}})},
                                       {node("n1", 8)}, {}, job_uid, kNow);
  // Only the live job's group counts: it fits the 8 GPUs the gone ones would have filled.
  EXPECT_EQ(phase_of(written_group(result, "live")), "Inqueue");
  for (const char* gone : {"deleted", "replaced", "orphan"})
    EXPECT_TRUE(written_group(result, gone).is_null()) << gone;
  const json q = written_queue(result, "team-a");
  EXPECT_EQ(q["status"]["allocated"], json({{"nvidia.com/gpu", "8"}}));
  EXPECT_EQ(q["status"]["inqueue"], 1);
  EXPECT_EQ(q["status"]["running"], 0);
  EXPECT_EQ(q["status"]["pending"], 0);

  // Without the job in the cache, even the live one's group counts for nothing.
  const AdmissionResult none =
      admit(groups, {queue("team-a", {{"nvidia.com/gpu", "8"}})}, {node("n1", 8)}, {}, {}, kNow);
  EXPECT_TRUE(written_group(none, "live").is_null());
  EXPECT_EQ(written_queue(none, "team-a")["status"]["allocated"], json::object());
}

// A PodGroup listed twice (two objects of one namespace/name) counts once, as the first says;
// a group taken back for its gone job leaves no trace in the index its pods' gangs are found by.
TEST(AdmitTest, AGroupListedTwiceCountsOnceAndPodsFindTheirGangPastOneTakenBack) {
  json again = group("a", "team-a", {{"nvidia.com/gpu", "16"}}, "2024-05-01T10:00:00Z", "", 1);
  again["metadata"]["uid"] = "uid-a-again";
  const std::vector<json> groups = {
      owned_by_job(group("deleted", "team-a", {{"nvidia.com/gpu", "8"}}), "PyTorchJob", "deleted",
                   "uid-deleted"),
      group("a", "team-a", {{"nvidia.com/gpu", "4"}}, "2024-05-01T10:00:00Z", "", 1), again,
      group("run", "team-a", json::object(), "2024-05-01T09:00:00Z", "Running", 1)};
  const AdmissionResult result = admit(groups, {queue("team-a", json::object())}, {node("n1", 8)},
                                       {pod("run-0", "run", "n1", "Running", 4)}, {}, kNow);
  EXPECT_EQ(phase_of(written_group(result, "a")), "Inqueue");  // 4 GPUs fit; 16 would not
  EXPECT_EQ(std::count_if(result.actions.begin(), result.actions.end(),
                          [](const Action& a) { return a.name == "a"; }),
            1);
  EXPECT_TRUE(written_group(result, "deleted").is_null());
  EXPECT_EQ(written_group(result, "run")["status"]["running"], 1);
  EXPECT_EQ(written_queue(result, "team-a")["status"]["allocated"],
            json({{"nvidia.com/gpu", "8"}}));
}

// Groups not controlled by a training job (made by hand, or by another controller) are admitted
// whatever the job caches hold.
TEST(AdmitTest, GroupsWithoutATrainingJobOwnerCountAsAlways) {
  json by_hand = group("by-hand", "team-a", {{"nvidia.com/gpu", "4"}});
  json other = owned_by_job(group("other", "team-a", {{"nvidia.com/gpu", "4"}}), "Job", "other",
                            "uid-batch");
  other["metadata"]["ownerReferences"][0]["apiVersion"] = "batch.volcano.sh/v1alpha1";
  const AdmissionResult result =
      admit({by_hand, other}, {queue("team-a", {{"nvidia.com/gpu", "8"}})}, {node("n1", 8)}, {}, {},
            kNow);
  EXPECT_EQ(phase_of(written_group(result, "by-hand")), "Inqueue");
  EXPECT_EQ(phase_of(written_group(result, "other")), "Inqueue");
  EXPECT_EQ(written_queue(result, "team-a")["status"]["allocated"],
            json({{"nvidia.com/gpu", "8"}}));
}

// ---- per-node placement, order, head of line, timeouts ----

std::vector<json> gpu_nodes(int count, int gpus) {
  std::vector<json> nodes;
  for (int i = 1; i <= count; ++i)
    nodes.push_back(node("node-" + std::to_string(i), gpus));
  return nodes;
}

// The seed deadlock: 4 nodes x 1 GPU, two gangs of 4 one-GPU pods at the same instant. Exactly
// one is admitted; the other holds nothing and says why; it goes once the first has finished.
TEST(AdmitTest, SeedDeadlockAdmitsExactlyOneGangAndTheOtherAfterIt) {
  const std::vector<json> nodes = gpu_nodes(4, 1);
  json a = group("a", "default", {{"nvidia.com/gpu", "4"}}, "2024-05-01T11:00:00Z", "", 4);
  json b = group("b", "default", {{"nvidia.com/gpu", "4"}}, "2024-05-01T11:00:00Z", "", 4);
  const std::vector<json> queues = {queue("default", json::object())};
  const AdmissionResult first = admit({a, b}, queues, nodes, {}, {}, kNow);
  a = after(first, a);
  b = after(first, b);
  EXPECT_EQ(phase_of(a), "Inqueue");
  EXPECT_EQ(phase_of(b), "Pending");
  EXPECT_EQ(unschedulable(b)["message"], "cluster: nvidia.com/gpu 4 requested, 0 free of 4");
  // One GPU reserved on each node, written with the admission.
  EXPECT_EQ(
      json::parse(a["metadata"]["annotations"]["trainctl.io/node-reservations"].get<std::string>()),
      json({{"node-1", {{"nvidia.com/gpu", "1"}, {"pods", "1"}}},
            {"node-2", {{"nvidia.com/gpu", "1"}, {"pods", "1"}}},
            {"node-3", {{"nvidia.com/gpu", "1"}, {"pods", "1"}}},
            {"node-4", {{"nvidia.com/gpu", "1"}, {"pods", "1"}}}}));
  // A restarted controller sees only the objects: a's pods are not created yet, b still waits.
  const AdmissionResult again =
      admit({a, b}, queues, nodes, {}, {}, kNow + std::chrono::seconds(5));
  EXPECT_EQ(phase_of(after(again, b)), "Pending");
  EXPECT_EQ(phase_of(after(again, a)), "Inqueue");
  // a's pods ran and succeeded: b goes.
  std::vector<json> pods;
  for (int i = 0; i < 4; ++i)
    pods.push_back(
        pod("a-" + std::to_string(i), "a", "node-" + std::to_string(i + 1), "Succeeded", 1));
  const AdmissionResult done =
      admit({a, b}, queues, nodes, pods, {}, kNow + std::chrono::seconds(30));
  EXPECT_EQ(phase_of(after(done, a)), "Completed");
  EXPECT_EQ(phase_of(after(done, b)), "Inqueue");
}

// 4 nodes x 4 GPUs with 2 free each: 8 GPUs free in total, but a gang of 2 x 4-GPU pods fits no
// node, and the message names the largest free one.
TEST(AdmitTest, FragmentedCapacityIsNotAdmittedAndTheMessageNamesTheLargestFreeNode) {
  json busy = group("busy", "default", json::object(), "2024-05-01T09:00:00Z", "Running", 4);
  std::vector<json> pods;
  for (int i = 1; i <= 4; ++i)
    pods.push_back(
        pod("busy-" + std::to_string(i), "busy", "node-" + std::to_string(i), "Running", 2));
  const AdmissionResult result =
      admit({busy, group("big", "default", {{"nvidia.com/gpu", "8"}})},
            {queue("default", json::object())}, gpu_nodes(4, 4), pods, {}, kNow);
  EXPECT_EQ(unschedulable(written_group(result, "big"))["message"],
            "no node fits pod big-0: needs 4 nvidia.com/gpu, largest free on one node is 2 "
            "(node-1)");
}

json priority_class(const std::string& name, int value, bool global_default = false) {
  return {{"apiVersion", "scheduling.k8s.io/v1"},
          {"kind", "PriorityClass"},
          {"metadata", {{"name", name}}},
          {"value", value},
          {"globalDefault", global_default}};
}

json with_priority(json g, const std::string& class_name) {
  g["spec"]["priorityClassName"] = class_name;
  return g;
}

// Higher PriorityClass first, then creation time; an unknown class counts 0 and says so; the
// gangs behind the head name it, its priority and their place in the queue.
TEST(AdmitTest, PriorityThenAgeAndTheOthersWaitBehindTheHead) {
  const std::vector<json> groups = {
      with_priority(group("old-low", "default", {{"nvidia.com/gpu", "8"}}, "2024-05-01T08:00:00Z"),
                    "low"),
      with_priority(group("new-high", "default", {{"nvidia.com/gpu", "8"}}, "2024-05-01T11:00:00Z"),
                    "high"),
      with_priority(group("typo", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T07:00:00Z"),
                    "hihg")};
  // 8 GPUs free now on two nodes, of 16: new-high fits and goes first.
  json busy = group("busy", "default", json::object(), "2024-05-01T06:00:00Z", "Running", 2);
  const std::vector<json> pods = {pod("busy-0", "busy", "node-3", "Running", 4),
                                  pod("busy-1", "busy", "node-4", "Running", 4)};
  std::vector<json> all = groups;
  all.push_back(busy);
  const AdmissionInput input{
      .pod_groups = all,
      .queues = {queue("default", json::object())},
      .nodes = gpu_nodes(4, 4),
      .pods = pods,
      .priority_classes = {priority_class("high", 1000), priority_class("low", 10, true)},
      .now = kNow};
  const AdmissionResult result = controller::admit(input);
  EXPECT_EQ(phase_of(written_group(result, "new-high")), "Inqueue");
  // old-low (priority 10) is the head: it waits for the busy nodes and holds them.
  EXPECT_EQ(unschedulable(written_group(result, "old-low"))["message"],
            "cluster: nvidia.com/gpu 8 requested, 0 free of 16");
  // typo would fit nowhere now anyway (no GPU free); its priority note is in its message.
  EXPECT_EQ(unschedulable(written_group(result, "typo"))["message"],
            "cluster: nvidia.com/gpu 2 requested, 0 free of 16 (priority class hihg not found, "
            "using 0)");
}

// Backfill may use only what the head cannot: with the head's room held, a small gang that
// fits now waits behind it; strict FIFO admits nothing after the head at all.
TEST(AdmitTest, BackfillNeverTakesTheHeadsRoomAndStrictFifoAdmitsNothingBehindIt) {
  // node-1 has 2 of 4 GPUs used by a running gang; node-2 is free. head: 2 x 4 GPUs.
  json busy = group("busy", "default", json::object(), "2024-05-01T06:00:00Z", "Running", 1);
  const std::vector<json> pods = {pod("busy-0", "busy", "node-1", "Running", 2)};
  const std::vector<json> groups = {
      busy, group("head", "default", {{"nvidia.com/gpu", "8"}}, "2024-05-01T08:00:00Z"),
      group("small", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T09:00:00Z", "", 1),
      group("tiny-cpu", "default", {{"cpu", "1"}}, "2024-05-01T10:00:00Z", "", 1)};
  AdmissionInput input{.pod_groups = groups,
                       .queues = {queue("default", json::object())},
                       .nodes = gpu_nodes(2, 4),
                       .pods = pods,
                       .now = kNow};
  const AdmissionResult backfill = controller::admit(input);
  EXPECT_EQ(phase_of(written_group(backfill, "head")), "Pending");
  // small fits node-1's 2 free GPUs now, but the head needs all of node-1 once busy finishes.
  EXPECT_EQ(unschedulable(written_group(backfill, "small"))["message"],
            "waiting behind team-a/head (priority 0, position 2 of 3)");
  // A cpu-only gang takes nothing the head waits for.
  EXPECT_EQ(phase_of(written_group(backfill, "tiny-cpu")), "Inqueue");

  const AdmissionResult strict = controller::admit(input, {.order = AdmissionOrder::StrictFifo});
  EXPECT_EQ(unschedulable(written_group(strict, "tiny-cpu"))["message"],
            "waiting behind team-a/head (priority 0, position 3 of 3)");
}

// Across queues the one furthest below its deserved share goes first: team-b (weight 1) holds
// nothing, team-a (weight 3) already holds 6 of its deserved 6, so team-b's younger gang wins
// the last free node.
TEST(AdmitTest, TheQueueFurthestBelowItsDeservedShareGoesFirst) {
  json qa = queue("team-a", json::object());
  qa["spec"]["weight"] = 3;
  const json qb = queue("team-b", json::object());
  json held =
      group("held", "team-a", {{"nvidia.com/gpu", "6"}}, "2024-05-01T06:00:00Z", "Running", 1);
  const std::vector<json> pods = {pod("held-0", "held", "node-1", "Running", 6)};
  const AdmissionResult result = admit(
      {held, group("a-next", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T08:00:00Z", "", 1),
       group("b-next", "team-b", {{"nvidia.com/gpu", "2"}}, "2024-05-01T09:00:00Z", "", 1)},
      {qa, qb}, {node("node-1", 6), node("node-2", 2)}, pods, {}, kNow);
  EXPECT_EQ(phase_of(written_group(result, "b-next")), "Inqueue");
  EXPECT_EQ(phase_of(written_group(result, "a-next")), "Pending");
}

// No node Ready and schedulable (a cluster whose nodes all went NotReady): gangs wait and say
// why. The pass threw std::out_of_range before, so nothing was written at all.
TEST(AdmitTest, WithoutASchedulableNodeGangsWaitAndSayWhy) {
  const AdmissionResult result =
      admit({group("a", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T11:00:00Z", "", 2)},
            {queue("team-a", json::object())}, {node("n1", 8, false)}, {}, {}, kNow);
  const json a = written_group(result, "a");
  EXPECT_EQ(phase_of(a), "Pending");
  EXPECT_EQ(unschedulable(a)["message"], "cluster: nvidia.com/gpu 2 requested, 0 free of 0");
}

// A gang whose pods are not all bound within the schedule timeout is taken back: pods deleted,
// Pending with the reason and the unbound pods named, requeued after a back-off that doubles.
TEST(AdmitTest, ScheduleTimeoutDeletesThePodsAndRequeuesWithBackoff) {
  json g = group("slow", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T11:00:00Z", "", 2);
  const std::vector<json> queues = {queue("default", json::object())};
  const std::vector<json> nodes = gpu_nodes(2, 1);
  g = after(admit({g}, queues, nodes, {}, {}, kNow), g);
  ASSERT_EQ(phase_of(g), "Inqueue");
  json stuck = pod("slow-1", "slow", "", "Pending", 1);
  stuck["metadata"]["uid"] = "uid-stuck";
  stuck["status"]["conditions"] = {
      {{"type", "PodScheduled"},
       {"status", "False"},
       {"message", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}}};
  const std::vector<json> pods = {pod("slow-0", "slow", "node-1", "Running", 1), stuck};
  const AdmissionResult waiting =
      admit({g}, queues, nodes, pods, {}, kNow + std::chrono::seconds(299));
  EXPECT_EQ(phase_of(after(waiting, g)), "Inqueue");
  EXPECT_EQ(waiting.requeue_after, std::chrono::milliseconds(1000));

  const AdmissionResult timed_out =
      admit({g}, queues, nodes, pods, {}, kNow + std::chrono::seconds(300));
  const json back = after(timed_out, g);
  EXPECT_EQ(phase_of(back), "Pending");
  EXPECT_EQ(unschedulable(back)["reason"], "ScheduleTimeout");
  EXPECT_EQ(unschedulable(back)["message"],
            "1 of 2 pods not bound within 300s: slow-1; scheduler: 0/2 nodes are available: 2 "
            "Insufficient nvidia.com/gpu.; requeued, next try after 2024-05-01T12:06:00Z");
  EXPECT_EQ(back["metadata"]["annotations"]["trainctl.io/schedule-timeouts"], "1");
  EXPECT_FALSE(back["metadata"]["annotations"].contains("trainctl.io/node-reservations"));
  const auto deleted = [](const AdmissionResult& result) {
    std::vector<std::string> names;
    for (const auto& a : result.actions)
      if (a.type == Action::Type::Delete)
        names.push_back(a.name + "/" + a.uid);
    return names;
  };
  // Its pods go once the caches show it Pending: deleted with the status write, they would be
  // seen gone by the job reconciler while it still saw the gang admitted, and created again.
  EXPECT_THAT(deleted(timed_out), IsEmpty());
  EXPECT_EQ(timed_out.requeue_after, std::chrono::milliseconds(60'000));
  const AdmissionResult next_round =
      admit({back}, queues, nodes, pods, {}, kNow + std::chrono::seconds(301));
  EXPECT_THAT(deleted(next_round), ElementsAre("slow-0/", "slow-1/uid-stuck"));
  EXPECT_EQ(unschedulable(after(next_round, back))["message"], "its pods are being deleted");

  // During the back-off it stays Pending although it fits; after it, it is admitted again.
  const AdmissionResult backing_off =
      admit({back}, queues, nodes, {}, {}, kNow + std::chrono::seconds(330));
  EXPECT_THAT(unschedulable(after(backing_off, back))["message"].get<std::string>(),
              HasSubstr("requeued after a schedule timeout"));
  const json again =
      after(admit({back}, queues, nodes, {}, {}, kNow + std::chrono::seconds(361)), back);
  EXPECT_EQ(phase_of(again), "Inqueue");
  // A second timeout waits twice as long.
  const AdmissionResult second =
      admit({again}, queues, nodes, {}, {}, kNow + std::chrono::seconds(661));
  EXPECT_EQ(
      written_group(second, "slow")["metadata"]["annotations"]["trainctl.io/schedule-timeouts"],
      "2");
  EXPECT_EQ(second.requeue_after, std::chrono::milliseconds(120'000));
}

// Volcano: a Running gang that drops below minMember goes back to Pending (not Inqueue) and is
// admitted again only for the pods it misses.
TEST(AdmitTest, ARunningGangBelowMinMemberGoesBackToPending) {
  const json g =
      group("r", "default", {{"nvidia.com/gpu", "4"}}, "2024-05-01T10:00:00Z", "Running", 2);
  // One pod failed; node-1 is full with another gang, so the missing pod has nowhere to go.
  json other = group("other", "default", json::object(), "2024-05-01T09:00:00Z", "Running", 1);
  const std::vector<json> pods = {pod("r-0", "r", "node-2", "Running", 2),
                                  pod("r-1", "r", "node-2", "Failed", 2),
                                  pod("other-0", "other", "node-1", "Running", 4)};
  const AdmissionResult result = admit({g, other}, {queue("default", json::object())},
                                       {node("node-1", 4), node("node-2", 2)}, pods, {}, kNow);
  const json r = written_group(result, "r");
  EXPECT_EQ(phase_of(r), "Pending");
  EXPECT_EQ(unschedulable(r)["message"], "cluster: nvidia.com/gpu 2 requested, 0 free of 6");
}

}  // namespace
}  // namespace trainctl::controller

namespace trainctl::controller {
namespace {

api::ResourceList gpus(int n) {
  return {{"nvidia.com/gpu", 1000LL * n}};
}

// An admitted gang's node reservation is read alike whether admission wrote it or a person did:
// spaces, numbers, any member order; of a node named twice the last counts (as in JSON); a
// quantity that does not parse reserves nothing on its node; text that is no object, nothing.
TEST(AdmissionViewTest, AReservationWrittenByHandReservesWhatAdmissionsOwnWouldReserve) {
  const std::vector<std::pair<std::string, std::string>> annotations = {
      {"canonical", R"({"n1":{"nvidia.com/gpu":"2","pods":"1"}})"},
      {"by-hand", R"( { "n2" : { "pods" : 1, "nvidia.com/gpu" : "2" } } )"},
      {"twice", R"({"n3":{"nvidia.com/gpu":"1"},"n3":{"nvidia.com/gpu":"2","pods":"1"}})"},
      {"bad", R"({"n4":{"nvidia.com/gpu":"2","pods":"1"},"n5":{"nvidia.com/gpu":"many"}})"},
      {"no-object", R"(["n5"])"}};
  std::vector<json> groups;
  for (const auto& [name, text] : annotations) {
    json g = group(name, "q", {{"nvidia.com/gpu", "2"}}, "2024-05-01T10:00:00Z", "Inqueue", 1);
    g["metadata"]["annotations"] = {{"trainctl.io/node-reservations", text},
                                    {"trainctl.io/admitted-at", api::format_timestamp(kNow)}};
    groups.push_back(std::move(g));
  }
  AdmissionView view;
  controller::admit(
      {.pod_groups = groups,
       .queues = {queue("q", json::object())},
       .nodes = {node("n1", 8), node("n2", 8), node("n3", 8), node("n4", 8), node("n5", 8)},
       .now = kNow},
      {}, &view);
  ASSERT_EQ(view.nodes.size(), 5);
  const api::ResourceList two_gpus_one_pod = {{"nvidia.com/gpu", 2000}, {"pods", 1000}};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(view.nodes[i].reserved, two_gpus_one_pod) << view.nodes[i].name;
  EXPECT_THAT(view.nodes[4].reserved, IsEmpty());
}

// What `trainctl top` and the metrics show: per node bound pods' requests, reservations of
// admitted gangs (less what their bound pods use) and whose they are; per queue its deserved
// share, what it holds, and its pending gangs in order with why each waits. The controller asks
// for the queues alone.
TEST(AdmissionViewTest,
     NodesShowRequestsReservationsAndJobsQueuesShowSharesAndHeadsTheQueuesAloneOnRequest) {
  json running =
      group("running", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T08:00:00Z", "Running", 1);
  // Admitted on node-2 (3 GPUs, 2 pods), one of its pods bound there already.
  json admitted =
      group("admitted", "team-a", {{"nvidia.com/gpu", "3"}}, "2024-05-01T09:00:00Z", "Inqueue", 2);
  admitted["metadata"]["annotations"] = {
      {"trainctl.io/node-reservations",
       json({{"node-2", {{"nvidia.com/gpu", "3"}, {"pods", "2"}}}}).dump()},
      {"trainctl.io/admitted-at", "2024-05-01T11:59:00Z"}};
  const std::vector<json> pods = {pod("running-0", "running", "node-1", "Running", 2),
                                  pod("admitted-0", "admitted", "node-2", "Running", 1)};
  const json big = group("big", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:00:00Z", "", 1);
  const json later =
      group("later", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:30:00Z", "", 1);
  json qb = queue("team-b", {{"nvidia.com/gpu", "4"}});
  qb["spec"]["weight"] = 3;
  qb["spec"]["reclaimable"] = false;
  const AdmissionInput input{
      .pod_groups = {running, admitted, big, later},
      .queues = {queue("team-a", json::object()), qb},
      .nodes = {node("node-1", 4), node("node-2", 4), node("node-3", 4, false)},
      .pods = pods,
      .now = kNow};
  AdmissionView view;
  controller::admit(input, {}, &view);

  ASSERT_EQ(view.nodes.size(), 3u);
  const NodeUsage& n1 = view.nodes[0];
  EXPECT_EQ(n1.name, "node-1");
  EXPECT_TRUE(n1.schedulable);
  EXPECT_EQ(api::amount(n1.allocatable, "nvidia.com/gpu"), 4000);
  EXPECT_EQ(api::amount(n1.requested, "nvidia.com/gpu"), 2000);
  EXPECT_EQ(api::amount(n1.requested, "pods"), 1000);
  EXPECT_THAT(n1.reserved, IsEmpty());
  EXPECT_THAT(n1.jobs, ElementsAre("team-a/running"));
  const NodeUsage& n2 = view.nodes[1];
  EXPECT_EQ(api::amount(n2.requested, "nvidia.com/gpu"), 1000);
  // 3 reserved, 1 used by its bound pod: 2 still held for the pod to come, and one pod slot.
  EXPECT_EQ(api::amount(n2.reserved, "nvidia.com/gpu"), 2000);
  EXPECT_EQ(api::amount(n2.reserved, "pods"), 1000);
  EXPECT_THAT(n2.jobs, ElementsAre("team-a/admitted"));
  EXPECT_FALSE(view.nodes[2].schedulable);  // not Ready

  ASSERT_EQ(view.queues.size(), 2u);
  const QueueUsage& a = view.queues[0];
  EXPECT_EQ(a.name, "team-a");
  EXPECT_EQ(a.state, "Open");
  EXPECT_EQ(a.allocated, gpus(5));  // running 2 + admitted 3
  // 8 schedulable GPUs, team-b asks for nothing: team-a deserves all it asks, capped by them.
  EXPECT_EQ(api::amount(a.deserved, "nvidia.com/gpu"), 8000);
  EXPECT_EQ(a.gangs.at("Running"), 1);
  EXPECT_EQ(a.gangs.at("Inqueue"), 1);
  EXPECT_EQ(a.gangs.at("Pending"), 2);
  ASSERT_EQ(a.pending.size(), 2u);
  EXPECT_EQ(a.pending[0].key, "team-a/big");  // the head of line
  EXPECT_EQ(a.pending[0].reason, "NotEnoughResources");
  EXPECT_EQ(a.pending[0].why, "cluster: nvidia.com/gpu 8 requested, 3 free of 8");
  EXPECT_EQ(a.pending[1].key, "team-a/later");
  const QueueUsage& b = view.queues[1];
  EXPECT_EQ(b.weight, 3);
  EXPECT_FALSE(b.reclaimable);
  EXPECT_EQ(b.capability, gpus(4));
  EXPECT_THAT(b.pending, IsEmpty());
  EXPECT_EQ(view.schedule_timeouts, 0);

  // The controller's view (its metrics read the queues only): no nodes, the same queues.
  AdmissionView queues_only{.with_nodes = false};
  controller::admit(input, {}, &queues_only);
  EXPECT_THAT(queues_only.nodes, IsEmpty());
  ASSERT_EQ(queues_only.queues.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const QueueUsage& full = view.queues[i];
    const QueueUsage& only = queues_only.queues[i];
    EXPECT_EQ(only.name, full.name);
    EXPECT_EQ(only.allocated, full.allocated);
    EXPECT_EQ(only.deserved, full.deserved);
    EXPECT_EQ(only.gangs, full.gangs);
    ASSERT_EQ(only.pending.size(), full.pending.size());
    for (std::size_t p = 0; p < only.pending.size(); ++p)
      EXPECT_EQ(only.pending[p].why, full.pending[p].why);
  }
  // Without the pending gangs (the controller's: its metrics count them by phase): the same
  // figures and counts, no list.
  AdmissionView counts_only{.with_nodes = false, .with_pending = false};
  controller::admit(input, {}, &counts_only);
  ASSERT_EQ(counts_only.queues.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(counts_only.queues[i].allocated, view.queues[i].allocated);
    EXPECT_EQ(counts_only.queues[i].deserved, view.queues[i].deserved);
    EXPECT_EQ(counts_only.queues[i].gangs, view.queues[i].gangs);
    EXPECT_THAT(counts_only.queues[i].pending, IsEmpty());
  }
}

// The view shows every node's allocatable as the node writes it (no default pod count), whether
// or not admission may place pods there; an unreadable one shows nothing. Asking for the view
// changes nothing the round decides.
TEST(AdmissionViewTest, NodesShowAllocatableAsWrittenSchedulableOrNot) {
  json cordoned = node("cordoned", 4);
  cordoned["spec"]["unschedulable"] = true;
  json unreadable = node("unreadable", 4);
  unreadable["status"]["allocatable"]["cpu"] = "lots";
  json with_pods = node("with-pods", 4);
  with_pods["status"]["allocatable"]["pods"] = "3";
  const AdmissionInput input{
      .pod_groups = {group("a", "team-a", {{"nvidia.com/gpu", "6"}}, "2024-05-01T10:00:00Z", "", 2),
                     group("b", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:01:00Z", "",
                           1)},
      .queues = {queue("team-a", json::object())},
      .nodes = {node("ready", 4), node("not-ready", 4, false), cordoned, unreadable, with_pods},
      .now = kNow};
  AdmissionView view;
  const AdmissionResult with_view = controller::admit(input, {}, &view);
  const AdmissionResult without = controller::admit(input);

  ASSERT_EQ(view.nodes.size(), 5u);
  std::map<std::string, const NodeUsage*> by_name;
  for (const auto& n : view.nodes)
    by_name[n.name] = &n;
  EXPECT_TRUE(by_name.at("ready")->schedulable);
  EXPECT_EQ(by_name.at("ready")->allocatable,
            api::ResourceList({{"cpu", 32000},
                               {"memory", 256LL * 1024 * 1024 * 1024 * 1000},
                               {"nvidia.com/gpu", 4000}}));
  EXPECT_FALSE(by_name.at("not-ready")->schedulable);
  EXPECT_EQ(api::amount(by_name.at("not-ready")->allocatable, "nvidia.com/gpu"), 4000);
  EXPECT_FALSE(by_name.at("cordoned")->schedulable);
  EXPECT_EQ(api::amount(by_name.at("cordoned")->allocatable, "nvidia.com/gpu"), 4000);
  EXPECT_FALSE(by_name.at("unreadable")->schedulable);
  EXPECT_THAT(by_name.at("unreadable")->allocatable, IsEmpty());
  EXPECT_TRUE(by_name.at("with-pods")->schedulable);
  EXPECT_EQ(api::amount(by_name.at("with-pods")->allocatable, "pods"), 3000);
  // a's two pods of 3 GPUs: one on ready, one on with-pods; b waits.
  EXPECT_EQ(api::amount(by_name.at("ready")->reserved, "nvidia.com/gpu"), 3000);
  EXPECT_EQ(api::amount(by_name.at("with-pods")->reserved, "nvidia.com/gpu"), 3000);

  ASSERT_EQ(with_view.actions.size(), without.actions.size());
  for (std::size_t i = 0; i < without.actions.size(); ++i)
    EXPECT_EQ(written(with_view.actions[i]), written(without.actions[i])) << i;
  EXPECT_EQ(with_view.events, without.events);
}

}  // namespace
}  // namespace trainctl::controller

namespace trainctl::controller {
namespace {

const std::vector<json> kPriorities = {priority_class("low", 10), priority_class("high", 1000)};

/// One round with Preemption::WithinQueue, or without when `preempt` is false.
AdmissionResult admit_preempting(std::vector<json> groups, std::vector<json> queues,
                                 std::vector<json> nodes, std::vector<json> pods,
                                 bool preempt = true) {
  return controller::admit({.pod_groups = std::move(groups),
                            .queues = std::move(queues),
                            .nodes = std::move(nodes),
                            .pods = std::move(pods),
                            .priority_classes = kPriorities,
                            .now = kNow},
                           {.preemption = preempt ? Preemption::WithinQueue : Preemption::Never});
}

/// The PodGroups `result` evicts (sets Pending with reason Preempted).
std::vector<std::string> evicted(const AdmissionResult& result) {
  std::vector<std::string> names;
  for (const auto& a : result.actions)
    if (a.resource.plural == "podgroups" && phase_of(written(a)) == "Pending" &&
        unschedulable(written(a))["reason"] == "Preempted")
      names.push_back(a.name);
  return names;
}

std::vector<std::string> deleted_pods(const AdmissionResult& result) {
  std::vector<std::string> names;
  for (const auto& a : result.actions)
    if (a.type == Action::Type::Delete && a.resource.plural == "pods")
      names.push_back(a.name);
  return names;
}

/// `low` runs two 2-GPU pods on the one 4-GPU node; `urgent` (priority high) needs 4 GPUs.
struct PreemptionCase {
  json low = with_priority(
      group("low", "team-a", {{"nvidia.com/gpu", "4"}}, "2024-05-01T09:00:00Z", "Running", 2),
      "low");
  json urgent = with_priority(
      group("urgent", "team-a", {{"nvidia.com/gpu", "4"}}, "2024-05-01T11:00:00Z", "", 1), "high");
  std::vector<json> pods = {pod("low-0", "low", "node-1", "Running", 2),
                            pod("low-1", "low", "node-1", "Running", 2)};
};

// Opt-in: a pending gang of higher priority evicts a whole lower-priority gang of its queue;
// the eviction is an Event on both and the reason on the victim's condition.
TEST(PreemptionTest, AHigherPriorityGangEvictsAWholeLowerPriorityGangOfItsQueue) {
  const PreemptionCase c;
  const std::vector<json> queues = {queue("team-a", json::object())};
  const AdmissionResult off =
      admit_preempting({c.low, c.urgent}, queues, {node("node-1", 4)}, c.pods, false);
  EXPECT_THAT(evicted(off), IsEmpty());
  EXPECT_EQ(phase_of(written_group(off, "urgent")), "Pending");

  const AdmissionResult on =
      admit_preempting({c.low, c.urgent}, queues, {node("node-1", 4)}, c.pods);
  EXPECT_THAT(evicted(on), ElementsAre("low"));
  // Its pods go once the caches show it Pending (the next round), every one of them.
  EXPECT_THAT(deleted_pods(on), IsEmpty());
  const json low = after(on, c.low);
  const json urgent = after(on, c.urgent);
  const AdmissionResult next = admit_preempting({low, urgent}, queues, {node("node-1", 4)}, c.pods);
  EXPECT_THAT(deleted_pods(next), ElementsAre("low-0", "low-1"));
  // Not admitted again with the pods it still has.
  EXPECT_EQ(phase_of(after(next, low)), "Pending");
  EXPECT_EQ(unschedulable(after(next, low))["message"],
            "preempted by team-a/urgent (priority 1000 over 10); now: its pods are being deleted");
  EXPECT_EQ(phase_of(low), "Pending");
  EXPECT_EQ(unschedulable(low)["reason"], "Preempted");
  EXPECT_EQ(unschedulable(low)["message"],
            "preempted by team-a/urgent (priority 1000 over 10): the whole gang was evicted");
  EXPECT_FALSE(low["metadata"]
                   .value("annotations", json::object())
                   .contains("trainctl.io/node-reservations"));
  EXPECT_EQ(phase_of(written_group(on, "urgent")), "Inqueue");
  std::vector<std::string> events;
  for (const auto& e : on.events)
    events.push_back(fmt::format("{} {} {}", e.type, e.reason, e.involved_object.name));
  EXPECT_THAT(events,
              ::testing::IsSupersetOf({"Warning Preempted low", "Normal Preempting urgent"}));

  // While it waits again its condition keeps the reason, and says what it waits for now.
  const json urgent_pod = pod("urgent-0", "urgent", "node-1", "Running", 4);
  const AdmissionResult later =
      admit_preempting({low, urgent}, queues, {node("node-1", 4)}, {urgent_pod});
  EXPECT_EQ(unschedulable(after(later, low))["reason"], "Preempted");
  EXPECT_THAT(unschedulable(after(later, low))["message"].get<std::string>(),
              ::testing::StartsWith("preempted by team-a/urgent (priority 1000 over 10); now: "));
}

// An evicted gang's pods are deleted once: those the caches show being deleted (their grace
// period running) are not asked again by the rounds after.
TEST(PreemptionTest, PodsOfAnEvictedGangAlreadyBeingDeletedAreNotDeletedAgain) {
  const PreemptionCase c;
  const std::vector<json> queues = {queue("team-a", json::object())};
  const AdmissionResult on =
      admit_preempting({c.low, c.urgent}, queues, {node("node-1", 4)}, c.pods);
  std::vector<json> pods = c.pods;
  pods[0]["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:30Z";
  const AdmissionResult next =
      admit_preempting({after(on, c.low), after(on, c.urgent)}, queues, {node("node-1", 4)}, pods);
  EXPECT_THAT(deleted_pods(next), ElementsAre("low-1"));
}

// Only as many gangs as needed go, newest of the lowest priority first; equal priority evicts
// nobody.
TEST(PreemptionTest, EvictsTheFewestNewestLowestPriorityGangsAndNeverAnEqual) {
  json older = with_priority(
      group("older", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T08:00:00Z", "Running", 1),
      "low");
  json newer = with_priority(
      group("newer", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T09:00:00Z", "Running", 1),
      "low");
  const std::vector<json> pods = {pod("older-0", "older", "node-1", "Running", 2),
                                  pod("newer-0", "newer", "node-1", "Running", 2)};
  const json urgent = with_priority(
      group("urgent", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T11:00:00Z", "", 1), "high");
  const std::vector<json> queues = {queue("team-a", json::object())};
  const AdmissionResult result =
      admit_preempting({older, newer, urgent}, queues, {node("node-1", 4)}, pods);
  EXPECT_THAT(evicted(result), ElementsAre("newer"));
  EXPECT_EQ(phase_of(written_group(result, "urgent")), "Inqueue");
  EXPECT_EQ(phase_of(after(result, older)), "Running");  // spared

  const json peer = with_priority(
      group("peer", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T11:00:00Z", "", 1), "low");
  const AdmissionResult equal =
      admit_preempting({older, newer, peer}, queues, {node("node-1", 4)}, pods);
  EXPECT_THAT(evicted(equal), IsEmpty());
  EXPECT_EQ(phase_of(written_group(equal, "peer")), "Pending");
}

// Its queue's capability counts too: evicting a lower-priority gang of the queue frees quota.
TEST(PreemptionTest, EvictionFreesTheQueuesCapability) {
  const PreemptionCase c;
  const AdmissionResult result =
      admit_preempting({c.low, c.urgent}, {queue("team-a", {{"nvidia.com/gpu", "4"}})},
                       {node("node-1", 4), node("node-2", 4)}, c.pods);
  EXPECT_THAT(evicted(result), ElementsAre("low"));
  EXPECT_EQ(phase_of(written_group(result, "urgent")), "Inqueue");
}

// Across queues only from a reclaimable queue over its deserved share.
TEST(PreemptionTest, AnotherQueuesGangGoesOnlyWhenThatQueueIsOverItsShareAndReclaimable) {
  PreemptionCase c;
  c.low["spec"]["queue"] = "team-b";
  const std::vector<json> nodes = {node("node-1", 4)};
  // 4 GPUs, both queues ask for 4 at weight 1: each deserves 2, team-b holds 4.
  json team_b = queue("team-b", json::object());
  const AdmissionResult over =
      admit_preempting({c.low, c.urgent}, {queue("team-a", json::object()), team_b}, nodes, c.pods);
  EXPECT_THAT(evicted(over), ElementsAre("low"));
  EXPECT_EQ(phase_of(written_group(over, "urgent")), "Inqueue");

  team_b["spec"]["reclaimable"] = false;
  const AdmissionResult kept =
      admit_preempting({c.low, c.urgent}, {queue("team-a", json::object()), team_b}, nodes, c.pods);
  EXPECT_THAT(evicted(kept), IsEmpty());
  EXPECT_EQ(phase_of(written_group(kept, "urgent")), "Pending");

  // 8 GPUs: team-a holds 4 (a gang as urgent as the new one) and asks 4 more, team-b holds 4:
  // each deserves 4, so team-b is within its share and keeps its gang.
  const json mine = with_priority(
      group("mine", "team-a", {{"nvidia.com/gpu", "4"}}, "2024-05-01T07:00:00Z", "Running", 1),
      "high");
  std::vector<json> pods = c.pods;
  pods.push_back(pod("mine-0", "mine", "node-2", "Running", 4));
  const AdmissionResult within = admit_preempting(
      {mine, c.low, c.urgent}, {queue("team-a", json::object()), queue("team-b", json::object())},
      {node("node-1", 4), node("node-2", 4)}, pods);
  EXPECT_THAT(evicted(within), IsEmpty());
}

}  // namespace
}  // namespace trainctl::controller

namespace trainctl::controller {
namespace {

// Fair share over time: queues of weight 3 and 1 under contention get admitted GPU-time within
// 10 % of 3:1, over many small gangs of random length, although every gang of the weight-1 queue
// is younger than every gang of the other (oldest-first alone would starve it). Simulated: each
// pass's admissions get their pod bound at once on the reserved node; a pod runs its gang's
// length in seconds, one pass per second.
TEST(FairShareTest, WeightsThreeToOneGiveThreeToOneGpuTimeUnderContention) {
  constexpr int kGangsPerQueue = 100;
  json heavy = queue("heavy", json::object());
  heavy["spec"]["weight"] = 3;
  const std::vector<json> queues = {heavy, queue("light", json::object())};
  const std::vector<json> nodes = gpu_nodes(2, 8);
  std::map<std::string, json> groups;
  std::map<std::string, int> length;  // seconds
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> seconds(3, 12);
  for (const char* q : {"heavy", "light"}) {
    for (int i = 0; i < kGangsPerQueue; ++i) {
      const std::string name = fmt::format("{}-{:03}", q, i);
      groups[name] = group(name, q, {{"nvidia.com/gpu", "1"}},
                           fmt::format("2024-05-01T{}:{:02}:{:02}Z",
                                       q == std::string("heavy") ? 10 : 11, i / 60, i % 60),
                           "", 1);
      length[name] = seconds(rng);
    }
  }
  std::map<std::string, json> pods;           // by gang
  std::map<std::string, int> ends;            // gang -> second its pod finishes
  std::map<std::string, double> gpu_seconds;  // by queue, while both queues wait
  for (int t = 0; t < 2000; ++t) {
    const auto now = kNow + std::chrono::seconds(t);
    for (auto& [name, end] : ends)
      if (end == t)
        pods[name]["status"]["phase"] = "Succeeded";
    std::vector<json> group_list, pod_list;
    for (const auto& [name, g] : groups)
      group_list.push_back(g);
    for (const auto& [name, p] : pods)
      pod_list.push_back(p);
    const AdmissionResult result = admit(group_list, queues, nodes, pod_list, {}, now);
    for (const auto& a : result.actions) {
      if (a.resource.plural != "podgroups")
        continue;
      const json patch = written(a);
      groups[a.name].merge_patch(patch);
      if (phase_of(patch) != "Inqueue" || pods.contains(a.name))
        continue;
      const json reserved = json::parse(
          patch["metadata"]["annotations"]["trainctl.io/node-reservations"].get<std::string>());
      pods[a.name] = pod(a.name + "-0", a.name, reserved.begin().key(), "Running", 1);
      ends[a.name] = t + length[a.name];
    }
    std::map<std::string, int> waiting;
    for (const auto& [name, g] : groups)
      waiting[g["spec"]["queue"]] +=
          g.value("status", json::object()).value("phase", "Pending") == "Pending";
    if (waiting["heavy"] == 0 || waiting["light"] == 0)
      break;  // contention is over
    for (const auto& [name, p] : pods)
      if (p["status"]["phase"] == "Running")
        gpu_seconds[groups[name]["spec"]["queue"]] += 1;
  }
  ASSERT_GT(gpu_seconds["light"], 0);
  const double ratio = gpu_seconds["heavy"] / gpu_seconds["light"];
  EXPECT_NEAR(ratio, 3.0, 0.3) << "ratio " << ratio << ": heavy " << gpu_seconds["heavy"]
                               << " GPU-s, light " << gpu_seconds["light"] << " GPU-s";
}

}  // namespace
}  // namespace trainctl::controller

namespace trainctl::controller {
namespace {

// ---- the admission cache ----

json versioned_node(const std::string& name, int gpus, int version, bool ready = true) {
  json n = node(name, gpus, ready);
  n["metadata"]["uid"] = "uid-" + name;
  n["metadata"]["resourceVersion"] = std::to_string(version);
  return n;
}

/// `object` as the server returns it after a write: a resourceVersion one higher.
json bumped(json object) {
  const std::string version = object["metadata"].value("resourceVersion", "0");
  object["metadata"]["resourceVersion"] = std::to_string(std::stoi(version) + 1);
  return object;
}

/// Everything a round decided, as text: actions (with their objects), events, requeue.
std::string decided(const AdmissionResult& result) {
  json out = json::array();
  for (const auto& a : result.actions)
    out.push_back(
        {static_cast<int>(a.type), a.resource.plural, a.namespace_, a.name, written(a), a.uid});
  for (const auto& e : result.events)
    out.push_back({e.type, e.reason, e.message, e.involved_object.api_version,
                   e.involved_object.kind, e.involved_object.namespace_, e.involved_object.name,
                   e.involved_object.uid});
  out.push_back(result.requeue_after ? result.requeue_after->count() : -1);
  return out.dump();
}

std::string shown(const AdmissionView& view) {
  json out = {{"timeouts", view.schedule_timeouts}, {"preemptions", view.preemptions}};
  for (const NodeUsage& n : view.nodes)
    out["nodes"].push_back({n.name, n.schedulable, n.allocatable, n.requested, n.reserved, n.jobs});
  for (const QueueUsage& q : view.queues) {
    json pending = json::array();
    for (const PendingGang& g : q.pending)
      pending.push_back({g.key, g.priority, g.reason, g.why});
    out["queues"].push_back({q.name, q.state, q.weight, q.reclaimable, q.capability, q.deserved,
                             q.allocated, q.gangs, pending});
  }
  return out.dump();
}

TEST(AdmissionCacheTest, AnObjectIsReadOncePerResourceVersion) {
  const std::vector<json> queues = {queue("team-a", json::object())};
  std::vector<json> nodes = {versioned_node("n1", 8, 1), versioned_node("n2", 8, 1)};
  std::vector<json> groups = {group("a", "team-a", {{"nvidia.com/gpu", "8"}}),
                              group("b", "team-a", {{"nvidia.com/gpu", "8"}})};
  AdmissionCache cache;
  const auto pass = [&] {
    return admit({.pod_groups = groups, .queues = queues, .nodes = nodes, .now = kNow}, {}, nullptr,
                 &cache);
  };
  const AdmissionResult first = pass();
  EXPECT_EQ(cache.stats().read, 4);
  EXPECT_EQ(cache.stats().pod_groups, 2);
  EXPECT_EQ(cache.stats().nodes, 2);
  EXPECT_EQ(phase_of(written_group(first, "b")), "Inqueue");

  // The same objects again: nothing read, the node list's capacity reused.
  pass();
  EXPECT_EQ(cache.stats().read, 0);
  EXPECT_TRUE(cache.stats().node_list_reused);

  // b grows under a new resourceVersion: read again, and decided as it now is.
  groups[1]["spec"]["minResources"]["nvidia.com/gpu"] = "16";
  groups[1] = bumped(groups[1]);
  const AdmissionResult grown = pass();
  EXPECT_EQ(cache.stats().read, 1);
  EXPECT_THAT(unschedulable(written_group(grown, "b"))["message"].get<std::string>(),
              HasSubstr("nvidia.com/gpu 16 requested"));

  // A node that is no longer Ready, under a new resourceVersion: read again, nothing goes there.
  nodes[1] = bumped(versioned_node("n2", 8, 1, false));
  groups[1]["spec"]["minResources"]["nvidia.com/gpu"] = "8";
  groups[1] = bumped(groups[1]);
  const AdmissionResult cordoned = pass();
  EXPECT_EQ(cache.stats().read, 2);
  EXPECT_FALSE(cache.stats().node_list_reused);
  EXPECT_EQ(phase_of(written_group(cordoned, "a")), "Inqueue");
  EXPECT_EQ(phase_of(written_group(cordoned, "b")), "Pending");
}

// A pod that finishes is read again under its new resourceVersion: its gang completes.
TEST(AdmissionCacheTest, APodsNewVersionIsReadAgain) {
  const std::vector<json> queues = {queue("team-a", json::object())};
  const std::vector<json> nodes = {versioned_node("n1", 8, 1)};
  const std::vector<json> groups = {
      group("a", "team-a", {{"nvidia.com/gpu", "2"}}, "2024-05-01T11:00:00Z", "Running", 1)};
  json p = pod("a-0", "a", "n1", "Running", 2);
  p["metadata"]["uid"] = "uid-a-0";
  p["metadata"]["resourceVersion"] = "1";
  AdmissionCache cache;
  const auto pass = [&] {
    return admit({.pod_groups = groups, .queues = queues, .nodes = nodes, .pods = {p}, .now = kNow},
                 {}, nullptr, &cache);
  };
  EXPECT_EQ(written_group(pass(), "a")["status"]["running"], 1);
  EXPECT_EQ(cache.stats().pods, 1);
  pass();
  EXPECT_EQ(cache.stats().read, 0);
  p["status"]["phase"] = "Succeeded";
  p = bumped(p);
  EXPECT_EQ(phase_of(written_group(pass(), "a")), "Completed");
  EXPECT_EQ(cache.stats().read, 1);
}

// A node's status heartbeat gives it a new resourceVersion and changes nothing admission reads:
// read again, but the node list's capacity is kept. A new label is a change.
TEST(AdmissionCacheTest, ANodeReadAlikeUnderANewVersionKeepsTheNodeListsCapacity) {
  const std::vector<json> queues = {queue("team-a", json::object())};
  const std::vector<json> groups = {group("a", "team-a", {{"nvidia.com/gpu", "8"}})};
  std::vector<json> nodes = {versioned_node("n1", 8, 1), versioned_node("n2", 8, 1)};
  AdmissionCache cache;
  const auto pass = [&] {
    return admit({.pod_groups = groups, .queues = queues, .nodes = nodes, .now = kNow}, {}, nullptr,
                 &cache);
  };
  pass();
  nodes[1]["status"]["conditions"][0]["lastHeartbeatTime"] = "2024-05-01T11:59:00Z";
  nodes[1] = bumped(nodes[1]);
  pass();
  EXPECT_EQ(cache.stats().read, 1);
  EXPECT_TRUE(cache.stats().node_list_reused);
  nodes[1]["metadata"]["labels"]["pool"] = "h100";
  nodes[1] = bumped(nodes[1]);
  pass();
  EXPECT_EQ(cache.stats().read, 1);
  EXPECT_FALSE(cache.stats().node_list_reused);
}

// Each object's entry is tried where the last pass found it in the input first; objects listed
// in another order, or after one that is gone, are still found by uid and not read again.
TEST(AdmissionCacheTest, ObjectsListedInAnotherOrderAreFoundByUid) {
  std::vector<json> groups = {group("a", "team-a", {{"nvidia.com/gpu", "8"}}),
                              group("b", "team-a", {{"nvidia.com/gpu", "8"}}),
                              group("c", "team-a", {{"nvidia.com/gpu", "8"}})};
  std::vector<json> nodes = {versioned_node("n1", 8, 1), versioned_node("n2", 8, 1)};
  AdmissionCache cache;
  const auto pass = [&] {
    return admit({.pod_groups = groups,
                  .queues = {queue("team-a", json::object())},
                  .nodes = nodes,
                  .now = kNow},
                 {}, nullptr, &cache);
  };
  const AdmissionResult first = pass();
  EXPECT_EQ(cache.stats().read, 5);
  std::reverse(groups.begin(), groups.end());
  std::reverse(nodes.begin(), nodes.end());
  const AdmissionResult reversed = pass();
  EXPECT_EQ(cache.stats().read, 0);
  EXPECT_FALSE(cache.stats().node_list_reused);  // another order: indexed again
  EXPECT_EQ(cache.stats().found_by_place, 0u);
  groups.erase(groups.begin());  // c is gone: b and a move up a place
  const AdmissionResult shifted = pass();
  EXPECT_EQ(cache.stats().read, 0);
  EXPECT_EQ(cache.stats().pod_groups, 2);
  // b is looked up by uid; after it, a is where the last pass had it, and so are the nodes.
  EXPECT_EQ(cache.stats().found_by_place, 3u);
  // An object listed before the others (a PodGroup just created): those after it are found by
  // place, not by uid.
  groups.insert(groups.begin(), group("new", "team-a", {{"nvidia.com/gpu", "1"}}));
  pass();
  EXPECT_EQ(cache.stats().read, 1);
  EXPECT_EQ(cache.stats().found_by_place, 4u);  // b, a and both nodes
  for (const AdmissionResult* r : {&first, &reversed, &shifted}) {
    EXPECT_EQ(phase_of(written_group(*r, "a")), "Inqueue");
    EXPECT_EQ(phase_of(written_group(*r, "b")), "Inqueue");
  }
  EXPECT_EQ(phase_of(written_group(first, "c")), "Pending");
}

// A queue's order is kept between passes only while its gangs wait under the same keys: a
// PriorityClass raised between two passes reorders gangs whose objects did not change.
TEST(AdmissionCacheTest, AQueuesOrderIsMadeAgainWhenAGangsPriorityChanges) {
  const std::vector<json> groups = {
      group("old", "team-a", {{"nvidia.com/gpu", "4"}}, "2024-05-01T08:00:00Z", "", 1),
      with_priority(
          group("new", "team-a", {{"nvidia.com/gpu", "4"}}, "2024-05-01T09:00:00Z", "", 1),
          "urgent")};
  std::vector<json> classes = {priority_class("urgent", 0)};
  AdmissionCache cache;
  const auto pass = [&] {
    return admit({.pod_groups = groups,
                  .queues = {queue("team-a", json::object())},
                  .nodes = {versioned_node("n1", 4, 1)},
                  .priority_classes = classes,
                  .now = kNow},
                 {}, nullptr, &cache);
  };
  EXPECT_EQ(phase_of(written_group(pass(), "old")), "Inqueue");  // the same priority: oldest
  EXPECT_EQ(phase_of(written_group(pass(), "old")), "Inqueue");  // the order kept
  classes[0]["value"] = 1000;
  const AdmissionResult raised = pass();
  EXPECT_EQ(cache.stats().read, 0);  // no PodGroup changed
  EXPECT_EQ(phase_of(written_group(raised, "new")), "Inqueue");
  EXPECT_EQ(phase_of(written_group(raised, "old")), "Pending");
}

TEST(AdmissionCacheTest, ObjectsNoLongerListedAreDroppedAtTheEndOfThePass) {
  const std::vector<json> queues = {queue("team-a", json::object())};
  const json n1 = versioned_node("n1", 8, 1);
  const json n2 = versioned_node("n2", 8, 1);
  const json a = group("a", "team-a", {{"nvidia.com/gpu", "8"}});
  const json b = group("b", "team-a", {{"nvidia.com/gpu", "8"}});
  AdmissionCache cache;
  const auto pass = [&](std::vector<json> groups, std::vector<json> nodes) {
    admit(
        {.pod_groups = std::move(groups), .queues = queues, .nodes = std::move(nodes), .now = kNow},
        {}, nullptr, &cache);
  };
  pass({a, b}, {n1, n2});
  pass({a}, {n1});  // b and n2 deleted
  EXPECT_EQ(cache.stats().pod_groups, 1);
  EXPECT_EQ(cache.stats().nodes, 1);
  EXPECT_EQ(cache.stats().read, 0);
  EXPECT_FALSE(cache.stats().node_list_reused);
  pass({a, b}, {n1});  // b again, under the version it had: read afresh, it was dropped
  EXPECT_EQ(cache.stats().read, 1);
  EXPECT_EQ(cache.stats().pod_groups, 2);
}

// Objects without a uid or resourceVersion (made by hand, or by tests) are read on every pass.
TEST(AdmissionCacheTest, ObjectsWithoutUidOrVersionAreReadEveryPass) {
  const std::vector<json> queues = {queue("team-a", json::object())};
  json g = group("a", "team-a", {{"nvidia.com/gpu", "8"}});
  g["metadata"].erase("resourceVersion");
  AdmissionCache cache;
  const AdmissionInput input{
      .pod_groups = {g}, .queues = queues, .nodes = {node("n1", 8)}, .now = kNow};
  admit(input, {}, nullptr, &cache);
  admit(input, {}, nullptr, &cache);
  EXPECT_EQ(cache.stats().read, 2);
  EXPECT_EQ(cache.stats().pod_groups, 0);
  EXPECT_EQ(cache.stats().nodes, 0);
}

// has_node says which nodes the controller may list as their metadata alone: those read under
// that very version, by a cache that keeps what it reads.
TEST(AdmissionCacheTest, HasANodeReadUnderThatVersionOnly) {
  const std::vector<json> nodes = {versioned_node("n1", 8, 1), versioned_node("n2", 8, 3)};
  const auto pass = [&](AdmissionCache& cache) {
    admit({.pod_groups = {group("a", "team-a", {{"nvidia.com/gpu", "8"}})},
           .queues = {queue("team-a", json::object())},
           .nodes = nodes,
           .now = kNow},
          {}, nullptr, &cache);
  };
  AdmissionCache cache;
  EXPECT_FALSE(cache.has_node("uid-n1", "1"));
  pass(cache);
  EXPECT_TRUE(cache.has_node("uid-n1", "1"));
  EXPECT_TRUE(cache.has_node("uid-n2", "3"));
  EXPECT_FALSE(cache.has_node("uid-n1", "2"));
  EXPECT_FALSE(cache.has_node("uid-n3", "1"));
  EXPECT_FALSE(cache.has_node("uid-n1", ""));
  EXPECT_FALSE(cache.has_pod("uid-n1", "1"));  // nodes and pods apart
}

// A pod listed as its metadata alone (read before, unchanged) still gives a schedule timeout
// the scheduler's message and its uid to the delete that follows.
TEST(AdmissionCacheTest, PodsListedAsMetadataAloneStillExplainTimeoutsAndAreDeleted) {
  json g = group("slow", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T11:00:00Z", "", 2);
  const std::vector<json> queues = {queue("default", json::object())};
  const std::vector<json> nodes = gpu_nodes(2, 1);
  g = after(admit({g}, queues, nodes, {}, {}, kNow), g);
  json bound = pod("slow-0", "slow", "node-1", "Running", 1);
  json stuck = pod("slow-1", "slow", "", "Pending", 1);
  stuck["status"]["conditions"] = {
      {{"type", "PodScheduled"}, {"status", "False"}, {"message", "0/2 nodes are available."}}};
  for (json* p : {&bound, &stuck}) {
    (*p)["metadata"]["uid"] = "uid-" + (*p)["metadata"]["name"].get<std::string>();
    (*p)["metadata"]["resourceVersion"] = "4";
  }
  const std::vector<json> read = {bound, stuck};
  std::vector<json> listed;
  for (const json& p : read)
    listed.push_back({{"metadata",
                       {{"name", p["metadata"]["name"]},
                        {"namespace", p["metadata"]["namespace"]},
                        {"uid", p["metadata"]["uid"]},
                        {"resourceVersion", "4"}}}});
  AdmissionCache cache;
  const auto pass = [&](const json& group, const std::vector<json>& pods, int seconds) {
    return controller::admit({.pod_groups = {group},
                              .queues = queues,
                              .nodes = nodes,
                              .pods = pods,
                              .now = kNow + std::chrono::seconds(seconds)},
                             {}, nullptr, &cache);
  };
  pass(g, read, 299);
  ASSERT_TRUE(cache.has_pod("uid-slow-1", "4"));
  const json back = after(pass(g, listed, 300), g);
  EXPECT_EQ(unschedulable(back)["message"],
            "1 of 2 pods not bound within 300s: slow-1; scheduler: 0/2 nodes are available.; "
            "requeued, next try after 2024-05-01T12:06:00Z");
  std::vector<std::string> deleted;
  for (const auto& a : pass(bumped(back), listed, 301).actions)
    if (a.type == Action::Type::Delete)
      deleted.push_back(a.namespace_ + "/" + a.name + "/" + a.uid);
  EXPECT_THAT(deleted, ElementsAre("team-a/slow-0/uid-slow-0", "team-a/slow-1/uid-slow-1"));
}

/// The PodGroup of `job` as an informer holds it (uid, resourceVersion, creation time).
json cached_pod_group(const json& job) {
  json g = pod_group(job);
  g["metadata"]["uid"] = "uid-group";
  g["metadata"]["resourceVersion"] = "1";
  g["metadata"]["creationTimestamp"] = "2024-05-01T11:00:00Z";
  return g;
}

// A training job is read once per resourceVersion: the pass asks its lookup for the object only
// then, and decides as with the whole job every time: its pods' demands and its schedule timeout
// come from what was read.
TEST(AdmissionCacheTest, AJobIsReadOncePerVersionAndTheLookupAskedForItOnlyThen) {
  const json four_gpus = container("tensorflow", {{"limits", {{"nvidia.com/gpu", 4}}}});
  json job = tf_job_of({{"Chief", replica(1, {four_gpus})}, {"Worker", replica(2, {four_gpus})}},
                       {{"scheduleTimeoutSeconds", 50}});
  job["metadata"]["resourceVersion"] = "5";
  const json g = cached_pod_group(job);
  const std::vector<json> queues = {queue("default", json::object())};
  const std::vector<json> nodes = {versioned_node("n1", 8, 1), versioned_node("n2", 4, 1)};
  AdmissionCache cache;
  int whole = 0;  // lookups asked for the object
  const JobLookup lookup = [&](std::string_view, std::string_view, std::string_view,
                               const DecodeFilter& decode) -> std::optional<Versioned> {
    Versioned found = found_job(job, decode);
    whole += found.object.has_value();
    return found;
  };
  const JobLookup whole_job = [&](std::string_view, std::string_view, std::string_view,
                                  const DecodeFilter&) -> std::optional<Versioned> {
    return found_job(job, [](const auto&, const auto&) { return true; });
  };
  const auto pass = [&](const json& group, const JobLookup& jobs, AdmissionCache* with,
                        int seconds) {
    return controller::admit({.pod_groups = {group},
                              .queues = queues,
                              .nodes = nodes,
                              .job = jobs,
                              .now = kNow + std::chrono::seconds(seconds)},
                             {}, nullptr, with);
  };

  const AdmissionResult first = pass(g, lookup, &cache, 0);
  EXPECT_EQ(decided(first), decided(pass(g, whole_job, nullptr, 0)));
  EXPECT_EQ(phase_of(written_group(first, "mnist")), "Inqueue");  // 4 + 2 x 4 GPUs on n1, n2
  EXPECT_EQ(whole, 1);
  EXPECT_EQ(cache.stats().jobs, 1);

  // Its pods are not bound within the job's 50 s: taken back, the job read from the cache.
  const json admitted = bumped(after(first, g));
  const AdmissionResult timed_out = pass(admitted, lookup, &cache, 51);
  EXPECT_EQ(decided(timed_out), decided(pass(admitted, whole_job, nullptr, 51)));
  EXPECT_THAT(unschedulable(written_group(timed_out, "mnist"))["message"].get<std::string>(),
              HasSubstr("3 of 3 pods not bound within 50s"));
  EXPECT_EQ(whole, 1);

  // A new version of the job is read again: its workers now need 8 GPUs, which n2 has not.
  job["spec"]["tfReplicaSpecs"]["Worker"] =
      replica(2, {container("tensorflow", {{"limits", {{"nvidia.com/gpu", 8}}}})});
  job["metadata"]["resourceVersion"] = "6";
  const AdmissionResult changed = pass(g, lookup, &cache, 0);
  EXPECT_EQ(decided(changed), decided(pass(g, whole_job, nullptr, 0)));
  EXPECT_EQ(phase_of(written_group(changed, "mnist")), "Pending");
  EXPECT_EQ(whole, 2);
}

// While the job caches stay as they were (the same AdmissionInput::jobs_version), a pass takes
// the last pass's job lookups for the PodGroups that have not changed; a new jobs_version, an
// empty one, a changed PodGroup or a pass skipped in between asks again, and a job gone is seen.
TEST(AdmissionCacheTest, JobsAreLookedUpAgainOnlyWhenTheJobCachesOrTheGroupChanged) {
  const json four_gpus = container("tensorflow", {{"limits", {{"nvidia.com/gpu", 4}}}});
  json job = tf_job_of({{"Worker", replica(2, {four_gpus})}}, json::object());
  job["metadata"]["resourceVersion"] = "5";
  const json g = cached_pod_group(job);
  const std::vector<json> queues = {queue("default", json::object())};
  const std::vector<json> nodes = {versioned_node("n1", 4, 1)};  // room for one worker only
  AdmissionCache cache;
  int lookups = 0;
  bool job_exists = true;
  const JobLookup lookup = [&](std::string_view, std::string_view, std::string_view,
                               const DecodeFilter& decode) -> std::optional<Versioned> {
    ++lookups;
    if (!job_exists)
      return std::nullopt;
    return found_job(job, decode);
  };
  // Whether a pass writes the PodGroup (the Queue's status it writes every time here).
  const auto writes_group = [](const AdmissionResult& result) {
    return std::any_of(result.actions.begin(), result.actions.end(),
                       [](const Action& a) { return a.resource.plural == "podgroups"; });
  };
  const auto pass = [&](const json& group, std::string jobs_version) {
    return controller::admit({.pod_groups = {group},
                              .queues = queues,
                              .nodes = nodes,
                              .job = lookup,
                              .jobs_version = std::move(jobs_version),
                              .now = kNow},
                             {}, nullptr, &cache);
  };

  const AdmissionResult first = pass(g, "jobs=7;");
  EXPECT_EQ(phase_of(written_group(first, "mnist")), "Pending");  // 2 x 4 GPUs, n1 has 4
  EXPECT_EQ(lookups, 1);
  const json waiting = bumped(after(first, g));
  EXPECT_FALSE(writes_group(pass(waiting, "jobs=7;")));  // a changed PodGroup: asked again
  EXPECT_EQ(lookups, 2);
  EXPECT_FALSE(writes_group(pass(waiting, "jobs=7;")));
  EXPECT_FALSE(writes_group(pass(waiting, "jobs=7;")));
  EXPECT_EQ(lookups, 2);             // nothing changed: the last answer stands
  EXPECT_EQ(cache.stats().jobs, 1);  // and the job's facts stay cached

  EXPECT_FALSE(writes_group(pass(waiting, "")));  // no version named: asked every pass
  EXPECT_EQ(lookups, 3);
  EXPECT_FALSE(writes_group(pass(waiting, "jobs=7;")));  // the pass before named none
  EXPECT_EQ(lookups, 4);

  // The job changes (one worker now): a new jobs_version, asked again, and the gang fits.
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1;
  job["metadata"]["resourceVersion"] = "6";
  EXPECT_FALSE(writes_group(pass(waiting, "jobs=7;")));  // the caches say nothing changed yet
  EXPECT_EQ(lookups, 4);
  const AdmissionResult changed = pass(waiting, "jobs=8;");
  EXPECT_EQ(lookups, 5);
  EXPECT_EQ(phase_of(written_group(changed, "mnist")), "Inqueue");

  // The job is deleted: the next jobs_version shows it, and its PodGroup gets no update.
  job_exists = false;
  const json admitted = bumped(after(changed, waiting));
  EXPECT_FALSE(writes_group(pass(admitted, "jobs=9;")));
  EXPECT_FALSE(writes_group(pass(admitted, "jobs=9;")));
  EXPECT_EQ(lookups, 6);
  EXPECT_EQ(cache.stats().jobs, 0);
}

// A PodGroup listed as its metadata alone is written without its object where the pass sets no
// condition or the group has none (a merge patch); where it has conditions and the pass sets one
// (the array is replaced whole), the object is fetched, and the group not written when what is
// fetched is another version than the one the pass decided by.
TEST(AdmissionCacheTest, APodGroupListedAsItsMetadataAloneIsWrittenFromTheSameVersionOnly) {
  const json g = group("a", "team-a", {{"nvidia.com/gpu", "8"}}, "2024-05-01T10:00:00Z", "", 1);
  const auto alone = [](const json& group) {
    return json{{"metadata",
                 {{"name", "a"},
                  {"namespace", "team-a"},
                  {"uid", group["metadata"]["uid"]},
                  {"resourceVersion", group["metadata"]["resourceVersion"]}}}};
  };
  const std::vector<json> queues = {queue("team-a", json::object())};
  AdmissionCache cache;
  json fetched;
  int fetches = 0;
  const auto pass = [&](const json& listed, std::vector<json> nodes) {
    return admit({.pod_groups = {listed},
                  .queues = queues,
                  .nodes = std::move(nodes),
                  .pod_group = [&](const std::string& key) -> std::optional<json> {
                    ++fetches;
                    EXPECT_EQ(key, "team-a/a");
                    return fetched;
                  },
                  .now = kNow},
                 {}, nullptr, &cache);
  };
  // Read by a pass, then listed alone: no node yet, it waits, its first condition written
  // without the object.
  pass(g, {});
  ASSERT_TRUE(cache.has_pod_group(g["metadata"]["uid"], g["metadata"]["resourceVersion"]));
  const AdmissionResult first = pass(alone(g), {});
  EXPECT_EQ(unschedulable(written_group(first, "a"))["status"], "True");
  EXPECT_EQ(fetches, 0);

  const json waiting = bumped(after(first, g));
  pass(waiting, {});  // read under its new version
  fetched = waiting;
  fetched["metadata"]["resourceVersion"] = "9";  // changed since it was listed
  EXPECT_TRUE(written_group(pass(alone(waiting), {node("n1", 8)}), "a").is_null());
  EXPECT_EQ(fetches, 1);
  fetched = waiting;
  const json admitted = written_group(pass(alone(waiting), {node("n1", 8)}), "a");
  EXPECT_EQ(phase_of(admitted), "Inqueue");
  EXPECT_EQ(unschedulable(admitted)["message"], "admitted to queue team-a");
  EXPECT_EQ(admitted["status"]["conditions"].size(), 1u);
  EXPECT_EQ(admitted["metadata"]["resourceVersion"], waiting["metadata"]["resourceVersion"]);
  EXPECT_FALSE(admitted.contains("spec"));
  EXPECT_EQ(fetches, 2);
}

// Objects read where the informers delivered them (observe_*, on their threads in the
// controller) are not read by the pass that takes them in: the job lookup is not asked for the
// object, nothing is decoded, and the pass decides as one that reads everything itself. What was
// observed counts only once taken (take_observed), a deleted object's facts are forgotten, and an
// object observed under another version than the one listed is read from the list.
TEST(AdmissionCacheTest, ObjectsObservedAsDeliveredAreNotReadByThePass) {
  const json two_gpus = container("tensorflow", {{"limits", {{"nvidia.com/gpu", 2}}}});
  json job = tf_job_of({{"Worker", replica(2, {two_gpus})}}, json::object());
  job["metadata"]["resourceVersion"] = "5";
  const json g = cached_pod_group(job);
  json running =
      group("r", "default", {{"nvidia.com/gpu", "2"}}, "2024-05-01T10:00:00Z", "Running", 1);
  json p = pod("r-0", "r", "n1", "Running", 2);
  p["metadata"]["uid"] = "uid-r-0";
  p["metadata"]["resourceVersion"] = "3";
  const std::vector<json> queues = {queue("default", json::object())};
  const std::vector<json> nodes = {versioned_node("n1", 4, 1), versioned_node("n2", 2, 1)};
  int whole = 0;  // lookups asked for the job itself
  const JobLookup lookup = [&](std::string_view, std::string_view, std::string_view,
                               const DecodeFilter& decode) -> std::optional<Versioned> {
    Versioned found = found_job(job, decode);
    whole += found.object.has_value();
    return found;
  };
  const AdmissionInput input{.pod_groups = {g, running},
                             .queues = queues,
                             .nodes = nodes,
                             .pods = {p},
                             .job = lookup,
                             .now = kNow};

  AdmissionCache cache;
  cache.observe_pod_group(g);
  cache.observe_pod_group(running);
  cache.observe_node(nodes[0]);
  cache.observe_node(nodes[1]);
  cache.observe_pod(p);
  cache.observe_job(job);
  EXPECT_FALSE(cache.has_pod_group("uid-group", "1"));  // not taken in yet
  cache.take_observed();
  EXPECT_TRUE(cache.has_pod_group("uid-group", "1"));
  EXPECT_TRUE(cache.has_node("uid-n2", "1"));
  EXPECT_TRUE(cache.has_pod("uid-r-0", "3"));
  const AdmissionResult observed = admit(input, {}, nullptr, &cache);
  EXPECT_EQ(cache.stats().read, 0);
  EXPECT_EQ(whole, 0);
  EXPECT_EQ(decided(observed), decided(admit(input, {}, nullptr)));
  // 2 x 2 GPUs: n1 has 2 free beside r-0, n2 has 2.
  EXPECT_EQ(phase_of(written_group(observed, "mnist")), "Inqueue");

  // Observed under a version the list does not show (and saying something else): the listed
  // object is read and decides; one deleted before a pass took it is forgotten.
  AdmissionCache other;
  json grown = g;
  grown["metadata"]["resourceVersion"] = "9";
  grown["spec"]["minMember"] = 4;
  other.observe_pod_group(grown);
  other.observe_job(job);
  json gone = versioned_node("n3", 8, 1);
  other.observe_node(gone);
  other.forget(gone);
  other.take_observed();
  EXPECT_FALSE(other.has_pod_group("uid-group", "1"));
  EXPECT_FALSE(other.has_node("uid-n3", "1"));
  const std::string uncached = decided(admit(input, {}, nullptr));
  whole = 0;
  EXPECT_EQ(decided(admit(input, {}, nullptr, &other)), uncached);
  EXPECT_EQ(other.stats().read, 5);  // both PodGroups, the nodes and the pod; not the job
  EXPECT_EQ(whole, 0);
  EXPECT_EQ(other.stats().nodes, 2);  // n3 was never taken in
}

// A property: on random clusters that change between passes (writes land under new
// resourceVersions; nodes fail, grow and go; gangs come, go, get pods; the informers deliver
// some objects before the pass, some under versions the list does not show), every pass with the
// cache decides and shows exactly what the same pass without it does, and so does a pass given
// its input to take apart (admit with an rvalue, as the controller calls it).
TEST(AdmissionCacheTest, PassesWithTheCacheDecideAsPassesWithoutOnRandomClusters) {
  std::mt19937 rng(11);
  int groups_listed_as_metadata = 0, nodes_listed_as_metadata = 0, pods_listed_as_metadata = 0;
  int job_lookups = 0, cached_pass_lookups = 0, observed = 0;
  const auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  for (int cluster = 0; cluster < 30; ++cluster) {
    AdmissionCache cache;
    AdmissionOptions options;
    if (cluster % 3 == 1)
      options.preemption = Preemption::WithinQueue;
    if (cluster % 3 == 2)
      options.order = AdmissionOrder::StrictFifo;
    std::vector<json> queues = {queue("q0", {{"nvidia.com/gpu", "24"}}),
                                queue("q1", json::object())};
    std::vector<json> nodes, groups, pods, classes = {priority_class("high", 1000)};
    int made = 0;
    // Half the gangs belong to a TFJob; the jobs change and go, and jobs_version names how
    // often they did (the controller: its job informers' resourceVersions).
    std::map<std::string, json> jobs;
    int jobs_changed = 0;
    const auto worker = [&](int replicas) {
      return replica(replicas,
                     {container("tensorflow", {{"limits", {{"nvidia.com/gpu", 1 + rng() % 4}}}})});
    };
    const JobLookup lookup = [&](std::string_view, std::string_view, std::string_view name,
                                 const DecodeFilter& decode) -> std::optional<Versioned> {
      ++job_lookups;
      const auto it = jobs.find(std::string(name));
      if (it == jobs.end())
        return std::nullopt;
      return found_job(it->second, decode);
    };
    const auto add_node = [&] {
      nodes.push_back(versioned_node(fmt::format("node-{}", made++), 1 + rng() % 8, 1));
    };
    const auto add_group = [&] {
      json g = group(fmt::format("g{}", made++), fmt::format("q{}", rng() % 2),
                     {{"nvidia.com/gpu", std::to_string(1 + rng() % 12)}},
                     fmt::format("2024-05-01T11:{:02}:00Z", rng() % 60), "", 1 + rng() % 4);
      if (chance(50)) {
        json job = tf_job_of({{"Worker", worker(g["spec"]["minMember"].get<int>())}});
        job["metadata"]["name"] = g["metadata"]["name"];
        job["metadata"]["uid"] = fmt::format("uid-job-{}", made++);
        job["metadata"]["resourceVersion"] = "1";
        g["metadata"]["ownerReferences"] = json::array({controller_reference(job)});
        jobs[g["metadata"]["name"]] = std::move(job);
        ++jobs_changed;
      }
      groups.push_back(chance(20) ? with_priority(g, "high") : g);
    };
    for (int i = 0, count = 2 + rng() % 5; i < count; ++i)
      add_node();
    for (int i = 0, count = 1 + rng() % 8; i < count; ++i)
      add_group();
    for (int pass = 0; pass < 8; ++pass) {
      const AdmissionInput input{.pod_groups = groups,
                                 .queues = queues,
                                 .nodes = nodes,
                                 .pods = pods,
                                 .priority_classes = classes,
                                 .job = lookup,
                                 .jobs_version = std::to_string(jobs_changed),
                                 .now = kNow + std::chrono::seconds(100 * pass)};
      // The informers' handlers read some objects as they deliver them; some were delivered
      // under a version the list no longer shows (with other contents), some deleted again.
      const auto observe = [&](const json& object, void (AdmissionCache::*read)(const json&)) {
        if (chance(30)) {
          (cache.*read)(object);
          ++observed;
        } else if (chance(5)) {
          json other = object;
          other["metadata"]["resourceVersion"] = fmt::format("other-{}", made++);
          other["metadata"]["labels"]["pool"] = "elsewhere";
          other["spec"]["minMember"] = 1 + rng() % 8;
          (cache.*read)(other);
          if (chance(50))
            cache.forget(other);
        }
      };
      for (const json& g : groups)
        observe(g, &AdmissionCache::observe_pod_group);
      for (const json& n : nodes)
        observe(n, &AdmissionCache::observe_node);
      for (const json& p : pods)
        observe(p, &AdmissionCache::observe_pod);
      for (const auto& [name, job] : jobs)
        observe(job, &AdmissionCache::observe_job);
      cache.take_observed();
      // As the controller lists them: PodGroups, nodes and pods the cache has read under their
      // version as their metadata alone, the PodGroups it writes fetched whole.
      AdmissionInput listed = input;
      const auto metadata_alone = [](json& object, int& count) {
        const json& meta = object["metadata"];
        json alone = {{"name", meta["name"]},
                      {"uid", meta["uid"]},
                      {"resourceVersion", meta["resourceVersion"]}};
        if (meta.contains("namespace"))
          alone["namespace"] = meta["namespace"];
        object = {{"metadata", std::move(alone)}};
        ++count;
      };
      for (json& g : listed.pod_groups)
        if (cache.has_pod_group(g["metadata"]["uid"], g["metadata"]["resourceVersion"]))
          metadata_alone(g, groups_listed_as_metadata);
      for (json& n : listed.nodes)
        if (cache.has_node(n["metadata"]["uid"], n["metadata"]["resourceVersion"]))
          metadata_alone(n, nodes_listed_as_metadata);
      for (json& p : listed.pods)
        if (cache.has_pod(p["metadata"]["uid"], p["metadata"]["resourceVersion"]))
          metadata_alone(p, pods_listed_as_metadata);
      listed.pod_group = [&](const std::string& key) -> std::optional<json> {
        for (const json& g : input.pod_groups)
          if (g["metadata"]["namespace"].get<std::string>() + "/" +
                  g["metadata"]["name"].get<std::string>() ==
              key)
            return g;
        return std::nullopt;
      };
      AdmissionView with_cache, without;
      const int lookups_before = job_lookups;
      const AdmissionResult cached = admit(listed, options, &with_cache, &cache);
      cached_pass_lookups += job_lookups - lookups_before;
      ASSERT_EQ(decided(cached), decided(admit(input, options, &without)))
          << "cluster " << cluster << ", pass " << pass;
      ASSERT_EQ(shown(with_cache), shown(without)) << "cluster " << cluster << ", pass " << pass;
      // What the server does with the writes, and what changes meanwhile.
      for (const auto& a : cached.actions) {
        auto& objects = a.resource.plural == "queues" ? queues : groups;
        for (json& o : objects) {
          if (o["metadata"]["name"] != a.name)
            continue;
          if (a.type == Action::Type::Patch)
            o.merge_patch(written(a));
          else
            o = a.object;
          o = bumped(o);
        }
        if (a.type == Action::Type::Delete)
          std::erase_if(pods, [&](const json& p) { return p["metadata"]["name"] == a.name; });
      }
      for (const json& g : groups) {
        const std::string name = g["metadata"]["name"];
        const std::string reservations = g["metadata"]
                                             .value("annotations", json::object())
                                             .value("trainctl.io/node-reservations", "");
        if (phase_of(g) != "Inqueue" || reservations.empty() || chance(30) ||
            std::any_of(pods.begin(), pods.end(), [&](const json& p) {
              return p["metadata"]["name"].get<std::string>().starts_with(name + "-");
            }))
          continue;
        const std::string on = json::parse(reservations).begin().key();
        for (int i = 0; i < g["spec"]["minMember"].get<int>(); ++i) {
          json p = pod(fmt::format("{}-{}", name, i), name, on, "Running", 1);
          p["metadata"]["uid"] = fmt::format("uid-{}-{}", name, i);
          p["metadata"]["resourceVersion"] = "1";
          pods.push_back(std::move(p));
        }
      }
      for (json& p : pods) {
        if (chance(10)) {
          p["status"]["phase"] = chance(50) ? "Succeeded" : "Failed";
          p = bumped(p);
        }
      }
      for (json& n : nodes)
        if (chance(15))
          n = bumped(versioned_node(n["metadata"]["name"], 1 + rng() % 8,
                                    std::stoi(n["metadata"]["resourceVersion"].get<std::string>()),
                                    !chance(25)));
      if (chance(20) && nodes.size() > 1)
        nodes.erase(nodes.begin() + rng() % nodes.size());
      if (chance(20))
        add_node();
      if (chance(20) && !groups.empty())
        groups.erase(groups.begin() + rng() % groups.size());
      for (auto it = jobs.begin(); it != jobs.end();) {
        if (chance(5)) {  // deleted: its PodGroup waits for the garbage collector
          it = jobs.erase(it);
          ++jobs_changed;
          continue;
        }
        if (chance(10)) {  // its workers' GPUs change
          json& job = it->second;
          job["spec"]["tfReplicaSpecs"]["Worker"] =
              worker(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"].get<int>());
          job = bumped(job);
          ++jobs_changed;
        }
        ++it;
      }
      if (chance(40))
        add_group();
    }
  }
  EXPECT_GT(groups_listed_as_metadata, 100);
  EXPECT_GT(nodes_listed_as_metadata, 100);
  EXPECT_GT(pods_listed_as_metadata, 50);
  EXPECT_GT(observed, 200);
  // The passes without a cache asked for every job every time; those with one, less often.
  EXPECT_GT(cached_pass_lookups, 0);
  EXPECT_LT(cached_pass_lookups, job_lookups - cached_pass_lookups);
}

}  // namespace
}  // namespace trainctl::controller
