// Custom resources pruned, defaulted and validated against their CRD's structural schema, with
// the fieldValidation directive, answered word for word as kube-apiserver v1.26 answered the same
// requests. The expectations were recorded from the real control plane; the suite runs against a
// sandbox, or against any cluster when TRAINCTL_TEST_KUBECONFIG names its kubeconfig (it creates
// the probe CRD, the packaged CRDs if missing, and its own namespace, which it deletes).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>

#include "kube/kubeconfig.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::EndsWith;
using ::testing::StartsWith;

/// The API server under test: a fresh sandbox, or the cluster TRAINCTL_TEST_KUBECONFIG names.
class ApiServerUnderTest {
 public:
  ApiServerUnderTest() {
    const char* kubeconfig = std::getenv("TRAINCTL_TEST_KUBECONFIG");
    if (kubeconfig && *kubeconfig) {
      kube::ConfigOverrides overrides;
      overrides.kubeconfig = kubeconfig;
      config_ = kube::resolve_rest_config(overrides, kube::ConfigEnvironment::from_process());
    } else {
      sandbox_ = std::make_unique<testing::LocalSandbox>();
      config_ = sandbox_->sandbox().admin_config();
    }
    http_ = std::make_unique<testing::RawSandboxHttp>(config_);
  }

  testing::RawSandboxHttp& http() { return *http_; }

 private:
  std::unique_ptr<testing::LocalSandbox> sandbox_;
  kube::RestConfig config_;
  std::unique_ptr<testing::RawSandboxHttp> http_;
};

class CrdSchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = "crd-schema-" + std::to_string(std::random_device()() % 1000000);
    ASSERT_EQ(http()
                  .send("POST", "/api/v1/namespaces", json{{"metadata", {{"name", ns_}}}}.dump())
                  .status,
              201);
    create_crd(yaml_to_json(
        YAML::LoadFile(std::string(TRAINCTL_SOURCE_DIR) + "/tests/support/widget_crd.yaml")));
    wait_served(widgets());
  }
  void TearDown() override { http().send("DELETE", "/api/v1/namespaces/" + ns_); }

  testing::RawSandboxHttp& http() { return server_.http(); }

  /// Creates the CRD unless it exists.
  void create_crd(const json& crd) {
    const int status =
        http()
            .send("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd.dump())
            .status;
    ASSERT_TRUE(status == 201 || status == 409) << status;
  }
  /// Waits until `path` lists.
  void wait_served(const std::string& path) {
    ASSERT_TRUE(testing::wait_until([&] { return http().send("GET", path).status == 200; },
                                    std::chrono::seconds(30)));
  }

  std::string widgets() const {
    return "/apis/probe.trainctl.dev/v1/namespaces/" + ns_ + "/widgets";
  }

  static json widget(const std::string& name, json spec) {
    return {{"apiVersion", "probe.trainctl.dev/v1"},
            {"kind", "Widget"},
            {"metadata", {{"name", name}}},
            {"spec", std::move(spec)}};
  }

  /// Each cause as "field: message", sorted: the real server lists them in a random order.
  static std::vector<std::string> causes(const json& status) {
    std::vector<std::string> out;
    for (const auto& c : status["details"]["causes"])
      out.push_back(c.value("field", "") + ": " + c.value("message", ""));
    std::sort(out.begin(), out.end());
    return out;
  }

  ApiServerUnderTest server_;
  std::string ns_;
};

TEST_F(CrdSchemaTest, UnknownFieldsAreDroppedWithAWarningEachByDefaultAndDefaultsFilledIn) {
  json body = widget("w", {{"size", 2},
                           {"foo", 1},
                           {"nested", {{"bar", 2}}},
                           {"free", {{"x", 1}}},
                           {"items", {{{"id", "a"}, {"zz", 1}}}},
                           {"notnull", nullptr},
                           {"maybe", nullptr}});
  body["extra"] = 1;
  const auto r = http().send("POST", widgets(), body.dump());
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.header("warning"),
            R"(299 - "unknown field \"extra\"", 299 - "unknown field \"spec.foo\"", )"
            R"(299 - "unknown field \"spec.items[0].zz\"", )"
            R"(299 - "unknown field \"spec.nested.bar\"")");
  const json created = json::parse(r.body);
  EXPECT_FALSE(created.contains("extra"));
  EXPECT_EQ(created["spec"], (json{{"count", 3},
                                   {"flag", true},
                                   {"free", {{"x", 1}}},
                                   {"items", {{{"id", "a"}}}},
                                   {"maybe", nullptr},
                                   {"nested", {{"inner", "x"}}},
                                   {"size", 2}}));
}

