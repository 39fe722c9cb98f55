#include "sandbox/patch.h"

#include <gtest/gtest.h>

#include "tests/support/expect_error.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;

// --- merge patch ---------------------------------------------------------------------------

TEST(MergePatchTest, Rfc7386) {
  json target = {{"a", "b"}, {"c", {{"d", "e"}, {"f", "g"}}}, {"list", {1, 2}}};
  json patched = apply_merge_patch(target, {{"a", "z"}, {"c", {{"f", nullptr}}}, {"list", {3}}});
  EXPECT_EQ(patched, (json{{"a", "z"}, {"c", {{"d", "e"}}}, {"list", {3}}}));
  EXPECT_EQ(apply_merge_patch({{"a", 1}}, {{"b", {{"c", nullptr}, {"d", 1}}}}),
            (json{{"a", 1}, {"b", {{"d", 1}}}}));
  EXPECT_EQ(apply_merge_patch({{"a", {{"b", 1}}}}, {{"a", "x"}}), (json{{"a", "x"}}));
}

TEST(MergePatchTest, NonObjectPatchIsABadRequest) {
  auto e = testing::expect_api_error([] { apply_merge_patch(json::object(), json::array()); });
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_EQ(e.message(), "Invalid JSON Patch");
}

// --- JSON patch ----------------------------------------------------------------------------

TEST(JsonPatchTest, AllOperations) {
  json doc = {{"metadata", {{"labels", {{"a/b", "1"}, {"m~n", "2"}}}}},
              {"spec", {{"args", {"x", "y"}}, {"replicas", 1}}}};
  json ops = json::array({
      {{"op", "test"}, {"path", "/spec/replicas"}, {"value", 1}},
      {{"op", "replace"}, {"path", "/spec/replicas"}, {"value", 3}},
      {{"op", "add"}, {"path", "/spec/args/-"}, {"value", "z"}},
      {{"op", "add"}, {"path", "/spec/args/0"}, {"value", "w"}},
      {{"op", "remove"}, {"path", "/metadata/labels/a~1b"}},
      {{"op", "copy"}, {"from", "/metadata/labels/m~0n"}, {"path", "/metadata/labels/copy"}},
      {{"op", "move"}, {"from", "/spec/args/1"}, {"path", "/spec/first"}},
  });
  json out = apply_json_patch(doc, ops);
  EXPECT_EQ(out["spec"]["replicas"], 3);
  EXPECT_EQ(out["spec"]["args"], (json{"w", "y", "z"}));
  EXPECT_EQ(out["spec"]["first"], "x");
  EXPECT_EQ(out["metadata"]["labels"], (json{{"m~n", "2"}, {"copy", "2"}}));
}

TEST(JsonPatchTest, FailedOperationsAreRejectedWithTheFailingPathAsCause) {
  json doc = {{"spec", {{"replicas", 1}}}};
  auto test = testing::expect_api_error([&] {
    apply_json_patch(doc,
                     json::array({{{"op", "test"}, {"path", "/spec/replicas"}, {"value", 2}}}));
  });
  EXPECT_EQ(test.kind(), ErrorKind::Invalid);
  EXPECT_EQ(test.http_code(), 422);
  EXPECT_EQ(test.message(), "the server rejected our request due to an error in our request");
  EXPECT_EQ(test.api_status()["details"]["causes"][0]["message"],
            "testing value /spec/replicas failed: test failed");
  auto remove = testing::expect_api_error([&] {
    apply_json_patch(doc, json::array({{{"op", "remove"}, {"path", "/spec/missing"}}}));
  });
  EXPECT_EQ(remove.api_status()["details"]["causes"][0]["message"],
            "error in remove for path: '/spec/missing': Unable to remove nonexistent key: "
            "missing: missing value");
  auto replace = testing::expect_api_error([&] {
    apply_json_patch(doc, json::array({{{"op", "replace"}, {"path", "/spec/x"}, {"value", 1}}}));
  });
  EXPECT_EQ(replace.api_status()["details"]["causes"][0]["message"],
            "replace operation does not apply: doc is missing key: /spec/x: missing value");
  auto add = testing::expect_api_error([&] {
    apply_json_patch(doc, json::array({{{"op", "add"}, {"path", "/nope/x"}, {"value", 1}}}));
  });
  EXPECT_EQ(add.api_status()["details"]["causes"][0]["message"],
            "add operation does not apply: doc is missing path: \"/nope/x\": missing value");
  auto op = testing::expect_api_error([&] {
    apply_json_patch(doc, json::array({{{"op", "frobnicate"}, {"path", "/spec"}}}));
  });
  EXPECT_EQ(op.api_status()["details"]["causes"][0]["message"],
            "Unexpected kind: frobnicate: unknown object type");
}

