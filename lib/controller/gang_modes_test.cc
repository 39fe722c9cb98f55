// The gang-scheduler modes: which PodGroup type a job gets, how its pods are decorated and when
// they may be created. Upstream: the Training Operator's common/job.go ReconcileJobs (pgSpecFill
// per scheduler), common/scheduling.go SyncPodGroup, control/podgroup_control.go (VolcanoControl,
// SchedulerPluginsControl: DecoratePodTemplateSpec, DelayPodCreationDueToPodGroup).
#include <gtest/gtest.h>

#include "controller/gang.h"
#include "controller/replica_pod.h"
#include "tests/support/plan_fixture.h"

namespace trainctl::controller {
namespace {

using namespace plan_testing;

json gang_job() {
  json job = pytorch_job({{"runPolicy",
                           {{"schedulingPolicy",
                             {{"minAvailable", 2},
                              {"queue", "team-a"},
                              {"priorityClass", "high"},
                              {"scheduleTimeoutSeconds", 120}}}}}});
  job["metadata"]["annotations"] = {{"trainctl.io/template", "pytorchjob"}};
  for (const char* type : {"Master", "Worker"}) {
    job["spec"]["pytorchReplicaSpecs"][type]["template"]["spec"]["containers"][0]["resources"] = {
        {"requests", {{"cpu", "2"}, {"nvidia.com/gpu", "1"}}}};
  }
  return job;
}

TEST(GangModesTest, SchedulerPluginsPodGroupHasMinMemberMinResourcesAndTimeoutOnly) {
  const json group = scheduler_plugins_pod_group(gang_job());
  EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["metadata"]["name"], "ddp");
  EXPECT_EQ(group["metadata"]["namespace"], "team");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], "uid-2");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["kind"], "PyTorchJob");
  EXPECT_EQ(group["metadata"]["annotations"]["trainctl.io/template"], "pytorchjob");
  // The type has no queue or priorityClassName: the Training Operator sets just these three.
  EXPECT_EQ(group["spec"], json({{"minMember", 2},
                                 {"minResources", {{"cpu", "4"}, {"nvidia.com/gpu", "2"}}},
                                 {"scheduleTimeoutSeconds", 120}}));

  json untimed = gang_job();
  untimed["spec"]["runPolicy"]["schedulingPolicy"].erase("scheduleTimeoutSeconds");
  EXPECT_FALSE(scheduler_plugins_pod_group(untimed)["spec"].contains("scheduleTimeoutSeconds"));
}