TEST_F(CrdSchemaTest, FieldValidationStrictRefusesUnknownFieldsIgnoreDropsThemSilently) {
  json body = widget("w", {{"size", 2}, {"foo", 1}, {"nested", {{"bar", 2}}}});
  body["metadata"]["bogus"] = 1;
  auto r = http().send("POST", widgets() + "?fieldValidation=Strict", body.dump());
  EXPECT_EQ(r.status, 400);
  json status = json::parse(r.body);
  EXPECT_EQ(status["reason"], "BadRequest");
  EXPECT_EQ(status["message"],
            R"(Widget in version "v1" cannot be handled as a Widget: strict decoding error: )"
            R"(unknown field "metadata.bogus", unknown field "spec.foo", )"
            R"(unknown field "spec.nested.bar")");

  r = http().send("POST", widgets() + "?fieldValidation=Ignore", body.dump());
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.header("warning"), "");
  EXPECT_FALSE(json::parse(r.body)["spec"].contains("foo"));

  body["metadata"]["resourceVersion"] = json::parse(r.body)["metadata"]["resourceVersion"];
  r = http().send("PUT", widgets() + "/w?fieldValidation=Strict", body.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(json::parse(r.body)["message"].get<std::string>(),
              EndsWith(R"(strict decoding error: unknown field "metadata.bogus", unknown field )"
                       R"("spec.foo", unknown field "spec.nested.bar")"));

  r = http().send("POST", widgets() + "?fieldValidation=bogus", widget("v", {{"size", 2}}).dump());
  EXPECT_EQ(r.status, 422);
  status = json::parse(r.body);
  EXPECT_EQ(status["message"],
            R"(CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: )"
            R"("bogus": supported values: "", "Ignore", "Strict", "Warn")");
  EXPECT_EQ(causes(status),
            std::vector<std::string>{R"(fieldValidation: Unsupported value: "bogus": supported )"
                                     R"(values: "", "Ignore", "Strict", "Warn")"});
}

TEST_F(CrdSchemaTest, SchemaViolationsAre422NamingEachField) {
  auto r = http().send("POST", widgets(), widget("bad", {{"size", "string"}}).dump());
  EXPECT_EQ(r.status, 422);
  json status = json::parse(r.body);
  EXPECT_EQ(status["reason"], "Invalid");
  EXPECT_EQ(status["message"],
            R"(Widget.probe.trainctl.dev "bad" is invalid: spec.size: Invalid value: "string": )"
            R"(spec.size in body must be of type integer: "string")");
  EXPECT_EQ(
      status["details"]["causes"][0],
      (json{{"reason", "FieldValueTypeInvalid"},
            {"message",
             R"(Invalid value: "string": spec.size in body must be of type integer: "string")"},
            {"field", "spec.size"}}));

  r = http().send("POST", widgets(), widget("bad", json::object()).dump());
  EXPECT_EQ(json::parse(r.body)["message"],
            R"(Widget.probe.trainctl.dev "bad" is invalid: spec.size: Required value)");

  r = http().send("POST", widgets(),
                  widget("bad", {{"size", 11},
                                 {"big", "x"},
                                 {"ratio", 0},
                                 {"name", "ABCDEFG"},
                                 {"mode", "Medium"},
                                 {"items", {json::object()}}})
                      .dump());
  EXPECT_EQ(r.status, 422);
  status = json::parse(r.body);
  EXPECT_THAT(status["message"].get<std::string>(),
              StartsWith(R"(Widget.probe.trainctl.dev "bad" is invalid: [)"));
  EXPECT_EQ(
      causes(status),
      (std::vector<std::string>{
          R"(spec.big: Invalid value: "string": spec.big in body must be of type integer: "string")",
          "spec.items[0].id: Required value",
          R"(spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow")",
          "spec.name: Too long: may not be longer than 5",
          "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
          "spec.size: Invalid value: 11: spec.size in body should be less than or equal to "
          "10"}));
}