TEST(JsonPatchTest, MalformedDocumentIsABadRequest) {
  auto e = testing::expect_api_error([] { apply_json_patch(json::object(), {{"op", "add"}}); });
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_EQ(e.message(), "json: cannot unmarshal object into Go value of type jsonpatch.Patch");
}

// --- strategic merge patch -----------------------------------------------------------------

json pod_spec() {
  return {{"metadata", {{"name", "web"}, {"finalizers", {"a", "b"}}, {"labels", {{"app", "web"}}}}},
          {"spec",
           {{"containers",
             {{{"name", "main"},
               {"image", "app:1"},
               {"env", {{{"name", "A"}, {"value", "1"}}, {{"name", "B"}, {"value", "2"}}}},
               {"ports", {{{"containerPort", 80}, {"name", "http"}}}}},
              {{"name", "sidecar"}, {"image", "proxy:1"}}}},
            {"tolerations", {{{"key", "gpu"}, {"operator", "Exists"}}}},
            {"volumes", {{{"name", "data"}, {"emptyDir", json::object()}}}}}}};
}

TEST(StrategicMergeTest, ContainersAndEnvMergeByName) {
  json patch = {{"spec",
                 {{"containers",
                   {{{"name", "main"},
                     {"image", "app:2"},
                     {"env", {{{"name", "B"}, {"value", "20"}}, {{"name", "C"}, {"value", "3"}}}}},
                    {{"name", "new"}, {"image", "x"}}}}}}};
  json out = apply_strategic_merge_patch(pod_spec(), patch);
  const json& containers = out["spec"]["containers"];
  ASSERT_EQ(containers.size(), 3u);
  EXPECT_EQ(containers[0]["image"], "app:2");
  EXPECT_EQ(containers[0]["env"], (json{{{"name", "A"}, {"value", "1"}},
                                        {{"name", "B"}, {"value", "20"}},
                                        {{"name", "C"}, {"value", "3"}}}));
  EXPECT_EQ(containers[0]["ports"][0]["containerPort"], 80);  // untouched
  EXPECT_EQ(containers[1]["image"], "proxy:1");
  EXPECT_EQ(containers[2]["name"], "new");
}

TEST(StrategicMergeTest, PortsMergeByContainerPortAndServicePortsByPort) {
  json patch = {{"spec",
                 {{"containers",
                   {{{"name", "main"}, {"ports", {{{"containerPort", 80}, {"name", "web"}}}}}}}}}};
  json out = apply_strategic_merge_patch(pod_spec(), patch);
  EXPECT_EQ(out["spec"]["containers"][0]["ports"],
            (json{{{"containerPort", 80}, {"name", "web"}}}));
  json service = {{"spec", {{"ports", {{{"port", 80}, {"targetPort", 8080}}}}}}};
  json svc_out = apply_strategic_merge_patch(
      service, {{"spec", {{"ports", {{{"port", 80}, {"name", "http"}}, {{"port", 443}}}}}}});
  EXPECT_EQ(svc_out["spec"]["ports"],
            (json{{{"port", 80}, {"targetPort", 8080}, {"name", "http"}}, {{"port", 443}}}));
}

TEST(StrategicMergeTest, UnknownListsAndTolerationsAreReplaced) {
  json out = apply_strategic_merge_patch(
      pod_spec(), {{"spec", {{"tolerations", {{{"key", "spot"}}}}, {"args", {"a"}}}}});
  EXPECT_EQ(out["spec"]["tolerations"], (json{{{"key", "spot"}}}));
  EXPECT_EQ(out["spec"]["args"], (json{"a"}));
}

