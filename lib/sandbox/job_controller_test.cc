#include "sandbox/job_controller.h"

#include <gtest/gtest.h>

#include "api/status.h"
#include "sandbox/api_server.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Expectations are what a v1.26 kube-apiserver + kube-controller-manager (job controller,
// ttlafterfinished) showed for the same jobs, read back with kubectl.

class JobControllerTest : public ::testing::Test {
 protected:
  JobControllerTest() { install_builtin_resources(store_); }

  /// A job as the API server stores it after its defaulting (admit_job), with `spec_extra`.
  json job(const std::string& name, json spec_extra = json::object()) {
    json spec = {{"backoffLimit", 6},
                 {"completionMode", "NonIndexed"},
                 {"completions", 1},
                 {"parallelism", 1},
                 {"suspend", false},
                 {"template",
                  {{"metadata", {{"labels", {{"app", "launcher"}}}}},
                   {"spec",
                    {{"restartPolicy", "Never"},
                     {"containers", {{{"name", "mpi"}, {"image", "mpi:1"}}}}}}}}};
    spec.update(spec_extra);
    return store_.create("jobs.batch", {{"apiVersion", "batch/v1"},
                                        {"kind", "Job"},
                                        {"metadata", {{"name", name}, {"namespace", "default"}}},
                                        {"spec", spec}});
  }
  /// The job's pods, found as the controller finds them: by its selector.
  std::vector<json> pods(const std::string& job_name = "") {
    ListRequest r;
    r.ns = "default";
    r.labels = LabelSelector::parse(job_name.empty() ? "job-name" : "job-name=" + job_name);
    return store_.list("pods", r).items;
  }
  void set_phase(const json& pod, const std::string& phase, bool ready = false) {
    store_.modify("pods", "default", pod["metadata"]["name"], WritePart::Status, [&](json& p) {
      p["status"]["phase"] = phase;
      if (ready)
        p["status"]["conditions"] = {{{"type", "Ready"}, {"status", "True"}}};
    });
  }
  json status(const std::string& name) {
    return store_.get("jobs.batch", "default", name)["status"];
  }
  std::string at(std::chrono::seconds offset) const {
    return api::format_timestamp(start_ + offset);
  }
  /// The status v1.26 writes for a job started at start_ that failed `after` later.
  json failed_status(std::chrono::seconds after, const std::string& reason,
                     const std::string& message, int failed, int ready) const {
    return {{"conditions",
             {{{"lastProbeTime", at(after)},
               {"lastTransitionTime", at(after)},
               {"message", message},
               {"reason", reason},
               {"status", "True"},
               {"type", "Failed"}}}},
            {"failed", failed},
            {"ready", ready},
            {"startTime", at(0s)},
            {"uncountedTerminatedPods", json::object()}};
  }

  const std::chrono::system_clock::time_point start_ =
      *api::parse_timestamp("2026-11-23T22:42:08Z");
  std::chrono::system_clock::time_point now_ = start_;
  Store store_{StoreOptions{.now = [this] { return now_; }}};
  JobController controller_{store_};
};

TEST_F(JobControllerTest, CreatesOneOwnedTrackedPodAndCompletesWhenItSucceeds) {
  const json j = job("pi-launcher");
  const std::string uid = j["metadata"]["uid"];
  // The store's part of the create: v1.26's generated selector and labels.
  EXPECT_EQ(j["spec"]["selector"], json({{"matchLabels", {{"controller-uid", uid}}}}));
  EXPECT_EQ(j["metadata"]["annotations"], json({{"batch.kubernetes.io/job-tracking", ""}}));
  controller_.step();
  controller_.step();  // idempotent: still one pod
  ListRequest by_selector;
  by_selector.labels = LabelSelector::parse("controller-uid=" + uid);
  auto ps = store_.list("pods", by_selector).items;
  ASSERT_EQ(ps.size(), 1u);
  const json& meta = ps[0]["metadata"];
  EXPECT_EQ(meta["generateName"], "pi-launcher-");
  EXPECT_EQ(meta["name"].get<std::string>().size(), std::string("pi-launcher-").size() + 5);
  EXPECT_EQ(meta["labels"],
            json({{"app", "launcher"}, {"controller-uid", uid}, {"job-name", "pi-launcher"}}));
  EXPECT_EQ(meta["finalizers"], json({"batch.kubernetes.io/job-tracking"}));
  EXPECT_EQ(meta["ownerReferences"], json::parse(R"([{"apiVersion": "batch/v1", "kind": "Job",
      "name": "pi-launcher", "uid": ")" + uid + R"(", "controller": true,
      "blockOwnerDeletion": true}])"));
  // Created through the pod admission, as the real controller's POST is.
  EXPECT_EQ(ps[0]["spec"]["serviceAccountName"], "default");
  EXPECT_EQ(ps[0]["spec"]["dnsPolicy"], "ClusterFirst");
  EXPECT_EQ(status("pi-launcher"), json::parse(R"({"active": 1, "ready": 0,
      "startTime": "2026-11-23T22:42:08Z", "uncountedTerminatedPods": {}})"));

  now_ += 3s;
  set_phase(ps[0], "Succeeded");
  controller_.step();
  EXPECT_EQ(status("pi-launcher"), json::parse(R"({
      "completionTime": "2026-11-23T22:42:11Z",
      "conditions": [{"lastProbeTime": "2026-11-23T22:42:11Z",
                      "lastTransitionTime": "2026-11-23T22:42:11Z",
                      "status": "True", "type": "Complete"}],
      "ready": 0, "startTime": "2026-11-23T22:42:08Z", "succeeded": 1,
      "uncountedTerminatedPods": {}})"));
  ps = pods();
  ASSERT_EQ(ps.size(), 1u);  // the finished pod stays, counted: its finalizer is off
  EXPECT_FALSE(ps[0]["metadata"].contains("finalizers"));
}