TEST_F(CrdSchemaTest, PatchesAreDecodedAndValidatedAsTheirResult) {
  ASSERT_EQ(http().send("POST", widgets(), widget("p", {{"size", 2}}).dump()).status, 201);
  const std::string merge = "application/merge-patch+json";

  auto r = http().send("PATCH", widgets() + "/p?fieldValidation=Strict",
                       R"({"spec":{"foo":1,"size":3}})", merge);
  EXPECT_EQ(r.status, 422);
  json status = json::parse(r.body);
  EXPECT_THAT(status["message"].get<std::string>(),
              StartsWith(R"( "" is invalid: patch: Invalid value: "{\"apiVersion\":)"));
  EXPECT_THAT(status["message"].get<std::string>(),
              EndsWith(R"(: strict decoding error: unknown field "spec.foo")"));
  EXPECT_EQ(status["details"]["causes"][0]["field"], "patch");

  r = http().send("PATCH", widgets() + "/p", R"({"spec":{"foo":1,"size":4}})", merge);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("warning"), R"(299 - "unknown field \"spec.foo\"")");
  EXPECT_EQ(json::parse(r.body)["spec"],
            (json{{"count", 3}, {"flag", true}, {"nested", {{"inner", "x"}}}, {"size", 4}}));

  r = http().send("PATCH", widgets() + "/p", R"([{"op":"add","path":"/spec/bar","value":1}])",
                  "application/json-patch+json");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("warning"), R"(299 - "unknown field \"spec.bar\"")");

  r = http().send("PATCH", widgets() + "/p", R"({"spec":{"size":"x"}})", merge);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(json::parse(r.body)["message"],
            R"(Widget.probe.trainctl.dev "p" is invalid: spec.size: Invalid value: "string": )"
            R"(spec.size in body must be of type integer: "string")");

  // Server-side apply types the applied configuration first: an undeclared field is a 500.
  r = http().send("PATCH", widgets() + "/p?fieldManager=me",
                  widget("p", {{"size", 5}, {"foo", 1}}).dump(), "application/apply-patch+yaml");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json::parse(r.body)["message"],
            "failed to create typed patch object (/p; probe.trainctl.dev/v1, Kind=Widget): "
            ".spec.foo: field not declared in schema");
}

TEST_F(CrdSchemaTest, StatusWritesAreValidatedAndPrunedToo) {
  ASSERT_EQ(http().send("POST", widgets(), widget("s", {{"size", 2}}).dump()).status, 201);
  const std::string merge = "application/merge-patch+json";
  auto r = http().send("PATCH", widgets() + "/s/status", R"({"status":{"phase":"C"}})", merge);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(json::parse(r.body)["message"],
            R"(Widget.probe.trainctl.dev "s" is invalid: status.phase: Unsupported value: "C": )"
            R"(supported values: "A", "B")");

  r = http().send("PATCH", widgets() + "/s/status",
                  R"({"status":{"phase":"A","zz":1},"spec":{"qq":1}})", merge);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("warning"),
            R"(299 - "unknown field \"spec.qq\"", 299 - "unknown field \"status.zz\"")");
  EXPECT_EQ(json::parse(r.body)["status"], (json{{"phase", "A"}}));
}

