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

// kube-apiserver's event printer: every cell (wide ones too), from core/v1 fields or, for an event
// written as events.k8s.io/v1, from that group's (the real server converts, then prints alike).
TEST(TableTest, EventRowsAreTheApiServersWhicheverGroupWroteThem) {
  const json core = {
      {"metadata", {{"name", "w-0.18ebce06"}, {"creationTimestamp", "2027-01-15T07:00:00Z"}}},
      {"involvedObject", {{"kind", "Pod"}, {"name", "w-0"}, {"fieldPath", "spec.containers{a}"}}},
      {"reason", "Scheduled"},
      {"message", "Successfully assigned team/w-0 to node-1 \n"},
      {"source", {{"component", "default-scheduler"}, {"host", "vm"}}},
      {"firstTimestamp", "2027-01-15T07:55:00Z"},
      {"lastTimestamp", "2027-01-15T07:59:00Z"},
      {"count", 3},
      {"type", "Normal"}};
  const json table =
      to_table({"", "v1", "events", "Event", true, false}, {core}, nullptr, "", kNow);
  std::vector<std::string> names;
  for (const auto& c : table["columnDefinitions"])
    names.push_back(c["name"].get<std::string>() + (c["priority"] == 1 ? "*" : ""));
  EXPECT_EQ(names,
            (std::vector<std::string>{"Last Seen", "Type", "Reason", "Object", "Subobject*",
                                      "Source*", "Message", "First Seen*", "Count*", "Name*"}));
  EXPECT_EQ(table["columnDefinitions"][9]["format"], "name");
  EXPECT_EQ(
      table["rows"][0]["cells"],
      json({"60s", "Normal", "Scheduled", "pod/w-0", "spec.containers{a}", "default-scheduler, vm",
            "Successfully assigned team/w-0 to node-1", "5m", 3, "w-0.18ebce06"}));

  const json new_group = {
      {"metadata", {{"name", "job.1"}, {"creationTimestamp", "2027-01-15T07:00:00Z"}}},
      {"regarding", {{"kind", "TFJob"}, {"name", "mnist"}}},
      {"reason", "SuccessfulCreatePod"},
      {"note", "Created pod: mnist-worker-0"},
      {"reportingController", "trainctl"},
      {"reportingInstance", "trainctl-0"},
      {"eventTime", "2027-01-15T07:50:00.123456Z"},
      {"series", {{"count", 7}, {"lastObservedTime", "2027-01-15T07:58:00.000001Z"}}},
      {"type", "Normal"}};
  const json no_times = {{"metadata", {{"name", "x"}}}, {"involvedObject", {{"kind", "Node"}}}};
  const json rows = to_table({"events.k8s.io", "v1", "events", "Event", true, false},
                             {new_group, no_times}, nullptr, "", kNow)["rows"];
  EXPECT_EQ(rows[0]["cells"],
            json({"2m", "Normal", "SuccessfulCreatePod", "tfjob/mnist", "", "trainctl, trainctl-0",
                  "Created pod: mnist-worker-0", "10m", 7, "job.1"}));
  EXPECT_EQ(rows[1]["cells"], json({"<unknown>", "", "", "node", "", "", "", "<unknown>", 1, "x"}));
}