TEST(StrategicMergeTest, Directives) {
  // $patch: delete removes one element of a keyed list.
  json out = apply_strategic_merge_patch(
      pod_spec(), {{"spec", {{"containers", {{{"name", "sidecar"}, {"$patch", "delete"}}}}}}});
  ASSERT_EQ(out["spec"]["containers"].size(), 1u);
  EXPECT_EQ(out["spec"]["containers"][0]["name"], "main");
  // $patch: replace on a list replaces it whole.
  out = apply_strategic_merge_patch(
      pod_spec(), {{"spec", {{"volumes", {{{"$patch", "replace"}}, {{"name", "only"}}}}}}});
  EXPECT_EQ(out["spec"]["volumes"], (json{{{"name", "only"}}}));
  // $patch: replace on a map.
  out = apply_strategic_merge_patch(
      pod_spec(), {{"metadata", {{"labels", {{"$patch", "replace"}, {"new", "1"}}}}}});
  EXPECT_EQ(out["metadata"]["labels"], (json{{"new", "1"}}));
  // Finalizers merge as a set; $deleteFromPrimitiveList removes.
  out = apply_strategic_merge_patch(
      pod_spec(),
      {{"metadata", {{"finalizers", {"b", "c"}}, {"$deleteFromPrimitiveList/finalizers", {"a"}}}}});
  EXPECT_EQ(out["metadata"]["finalizers"], (json{"b", "c"}));
  // null deletes a key.
  out = apply_strategic_merge_patch(pod_spec(), {{"metadata", {{"labels", {{"app", nullptr}}}}}});
  EXPECT_EQ(out["metadata"]["labels"], json::object());
}

TEST(StrategicMergeTest, RetainKeysAndSetElementOrder) {
  json target = {
      {"spec", {{"strategy", {{"type", "RollingUpdate"}, {"rollingUpdate", {{"x", 1}}}}}}}};
  json out = apply_strategic_merge_patch(
      target, {{"spec", {{"strategy", {{"$retainKeys", {"type"}}, {"type", "Recreate"}}}}}});
  EXPECT_EQ(out["spec"]["strategy"], (json{{"type", "Recreate"}}));

  json ordered = apply_strategic_merge_patch(
      pod_spec(), {{"spec",
                    {{"$setElementOrder/containers", {{{"name", "sidecar"}}, {{"name", "main"}}}},
                     {"containers", {{{"name", "main"}, {"image", "app:3"}}}}}}});
  EXPECT_EQ(ordered["spec"]["containers"][0]["name"], "sidecar");
  EXPECT_EQ(ordered["spec"]["containers"][1]["image"], "app:3");
}

TEST(StrategicMergeTest, ElementsWithoutTheMergeKeyAreRejected) {
  auto e = testing::expect_api_error([] {
    apply_strategic_merge_patch(pod_spec(), {{"spec", {{"containers", {{{"image", "x"}}}}}}});
  });
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_EQ(e.message(), "map: {\"image\":\"x\"} does not contain declared merge key: name");
}

TEST(PatchTypesTest, ContentTypesAndSupport) {
  EXPECT_EQ(patch_type_for("application/merge-patch+json; charset=utf-8"), PatchType::Merge);
  EXPECT_EQ(patch_type_for("application/json-patch+json"), PatchType::Json);
  EXPECT_EQ(patch_type_for("application/strategic-merge-patch+json"), PatchType::StrategicMerge);
  EXPECT_EQ(patch_type_for("application/apply-patch+yaml"), PatchType::Apply);
  EXPECT_FALSE(patch_type_for("application/json"));
  EXPECT_EQ(content_type_of(PatchType::Apply), "application/apply-patch+yaml");

  const ResourceInfo pods{"", "v1", "pods", "Pod", true, true};
  const ResourceInfo tfjobs{"kubeflow.org", "v1", "tfjobs", "TFJob", true, true};
  EXPECT_TRUE(strategic_merge_supported(pods));
  EXPECT_FALSE(strategic_merge_supported(tfjobs));
  EXPECT_EQ(unsupported_patch_type(tfjobs).message(),
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, "
            "application/apply-patch+yaml");
  EXPECT_EQ(unsupported_patch_type(pods).http_code(), 415);
  EXPECT_NE(unsupported_patch_type(pods).message().find("strategic-merge-patch"),
            std::string::npos);
}