TEST_F(JobControllerTest, ReplacesFailedPodsUntilTheBackoffLimit) {
  job("flaky", {{"backoffLimit", 1}});
  controller_.step();
  set_phase(pods()[0], "Failed");
  controller_.step();
  ASSERT_EQ(pods().size(), 2u);  // a replacement
  EXPECT_EQ(status("flaky")["failed"], 1);
  EXPECT_EQ(status("flaky")["active"], 1);
  for (const auto& p : pods()) {
    if (p["status"]["phase"] != "Failed")
      set_phase(p, "Failed");
  }
  now_ += 2s;
  controller_.step();
  EXPECT_EQ(status("flaky"),
            failed_status(2s, "BackoffLimitExceeded", "Job has reached the specified backoff limit",
                          /*failed=*/2, /*ready=*/0));
  controller_.step();
  EXPECT_EQ(pods().size(), 2u);  // a finished job makes no more pods
}

TEST_F(JobControllerTest, CountsOutliveThePodsAndADeletedRunningPodIsAFailure) {
  job("counted", {{"completions", 2}});
  controller_.step();
  set_phase(pods()[0], "Succeeded");
  controller_.step();
  EXPECT_EQ(status("counted")["succeeded"], 1);
  // The counted pod going away changes nothing; the running one deleted is a failure.
  for (const auto& p : pods()) {
    store_.remove("pods", "default", p["metadata"]["name"]);
  }
  ASSERT_EQ(pods().size(), 1u);  // the running one waits for its tracking finalizer
  controller_.step();
  const json s = status("counted");
  EXPECT_EQ(s["succeeded"], 1);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(s["active"], 1);  // its replacement
  const auto left = pods();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_FALSE(left[0]["metadata"].contains("deletionTimestamp"));
}