TEST(GangModesTest, VolcanoPodGroupCarriesTheJobsAnnotationsQueueAndPriority) {
  const json group = pod_group_for(gang_job(), GangScheduler::Volcano);
  EXPECT_EQ(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(group["metadata"]["annotations"]["trainctl.io/template"], "pytorchjob");
  EXPECT_EQ(group["spec"]["queue"], "team-a");
  EXPECT_EQ(group["spec"]["priorityClassName"], "high");
  EXPECT_FALSE(group["spec"].contains("scheduleTimeoutSeconds"));  // not in Volcano's type
  EXPECT_EQ(pod_group_for(pytorch_job(), GangScheduler::Builtin)["metadata"].count("annotations"),
            0u);
}

TEST(GangModesTest, EachModeHasItsPodGroupType) {
  EXPECT_EQ(pod_group_resource(GangScheduler::Builtin)->group, "scheduling.volcano.sh");
  EXPECT_EQ(pod_group_resource(GangScheduler::Volcano)->group, "scheduling.volcano.sh");
  EXPECT_EQ(pod_group_resource(GangScheduler::SchedulerPlugins)->group, "scheduling.x-k8s.io");
  EXPECT_EQ(pod_group_resource(GangScheduler::SchedulerPlugins)->version, "v1alpha1");
  EXPECT_FALSE(pod_group_resource(GangScheduler::None).has_value());
}

TEST(GangModesTest, PodsWaitForAnEnqueuedGroupOnlyWhereVolcanoOrTrainctlAdmits) {
  const json pending = {{"status", {{"phase", "Pending"}}}};
  const json unset = json::object();
  const json inqueue = {{"status", {{"phase", "Inqueue"}}}};
  for (const GangScheduler admitted : {GangScheduler::Builtin, GangScheduler::Volcano}) {
    EXPECT_FALSE(pods_may_start(admitted, nullptr));
    EXPECT_FALSE(pods_may_start(admitted, &unset));
    EXPECT_FALSE(pods_may_start(admitted, &pending));
    EXPECT_TRUE(pods_may_start(admitted, &inqueue));
  }
  EXPECT_TRUE(pods_may_start(GangScheduler::SchedulerPlugins, nullptr));
  EXPECT_TRUE(pods_may_start(GangScheduler::SchedulerPlugins, &pending));
  EXPECT_TRUE(pods_may_start(GangScheduler::None, nullptr));
}

TEST(GangModesTest, VolcanoModeCreatesNoPodBeforeVolcanoEnqueuesTheGroup) {
  PlanOptions o = options();
  o.gang_scheduler = GangScheduler::Volcano;
  FakeCluster cluster{.job = pytorch_job()};
  Plan plan = cluster.step(o);
  ASSERT_EQ(plan.actions.size(), 2u);  // the PodGroup and the job's Created status
  EXPECT_EQ(plan.actions[0].resource.group, "scheduling.volcano.sh");
  EXPECT_EQ(plan.actions[0].type, Action::Type::Create);
  EXPECT_EQ(plan.actions[1].type, Action::Type::UpdateStatus);
  EXPECT_TRUE(cluster.step(o).actions.empty());  // phase unset: trainctl never admits here
  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Pending"}}}});
  EXPECT_TRUE(cluster.step(o).actions.empty());

  cluster.observed.pod_group->merge_patch({{"status", {{"phase", "Inqueue"}}}});
  plan = cluster.step(o);
  EXPECT_EQ(names(plan, Action::Type::Create, "pods").size(), 3u);
  const json& worker = created(plan, "ddp-worker-1");
  EXPECT_EQ(worker["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(worker["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "ddp");
  EXPECT_EQ(worker["metadata"]["annotations"]["volcano.sh/task-spec"], "worker");
  EXPECT_FALSE(worker["metadata"]["labels"].contains("scheduling.x-k8s.io/pod-group"));
}

TEST(GangModesTest, SchedulerPluginsModeCreatesItsGroupAndLabelledPodsAtOnce) {
  PlanOptions o = options();
  o.gang_scheduler = GangScheduler::SchedulerPlugins;
  FakeCluster cluster{.job = pytorch_job()};
  const Plan plan = cluster.step(o);
  ASSERT_EQ(names(plan, Action::Type::Create, "podgroups"), std::vector<std::string>{"ddp"});
  EXPECT_EQ(plan.actions[0].resource.group, "scheduling.x-k8s.io");
  EXPECT_EQ(plan.actions[0].object["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(names(plan, Action::Type::Create, "pods").size(), 3u);
  const json& master = created(plan, "ddp-master-0");
  EXPECT_EQ(master["spec"]["schedulerName"], "scheduler-plugins-scheduler");
  EXPECT_EQ(master["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "ddp");
  // Volcano's annotations are Volcano's: SchedulerPluginsControl sets none.
  EXPECT_FALSE(master["metadata"].contains("annotations") &&
               master["metadata"]["annotations"].contains("scheduling.k8s.io/group-name"));

  // Suspending deletes the group of scheduler-plugins' type.
  cluster.job["spec"]["runPolicy"]["suspend"] = true;
  const Plan suspended = cluster.step(o);
  const auto deleted =
      std::find_if(suspended.actions.begin(), suspended.actions.end(), [](const Action& a) {
        return a.type == Action::Type::Delete && a.resource.plural == "podgroups";
      });
  ASSERT_NE(deleted, suspended.actions.end());
  EXPECT_EQ(deleted->resource.group, "scheduling.x-k8s.io");
  EXPECT_EQ(deleted->name, "ddp");
}

TEST(GangModesTest, SchedulerNamesComeFromTheOptionsUnlessTheTemplateNamesOne) {
  PlanOptions o = options();
  o.gang_scheduler = GangScheduler::SchedulerPlugins;
  o.scheduler_plugins_scheduler_name = "coscheduler";
  json pod_template = {{"spec", {{"containers", json::array()}}}};
  decorate_pod_template(pod_template, "ddp", "Worker", o);
  EXPECT_EQ(pod_template["spec"]["schedulerName"], "coscheduler");

  for (const GangScheduler mode : {GangScheduler::SchedulerPlugins, GangScheduler::Volcano}) {
    o.gang_scheduler = mode;
    json named = {{"spec", {{"schedulerName", "my-scheduler"}}}};
    decorate_pod_template(named, "ddp", "Worker", o);
    EXPECT_EQ(named["spec"]["schedulerName"], "my-scheduler");
  }
}

}  // namespace
}  // namespace trainctl::controller