// --- patch() against a store ---------------------------------------------------------------

class PatchStoreTest : public ::testing::Test {
 protected:
  PatchStoreTest() {
    store_.register_resource({"", "v1", "pods", "Pod", true, true});
    store_.register_resource({"kubeflow.org", "v1", "tfjobs", "TFJob", true, true});
    store_.ensure_namespace("default");
    store_.create("pods", {{"metadata", {{"name", "web"}, {"namespace", "default"}}},
                           {"spec", {{"containers", {{{"name", "main"}, {"image", "a"}}}}}}});
  }
  Store store_;
};

TEST_F(PatchStoreTest, MergePatchWritesThroughTheStore) {
  const std::string before = store_.get("pods", "default", "web")["metadata"]["resourceVersion"];
  PatchResult result = patch(store_, "pods", "default", "web",
                             {.type = PatchType::Merge,
                              .body = {{"metadata", {{"labels", {{"x", "1"}}}}},
                                       {"spec", {{"activeDeadlineSeconds", 5}}}}});
  EXPECT_FALSE(result.created);
  EXPECT_EQ(result.object["metadata"]["labels"]["x"], "1");
  EXPECT_FALSE(result.object["metadata"].contains("generation"));  // pods have none (1.26)
  EXPECT_NE(result.object["metadata"]["resourceVersion"], before);
  EXPECT_EQ(store_.get("pods", "default", "web"), result.object);
}