TEST_F(JobControllerTest, OnFailureContainerRestartsCountAgainstTheBackoffLimit) {
  json tmpl_spec = {{"restartPolicy", "OnFailure"},
                    {"containers", {{{"name", "mpi"}, {"image", "mpi:1"}}}}};
  job("restarts", {{"backoffLimit", 2}, {"template", {{"spec", tmpl_spec}}}});
  controller_.step();
  const json pod = pods()[0];
  store_.modify("pods", "default", pod["metadata"]["name"], WritePart::Status, [](json& p) {
    p["status"]["phase"] = "Running";
    p["status"]["containerStatuses"] = {{{"name", "mpi"}, {"restartCount", 1}}};
  });
  controller_.step();
  EXPECT_FALSE(status("restarts").contains("conditions"));
  store_.modify("pods", "default", pod["metadata"]["name"], WritePart::Status,
                [](json& p) { p["status"]["containerStatuses"][0]["restartCount"] = 2; });
  controller_.step();
  const json s = status("restarts");
  EXPECT_EQ(s["conditions"][0]["reason"], "BackoffLimitExceeded");
  EXPECT_EQ(s["failed"], 1);  // the running pod, deleted
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobControllerTest, ActiveDeadlineFailsTheJobOnTimeAndKillsItsPods) {
  job("deadline", {{"activeDeadlineSeconds", 5}});
  // The pass that starts the job asks for another when the deadline runs out.
  EXPECT_EQ(controller_.step(), start_ + 5s);
  set_phase(pods()[0], "Running", /*ready=*/true);
  now_ += 4s;
  EXPECT_EQ(controller_.step(), start_ + 5s);
  EXPECT_EQ(status("deadline")["active"], 1);
  now_ += 1s;
  EXPECT_EQ(controller_.step(), std::nullopt);
  // As the real one: the killed pod counted as failed, `ready` as seen before the kill.
  EXPECT_EQ(status("deadline"),
            failed_status(5s, "DeadlineExceeded", "Job was active longer than specified deadline",
                          /*failed=*/1, /*ready=*/1));
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobControllerTest, SuspendedJobsRunNoPodsAndResumeWithAFreshStartTime) {
  job("held", {{"suspend", true}, {"activeDeadlineSeconds", 5}});
  EXPECT_EQ(controller_.step(), std::nullopt);  // no deadline runs while suspended
  EXPECT_TRUE(pods().empty());
  EXPECT_EQ(status("held"), json::parse(R"({
      "conditions": [{"lastProbeTime": "2026-11-23T22:42:08Z",
                      "lastTransitionTime": "2026-11-23T22:42:08Z",
                      "message": "Job suspended", "reason": "JobSuspended",
                      "status": "True", "type": "Suspended"}],
      "ready": 0, "uncountedTerminatedPods": {}})"));

  now_ += 10s;
  store_.modify("jobs.batch", "default", "held", WritePart::Main,
                [](json& j) { j["spec"]["suspend"] = false; });
  EXPECT_EQ(controller_.step(), start_ + 15s);
  EXPECT_EQ(pods().size(), 1u);
  json s = status("held");
  EXPECT_EQ(s["startTime"], at(10s));
  EXPECT_EQ(s["conditions"][0], json::parse(R"({"lastProbeTime": "2026-11-23T22:42:18Z",
      "lastTransitionTime": "2026-11-23T22:42:18Z", "message": "Job resumed",
      "reason": "JobResumed", "status": "False", "type": "Suspended"})"));

  // Suspending a running job deletes its pod without counting a failure.
  store_.modify("jobs.batch", "default", "held", WritePart::Main,
                [](json& j) { j["spec"]["suspend"] = true; });
  controller_.step();
  EXPECT_TRUE(pods().empty());
  s = status("held");
  EXPECT_FALSE(s.contains("failed"));
  EXPECT_FALSE(s.contains("active"));
  EXPECT_EQ(s["conditions"][0]["status"], "True");
}

TEST_F(JobControllerTest, RunsParallelismPodsUpToTheCompletionsLeft) {
  job("wide", {{"completions", 3}, {"parallelism", 2}});
  controller_.step();
  auto ps = pods();
  ASSERT_EQ(ps.size(), 2u);
  set_phase(ps[0], "Succeeded");
  set_phase(ps[1], "Succeeded");
  controller_.step();
  EXPECT_EQ(status("wide")["active"], 1);  // one completion left
  EXPECT_EQ(pods().size(), 3u);
}

TEST_F(JobControllerTest, TtlAfterFinishedDeletesTheJobThatLongAfterItFinished) {
  job("short-lived", {{"ttlSecondsAfterFinished", 5}});
  controller_.step();
  now_ += 2s;
  set_phase(pods()[0], "Succeeded");
  controller_.step();                               // finishes at +2s
  EXPECT_EQ(controller_.step(), start_ + 2s + 5s);  // and is due 5s after that
  now_ += 4s;
  controller_.step();
  EXPECT_EQ(status("short-lived")["succeeded"], 1);
  now_ += 1s;
  controller_.step();
  EXPECT_THROW(store_.get("jobs.batch", "default", "short-lived"), Error);
  EXPECT_TRUE(pods().empty());  // foreground deletion took the pod first
}

TEST_F(JobControllerTest, DeletingTheJobReleasesAndCollectsItsPods) {
  job("gone");
  controller_.step();
  ASSERT_EQ(pods().size(), 1u);
  store_.remove("jobs.batch", "default", "gone", {.propagation_policy = "Background"});
  // The garbage collector deleted the pod; its tracking finalizer holds it until the controller
  // sees that its job is gone.
  ASSERT_EQ(pods().size(), 1u);
  EXPECT_TRUE(pods()[0]["metadata"].contains("deletionTimestamp"));
  controller_.step();
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobControllerTest, OrphanedPodsLoseTheTrackingFinalizerAndKeepRunning) {
  job("orphaning");
  controller_.step();
  store_.remove("jobs.batch", "default", "orphaning", {.propagation_policy = "Orphan"});
  controller_.step();
  const auto ps = pods();
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_FALSE(ps[0]["metadata"].contains("finalizers"));
  EXPECT_FALSE(ps[0]["metadata"].contains("ownerReferences"));
  EXPECT_FALSE(ps[0]["metadata"].contains("deletionTimestamp"));
}

}  // namespace
}  // namespace trainctl::sandbox
