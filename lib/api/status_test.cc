#include "api/status.h"

#include <gtest/gtest.h>

namespace trainctl::api {
namespace {

using nlohmann::json;
using std::chrono::seconds;

json condition(const std::string& type, const std::string& status) {
  return {{"type", type}, {"status", status}, {"reason", "JobX"}};
}

json tfjob_with_conditions(json conditions) {
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", "mnist"}}},
          {"status", {{"conditions", std::move(conditions)}}}};
}

TEST(JobStatusTest, NoConditionsIsPending) {
  EXPECT_EQ(job_status({{"kind", "TFJob"}}), "Pending");
  EXPECT_EQ(job_status(tfjob_with_conditions(json::array())), "Pending");
  EXPECT_EQ(job_status(tfjob_with_conditions({condition("Created", "False")})), "Pending");
}

TEST(JobStatusTest, LastTrueConditionWins) {
  EXPECT_EQ(job_status(tfjob_with_conditions({condition("Created", "True")})), "Created");
  EXPECT_EQ(job_status(tfjob_with_conditions(
                {condition("Created", "True"), condition("Running", "True")})),
            "Running");
}

TEST(JobStatusTest, RestartingAfterRunningWasSetFalse) {
  // The operator flips Running to False when a replica restarts.
  EXPECT_EQ(
      job_status(tfjob_with_conditions({condition("Created", "True"), condition("Running", "False"),
                                        condition("Restarting", "True")})),
      "Restarting");
}

TEST(JobStatusTest, SuspendedIsReported) {
  EXPECT_EQ(
      job_status(tfjob_with_conditions({condition("Created", "True"), condition("Running", "False"),
                                        condition("Suspended", "True")})),
      "Suspended");
}

TEST(JobStatusTest, FailedIsFinalEvenWhenALaterConditionIsTrue) {
  EXPECT_EQ(
      job_status(tfjob_with_conditions({condition("Created", "True"), condition("Failed", "True"),
                                        condition("Running", "True")})),
      "Failed");
  EXPECT_EQ(job_status(tfjob_with_conditions(
                {condition("Running", "False"), condition("Succeeded", "True")})),
            "Succeeded");
}

TEST(KindTest, KindAndResourceName) {
  EXPECT_EQ(kind_of({{"kind", "PyTorchJob"}}), JobKind::PyTorchJob);
  EXPECT_EQ(kind_of({{"kind", "Pod"}}), std::nullopt);
  EXPECT_EQ(kind_resource_name(JobKind::TFJob), "tfjob.kubeflow.org");
  EXPECT_EQ(kind_resource_name(JobKind::MPIJob), "mpijob.kubeflow.org");
}

json gpu_replica(int replicas, json gpus) {
  json container = {{"name", "tensorflow"}, {"image", "tf"}};
  if (!gpus.is_null())
    container["resources"]["limits"]["nvidia.com/gpu"] = std::move(gpus);
  json spec = {{"template", {{"spec", {{"containers", json::array({container})}}}}}};
  if (replicas >= 0)
    spec["replicas"] = replicas;
  return spec;
}

TEST(ReplicaTotalsTest, InOperatorOrderWithStatusCounts) {
  json job = {{"kind", "TFJob"},
              {"spec",
               {{"tfReplicaSpecs",
                 {{"Worker", gpu_replica(4, 2)},
                  {"PS", gpu_replica(-1, nullptr)},
                  {"Chief", gpu_replica(1, "1")}}}}},
              {"status",
               {{"replicaStatuses",
                 {{"Worker", {{"active", 3}, {"failed", 1}}}, {"Chief", {{"succeeded", 1}}}}}}}};
  const auto totals = replica_totals(job);
  ASSERT_EQ(totals.size(), 3u);
  EXPECT_EQ(totals[0].type, "Chief");
  EXPECT_EQ(totals[0].succeeded, 1);
  EXPECT_EQ(totals[1].type, "PS");
  EXPECT_EQ(totals[1].replicas, 1);  // defaulted
  EXPECT_EQ(totals[2].type, "Worker");
  EXPECT_EQ(totals[2].replicas, 4);
  EXPECT_EQ(totals[2].active, 3);
  EXPECT_EQ(totals[2].failed, 1);
  EXPECT_EQ(format_replicas(totals), "Chief:0/1,PS:0/1,Worker:3/4");
  EXPECT_EQ(job_gpus(job), 9);  // 4 workers x 2 + 1 chief x 1
}

TEST(StatusDetailTest, ReasonAndMessageOfTheConditionThatGivesTheStatus) {
  json job = tfjob_with_conditions(
      {condition("Created", "True"),
       {{"type", "Failed"},
        {"status", "True"},
        {"reason", "DeadlineExceeded"},
        {"message", "TFJob default/mnist has run longer than its activeDeadlineSeconds"}}});
  EXPECT_EQ(status_detail(job),
            "DeadlineExceeded: TFJob default/mnist has run longer than its activeDeadlineSeconds");
  EXPECT_EQ(status_detail(tfjob_with_conditions({condition("Created", "True")})), "JobX");
  EXPECT_EQ(status_detail(tfjob_with_conditions(json::array())), "");
}

TEST(DisplayStatusTest, AJobWhosePodGroupWaitsForAdmissionIsQueued) {
  const json created = tfjob_with_conditions({condition("Created", "True")});
  const json pending_group = {{"status", {{"phase", "Pending"}}}};
  EXPECT_EQ(display_status(created, pending_group), "Queued");
  EXPECT_EQ(display_status(tfjob_with_conditions(json::array()), {{"spec", json::object()}}),
            "Queued");  // the PodGroup has no status yet
  EXPECT_EQ(display_status(created, {{"status", {{"phase", "Inqueue"}}}}), "Created");
  EXPECT_EQ(display_status(created, nullptr), "Created");
  EXPECT_EQ(display_status(tfjob_with_conditions({condition("Suspended", "True")}), pending_group),
            "Suspended");
}

TEST(ReplicasColumnTest, AFinishedJobShowsWhatItsReplicasCameTo) {
  json job = {
      {"kind", "PyTorchJob"},
      {"spec",
       {{"pytorchReplicaSpecs",
         {{"Master", gpu_replica(1, nullptr)}, {"Worker", gpu_replica(3, nullptr)}}}}},
      {"status",
       {{"conditions", {condition("Succeeded", "True")}},
        {"replicaStatuses",
         {{"Master", {{"succeeded", 1}}}, {"Worker", {{"succeeded", 2}, {"failed", 1}}}}}}}};
  EXPECT_EQ(replicas_column(job), "Master:1 succeeded,Worker:2 succeeded 1 failed");
  job["status"]["conditions"] = {condition("Failed", "True")};
  job["status"]["replicaStatuses"] = {{"Worker", {{"failed", 3}}}};
  EXPECT_EQ(replicas_column(job), "Master:0 succeeded,Worker:3 failed");
  job["status"]["conditions"] = {condition("Running", "True")};
  job["status"]["replicaStatuses"] = {{"Worker", {{"active", 3}}}};
  EXPECT_EQ(replicas_column(job), "Master:0/1,Worker:3/3");
}

// A spec written with "master"/"worker" keys: the operators count them as Master and Worker and
// write the status under those names (walk: list showed `master:0 succeeded` for a done job).
TEST(ReplicaTotalsTest, CaseVariantsOfAReplicaTypeAreCountedUnderItsName) {
  json job = {
      {"kind", "PyTorchJob"},
      {"spec",
       {{"pytorchReplicaSpecs",
         {{"master", gpu_replica(1, nullptr)}, {"worker", gpu_replica(2, nullptr)}}}}},
      {"status",
       {{"replicaStatuses", {{"Master", {{"succeeded", 1}}}, {"Worker", {{"active", 2}}}}}}}};
  const auto totals = replica_totals(job);
  ASSERT_EQ(totals.size(), 2u);
  EXPECT_EQ(totals[0].type, "Master");
  EXPECT_EQ(totals[0].succeeded, 1);
  EXPECT_EQ(totals[1].type, "Worker");
  EXPECT_EQ(totals[1].active, 2);
  EXPECT_EQ(format_replicas(totals), "Master:0/1,Worker:2/2");
}

TEST(ReplicaTotalsTest, MPIJobUsesItsOwnField) {
  json job = {{"kind", "MPIJob"},
              {"spec",
               {{"mpiReplicaSpecs",
                 {{"Worker", gpu_replica(2, 8)}, {"Launcher", gpu_replica(1, nullptr)}}}}}};
  EXPECT_EQ(format_replicas(replica_totals(job)), "Launcher:0/1,Worker:0/2");
  EXPECT_EQ(job_gpus(job), 16);
  EXPECT_EQ(format_replicas(replica_totals({{"kind", "Pod"}})), "<none>");
}

TEST(QueueTest, FromSchedulingPolicy) {
  EXPECT_EQ(job_queue({{"spec", {{"runPolicy", {{"schedulingPolicy", {{"queue", "team-a"}}}}}}}}),
            "team-a");
  EXPECT_EQ(job_queue({{"spec", json::object()}}), "");
}

TEST(TimestampTest, ParsesRfc3339) {
  const auto t = parse_timestamp("2024-05-01T12:00:00Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*t), 1714564800);
  EXPECT_EQ(parse_timestamp("2024-05-01T14:00:00.123456+02:00"), t);
  EXPECT_FALSE(parse_timestamp("2024-05-01 12:00:00"));
  EXPECT_FALSE(parse_timestamp(""));
  EXPECT_FALSE(parse_timestamp("2024-13-01T12:00:00Z"));
}

TEST(DurationTest, StartToCompletionOrNow) {
  const auto now = *parse_timestamp("2024-05-01T13:00:00Z");
  json job = {{"status", {{"startTime", "2024-05-01T12:00:00Z"}}}};
  EXPECT_EQ(job_duration(job, now), seconds(3600));
  job["status"]["completionTime"] = "2024-05-01T12:03:12Z";
  EXPECT_EQ(job_duration(job, now), seconds(192));
  EXPECT_EQ(job_duration({{"status", json::object()}}, now), std::nullopt);
  EXPECT_EQ(human_duration_or_none(std::nullopt), "<none>");
}

TEST(DurationTest, HumanDurationAsKubectl) {
  EXPECT_EQ(human_duration(seconds(-5)), "0s");
  EXPECT_EQ(human_duration(seconds(45)), "45s");
  EXPECT_EQ(human_duration(seconds(119)), "119s");
  EXPECT_EQ(human_duration(seconds(192)), "3m12s");
  EXPECT_EQ(human_duration(seconds(25 * 60)), "25m");
  EXPECT_EQ(human_duration(seconds(5 * 3600)), "5h");
  EXPECT_EQ(human_duration(seconds(5 * 3600 + 30 * 60)), "5h30m");
  EXPECT_EQ(human_duration(seconds(20 * 3600)), "20h");
  EXPECT_EQ(human_duration(seconds(51 * 3600)), "2d3h");
  EXPECT_EQ(human_duration(seconds(400LL * 86400)), "400d");
  EXPECT_EQ(human_duration(seconds(1100LL * 86400)), "3y");
}

}  // namespace
}  // namespace trainctl::api