// kube-apiserver's job printer: completions (a work queue's "of N"), the run's duration until
// now or its completion, and with -o wide the template's containers and the selector.
TEST(TableTest, JobRowsShowCompletionsDurationAndTheTemplateWhenWide) {
  const json done = {
      {"metadata", {{"name", "done"}, {"creationTimestamp", "2027-01-15T07:00:00Z"}}},
      {"spec",
       {{"completions", 3},
        {"selector", {{"matchLabels", {{"job-name", "done"}, {"app", "x"}}}}},
        {"template",
         {{"spec",
           {{"containers",
             {{{"name", "main"}, {"image", "busybox:1"}},
              {{"name", "side"}, {"image", "envoy"}}}}}}}}}},
      {"status",
       {{"succeeded", 3},
        {"startTime", "2027-01-15T07:00:05Z"},
        {"completionTime", "2027-01-15T07:02:10Z"},
        {"conditions", {{{"type", "Complete"}, {"status", "True"}}}}}}};
  const json queue = {
      {"metadata", {{"name", "queue"}, {"creationTimestamp", "2027-01-15T07:50:00Z"}}},
      {"spec", {{"parallelism", 4}}},
      {"status", {{"succeeded", 1}, {"startTime", "2027-01-15T07:55:00Z"}}}};
  const json not_started = {
      {"metadata", {{"name", "new"}, {"creationTimestamp", "2027-01-15T07:59:50Z"}}},
      {"spec", {{"completions", 1}}}};
  const json table = to_table({"batch", "v1", "jobs", "Job", true, true},
                              {done, queue, not_started}, nullptr, "", kNow);
  std::vector<std::string> names;
  for (const auto& c : table["columnDefinitions"])
    names.push_back(c["name"].get<std::string>() + (c["priority"] == 1 ? "*" : ""));
  EXPECT_EQ(names, (std::vector<std::string>{"Name", "Status", "Completions", "Duration", "Age",
                                             "Containers*", "Images*", "Selector*"}));
  EXPECT_EQ(table["rows"][0]["cells"], json({"done", "Complete", "3/3", "2m5s", "60m", "main,side",
                                             "busybox:1,envoy", "app=x,job-name=done"}));
  EXPECT_EQ(table["rows"][1]["cells"],
            json({"queue", "Running", "1/1 of 4", "5m", "10m", "", "", "<none>"}));
  EXPECT_EQ(table["rows"][2]["cells"],
            json({"new", "Running", "0/1", "", "10s", "", "", "<none>"}));
}

TEST(TableTest, ServiceAccountRowsCountTheirSecrets) {
  const json account = {
      {"metadata", {{"name", "builder"}, {"creationTimestamp", "2027-01-15T07:59:00Z"}}},
      {"secrets", {{{"name", "builder-token"}}, {{"name", "registry"}}}}};
  const json bare = {
      {"metadata", {{"name", "default"}, {"creationTimestamp", "2027-01-15T07:00:00Z"}}}};
  const json table = to_table({"", "v1", "serviceaccounts", "ServiceAccount", true, false},
                              {account, bare}, nullptr, "", kNow);
  EXPECT_EQ(table["columnDefinitions"][1]["name"], "Secrets");
  EXPECT_EQ(table["rows"][0]["cells"], json({"builder", 2, "60s"}));
  EXPECT_EQ(table["rows"][1]["cells"], json({"default", 0, "60m"}));
}

json service(const std::string& name, json spec, json status = json::object()) {
  return {{"metadata", {{"name", name}, {"creationTimestamp", "2027-01-15T07:59:00Z"}}},
          {"spec", std::move(spec)},
          {"status", std::move(status)}};
}

