#include "sandbox/job_controller.h"

#include <gtest/gtest.h>

#include "sandbox/api_server.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;

class JobControllerTest : public ::testing::Test {
 protected:
  JobControllerTest() { install_builtin_resources(store_); }

  json job(const std::string& name, json spec_extra = json::object()) {
    json spec = {{"template",
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
  std::vector<json> pods() {
    ListRequest r;
    r.labels = LabelSelector::parse("job-name");
    return store_.list("pods", r).items;
  }
  void set_phase(const json& pod, const std::string& phase) {
    store_.modify("pods", "default", pod["metadata"]["name"], WritePart::Status,
                  [&](json& p) { p["status"]["phase"] = phase; });
  }
  json status(const std::string& name) {
    return store_.get("jobs.batch", "default", name)["status"];
  }

  Store store_;
  JobController controller_{store_};
};

TEST_F(JobControllerTest, CreatesOneOwnedLabelledPodAndCompletesWhenItSucceeds) {
  const json j = job("pi-launcher");
  controller_.step();
  controller_.step();  // idempotent: still one pod
  auto ps = pods();
  ASSERT_EQ(ps.size(), 1u);
  const json& meta = ps[0]["metadata"];
  EXPECT_TRUE(meta["name"].get<std::string>().starts_with("pi-launcher-"));
  EXPECT_EQ(meta["name"].get<std::string>().size(), std::string("pi-launcher-").size() + 5);
  EXPECT_EQ(meta["labels"]["job-name"], "pi-launcher");
  EXPECT_EQ(meta["labels"]["app"], "launcher");
  EXPECT_EQ(meta["labels"]["batch.kubernetes.io/controller-uid"], j["metadata"]["uid"]);
  EXPECT_EQ(meta["ownerReferences"][0]["uid"], j["metadata"]["uid"]);
  EXPECT_EQ(meta["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(status("pi-launcher")["active"], 1);

  set_phase(ps[0], "Succeeded");
  controller_.step();
  const json s = status("pi-launcher");
  EXPECT_EQ(s["succeeded"], 1);
  EXPECT_EQ(s["active"], 0);
  EXPECT_EQ(s["conditions"][0]["type"], "Complete");
  EXPECT_TRUE(s.contains("completionTime"));
}

TEST_F(JobControllerTest, ReplacesFailedPodsUntilTheBackoffLimit) {
  job("flaky", {{"backoffLimit", 1}});
  controller_.step();
  set_phase(pods()[0], "Failed");
  controller_.step();
  ASSERT_EQ(pods().size(), 2u);  // a replacement
  EXPECT_EQ(status("flaky")["failed"], 1);
  for (const auto& p : pods()) {
    if (p["status"]["phase"] != "Failed")
      set_phase(p, "Failed");
  }
  controller_.step();
  const json s = status("flaky");
  EXPECT_EQ(s["failed"], 2);
  EXPECT_EQ(s["conditions"][0]["type"], "Failed");
  EXPECT_EQ(s["conditions"][0]["reason"], "BackoffLimitExceeded");
  controller_.step();
  EXPECT_EQ(pods().size(), 2u);  // a finished job makes no more pods
}

TEST_F(JobControllerTest, SuspendedJobsRunNoPods) {
  job("held", {{"suspend", true}});
  controller_.step();
  EXPECT_TRUE(pods().empty());
  EXPECT_EQ(status("held")["conditions"][0]["type"], "Suspended");
}

TEST_F(JobControllerTest, DeletingTheJobCollectsItsPods) {
  job("gone");
  controller_.step();
  ASSERT_EQ(pods().size(), 1u);
  store_.remove("jobs.batch", "default", "gone", {.propagation_policy = "Background"});
  EXPECT_TRUE(pods().empty());
}

}  // namespace
}  // namespace trainctl::sandbox
