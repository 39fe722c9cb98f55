#include "sandbox/table.h"

#include <gtest/gtest.h>

namespace trainctl::sandbox {
namespace {

using nlohmann::json;
using std::chrono::seconds;

const auto kNow = std::chrono::system_clock::from_time_t(1'800'000'000);  // 2027-01-15T08:00:00Z

TEST(TableTest, JsonPathReadsFieldsAndIndexes) {
  const json obj = {{"status", {{"conditions", {{{"type", "Running"}}, {{"type", "Succeeded"}}}}}},
                    {"metadata", {{"labels", {{"team", "a"}}}}}};
  EXPECT_EQ(evaluate_json_path(obj, ".status.conditions[1].type"), "Succeeded");
  EXPECT_EQ(evaluate_json_path(obj, "{.metadata.labels.team}"), "a");
  EXPECT_EQ(evaluate_json_path(obj, ".status.conditions[-1:].type"), "Succeeded");
  EXPECT_EQ(evaluate_json_path(obj, ".status.conditions[-2].type"), "Running");
  EXPECT_TRUE(evaluate_json_path(obj, ".status.missing").is_null());
  EXPECT_TRUE(evaluate_json_path(obj, ".status.conditions[5].type").is_null());
}

TEST(TableTest, PodRowsShowReadinessStatusRestartsAndTheTerminatedReason) {
  const json pod = {
      {"metadata", {{"name", "w-0"}, {"creationTimestamp", "2027-01-15T07:59:00Z"}}},
      {"spec", {{"containers", {{{"name", "a"}}, {{"name", "b"}}}}, {"nodeName", "node-1"}}},
      {"status",
       {{"phase", "Failed"},
        {"podIP", "10.244.1.2"},
        {"containerStatuses",
         {{{"ready", false},
           {"restartCount", 2},
           {"state", {{"terminated", {{"reason", "Error"}}}}}},
          {{"ready", true}, {"restartCount", 1}, {"state", {{"running", json::object()}}}}}}}}};
  const json table = to_table({"", "v1", "pods", "Pod", true, true}, {pod}, nullptr, "", kNow);
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["columnDefinitions"][0]["name"], "Name");
  EXPECT_EQ(table["rows"][0]["cells"],
            json({"w-0", "1/2", "Error", "3", "60s", "10.244.1.2", "node-1", "<none>", "<none>"}));
  EXPECT_EQ(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

TEST(TableTest, CustomResourcesUsePrinterColumnsAndAddAge) {
  const json columns = {
      {{"name", "State"}, {"type", "string"}, {"jsonPath", ".status.conditions[0].type"}},
      {{"name", "Workers"}, {"type", "integer"}, {"jsonPath", ".spec.workers"}, {"priority", 1}}};
  const json job = {
      {"metadata", {{"name", "mnist"}, {"creationTimestamp", "2027-01-15T07:00:00Z"}}},
      {"spec", {{"workers", 4}}},
      {"status", {{"conditions", {{{"type", "Running"}}}}}}};
  const json table = to_table({"kubeflow.org", "v1", "tfjobs", "TFJob", true, true}, {job}, columns,
                              "Object", kNow);
  EXPECT_EQ(table["rows"][0]["cells"], json({"mnist", "Running", 4, "60m"}));
  EXPECT_EQ(table["columnDefinitions"][2]["priority"], 1);
  EXPECT_EQ(table["columnDefinitions"][3]["name"], "Age");
  EXPECT_EQ(table["rows"][0]["object"]["spec"]["workers"], 4);
}

TEST(TableTest, OnlyAsTableAcceptHeadersGetTables) {
  EXPECT_TRUE(wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"));
  EXPECT_FALSE(wants_table("application/json"));
}

}  // namespace
}  // namespace trainctl::sandbox