TEST(TableTest, ServiceRowsShowWhatKubectlGetSvcPrints) {
  // As `kubectl create svc clusterip foo --tcp=80:80` leaves it once the server defaulted it.
  const json cluster_ip = service(
      "foo",
      {{"type", "ClusterIP"},
       {"clusterIP", "10.96.0.1"},
       {"clusterIPs", {"10.96.0.1"}},
       {"ports", {{{"name", "80-80"}, {"port", 80}, {"protocol", "TCP"}, {"targetPort", 80}}}},
       {"selector", {{"app", "foo"}, {"tier", "web"}}}});
  const json node_port = service("np", {{"type", "NodePort"},
                                        {"clusterIPs", {"10.96.0.2"}},
                                        {"externalIPs", {"192.0.2.1", "192.0.2.2"}},
                                        {"ports",
                                         {{{"port", 80}, {"nodePort", 30080}, {"protocol", "TCP"}},
                                          {{"port", 53}, {"protocol", "UDP"}}}}});
  const json headless = service("db", {{"type", "ClusterIP"}, {"clusterIPs", {"None"}}});
  const json pending = service("lb", {{"type", "LoadBalancer"}, {"clusterIPs", {"10.96.0.3"}}});
  const json balanced = service("lb2", {{"type", "LoadBalancer"}, {"clusterIPs", {"10.96.0.4"}}},
                                {{"loadBalancer", {{"ingress", {{{"ip", "203.0.113.7"}}}}}}});
  const json external =
      service("ext", {{"type", "ExternalName"}, {"externalName", "db.example.com"}});

  const json table =
      to_table({"", "v1", "services", "Service", true, true},
               {cluster_ip, node_port, headless, pending, balanced, external}, nullptr, "", kNow);
  std::vector<std::string> names;
  for (const auto& c : table["columnDefinitions"])
    names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Name", "Type", "Cluster-IP", "External-IP", "Port(s)",
                                             "Age", "Selector"}));
  EXPECT_EQ(table["columnDefinitions"][6]["priority"], 1);
  const json& rows = table["rows"];
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0]["cells"],
            json({"foo", "ClusterIP", "10.96.0.1", "<none>", "80/TCP", "60s", "app=foo,tier=web"}));
  EXPECT_EQ(rows[1]["cells"], json({"np", "NodePort", "10.96.0.2", "192.0.2.1,192.0.2.2",
                                    "80:30080/TCP,53/UDP", "60s", "<none>"}));
  EXPECT_EQ(rows[2]["cells"],
            json({"db", "ClusterIP", "None", "<none>", "<none>", "60s", "<none>"}));
  EXPECT_EQ(rows[3]["cells"][3], "<pending>");
  EXPECT_EQ(rows[4]["cells"][3], "203.0.113.7");
  EXPECT_EQ(rows[5]["cells"],
            json({"ext", "ExternalName", "<none>", "db.example.com", "<none>", "60s", "<none>"}));
}

TEST(TableTest, FieldsOfAnUnexpectedTypePrintAsEmptyInsteadOfThrowing) {
  const json odd = {{"metadata", {{"name", "odd"}}},
                    {"spec",
                     {{"ports", {{{"port", "eighty"}, {"protocol", nullptr}}}},
                      {"selector", nullptr},
                      {"type", 7}}}};
  json table;
  ASSERT_NO_THROW(
      table = to_table({"", "v1", "services", "Service", true, true}, {odd}, nullptr, "", kNow));
  EXPECT_EQ(table["rows"][0]["cells"][4], "0/TCP");
  const json pod = {{"metadata", {{"name", "p"}}},
                    {"spec", {{"containers", "none"}}},
                    {"status", {{"phase", nullptr}, {"containerStatuses", {{{"ready", "yes"}}}}}}};
  ASSERT_NO_THROW(table =
                      to_table({"", "v1", "pods", "Pod", true, true}, {pod}, nullptr, "", kNow));
  EXPECT_EQ(table["rows"][0]["cells"][1], "0/0");
  EXPECT_EQ(table["rows"][0]["cells"][2], "Unknown");
  const json event = {{"metadata", {{"name", "e"}}},
                      {"involvedObject", "pod/x"},
                      {"count", "3"},
                      {"source", 5},
                      {"firstTimestamp", 7},
                      {"series", {{"count", "x"}}},
                      {"message", {{"a", 1}}}};
  ASSERT_NO_THROW(
      table = to_table({"", "v1", "events", "Event", true, false}, {event}, nullptr, "", kNow));
  EXPECT_EQ(table["rows"][0]["cells"],
            json({"<unknown>", "", "", "", "", "", "{\"a\":1}", "<unknown>", 0, "e"}));
}

TEST(TableTest, OnlyAsTableAcceptHeadersGetTables) {
  EXPECT_TRUE(wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"));
  EXPECT_FALSE(wants_table("application/json"));
}

}  // namespace
}  // namespace trainctl::sandbox