TEST_F(CrdSchemaTest, PackagedTrainingCrdsNameTheBadFieldOfAJob) {
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(TRAINCTL_SOURCE_DIR) / "packaging" / "crds")) {
    create_crd(yaml_to_json(YAML::LoadFile(entry.path().string())));
  }
  wait_served("/apis/kubeflow.org/v1/namespaces/" + ns_ + "/tfjobs");
  const json job = {
      {"apiVersion", "kubeflow.org/v1"},
      {"kind", "TFJob"},
      {"metadata", {{"name", "x"}}},
      {"spec",
       {{"runPolicy", {{"backoffLimit", "string"}}},
        {"tfReplicaSpecs",
         {{"Worker",
           {{"replicas", 1}, {"template", {{"spec", {{"anything", {{"goes", true}}}}}}}}}}}}}};
  auto r = http().send("POST", "/apis/kubeflow.org/v1/namespaces/" + ns_ + "/tfjobs", job.dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(json::parse(r.body)["message"],
            R"(TFJob.kubeflow.org "x" is invalid: spec.runPolicy.backoffLimit: Invalid value: )"
            R"("string": spec.runPolicy.backoffLimit in body must be of type integer: "string")");

  json fixed = job;
  fixed["spec"]["runPolicy"] = {{"backoffLimit", 3}};
  r = http().send("POST", "/apis/kubeflow.org/v1/namespaces/" + ns_ + "/tfjobs", fixed.dump());
  ASSERT_EQ(r.status, 201) << r.body;
  const json created = json::parse(r.body);
  // The pod template keeps what its schema does not list; runPolicy.suspend is defaulted.
  EXPECT_EQ(created["spec"]["tfReplicaSpecs"]["Worker"]["template"],
            fixed["spec"]["tfReplicaSpecs"]["Worker"]["template"]);
  EXPECT_EQ(created["spec"]["runPolicy"], (json{{"backoffLimit", 3}, {"suspend", false}}));
}

// packaging/crds/scheduling.x-k8s.io_podgroups.yaml, scheduler-plugins' own: minMember of at least
// 1, quantities for minResources, undeclared fields (a Volcano queue) dropped, status only
// through its subresource.
TEST_F(CrdSchemaTest, PackagedSchedulerPluginsPodGroupIsServedAndValidated) {
  create_crd(yaml_to_json(YAML::LoadFile(std::string(TRAINCTL_SOURCE_DIR) +
                                         "/packaging/crds/scheduling.x-k8s.io_podgroups.yaml")));
  const std::string groups = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/" + ns_ + "/podgroups";
  wait_served(groups);
  const auto group = [](const json& spec) {
    return json{{"apiVersion", "scheduling.x-k8s.io/v1alpha1"},
                {"kind", "PodGroup"},
                {"metadata", {{"name", "g"}}},
                {"spec", spec},
                {"status", {{"phase", "Running"}}}};
  };
  auto r = http().send("POST", groups, group({{"minMember", 0}}).dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(json::parse(r.body)["message"],
            R"(PodGroup.scheduling.x-k8s.io "g" is invalid: spec.minMember: Invalid value: 0: )"
            R"(spec.minMember in body should be greater than or equal to 1)");

  r = http().send("POST", groups,
                  group({{"minMember", 2}, {"minResources", {{"cpu", "lots"}}}}).dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_THAT(json::parse(r.body)["message"].get<std::string>(),
              StartsWith(R"(PodGroup.scheduling.x-k8s.io "g" is invalid: spec.minResources.cpu: )"
                         R"(Invalid value: "lots": spec.minResources.cpu in body should match )"));

  r = http().send("POST", groups,
                  group({{"minMember", 2},
                         {"minResources", {{"cpu", "2"}, {"nvidia.com/gpu", 4}}},
                         {"scheduleTimeoutSeconds", 60},
                         {"queue", "team-a"}})
                      .dump());
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.header("warning"), R"(299 - "unknown field \"spec.queue\"")");
  const json created = json::parse(r.body);
  EXPECT_EQ(created["spec"], (json{{"minMember", 2},
                                   {"minResources", {{"cpu", "2"}, {"nvidia.com/gpu", 4}}},
                                   {"scheduleTimeoutSeconds", 60}}));
  EXPECT_FALSE(created.contains("status")) << "status is written through its subresource only";
}

}  // namespace
}  // namespace trainctl