TEST_F(PatchStoreTest, StrategicMergeOnBuiltinsAndUnsupportedOnCustomResources) {
  PatchResult result =
      patch(store_, "pods", "default", "web",
            {.type = PatchType::StrategicMerge,
             .body = {{"spec", {{"containers", {{{"name", "side"}, {"image", "b"}}}}}}}});
  EXPECT_EQ(result.object["spec"]["containers"].size(), 2u);
  store_.create("tfjobs.kubeflow.org",
                {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  auto e = testing::expect_api_error([&] {
    patch(store_, "tfjobs.kubeflow.org", "default", "mnist",
          {.type = PatchType::StrategicMerge, .body = {{"spec", json::object()}}});
  });
  EXPECT_EQ(e.kind(), ErrorKind::UnsupportedMediaType);
  EXPECT_EQ(e.http_code(), 415);
}

TEST_F(PatchStoreTest, ResourceVersionInThePatchIsAPrecondition) {
  auto e = testing::expect_api_error([&] {
    patch(store_, "pods", "default", "web",
          {.type = PatchType::Merge, .body = {{"metadata", {{"resourceVersion", "1"}}}}});
  });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(testing::expect_api_error([&] {
              patch(store_, "pods", "default", "ghost",
                    {.type = PatchType::Merge, .body = json::object()});
            }).message(),
            "pods \"ghost\" not found");
}

TEST_F(PatchStoreTest, PatchMayNotRenameTheObject) {
  auto e = testing::expect_api_error([&] {
    patch(store_, "pods", "default", "web",
          {.type = PatchType::Merge, .body = {{"metadata", {{"name", "other"}}}}});
  });
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_EQ(e.message(), "the name of the object (other) does not match the name on the URL (web)");
}

TEST_F(PatchStoreTest, JsonPatchOnTheStatusSubresourceWritesOnlyStatus) {
  PatchResult result = patch(
      store_, "pods", "default", "web",
      {.type = PatchType::Json,
       .body =
           json::array({{{"op", "replace"}, {"path", "/status/phase"}, {"value", "Running"}},
                        {{"op", "replace"}, {"path", "/spec/containers/0/image"}, {"value", "b"}}}),
       .part = WritePart::Status});
  EXPECT_EQ(result.object["status"]["phase"], "Running");
  EXPECT_EQ(result.object["spec"]["containers"][0]["image"], "a");
}

TEST_F(PatchStoreTest, ApplyCreatesThenMerges) {
  json config = {{"apiVersion", "kubeflow.org/v1"},
                 {"kind", "TFJob"},
                 {"metadata", {{"name", "mnist"}, {"labels", {{"team", "a"}}}}},
                 {"spec", {{"runPolicy", {{"cleanPodPolicy", "None"}}}, {"list", {1, 2}}}}};
  PatchResult created =
      patch(store_, "tfjobs.kubeflow.org", "default", "mnist",
            {.type = PatchType::Apply, .body = config, .field_manager = "kubectl"});
  EXPECT_TRUE(created.created);
  EXPECT_EQ(created.object["metadata"]["namespace"], "default");
  const json& entry = created.object["metadata"]["managedFields"][0];
  EXPECT_EQ(entry["manager"], "kubectl");
  EXPECT_EQ(entry["operation"], "Apply");
  EXPECT_EQ(entry["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(entry["fieldsType"], "FieldsV1");
  EXPECT_TRUE(entry["fieldsV1"]["f:spec"]["f:runPolicy"].contains("f:cleanPodPolicy"));
  EXPECT_TRUE(entry["fieldsV1"]["f:metadata"]["f:labels"].contains("f:team"));

  json second = {{"metadata", {{"name", "mnist"}, {"labels", {{"env", "dev"}}}}},
                 {"spec", {{"list", {3}}}}};
  PatchResult merged =
      patch(store_, "tfjobs.kubeflow.org", "default", "mnist",
            {.type = PatchType::Apply, .body = second, .field_manager = "kubectl"});
  EXPECT_FALSE(merged.created);
  EXPECT_EQ(merged.object["metadata"]["labels"], (json{{"team", "a"}, {"env", "dev"}}));
  EXPECT_EQ(merged.object["spec"]["runPolicy"]["cleanPodPolicy"], "None");
  EXPECT_EQ(merged.object["spec"]["list"], (json{3}));  // custom resource lists are atomic
  EXPECT_EQ(merged.object["metadata"]["managedFields"].size(), 1u);
}

TEST_F(PatchStoreTest, ApplyMergesContainersByName) {
  PatchResult result =
      patch(store_, "pods", "default", "web",
            {.type = PatchType::Apply,
             .body = {{"metadata", {{"name", "web"}}},
                      {"spec", {{"containers", {{{"name", "side"}, {"image", "s"}}}}}}},
             .field_manager = "ctl"});
  ASSERT_EQ(result.object["spec"]["containers"].size(), 2u);
  EXPECT_TRUE(
      result.object["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:containers"].contains(
          "k:{\"name\":\"side\"}"));
}

TEST_F(PatchStoreTest, ApplyNeedsAFieldManager) {
  auto e = testing::expect_api_error([&] {
    patch(store_, "pods", "default", "web", {.type = PatchType::Apply, .body = json::object()});
  });
  EXPECT_EQ(e.http_code(), 422);
  EXPECT_EQ(e.message(),
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required "
            "for apply patch");
  auto force = testing::expect_api_error([&] {
    patch(store_, "pods", "default", "web",
          {.type = PatchType::Merge, .body = json::object(), .force = true});
  });
  EXPECT_EQ(force.http_code(), 422);
}

TEST_F(PatchStoreTest, DryRunPatchStoresNothing) {
  const json before = store_.get("pods", "default", "web");
  PatchResult result = patch(store_, "pods", "default", "web",
                             {.type = PatchType::Merge,
                              .body = {{"metadata", {{"labels", {{"x", "1"}}}}}},
                              .dry_run = true});
  EXPECT_EQ(result.object["metadata"]["labels"]["x"], "1");
  EXPECT_EQ(store_.get("pods", "default", "web"), before);
  PatchResult created = patch(store_, "tfjobs.kubeflow.org", "default", "dry",
                              {.type = PatchType::Apply,
                               .body = {{"metadata", {{"name", "dry"}}}},
                               .field_manager = "m",
                               .dry_run = true});
  EXPECT_TRUE(created.created);
  EXPECT_EQ(testing::expect_api_error([&] {
              store_.get("tfjobs.kubeflow.org", "default", "dry");
            }).kind(),
            ErrorKind::NotFound);
}

}  // namespace
}  // namespace trainctl::sandbox
