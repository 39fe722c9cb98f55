// Conformance of the sandbox's Kubernetes API, driven through kube::Client over HTTPS against an
// in-process sandbox: what a real kube-apiserver answers for discovery, object metadata, errors,
// list, watch, updates and patches, deletion, dry run, authentication, and the sandbox's own
// fault injection.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "error.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "sandbox/api_server.h"
#include "sandbox/http_server.h"
#include "sandbox/store.h"
#include "tests/support/expect_error.h"
#include "tests/support/https_test_server.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl {
namespace {

using kube::Client;
using kube::PatchType;
using kube::Resource;
using kube::WatchEvent;
using kube::WatchEventType;
using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using testing::expect_error;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::LocalSandbox;
using ::testing::MatchesRegex;
using ::testing::Not;
using testing::pod_manifest;
using testing::RawSandboxHttp;
using ::testing::SizeIs;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;
using testing::wait_until;

namespace resources = kube::resources;

using SandboxDiscoveryTest = testing::SandboxTest;
using SandboxCrdTest = testing::SandboxTest;
using SandboxMetadataTest = testing::SandboxTest;
using SandboxErrorTest = testing::SandboxTest;
using SandboxListTest = testing::SandboxTest;
using SandboxWatchTest = testing::SandboxTest;
using SandboxWriteTest = testing::SandboxTest;
using SandboxDeleteTest = testing::SandboxTest;
using SandboxDryRunTest = testing::SandboxTest;
using SandboxAuthTest = testing::SandboxTest;
using SandboxFaultTest = testing::SandboxTest;
using SandboxJobTest = testing::SandboxTest;

// --- helpers ----------------------------------------------------------------------------------

json configmap(const std::string& name, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", std::move(labels)}}},
          {"data", {{"key", "value"}}}};
}

/// An ownerReferences entry pointing at `owner`.
json owner_reference(const json& owner, bool block_owner_deletion = true) {
  return {{"apiVersion", owner.value("apiVersion", "v1")},
          {"kind", owner.value("kind", "")},
          {"name", owner["metadata"]["name"]},
          {"uid", owner["metadata"]["uid"]},
          {"controller", true},
          {"blockOwnerDeletion", block_owner_deletion}};
}

json owned_configmap(const std::string& name, const json& owner, bool block = true) {
  json cm = configmap(name);
  cm["metadata"]["ownerReferences"] = json::array({owner_reference(owner, block)});
  return cm;
}

std::vector<std::string> names_of(const json& list) {
  std::vector<std::string> names;
  for (const auto& item : list["items"])
    names.push_back(item["metadata"]["name"]);
  return names;
}

std::uint64_t rv_of(const json& object) {
  return std::stoull(object["metadata"]["resourceVersion"].get<std::string>());
}

/// The resource entry named `name` in an APIResourceList, or null.
json find_resource(const json& list, const std::string& name) {
  for (const auto& r : list["resources"]) {
    if (r["name"] == name)
      return r;
  }
  return nullptr;
}

std::vector<std::string> resource_names(const json& list) {
  std::vector<std::string> names;
  for (const auto& r : list["resources"])
    names.push_back(r["name"]);
  return names;
}

std::vector<std::string> group_names(const json& group_list) {
  std::vector<std::string> names;
  for (const auto& g : group_list["groups"])
    names.push_back(g["name"]);
  return names;
}

/// The status of condition `type` in the object's status.conditions ("" when absent).
std::string condition_status(const json& object, const std::string& type) {
  for (const auto& c : object.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type)
      return c.value("status", "");
  }
  return "";
}

json crd_manifest(const std::string& group, const std::string& version, const std::string& plural,
                  const std::string& kind, const std::string& scope, bool status_subresource) {
  json v = {{"name", version},
            {"served", true},
            {"storage", true},
            {"schema",
             {{"openAPIV3Schema",
               {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  if (status_subresource)
    v["subresources"] = {{"status", json::object()}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", plural + "." + group}}},
          {"spec",
           {{"group", group},
            {"scope", scope},
            {"names", {{"plural", plural}, {"kind", kind}}},
            {"versions", json::array({v})}}}};
}

json tfjob_crd() {
  return crd_manifest("kubeflow.org", "v1", "tfjobs", "TFJob", "Namespaced", true);
}

json queue_crd() {
  return crd_manifest("scheduling.volcano.sh", "v1beta1", "queues", "Queue", "Cluster", false);
}

json tfjob(const std::string& name, int workers = 2) {
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"tfReplicaSpecs", {{"Worker", {{"replicas", workers}}}}}}}};
}

/// Creates the CRD and waits until it is Established and its resource is served.
void install_crd(Client& client, const json& crd, const Resource& r) {
  client.create(resources::custom_resource_definitions(), "", crd);
  const std::string name = crd["metadata"]["name"];
  ASSERT_TRUE(wait_until([&] {
    return condition_status(client.get(resources::custom_resource_definitions(), "", name),
                            "Established") == "True";
  })) << name
      << " never became Established";
  client.require_served(r);
}

/// Watches until `count` events other than BOOKMARK arrived or the watch ended.
std::vector<WatchEvent> collect_events(Client& client, const Resource& r, std::string_view ns,
                                       kube::WatchOptions options, std::size_t count) {
  std::vector<WatchEvent> events;
  if (options.timeout_seconds == 0)
    options.timeout_seconds = 5;
  client.watch(r, ns, options, [&](const WatchEvent& e) {
    if (e.type != WatchEventType::Bookmark)
      events.push_back(e);
    return events.size() < count;
  });
  return events;
}

/// "ADDED name" for each event.
std::vector<std::string> describe(const std::vector<WatchEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    out.push_back(std::string(kube::to_string(e.type)) + " " +
                  e.object["metadata"].value("name", ""));
  }
  return out;
}

// --- discovery --------------------------------------------------------------------------------

TEST_F(SandboxDiscoveryTest, VersionApiAndApisDescribeTheServer) {
  const json version = client().server_version();
  EXPECT_EQ(version["major"], "1");
  EXPECT_THAT(version["gitVersion"].get<std::string>(), StartsWith("v1."));

  RawSandboxHttp http(sandbox().admin_config());
  const json api = http.get_json("/api");
  EXPECT_EQ(api["kind"], "APIVersions");
  EXPECT_THAT(api["versions"], Contains("v1"));

  const json apis = http.get_json("/apis");
  EXPECT_EQ(apis["kind"], "APIGroupList");
  for (const char* group : {"apiextensions.k8s.io", "batch", "coordination.k8s.io", "events.k8s.io",
                            "scheduling.k8s.io"}) {
    EXPECT_THAT(group_names(apis), Contains(group));
  }
  for (const auto& g : apis["groups"]) {
    if (g["name"] == "batch") {
      EXPECT_EQ(g["preferredVersion"]["groupVersion"], "batch/v1");
    }
  }
}

TEST_F(SandboxDiscoveryTest, CoreV1ListsPodsWithTheirSubresources) {
  const json core = client().discover("", "v1");
  EXPECT_EQ(core["kind"], "APIResourceList");
  EXPECT_EQ(core["groupVersion"], "v1");
  const json pods = find_resource(core, "pods");
  ASSERT_TRUE(pods.is_object()) << core.dump();
  EXPECT_EQ(pods["kind"], "Pod");
  EXPECT_EQ(pods["namespaced"], true);
  for (const char* verb : {"create", "delete", "get", "list", "patch", "update", "watch"})
    EXPECT_THAT(pods["verbs"], Contains(verb));
  EXPECT_THAT(resource_names(core),
              ::testing::IsSupersetOf({"pods/status", "pods/log", "pods/exec", "pods/binding"}));
  EXPECT_THAT(find_resource(core, "pods/exec")["verbs"], Contains("create"));
  EXPECT_EQ(find_resource(core, "nodes")["namespaced"], false);
  EXPECT_EQ(find_resource(core, "namespaces")["namespaced"], false);
  EXPECT_THAT(resource_names(core), Not(Contains("configmaps/status")));

  const json batch = client().discover("batch", "v1");
  EXPECT_EQ(batch["groupVersion"], "batch/v1");
  EXPECT_THAT(resource_names(batch), ::testing::IsSupersetOf({"jobs", "jobs/status"}));
  EXPECT_THAT(resource_names(client().discover("coordination.k8s.io", "v1")), Contains("leases"));
  EXPECT_NO_THROW(client().require_served(resources::leases()));

  const Error missing = expect_error([&] { client().discover("nothing.example.com", "v1"); });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);
  EXPECT_EQ(missing.http_code(), 404);
}

// --- CustomResourceDefinitions ----------------------------------------------------------------

TEST_F(SandboxCrdTest, ShippedTrainingCrdsInstallAndServeWithPrinterColumns) {
  testing::install_training_crds(client());
  const json job =
      client().create(resources::job(api::JobKind::TFJob), "default",
                      {{"apiVersion", "kubeflow.org/v1"},
                       {"kind", "TFJob"},
                       {"metadata", {{"name", "mnist"}}},
                       {"spec", {{"tfReplicaSpecs", {{"Worker", {{"replicas", 2}}}}}}}});
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2);  // unknown fields kept
  const json queue = client().create(resources::queues(), "",
                                     {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                                      {"kind", "Queue"},
                                      {"metadata", {{"name", "team-a"}}},
                                      {"spec", {{"weight", 1}}}});
  EXPECT_FALSE(queue["metadata"].contains("namespace"));  // cluster-scoped
  RawSandboxHttp http(sandbox().admin_config());
  const auto table = http.send("GET", "/apis/kubeflow.org/v1/namespaces/default/tfjobs", "", "",
                               {{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}});
  ASSERT_EQ(table.status, 200) << table.body;
  const json t = json::parse(table.body);
  EXPECT_EQ(t["columnDefinitions"][1]["name"], "State");
  EXPECT_EQ(t["rows"][0]["cells"][0], "mnist");
}

TEST_F(SandboxCrdTest, NamespacedCrdWithStatusIsServedUntilDeleted) {
  const Error before =
      expect_error([&] { client().require_served(resources::job(api::JobKind::TFJob)); });
  EXPECT_EQ(before.kind(), ErrorKind::NotFound);
  EXPECT_THAT(before.message(), HasSubstr("kubeflow.org/v1 tfjobs is not served"));

  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  const json crd =
      client().get(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org");
  EXPECT_EQ(condition_status(crd, "NamesAccepted"), "True");
  EXPECT_EQ(crd["status"]["acceptedNames"]["kind"], "TFJob");

  const json list = client().discover("kubeflow.org", "v1");
  const json tfjobs = find_resource(list, "tfjobs");
  ASSERT_TRUE(tfjobs.is_object()) << list.dump();
  EXPECT_EQ(tfjobs["namespaced"], true);
  EXPECT_EQ(tfjobs["kind"], "TFJob");
  EXPECT_THAT(resource_names(list), Contains("tfjobs/status"));
  EXPECT_THAT(group_names(RawSandboxHttp(sandbox().admin_config()).get_json("/apis")),
              Contains("kubeflow.org"));

  client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist", 3));
  const json job = client().get(resources::job(api::JobKind::TFJob), "default", "mnist");
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(job["kind"], "TFJob");
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 3);
  EXPECT_THAT(names_of(client().list(resources::job(api::JobKind::TFJob), "default")),
              ElementsAre("mnist"));

  client().remove(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org");
  const Error after =
      expect_error([&] { client().require_served(resources::job(api::JobKind::TFJob)); });
  EXPECT_EQ(after.kind(), ErrorKind::NotFound);
  EXPECT_THAT(after.message(), HasSubstr("kubeflow.org/v1 tfjobs is not served"));
  const Error gone =
      expect_error([&] { client().get(resources::job(api::JobKind::TFJob), "default", "mnist"); });
  EXPECT_EQ(gone.http_code(), 404);
  EXPECT_THAT(group_names(RawSandboxHttp(sandbox().admin_config()).get_json("/apis")),
              Not(Contains("kubeflow.org")));
}

TEST_F(SandboxCrdTest, ClusterScopedCrdWithoutStatusTakesStatusInAPlainUpdate) {
  install_crd(client(), queue_crd(), resources::queues());
  const json list = client().discover("scheduling.volcano.sh", "v1beta1");
  ASSERT_TRUE(find_resource(list, "queues").is_object()) << list.dump();
  EXPECT_EQ(find_resource(list, "queues")["namespaced"], false);
  EXPECT_THAT(resource_names(list), Not(Contains("queues/status")));

  const json created =
      client().create(resources::queues(), "",
                      {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                       {"kind", "Queue"},
                       {"metadata", {{"name", "team-a"}}},
                       {"spec", {{"weight", 1}, {"capability", {{"nvidia.com/gpu", "32"}}}}}});
  EXPECT_FALSE(created["metadata"].contains("namespace"));
  EXPECT_EQ(created["metadata"]["generation"], 1);

  json queue = created;
  queue["status"] = {{"state", "Open"}};
  const json updated = client().update(resources::queues(), "", queue);
  EXPECT_EQ(updated["status"]["state"], "Open");
  EXPECT_EQ(updated["metadata"]["generation"], 2)
      << "without a status subresource, status is part of what generation counts";
  EXPECT_EQ(client().get(resources::queues(), "", "team-a")["status"]["state"], "Open");

  const Error no_status =
      expect_error([&] { client().get(resources::queues(), "", "team-a", "status"); });
  EXPECT_EQ(no_status.http_code(), 404);
  EXPECT_EQ(
      expect_error([&] { client().update_status(resources::queues(), "", updated); }).http_code(),
      404);
}

TEST_F(SandboxCrdTest, CrdHeldByAFinalizerIsServedUntilReleased) {
  json crd = tfjob_crd();
  crd["metadata"]["finalizers"] = {"example.com/hold"};
  install_crd(client(), crd, resources::job(api::JobKind::TFJob));
  client().remove(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org");
  EXPECT_NO_THROW(client().require_served(resources::job(api::JobKind::TFJob)))
      << "still terminating";

  client().patch(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org",
                 PatchType::Merge, {{"metadata", {{"finalizers", nullptr}}}});
  EXPECT_EQ(
      expect_error([&] { client().require_served(resources::job(api::JobKind::TFJob)); }).kind(),
      ErrorKind::NotFound);
}

TEST_F(SandboxCrdTest, CustomResourceUpdateWithoutResourceVersionIsInvalid) {
  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist"));
  // Built-in types take an unconditional update; custom resources refuse one.
  const Error e = expect_error(
      [&] { client().update(resources::job(api::JobKind::TFJob), "default", tfjob("mnist", 4)); });
  EXPECT_EQ(e.kind(), ErrorKind::Invalid);
  EXPECT_THAT(e.message(), HasSubstr("metadata.resourceVersion"));
}

TEST_F(SandboxCrdTest, UpdatingACrdChangesWhatIsServed) {
  install_crd(client(), crd_manifest("kubeflow.org", "v1", "tfjobs", "TFJob", "Namespaced", false),
              resources::job(api::JobKind::TFJob));
  EXPECT_THAT(resource_names(client().discover("kubeflow.org", "v1")),
              Not(Contains("tfjobs/status")));

  json crd = client().get(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org");
  crd["spec"]["versions"][0]["subresources"] = {{"status", json::object()}};
  client().update(resources::custom_resource_definitions(), "", crd);
  EXPECT_THAT(resource_names(client().discover("kubeflow.org", "v1")), Contains("tfjobs/status"));

  const json job = client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist"));
  json with_status = job;
  with_status["status"] = {
      {"conditions", json::array({{{"type", "Created"}, {"status", "True"}}})}};
  const json written =
      client().update_status(resources::job(api::JobKind::TFJob), "default", with_status);
  EXPECT_EQ(condition_status(written, "Created"), "True");
}

// --- metadata ---------------------------------------------------------------------------------

TEST_F(SandboxMetadataTest, CreateSetsUidCreationTimestampAndResourceVersion) {
  json requested = configmap("a");
  requested["metadata"]["uid"] = "chosen-by-the-client";
  requested["metadata"]["creationTimestamp"] = "2001-01-01T00:00:00Z";
  const json a = client().create(resources::configmaps(), "default", requested);
  const json b = client().create(resources::configmaps(), "default", configmap("b"));

  const std::string uid = a["metadata"]["uid"];
  EXPECT_THAT(uid, MatchesRegex("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
  EXPECT_NE(uid, b["metadata"]["uid"]);
  EXPECT_THAT(a["metadata"]["creationTimestamp"].get<std::string>(),
              MatchesRegex("20[2-9][0-9]-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"));
  EXPECT_FALSE(a["metadata"]["resourceVersion"].get<std::string>().empty());
  EXPECT_EQ(a["metadata"]["namespace"], "default");
  EXPECT_EQ(client().get(resources::configmaps(), "default", "a")["metadata"]["uid"], uid);
}

TEST_F(SandboxMetadataTest, ResourceVersionIncreasesAcrossAllResourceTypes) {
  const json cm = client().create(resources::configmaps(), "default", configmap("a"));
  const json secret =
      client().create(resources::secrets(), "default",
                      {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s"}}}});
  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  const json job = client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist"));
  json changed = cm;
  changed["data"]["key"] = "other";
  const json updated = client().update(resources::configmaps(), "default", changed);

  EXPECT_LT(rv_of(cm), rv_of(secret));
  EXPECT_LT(rv_of(secret), rv_of(job));
  EXPECT_LT(rv_of(job), rv_of(updated));
  const json list = client().list(resources::configmaps(), "default");
  EXPECT_GE(std::stoull(list["metadata"]["resourceVersion"].get<std::string>()), rv_of(updated));
}

TEST_F(SandboxMetadataTest, GenerationIsBumpedBySpecChangesOnly) {
  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  json job = client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist", 2));
  EXPECT_EQ(job["metadata"]["generation"], 1);

  job["metadata"]["labels"] = {{"team", "vision"}};
  job = client().update(resources::job(api::JobKind::TFJob), "default", job);
  EXPECT_EQ(job["metadata"]["generation"], 1) << "a label change is not a spec change";

  job["status"] = {{"conditions", json::array({{{"type", "Created"}, {"status", "True"}}})}};
  job = client().update_status(resources::job(api::JobKind::TFJob), "default", job);
  EXPECT_EQ(job["metadata"]["generation"], 1) << "a status write is not a spec change";

  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4;
  job = client().update(resources::job(api::JobKind::TFJob), "default", job);
  EXPECT_EQ(job["metadata"]["generation"], 2);
  job = client().patch(resources::job(api::JobKind::TFJob), "default", "mnist", PatchType::Merge,
                       {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  EXPECT_EQ(job["metadata"]["generation"], 3);
}

TEST_F(SandboxMetadataTest, GenerateNameMakesAFreshNameEachTime) {
  json request = configmap("");
  request["metadata"].erase("name");
  request["metadata"]["generateName"] = "worker-";
  const std::string first =
      client().create(resources::configmaps(), "default", request)["metadata"]["name"];
  const std::string second =
      client().create(resources::configmaps(), "default", request)["metadata"]["name"];
  EXPECT_THAT(first, MatchesRegex("worker-[a-z0-9]{5}"));
  EXPECT_THAT(second, MatchesRegex("worker-[a-z0-9]{5}"));
  EXPECT_NE(first, second);
  EXPECT_EQ(client().get(resources::configmaps(), "default", first)["metadata"]["generateName"],
            "worker-");
}

TEST_F(SandboxMetadataTest, LabelsAnnotationsAndOwnerReferencesAreKept) {
  const json owner = client().create(resources::configmaps(), "default", configmap("owner"));
  json dependent = owned_configmap("dependent", owner);
  dependent["metadata"]["labels"] = {{"training.kubeflow.org/job-name", "mnist"}};
  dependent["metadata"]["annotations"] = {{"example.com/note", "kept"}};
  client().create(resources::configmaps(), "default", dependent);

  const json got = client().get(resources::configmaps(), "default", "dependent");
  EXPECT_EQ(got["metadata"]["ownerReferences"], dependent["metadata"]["ownerReferences"]);
  EXPECT_EQ(got["metadata"]["labels"]["training.kubeflow.org/job-name"], "mnist");
  EXPECT_EQ(got["metadata"]["annotations"]["example.com/note"], "kept");
}

TEST_F(SandboxMetadataTest, FinalizersHoldDeletionUntilRemoved) {
  json held = configmap("held");
  held["metadata"]["finalizers"] = {"example.com/hold"};
  const json created = client().create(resources::configmaps(), "default", held);

  const json deleting = client().remove(resources::configmaps(), "default", "held");
  EXPECT_TRUE(deleting["metadata"].contains("deletionTimestamp")) << deleting.dump();
  const json still = client().get(resources::configmaps(), "default", "held");
  EXPECT_TRUE(still["metadata"].contains("deletionTimestamp"));
  EXPECT_THAT(still["metadata"]["finalizers"], ElementsAre("example.com/hold"));

  client().patch(resources::configmaps(), "default", "held", PatchType::Merge,
                 {{"metadata", {{"finalizers", nullptr}}}});
  EXPECT_EQ(expect_error([&] { client().get(resources::configmaps(), "default", "held"); }).kind(),
            ErrorKind::NotFound);

  kube::WatchOptions from_create;
  from_create.resource_version = created["metadata"]["resourceVersion"];
  // As kube-apiserver: the DELETE sets deletionTimestamp (MODIFIED); the write that empties the
  // finalizers of a terminating object deletes it instead of storing it (DELETED only).
  const auto events = collect_events(client(), resources::configmaps(), "default", from_create, 2);
  EXPECT_THAT(describe(events), ElementsAre("MODIFIED held", "DELETED held"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].object["metadata"].contains("deletionTimestamp"));
}

// --- errors -----------------------------------------------------------------------------------

TEST_F(SandboxErrorTest, MissingObjectIsNotFoundWithAStatusNamingIt) {
  const Error e = expect_error([&] { client().get(resources::pods(), "default", "nope"); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.http_code(), 404);
  EXPECT_EQ(e.status()["message"], "pods \"nope\" not found");
  EXPECT_EQ(e.status()["kind"], "Status");
  EXPECT_EQ(e.status()["status"], "Failure");
  EXPECT_EQ(e.status()["reason"], "NotFound");
  EXPECT_EQ(e.status()["code"], 404);
  EXPECT_EQ(e.status()["details"]["name"], "nope");
  EXPECT_EQ(e.status()["details"]["kind"], "pods");
}

TEST_F(SandboxErrorTest, CreatingAnExistingNameIsAlreadyExists) {
  client().create(resources::configmaps(), "default", configmap("a"));
  const Error e =
      expect_error([&] { client().create(resources::configmaps(), "default", configmap("a")); });
  EXPECT_EQ(e.kind(), ErrorKind::AlreadyExists);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.status()["reason"], "AlreadyExists");
  EXPECT_EQ(e.status()["message"], "configmaps \"a\" already exists");
}

TEST_F(SandboxErrorTest, StaleResourceVersionIsAConflict) {
  const json v1 = client().create(resources::configmaps(), "default", configmap("a"));
  json first = v1;
  first["data"]["key"] = "first";
  client().update(resources::configmaps(), "default", first);

  json stale = v1;
  stale["data"]["key"] = "second";
  const Error e = expect_error([&] { client().update(resources::configmaps(), "default", stale); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.status()["reason"], "Conflict");
  EXPECT_THAT(e.message(), HasSubstr("Operation cannot be fulfilled on configmaps \"a\": the "
                                     "object has been modified"));
  EXPECT_EQ(client().get(resources::configmaps(), "default", "a")["data"]["key"], "first");
}

TEST_F(SandboxErrorTest, UpdateCarryingTheUidOfARecreatedObjectIsAPreconditionConflict) {
  const json old = client().create(resources::configmaps(), "default", configmap("a"));
  client().remove(resources::configmaps(), "default", "a");
  const json now = client().create(resources::configmaps(), "default", configmap("a"));

  json stale = old;
  stale["metadata"]["resourceVersion"] = now["metadata"]["resourceVersion"];
  const Error e = expect_error([&] { client().update(resources::configmaps(), "default", stale); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.status()["reason"], "Conflict");
  EXPECT_EQ(e.status()["message"],
            "Operation cannot be fulfilled on configmaps \"a\": StorageError: invalid object, "
            "Code: 4, Key: /registry/configmaps/default/a, ResourceVersion: 0, "
            "AdditionalErrorMsg: Precondition failed: UID in precondition: " +
                old["metadata"]["uid"].get<std::string>() +
                ", UID in object meta: " + now["metadata"]["uid"].get<std::string>());

  // Deleted and not re-created: still the precondition conflict, with no uid in object meta
  // (checked on kube-apiserver 1.26); without a uid the PUT is a plain 404.
  client().remove(resources::configmaps(), "default", "a");
  const Error gone =
      expect_error([&] { client().update(resources::configmaps(), "default", stale); });
  EXPECT_EQ(gone.kind(), ErrorKind::Conflict);
  EXPECT_THAT(
      gone.status()["message"].get<std::string>(),
      ::testing::EndsWith("Precondition failed: UID in precondition: " +
                          old["metadata"]["uid"].get<std::string>() + ", UID in object meta: "));
  stale["metadata"].erase("uid");
  const Error missing =
      expect_error([&] { client().update(resources::configmaps(), "default", stale); });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);
  EXPECT_EQ(missing.status()["message"], "configmaps \"a\" not found");
}

// Whatever a handler throws, the server answers (a 500 Status when it is no API error, as
// errors.NewInternalError words it), logs it and serves on. Here the store's clock, read when
// a list is printed as a Table, throws a plain std::exception.
TEST(SandboxInternalErrorTest, AnExceptionWhileServingIsA500AndTheServerServesOn) {
  std::atomic<bool> clock_broken{false};
  sandbox::StoreOptions store_options;
  store_options.now = [&] {
    if (clock_broken)
      throw std::runtime_error("the clock is broken");
    return std::chrono::system_clock::now();
  };
  sandbox::Store store(store_options);
  sandbox::install_builtin_resources(store);
  std::mutex log_mu;
  std::vector<std::string> log;
  sandbox::ApiServerOptions api_options;
  api_options.error_log = [&](std::string_view line) {
    std::lock_guard lock(log_mu);
    log.emplace_back(line);
  };
  sandbox::ApiServer api(store, api_options);
  const testing::TestPki& pki = testing::TestPki::shared();
  sandbox::HttpsServerConfig http_config;
  http_config.cert_pem = pki.server.cert_pem;
  http_config.key_pem = pki.server.key_pem;
  http_config.client_ca_pem = pki.ca.cert_pem;
  sandbox::HttpsServer server(
      http_config, [&](const sandbox::Request& request, sandbox::ResponseWriter& response) {
        api.handle(request, response);
      });
  server.start();
  kube::RestConfig config;
  config.server = "https://127.0.0.1:" + std::to_string(server.port());
  config.tls.ca_pem = pki.ca.cert_pem;
  config.auth.client_cert_pem = pki.client.cert_pem;
  config.auth.client_key_pem = pki.client.key_pem;
  Client client(config);
  client.create(resources::configmaps(), "default", configmap("a"));

  clock_broken = true;
  RawSandboxHttp http(config);
  const auto broken = http.send("GET", "/api/v1/namespaces/default/configmaps", "", "",
                                {{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}});
  EXPECT_EQ(broken.status, 500);
  const json status = json::parse(broken.body, nullptr, false);
  EXPECT_EQ(status["kind"], "Status") << broken.body;
  EXPECT_EQ(status["status"], "Failure");
  EXPECT_EQ(status["reason"], "InternalError");
  EXPECT_EQ(status["code"], 500);
  EXPECT_EQ(status["message"], "Internal error occurred: the clock is broken");
  EXPECT_EQ(status["details"], json({{"causes", {{{"message", "the clock is broken"}}}}}));
  {
    std::lock_guard lock(log_mu);
    EXPECT_THAT(
        log, Contains(HasSubstr("GET /api/v1/namespaces/default/configmaps: the clock is broken")));
  }

  clock_broken = false;
  EXPECT_EQ(client.get(resources::configmaps(), "default", "a")["metadata"]["name"], "a");
  server.stop();
}

TEST_F(SandboxErrorTest, BadNameIsInvalidNamingTheField) {
  const Error e = expect_error(
      [&] { client().create(resources::configmaps(), "default", configmap("Bad_Name")); });
  EXPECT_EQ(e.kind(), ErrorKind::Invalid);
  EXPECT_EQ(e.http_code(), 422);
  EXPECT_EQ(e.status()["reason"], "Invalid");
  EXPECT_THAT(e.message(), HasSubstr("metadata.name: Invalid value: \"Bad_Name\""));
  EXPECT_THAT(e.message(), HasSubstr("RFC 1123"));
  ASSERT_TRUE(e.status()["details"]["causes"].is_array()) << e.status().dump();
  EXPECT_EQ(e.status()["details"]["causes"][0]["field"], "metadata.name");

  json nameless = configmap("");
  nameless["metadata"].erase("name");
  const Error missing =
      expect_error([&] { client().create(resources::configmaps(), "default", nameless); });
  EXPECT_EQ(missing.kind(), ErrorKind::Invalid);
  EXPECT_THAT(missing.message(), HasSubstr("metadata.name: Required value"));
}

TEST_F(SandboxErrorTest, PodWithoutImageIsInvalidNamingTheField) {
  json pod = pod_manifest("no-image");
  pod["spec"]["containers"][0].erase("image");
  const Error e = expect_error([&] { client().create(resources::pods(), "default", pod); });
  EXPECT_EQ(e.kind(), ErrorKind::Invalid);
  EXPECT_EQ(e.http_code(), 422);
  EXPECT_EQ(e.status()["message"],
            "Pod \"no-image\" is invalid: spec.containers[0].image: Required value");
  // client-go and kubectl read the offending fields from details.causes.
  EXPECT_EQ(e.status()["details"]["kind"], "Pod");
  EXPECT_EQ(e.status()["details"]["name"], "no-image");
  ASSERT_TRUE(e.status()["details"]["causes"].is_array()) << e.status().dump();
  EXPECT_EQ(e.status()["details"]["causes"][0]["field"], "spec.containers[0].image");
  EXPECT_EQ(e.status()["details"]["causes"][0]["reason"], "FieldValueRequired");
}

TEST_F(SandboxErrorTest, ConfigMapDataThatIsNotStringsIsABadRequest) {
  // The server cannot decode the body into a v1.ConfigMap (data is map[string]string): 400
  // BadRequest with the decoder's words (handlers/rest.go transformDecodeError) on a create or
  // an update.
  json cm = configmap("numbers");
  cm["data"]["replicas"] = 3;
  Error e = expect_error([&] { client().create(resources::configmaps(), "default", cm); });
  EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
  EXPECT_EQ(e.status(), json::parse(R"({
      "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
      "message": "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string",
      "reason": "BadRequest", "code": 400})"));

  cm["data"] = {{"nested", {{"a", "b"}}}};
  EXPECT_THAT(
      expect_error([&] { client().create(resources::configmaps(), "default", cm); }).message(),
      HasSubstr("cannot unmarshal object into Go struct field ConfigMap.data of type string"));
  cm["data"] = json::array({"a"});
  EXPECT_THAT(
      expect_error([&] { client().create(resources::configmaps(), "default", cm); }).message(),
      HasSubstr("cannot unmarshal array into Go struct field ConfigMap.data of type "
                "map[string]string"));

  // A null value decodes as an empty string.
  cm["data"] = {{"empty", nullptr}, {"text", "x"}};
  json created = client().create(resources::configmaps(), "default", cm);
  EXPECT_EQ(created["data"], json({{"empty", ""}, {"text", "x"}}));

  created["data"]["flag"] = true;
  EXPECT_THAT(
      expect_error([&] { client().update(resources::configmaps(), "default", created); }).message(),
      HasSubstr("cannot unmarshal bool into Go struct field ConfigMap.data of type string"));
  // A patch whose result does not decode is applyPatchToCurrentObject's 422 on `patch`.
  const Error patched = expect_error([&] {
    client().patch(resources::configmaps(), "default", "numbers", kube::PatchType::Merge,
                   {{"binaryData", {{"blob", 1}}}});
  });
  EXPECT_EQ(patched.kind(), ErrorKind::Invalid);
  EXPECT_EQ(patched.http_code(), 422);
  EXPECT_EQ(patched.status()["details"].size(), 1u) << "only causes: no kind, no name";
  EXPECT_EQ(patched.status()["details"]["causes"][0]["field"], "patch");
  EXPECT_THAT(patched.message(),
              HasSubstr(": json: cannot unmarshal number into Go struct field ConfigMap.binaryData "
                        "of type []uint8"));
  const std::string message = patched.status()["message"];
  EXPECT_EQ(message.rfind(" \"\" is invalid: patch: Invalid value: \"{", 0), 0u) << message;
}

TEST_F(SandboxErrorTest, MissingNamespaceIsNotFound) {
  const Error e =
      expect_error([&] { client().create(resources::configmaps(), "nowhere", configmap("a")); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.http_code(), 404);
  EXPECT_EQ(e.status()["message"], "namespaces \"nowhere\" not found");
}

TEST_F(SandboxErrorTest, NamespaceInTheBodyMustMatchTheUrl) {
  json cm = configmap("a");
  cm["metadata"]["namespace"] = "kube-system";
  const Error e = expect_error([&] { client().create(resources::configmaps(), "default", cm); });
  EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_THAT(e.message(), HasSubstr("does not match the namespace sent on the request"));
}

TEST_F(SandboxErrorTest, UnsupportedMethodIs405) {
  client().create(resources::configmaps(), "default", configmap("a"));
  const Error e = expect_error([&] {
    client().patch(resources::pods(), "default", "any", PatchType::Merge, json::object(),
                   {.subresource = "log"});
  });
  EXPECT_EQ(e.kind(), ErrorKind::MethodNotAllowed);
  EXPECT_EQ(e.http_code(), 405);
  EXPECT_EQ(e.status()["reason"], "MethodNotAllowed");

  RawSandboxHttp http(sandbox().admin_config());
  const auto put_collection =
      http.send("PUT", "/api/v1/namespaces/default/configmaps", configmap("a").dump());
  EXPECT_EQ(put_collection.status, 405);
  EXPECT_EQ(json::parse(put_collection.body)["reason"], "MethodNotAllowed");
}

TEST_F(SandboxErrorTest, StrategicMergeOnACustomResourceIs415) {
  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist"));
  const Error e = expect_error([&] {
    client().patch(resources::job(api::JobKind::TFJob), "default", "mnist", PatchType::Strategic,
                   {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  });
  EXPECT_EQ(e.kind(), ErrorKind::UnsupportedMediaType);
  EXPECT_EQ(e.http_code(), 415);
  EXPECT_EQ(e.status()["reason"], "UnsupportedMediaType");
  EXPECT_THAT(e.message(), HasSubstr("application/merge-patch+json"));
  EXPECT_THAT(e.message(), Not(HasSubstr("strategic")));

  client().create(resources::configmaps(), "default", configmap("a"));
  RawSandboxHttp http(sandbox().admin_config());
  const auto unknown = http.send("PATCH", "/api/v1/namespaces/default/configmaps/a",
                                 R"({"data":{"k":"v"}})", "text/plain");
  EXPECT_EQ(unknown.status, 415);
}

// --- list -------------------------------------------------------------------------------------

TEST_F(SandboxListTest, ServicesPrintAsTheServersTable) {
  // What `kubectl create service clusterip web --tcp=80:80 --tcp=443:8443` sends.
  client().create(
      resources::services(), "default",
      {{"apiVersion", "v1"},
       {"kind", "Service"},
       {"metadata", {{"name", "web"}, {"labels", {{"app", "web"}}}}},
       {"spec",
        {{"type", "ClusterIP"},
         {"selector", {{"app", "web"}}},
         {"ports",
          {{{"name", "80-80"}, {"port", 80}, {"protocol", "TCP"}, {"targetPort", 80}},
           {{"name", "443-8443"}, {"port", 443}, {"protocol", "TCP"}, {"targetPort", 8443}}}}}}});
  RawSandboxHttp http(sandbox().admin_config());
  const std::string accept =
      "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta."
      "k8s.io,application/json";
  const auto list = http.send("GET", "/api/v1/namespaces/default/services?limit=500", "", "",
                              {{"Accept", accept}});
  ASSERT_EQ(list.status, 200) << list.body;
  const json table = json::parse(list.body);
  ASSERT_EQ(table["rows"].size(), 1u) << list.body;
  const json cells = table["rows"][0]["cells"];
  ASSERT_EQ(cells.size(), 7u) << cells.dump();
  EXPECT_EQ(cells[0], "web");
  EXPECT_EQ(cells[1], "ClusterIP");
  EXPECT_THAT(cells[2].get<std::string>(), MatchesRegex("10\\.96\\.[0-9]+\\.[0-9]+"));
  EXPECT_EQ(cells[3], "<none>");
  EXPECT_EQ(cells[4], "80/TCP,443/TCP");
  EXPECT_EQ(cells[6], "app=web");

  const auto one =
      http.send("GET", "/api/v1/namespaces/default/services/web", "", "", {{"Accept", accept}});
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["rows"][0]["cells"], cells);
}

TEST_F(SandboxListTest, LabelSelectorsSupportEveryOperator) {
  client().create(resources::configmaps(), "default",
                  configmap("web-front", {{"app", "web"}, {"tier", "front"}}));
  client().create(resources::configmaps(), "default",
                  configmap("web-back", {{"app", "web"}, {"tier", "back"}}));
  client().create(resources::configmaps(), "default", configmap("db", {{"app", "db"}}));
  client().create(resources::configmaps(), "default", configmap("plain"));
  auto select = [&](const std::string& selector) {
    return names_of(
        client().list(resources::configmaps(), "default", {.label_selector = selector}));
  };
  EXPECT_THAT(select("app=web"), UnorderedElementsAre("web-front", "web-back"));
  EXPECT_THAT(select("app==web"), UnorderedElementsAre("web-front", "web-back"));
  EXPECT_THAT(select("app!=web"), UnorderedElementsAre("db", "plain"));
  EXPECT_THAT(select("app in (web,db)"), UnorderedElementsAre("web-front", "web-back", "db"));
  EXPECT_THAT(select("app notin (web)"), UnorderedElementsAre("db", "plain"));
  EXPECT_THAT(select("tier"), UnorderedElementsAre("web-front", "web-back"));
  EXPECT_THAT(select("!tier"), UnorderedElementsAre("db", "plain"));
  EXPECT_THAT(select("app=web,tier!=front"), UnorderedElementsAre("web-back"));
  EXPECT_THAT(select("app=nothing"), IsEmpty());

  const Error bad = expect_error([&] { select("app in web"); });
  EXPECT_EQ(bad.kind(), ErrorKind::BadRequest);
  EXPECT_EQ(bad.http_code(), 400);
}

TEST_F(SandboxListTest, FieldSelectorsOnPods) {
  client().create(
      resources::namespaces(), "",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "team-a"}}}});
  json placed = pod_manifest("placed", {{"sandbox.trainctl.io/run-seconds", "forever"}});
  placed["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", "sandbox-node-2"}};
  client().create(resources::pods(), "default", placed);
  json stuck = pod_manifest("stuck");
  stuck["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", "no-such-node"}};
  client().create(resources::pods(), "default", stuck);
  client().create(resources::pods(), "team-a", stuck);
  ASSERT_TRUE(wait_until([&] {
    return client().get(resources::pods(), "default", "placed")["status"].value("phase", "") ==
           "Running";
  }));

  auto select = [&](std::string_view ns, const std::string& selector) {
    std::vector<std::string> out;
    const json list = client().list(resources::pods(), ns, {.field_selector = selector});
    for (const auto& pod : list["items"])
      out.push_back(pod["metadata"]["namespace"].get<std::string>() + "/" +
                    pod["metadata"]["name"].get<std::string>());
    return out;
  };
  EXPECT_THAT(select("default", "metadata.name=stuck"), ElementsAre("default/stuck"));
  EXPECT_THAT(select("", "metadata.name=stuck"),
              UnorderedElementsAre("default/stuck", "team-a/stuck"));
  EXPECT_THAT(select("", "metadata.namespace=team-a"), ElementsAre("team-a/stuck"));
  EXPECT_THAT(select("default", "status.phase=Running"), ElementsAre("default/placed"));
  EXPECT_THAT(select("", "status.phase=Pending"),
              UnorderedElementsAre("default/stuck", "team-a/stuck"));
  EXPECT_THAT(select("", "spec.nodeName=sandbox-node-2"), ElementsAre("default/placed"));
  EXPECT_THAT(select("default", "spec.nodeName="), ElementsAre("default/stuck"));
  EXPECT_THAT(select("", "status.phase!=Pending,metadata.namespace=default"),
              ElementsAre("default/placed"));

  const Error bad = expect_error(
      [&] { client().list(resources::pods(), "default", {.field_selector = "spec.image=x"}); });
  EXPECT_EQ(bad.kind(), ErrorKind::BadRequest);
  EXPECT_THAT(bad.message(), HasSubstr("field label not supported: spec.image"));
}

TEST_F(SandboxListTest, LimitAndContinuePageThroughAConsistentSnapshot) {
  for (int i = 0; i < 7; ++i)
    client().create(resources::configmaps(), "default", configmap("cm-" + std::to_string(i)));

  const json first = client().list(resources::configmaps(), "default", {.limit = 3});
  EXPECT_THAT(names_of(first), ElementsAre("cm-0", "cm-1", "cm-2"));
  const std::string token = first["metadata"].value("continue", "");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(first["metadata"]["remainingItemCount"], 4);

  // Pages after the first show the list as it was when the first was read.
  client().create(resources::configmaps(), "default", configmap("cm-9-late"));
  client().remove(resources::configmaps(), "default", "cm-5");
  const json second =
      client().list(resources::configmaps(), "default", {.limit = 3, .continue_token = token});
  EXPECT_THAT(names_of(second), ElementsAre("cm-3", "cm-4", "cm-5"));
  EXPECT_EQ(second["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"]);

  const json all = client().list_all(resources::configmaps(), "default", {.limit = 2});
  EXPECT_THAT(names_of(all),
              ElementsAre("cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "cm-6", "cm-9-late"));
  EXPECT_FALSE(all["metadata"].contains("continue"));
}

TEST_F(SandboxListTest, ListCarriesTheResourceVersionItWasReadAt) {
  const json created = client().create(resources::configmaps(), "default", configmap("a"));
  const json list = client().list(resources::configmaps(), "default");
  EXPECT_EQ(list["kind"], "ConfigMapList");
  EXPECT_EQ(list["apiVersion"], "v1");
  const std::uint64_t list_rv = std::stoull(list["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_GE(list_rv, rv_of(created));

  EXPECT_THAT(names_of(client().list(resources::configmaps(), "default",
                                     {.resource_version = std::to_string(list_rv)})),
              ElementsAre("a"));
}

TEST_F(SandboxListTest, AVersionNotReachedIsWaitedForThenRefusedAsTheWatchCacheDoes) {
  const std::uint64_t current =
      std::stoull(client()
                      .list(resources::configmaps(), "default")["metadata"]["resourceVersion"]
                      .get<std::string>());
  const std::string wanted = std::to_string(current + 1000);
  // What kube-apiserver 1.26 answers after waiting 3 s for its cache, Retry-After header included.
  RawSandboxHttp http(sandbox().admin_config());
  const auto start = std::chrono::steady_clock::now();
  const auto response =
      http.send("GET", "/api/v1/namespaces/default/configmaps?resourceVersion=" + wanted);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(2900));
  EXPECT_LT(waited, std::chrono::seconds(6));
  EXPECT_EQ(response.status, 504);
  EXPECT_EQ(response.header("retry-after"), "1");
  const json status = json::parse(response.body);
  EXPECT_EQ(status["reason"], "Timeout");
  EXPECT_EQ(status["message"],
            fmt::format("Timeout: Too large resource version: {}, current: {}", wanted, current));
  EXPECT_EQ(
      status["details"],
      (json{{"causes",
             {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
            {"retryAfterSeconds", 1}}));
  // The client does not retry it: the server already waited, and one that lost its data (a
  // restore, a restart) never gets there.
  const auto sent = client().requests_sent();
  const Error refused = expect_error(
      [&] { client().list(resources::configmaps(), "default", {.resource_version = wanted}); });
  EXPECT_EQ(client().requests_sent(), sent + 1);
  EXPECT_TRUE(kube::is_too_large_resource_version(refused)) << refused.what();
  EXPECT_EQ(refused.kind(), ErrorKind::Timeout);

  // A version that is no number: the real server's 500 without a reason, for lists and watches.
  for (const char* path :
       {"/api/v1/namespaces/default/configmaps?resourceVersion=abc",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=abc"}) {
    const auto invalid = http.send("GET", path);
    EXPECT_EQ(invalid.status, 500) << path;
    const json body = json::parse(invalid.body);
    EXPECT_EQ(body["message"],
              "resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": "
              "invalid syntax");
    EXPECT_FALSE(body.contains("reason"));
  }
}

// --- watch ------------------------------------------------------------------------------------

TEST_F(SandboxWatchTest, FromAResourceVersionEveryLaterEventArrivesInOrder) {
  client().create(resources::configmaps(), "default", configmap("before"));
  const std::string start =
      client().list(resources::configmaps(), "default")["metadata"]["resourceVersion"];
  const json a = client().create(resources::configmaps(), "default", configmap("a"));
  json changed = a;
  changed["data"]["key"] = "changed";
  client().update(resources::configmaps(), "default", changed);
  client().remove(resources::configmaps(), "default", "a");

  kube::WatchOptions options;
  options.resource_version = start;
  const auto events = collect_events(client(), resources::configmaps(), "default", options, 3);
  EXPECT_THAT(describe(events), ElementsAre("ADDED a", "MODIFIED a", "DELETED a"));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].object["data"]["key"], "changed");
  EXPECT_EQ(events[0].object["apiVersion"], "v1");
  EXPECT_EQ(events[0].object["kind"], "ConfigMap");
  EXPECT_LT(rv_of(events[0].object), rv_of(events[1].object));
  EXPECT_LT(rv_of(events[1].object), rv_of(events[2].object));
}

TEST_F(SandboxWatchTest, WithoutAResourceVersionExistingObjectsArriveFirstThenLiveEvents) {
  client().create(resources::configmaps(), "default", configmap("old", {{"app", "web"}}));
  client().create(resources::configmaps(), "default", configmap("other", {{"app", "db"}}));
  std::vector<WatchEvent> events;
  std::jthread writer;
  kube::WatchOptions options;
  options.label_selector = "app=web";
  options.timeout_seconds = 5;
  client().watch(resources::configmaps(), "default", options, [&](const WatchEvent& e) {
    if (e.type == WatchEventType::Bookmark)
      return true;
    events.push_back(e);
    if (events.size() == 1) {
      writer = std::jthread([this] {
        client().create(resources::configmaps(), "default", configmap("skipped", {{"app", "db"}}));
        client().create(resources::configmaps(), "default", configmap("new", {{"app", "web"}}));
      });
    }
    return events.size() < 2;
  });
  EXPECT_THAT(describe(events), ElementsAre("ADDED old", "ADDED new"));
}

TEST_F(SandboxWatchTest, BookmarksArriveWhenAskedFor) {
  const json cm = client().create(resources::configmaps(), "default", configmap("a"));
  std::vector<WatchEvent> bookmarks;
  kube::WatchOptions options;
  options.resource_version = cm["metadata"]["resourceVersion"];
  options.allow_bookmarks = true;
  options.timeout_seconds = 3;
  client().watch(resources::configmaps(), "default", options, [&](const WatchEvent& e) {
    if (e.type == WatchEventType::Bookmark)
      bookmarks.push_back(e);
    return bookmarks.empty();
  });
  ASSERT_THAT(bookmarks, SizeIs(1)) << "no BOOKMARK within the watch's 3 s";
  EXPECT_EQ(bookmarks[0].object["kind"], "ConfigMap");
  EXPECT_GE(rv_of(bookmarks[0].object), rv_of(cm));
}

TEST_F(SandboxWatchTest, BookmarksDoNotArriveUnasked) {
  kube::WatchOptions options;
  options.resource_version =
      client().list(resources::configmaps(), "default")["metadata"]["resourceVersion"];
  options.allow_bookmarks = false;
  options.timeout_seconds = 1;  // the sandbox would have sent one after 1 s of silence
  std::size_t bookmarks = 0;
  client().watch(resources::configmaps(), "default", options, [&](const WatchEvent& e) {
    bookmarks += e.type == WatchEventType::Bookmark ? 1 : 0;
    return true;
  });
  EXPECT_EQ(bookmarks, 0u);
}

TEST_F(SandboxWatchTest, TimeoutSecondsEndsTheWatch) {
  kube::WatchOptions options;
  options.resource_version =
      client().list(resources::pods(), "default")["metadata"]["resourceVersion"];
  options.timeout_seconds = 1;
  options.allow_bookmarks = false;
  const auto started = std::chrono::steady_clock::now();
  const kube::WatchResult result =
      client().watch(resources::pods(), "default", options, [](const WatchEvent&) { return true; });
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.events, 0u);
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::milliseconds(2500));
}

TEST(SandboxWatchWindowTest, ResumingFromBeyondTheWindowIsGone) {
  LocalSandbox local([](sandbox::SandboxOptions& options) { options.watch_window = 5; });
  Client& client = local.client();
  const json first = client.create(resources::configmaps(), "default", configmap("first"));
  client.create(resources::configmaps(), "default", configmap("second"));
  const json page = client.list(resources::configmaps(), "default", {.limit = 1});
  const std::string token = page["metadata"].value("continue", "");
  for (int i = 0; i < 20; ++i)
    client.create(resources::configmaps(), "default", configmap("cm-" + std::to_string(i)));

  kube::WatchOptions options;
  options.resource_version = first["metadata"]["resourceVersion"];
  options.timeout_seconds = 5;
  const Error e = expect_error([&] {
    client.watch(resources::configmaps(), "default", options,
                 [](const WatchEvent&) { return true; });
  });
  EXPECT_EQ(e.kind(), ErrorKind::Gone);
  EXPECT_EQ(e.http_code(), 410);
  EXPECT_EQ(e.reason(), "Expired");

  ASSERT_FALSE(token.empty());
  const Error expired = expect_error([&] {
    client.list(resources::configmaps(), "default", {.limit = 1, .continue_token = token});
  });
  EXPECT_EQ(expired.kind(), ErrorKind::Gone);

  // A recent version is still inside the window.
  options.resource_version =
      client.list(resources::configmaps(), "default")["metadata"]["resourceVersion"];
  options.timeout_seconds = 1;
  EXPECT_NO_THROW(client.watch(resources::configmaps(), "default", options,
                               [](const WatchEvent&) { return true; }));
}

// --- update and patch -------------------------------------------------------------------------

TEST_F(SandboxWriteTest, UpdateSucceedsOnlyFromTheCurrentResourceVersion) {
  const json v1 = client().create(resources::configmaps(), "default", configmap("a"));
  json next = v1;
  next["data"]["key"] = "two";
  const json v2 = client().update(resources::configmaps(), "default", next);
  EXPECT_GT(rv_of(v2), rv_of(v1));
  EXPECT_EQ(v2["data"]["key"], "two");

  next["data"]["key"] = "three";  // still carries v1's resourceVersion
  EXPECT_EQ(expect_error([&] { client().update(resources::configmaps(), "default", next); }).kind(),
            ErrorKind::Conflict);

  // A built-in object updated without a resourceVersion is written unconditionally.
  next["metadata"].erase("resourceVersion");
  EXPECT_EQ(client().update(resources::configmaps(), "default", next)["data"]["key"], "three");
}

TEST_F(SandboxWriteTest, MergePatchSetsAndRemovesFields) {
  json cm = configmap("a", {{"app", "web"}, {"tier", "front"}});
  cm["data"]["other"] = "x";
  client().create(resources::configmaps(), "default", cm);
  const json patched =
      client().patch(resources::configmaps(), "default", "a", PatchType::Merge,
                     {{"metadata", {{"labels", {{"tier", nullptr}, {"team", "vision"}}}}},
                      {"data", {{"key", "new"}}}});
  EXPECT_EQ(patched["metadata"]["labels"], json({{"app", "web"}, {"team", "vision"}}));
  EXPECT_EQ(patched["data"], json({{"key", "new"}, {"other", "x"}}));

  const Error stale = expect_error([&] {
    client().patch(resources::configmaps(), "default", "a", PatchType::Merge,
                   {{"metadata", {{"resourceVersion", "1"}}}, {"data", {{"key", "stale"}}}});
  });
  EXPECT_EQ(stale.kind(), ErrorKind::Conflict) << "a resourceVersion in a patch is a precondition";
  EXPECT_EQ(expect_error([&] {
              client().patch(resources::configmaps(), "default", "missing", PatchType::Merge,
                             {{"data", {{"k", "v"}}}});
            }).kind(),
            ErrorKind::NotFound);
}

TEST_F(SandboxWriteTest, JsonPatchAppliesOperationsInOrder) {
  client().create(resources::configmaps(), "default", configmap("a", {{"app", "web"}}));
  const json patched = client().patch(
      resources::configmaps(), "default", "a", PatchType::Json,
      json::array({{{"op", "test"}, {"path", "/data/key"}, {"value", "value"}},
                   {{"op", "add"}, {"path", "/metadata/labels/team"}, {"value", "vision"}},
                   {{"op", "remove"}, {"path", "/metadata/labels/app"}},
                   {{"op", "replace"}, {"path", "/data/key"}, {"value", "replaced"}}}));
  EXPECT_EQ(patched["metadata"]["labels"], json({{"team", "vision"}}));
  EXPECT_EQ(patched["data"]["key"], "replaced");

  const Error failed = expect_error([&] {
    client().patch(resources::configmaps(), "default", "a", PatchType::Json,
                   json::array({{{"op", "test"}, {"path", "/data/key"}, {"value", "value"}},
                                {{"op", "add"}, {"path", "/data/x"}, {"value", "y"}}}));
  });
  EXPECT_EQ(failed.kind(), ErrorKind::Invalid);
  EXPECT_EQ(failed.http_code(), 422);
  EXPECT_FALSE(client().get(resources::configmaps(), "default", "a")["data"].contains("x"))
      << "a failed test operation applies nothing";
}

/// A pod with two containers that no scheduler or kubelet of the sandbox touches.
json unscheduled_two_container_pod(const std::string& name) {
  json pod = pod_manifest(name);
  pod["spec"]["schedulerName"] = "manual-scheduler";
  pod["spec"]["containers"].push_back({{"name", "helper"}, {"image", "busybox:1.36"}});
  return pod;
}

TEST_F(SandboxWriteTest, StrategicMergePatchMergesContainersByName) {
  client().create(resources::pods(), "default", unscheduled_two_container_pod("p"));
  const json patched = client().patch(
      resources::pods(), "default", "p", PatchType::Strategic,
      {{"metadata", {{"labels", {{"patched", "yes"}}}}},
       {"spec", {{"containers", json::array({{{"name", "helper"}, {"image", "busybox:1.37"}}})}}}});
  const json& containers = patched["spec"]["containers"];
  ASSERT_EQ(containers.size(), 2u) << containers.dump();
  EXPECT_EQ(containers[0]["name"], "main");
  EXPECT_EQ(containers[0]["image"], "busybox:1.36");
  EXPECT_EQ(containers[1]["name"], "helper");
  EXPECT_EQ(containers[1]["image"], "busybox:1.37");
  EXPECT_EQ(patched["metadata"]["labels"]["patched"], "yes");
}

TEST_F(SandboxWriteTest, ApplyPatchCreatesThenMerges) {
  const json applied =
      client().patch(resources::configmaps(), "default", "applied", PatchType::Apply,
                     {{"apiVersion", "v1"},
                      {"kind", "ConfigMap"},
                      {"metadata", {{"name", "applied"}, {"labels", {{"app", "web"}}}}},
                      {"data", {{"a", "1"}}}},
                     {.field_manager = "trainctl"});
  EXPECT_EQ(applied["data"], json({{"a", "1"}}));
  bool recorded = false;
  for (const auto& entry : applied["metadata"].value("managedFields", json::array()))
    recorded = recorded || (entry["manager"] == "trainctl" && entry["operation"] == "Apply");
  EXPECT_TRUE(recorded) << applied["metadata"].dump();

  const json merged =
      client().patch(resources::configmaps(), "default", "applied", PatchType::Apply,
                     {{"apiVersion", "v1"},
                      {"kind", "ConfigMap"},
                      {"metadata", {{"name", "applied"}}},
                      {"data", {{"b", "2"}}}},
                     {.field_manager = "other-manager"});
  EXPECT_EQ(merged["data"], json({{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(merged["metadata"]["labels"]["app"], "web");
  EXPECT_EQ(merged["metadata"]["uid"], applied["metadata"]["uid"]);
}

TEST_F(SandboxWriteTest, StatusSubresourceSplitsSpecAndStatusWritesOfACustomResource) {
  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  json job = client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist", 2));

  json both = job;
  both["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3;
  both["status"] = {{"conditions", json::array({{{"type", "Running"}, {"status", "True"}}})}};
  job = client().update(resources::job(api::JobKind::TFJob), "default", both);
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 3);
  EXPECT_EQ(condition_status(job, "Running"), "") << "a main write must not touch status";

  both = job;
  both["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 9;
  both["status"] = {{"conditions", json::array({{{"type", "Running"}, {"status", "True"}}})}};
  job = client().update_status(resources::job(api::JobKind::TFJob), "default", both);
  EXPECT_EQ(condition_status(job, "Running"), "True");
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 3)
      << "a status write must not touch spec";

  job = client().patch(resources::job(api::JobKind::TFJob), "default", "mnist", PatchType::Merge,
                       {{"status", {{"replicaStatuses", {{"Worker", {{"active", 3}}}}}}}},
                       {.subresource = "status"});
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"]["active"], 3);
  EXPECT_EQ(condition_status(
                client().get(resources::job(api::JobKind::TFJob), "default", "mnist", "status"),
                "Running"),
            "True");
}

// apiextensions-apiserver registry/customresource/etcd.go: ScaleREST Get/Update and
// scaleFromCustomResource; validator.go ValidateScaleSpec.
TEST_F(SandboxWriteTest, ScaleSubresourceReadsAndWritesTheCrdsReplicaPaths) {
  testing::install_training_crds(client());
  const json list = client().discover("kubeflow.org", "v1");
  const json scale_entry = find_resource(list, "pytorchjobs/scale");
  ASSERT_TRUE(scale_entry.is_object()) << list.dump();
  EXPECT_EQ(scale_entry["group"], "autoscaling");
  EXPECT_EQ(scale_entry["kind"], "Scale");
  EXPECT_FALSE(find_resource(list, "tfjobs/scale").is_object());

  json job = {{"apiVersion", "kubeflow.org/v1"},
              {"kind", "PyTorchJob"},
              {"metadata", {{"name", "ddp"}}},
              {"spec", {{"pytorchReplicaSpecs", {{"Worker", {{"replicas", 2}}}}}}}};
  job = client().create(resources::job(api::JobKind::PyTorchJob), "default", job);
  client().patch(
      resources::job(api::JobKind::PyTorchJob), "default", "ddp", PatchType::Merge,
      {{"status", {{"replicaStatuses", {{"Worker", {{"active", 2}, {"selector", "a=b"}}}}}}}},
      {.subresource = "status"});

  json scale = client().get(resources::job(api::JobKind::PyTorchJob), "default", "ddp", "scale");
  EXPECT_EQ(scale["kind"], "Scale");
  EXPECT_EQ(scale["apiVersion"], "autoscaling/v1");
  EXPECT_EQ(scale["metadata"]["uid"], job["metadata"]["uid"]);
  EXPECT_EQ(scale["spec"], json({{"replicas", 2}}));
  EXPECT_EQ(scale["status"], json({{"replicas", 2}, {"selector", "a=b"}}));

  scale = client().patch(resources::job(api::JobKind::PyTorchJob), "default", "ddp",
                         PatchType::Merge, {{"spec", {{"replicas", 4}}}}, {.subresource = "scale"});
  EXPECT_EQ(scale["spec"]["replicas"], 4);
  EXPECT_EQ(client().get(resources::job(api::JobKind::PyTorchJob), "default",
                         "ddp")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"],
            4);

  RawSandboxHttp http(sandbox().admin_config());
  const std::string path = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/ddp/scale";
  json stale = scale;
  stale["metadata"]["resourceVersion"] = job["metadata"]["resourceVersion"];
  stale["spec"]["replicas"] = 1;
  EXPECT_EQ(http.send("PUT", path, stale.dump(), "application/json").status, 409);
  json negative = scale;
  negative["spec"]["replicas"] = -1;
  const auto invalid = http.send("PUT", path, negative.dump(), "application/json");
  EXPECT_EQ(invalid.status, 422);
  EXPECT_EQ(
      json::parse(invalid.body)["message"],
      "PyTorchJob.kubeflow.org \"ddp\" is invalid: .spec.pytorchReplicaSpecs.Worker.replicas: "
      "Invalid value: -1: should be a non-negative integer");
  scale["spec"]["replicas"] = 3;
  const auto put = http.send("PUT", path, scale.dump(), "application/json");
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(json::parse(put.body)["spec"]["replicas"], 3);
  EXPECT_EQ(expect_error([&] {
              client().get(resources::job(api::JobKind::TFJob), "default", "ddp", "scale");
            }).kind(),
            ErrorKind::NotFound);
}

TEST_F(SandboxWriteTest, StatusSubresourceSplitsSpecAndStatusWritesOfAPod) {
  json pod = client().create(resources::pods(), "default", unscheduled_two_container_pod("p"));
  EXPECT_EQ(pod["status"]["phase"], "Pending");

  json both = pod;
  both["metadata"]["labels"] = {{"seen", "yes"}};
  both["status"]["phase"] = "Running";
  pod = client().update(resources::pods(), "default", both);
  EXPECT_EQ(pod["metadata"]["labels"]["seen"], "yes");
  EXPECT_EQ(pod["status"]["phase"], "Pending") << "a main write must not touch status";

  both = pod;
  both["metadata"]["labels"] = {{"seen", "changed"}};
  both["status"]["phase"] = "Running";
  pod = client().update_status(resources::pods(), "default", both);
  EXPECT_EQ(pod["status"]["phase"], "Running");
  EXPECT_EQ(pod["metadata"]["labels"]["seen"], "yes") << "a status write must not touch labels";
}

// --- batch/v1 Jobs ---------------------------------------------------------------------------
// Expectations are what a v1.26 kube-apiserver and kube-controller-manager answered for the same
// requests (pkg/apis/batch/v1/defaults.go, pkg/registry/batch/job/strategy.go,
// pkg/apis/batch/validation, pkg/controller/job, pkg/controller/ttlafterfinished).

json batch_job(const std::string& name, const std::string& restart_policy = "Never",
               json annotations = json::object()) {
  json pod_spec = {{"containers", {{{"name", "mpi"}, {"image", "mpi:1"}}}}};
  if (!restart_policy.empty())
    pod_spec["restartPolicy"] = restart_policy;
  json tmpl_meta = {{"labels", {{"app", "launcher"}}}};
  if (!annotations.empty())
    tmpl_meta["annotations"] = std::move(annotations);
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", {{"name", name}}},
          {"spec", {{"template", {{"metadata", tmpl_meta}, {"spec", pod_spec}}}}}};
}

TEST_F(SandboxJobTest, JobWithOnlyATemplateIsDefaultedAndLabelledAsV126Does) {
  const json job = client().create(resources::jobs(), "default", batch_job("plain"));
  const std::string uid = job["metadata"]["uid"];
  EXPECT_EQ(job["metadata"]["annotations"], json({{"batch.kubernetes.io/job-tracking", ""}}));
  const json labels = {{"app", "launcher"}, {"controller-uid", uid}, {"job-name", "plain"}};
  EXPECT_EQ(job["metadata"]["labels"], labels) << "a job without labels takes its template's";
  EXPECT_EQ(job["metadata"]["generation"], 1);
  EXPECT_EQ(job["spec"], json::parse(R"({
      "backoffLimit": 6, "completionMode": "NonIndexed", "completions": 1, "parallelism": 1,
      "selector": {"matchLabels": {"controller-uid": ")" +
                                     uid + R"("}},
      "suspend": false,
      "template": {
        "metadata": {"creationTimestamp": null, "labels": )" +
                                     labels.dump() + R"(},
        "spec": {
          "containers": [{"image": "mpi:1", "imagePullPolicy": "IfNotPresent", "name": "mpi",
                          "resources": {}, "terminationMessagePath": "/dev/termination-log",
                          "terminationMessagePolicy": "File"}],
          "dnsPolicy": "ClusterFirst", "restartPolicy": "Never",
          "schedulerName": "default-scheduler", "securityContext": {},
          "terminationGracePeriodSeconds": 30}}})"));
  EXPECT_EQ(job["status"], json::object());

  // Its pod: found by the job's selector, labelled from the template, owned and tracked.
  json pods;
  ASSERT_TRUE(wait_until([&] {
    pods = client().list(resources::pods(), "default", {.label_selector = "controller-uid=" + uid});
    return pods["items"].size() == 1;
  }));
  const json& meta = pods["items"][0]["metadata"];
  EXPECT_EQ(meta["generateName"], "plain-");
  EXPECT_EQ(meta["labels"], labels);
  EXPECT_EQ(meta["finalizers"], json({"batch.kubernetes.io/job-tracking"}));
  EXPECT_EQ(meta["ownerReferences"], json({owner_reference(job)}));

  // A job with labels of its own keeps them.
  json labelled = batch_job("labelled");
  labelled["metadata"]["labels"] = {{"team", "a"}};
  EXPECT_EQ(client().create(resources::jobs(), "default", labelled)["metadata"]["labels"],
            json({{"team", "a"}}));
}

TEST_F(SandboxJobTest, JobTemplateMustRestartOnFailureOrNever) {
  // Missing, the template's restartPolicy defaults to Always, which a job may not use.
  for (const std::string policy : {"Always", ""}) {
    const Error e = expect_error(
        [&] { client().create(resources::jobs(), "default", batch_job("always", policy)); });
    EXPECT_EQ(e.kind(), ErrorKind::Invalid);
    EXPECT_EQ(e.http_code(), 422);
    EXPECT_EQ(e.status(), json::parse(R"({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Job.batch \"always\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
        "reason": "Invalid",
        "details": {"name": "always", "group": "batch", "kind": "Job",
                    "causes": [{"reason": "FieldValueRequired",
                                "message": "Required value: valid values: \"OnFailure\", \"Never\"",
                                "field": "spec.template.spec.restartPolicy"}]},
        "code": 422})"))
        << "restartPolicy " << policy;
  }
  // An unknown one fails the pod's check and the job's.
  const Error e = expect_error(
      [&] { client().create(resources::jobs(), "default", batch_job("bad", "Sometimes")); });
  EXPECT_EQ(e.status()["message"],
            "Job.batch \"bad\" is invalid: [spec.template.spec.restartPolicy: Unsupported value: "
            "\"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\", "
            "spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported "
            "values: \"OnFailure\", \"Never\"]");
  EXPECT_EQ(e.status()["details"]["causes"].size(), 2u);

  json negative = batch_job("negative");
  negative["spec"]["backoffLimit"] = -1;
  EXPECT_EQ(
      expect_error([&] {
        client().create(resources::jobs(), "default", negative);
      }).status()["message"],
      "Job.batch \"negative\" is invalid: spec.backoffLimit: Invalid value: -1: must be greater "
      "than or equal to 0");
}

TEST_F(SandboxJobTest, JobUpdateKeepsCompletionsSelectorAndTemplate) {
  // ValidateJobSpecUpdate (pkg/apis/batch/validation): completions, selector, completionMode and
  // the template are immutable; parallelism, activeDeadlineSeconds and suspend are not.
  json job = client().create(resources::jobs(), "default", batch_job("fixed"));
  const std::string uid = job["metadata"]["uid"];
  auto update_error = [&](const std::function<void(json&)>& change) {
    json changed = client().get(resources::jobs(), "default", "fixed");
    change(changed);
    return expect_error([&] { client().update(resources::jobs(), "default", changed); });
  };
  Error e = update_error([](json& j) { j["spec"]["completions"] = 2; });
  EXPECT_EQ(e.kind(), ErrorKind::Invalid);
  EXPECT_EQ(e.http_code(), 422);
  EXPECT_EQ(e.status()["message"],
            "Job.batch \"fixed\" is invalid: spec.completions: Invalid value: 2: field is "
            "immutable");
  EXPECT_EQ(e.status()["details"]["causes"][0]["field"], "spec.completions");

  e = update_error([](json& j) { j["spec"]["template"]["spec"]["containers"][0]["image"] = "b"; });
  EXPECT_EQ(e.status()["details"]["causes"], json::parse(R"([{"reason": "FieldValueInvalid",
      "message": "Invalid value: core.PodTemplateSpec{...}: field is immutable",
      "field": "spec.template"}])"));

  // ValidateGeneratedSelector, then ValidateJobSpec twice (once in ValidateJob, once in
  // ValidateJobSpecUpdate: listed twice among the causes, once in the message), then immutable.
  e = update_error([](json& j) { j["spec"]["selector"]["matchLabels"]["extra"] = "x"; });
  const std::string selector =
      "v1.LabelSelector{MatchLabels:map[string]string{\"controller-uid\":\"" + uid +
      "\", \"extra\":\"x\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}";
  const std::string labels = "map[string]string{\"app\":\"launcher\", \"controller-uid\":\"" + uid +
                             "\", \"job-name\":\"fixed\"}";
  EXPECT_EQ(e.status()["message"],
            "Job.batch \"fixed\" is invalid: [spec.selector: Invalid value: " + selector +
                ": `selector` not auto-generated, spec.template.metadata.labels: Invalid value: " +
                labels +
                ": `selector` does not match template `labels`, spec.selector: Invalid "
                "value: " +
                selector + ": field is immutable]");
  std::vector<std::string> fields;
  for (const json& cause : e.status()["details"]["causes"])
    fields.push_back(cause["field"]);
  EXPECT_EQ(fields, (std::vector<std::string>{"spec.selector", "spec.template.metadata.labels",
                                              "spec.template.metadata.labels", "spec.selector"}));

  e = update_error([](json& j) { j["spec"]["completionMode"] = "Indexed"; });
  EXPECT_EQ(e.status()["details"]["causes"][0]["field"], "spec.completionMode");

  // A job read back and written again is unchanged; parallelism and the deadline may change.
  json same = client().get(resources::jobs(), "default", "fixed");
  same["spec"]["parallelism"] = 3;
  same["spec"]["activeDeadlineSeconds"] = 600;
  const json updated = client().update(resources::jobs(), "default", same);
  EXPECT_EQ(updated["spec"]["parallelism"], 3);
  EXPECT_EQ(updated["metadata"]["generation"], 2);
}

TEST_F(SandboxJobTest, SuspendedJobThatNeverRanMayChangeItsSchedulingDirectives) {
  // validatePodTemplateUpdate with JobMutableNodeSchedulingDirectives (beta, on in v1.26): a
  // suspended job without startTime may change its template's labels, annotations,
  // nodeSelector, tolerations and node affinity, nothing else.
  json job = batch_job("queued");
  job["spec"]["suspend"] = true;
  job["spec"]["template"]["spec"]["affinity"] = json::parse(R"({"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]}}})");
  client().create(resources::jobs(), "default", job);
  json changed = client().get(resources::jobs(), "default", "queued");
  json& tmpl = changed["spec"]["template"];
  tmpl["metadata"]["labels"]["queue"] = "a";
  tmpl["metadata"]["annotations"] = {{"placed", "yes"}};
  tmpl["spec"]["nodeSelector"] = {{"pool", "gpu"}};
  tmpl["spec"]["tolerations"] = {{{"key", "gpu"}, {"operator", "Exists"}}};
  tmpl["spec"].erase("affinity");  // an affinity of only nodeAffinity may go
  const json updated = client().update(resources::jobs(), "default", changed);
  EXPECT_EQ(updated["spec"]["template"]["spec"]["nodeSelector"], json({{"pool", "gpu"}}));
  EXPECT_FALSE(updated["spec"]["template"]["spec"].contains("affinity"));

  changed = updated;
  changed["spec"]["template"]["spec"]["containers"][0]["image"] = "other";
  EXPECT_EQ(expect_error([&] {
              client().update(resources::jobs(), "default", changed);
            }).status()["details"]["causes"][0]["field"],
            "spec.template");
}

TEST_F(SandboxJobTest, JobPastItsActiveDeadlineFailsOnTimeAndItsPodIsKilled) {
  json job = batch_job("deadline", "Never", {{"sandbox.trainctl.io/run-seconds", "60"}});
  // Long enough that the kubelet's writes (pod scheduled, running) are over when it runs out.
  job["spec"]["activeDeadlineSeconds"] = 2;
  job = client().create(resources::jobs(), "default", job);
  const auto created = std::chrono::steady_clock::now();
  // Nothing happens to the job or its pod after it runs: the controller must wake by itself.
  json status;
  ASSERT_TRUE(wait_until(
      [&] {
        status = client().get(resources::jobs(), "default", "deadline")["status"];
        return status.contains("conditions");
      },
      std::chrono::seconds(5)))
      << status.dump();
  // startTime has whole seconds: the deadline runs out 1 to 2 s after the create.
  EXPECT_LT(std::chrono::steady_clock::now() - created, std::chrono::milliseconds(2500));
  const json& failed = status["conditions"][0];
  EXPECT_EQ(failed["type"], "Failed");
  EXPECT_EQ(failed["reason"], "DeadlineExceeded");
  EXPECT_EQ(failed["message"], "Job was active longer than specified deadline");
  EXPECT_EQ(failed["lastProbeTime"], failed["lastTransitionTime"]);
  EXPECT_EQ(status["failed"], 1);
  EXPECT_FALSE(status.contains("active"));
  EXPECT_EQ(status["uncountedTerminatedPods"], json::object());
  EXPECT_TRUE(wait_until([&] {
    return client()
        .list(resources::pods(), "default",
              {.label_selector =
                   "controller-uid=" + job["metadata"]["uid"].get<std::string>()})["items"]
        .empty();
  }));
}

TEST_F(SandboxJobTest, FinishedJobIsDeletedWithItsPodOnceItsTtlRunsOut) {
  json job = batch_job("ttl", "OnFailure");
  job["spec"]["ttlSecondsAfterFinished"] = 1;
  job = client().create(resources::jobs(), "default", job);
  json status;
  ASSERT_TRUE(wait_until([&] {
    status = client().get(resources::jobs(), "default", "ttl")["status"];
    return status.contains("completionTime");
  }));
  // v1.26's Complete condition has no reason or message.
  EXPECT_EQ(
      status["conditions"],
      json::parse(R"([{"type": "Complete", "status": "True", "lastProbeTime": ")" +
                  status["completionTime"].get<std::string>() + R"(", "lastTransitionTime": ")" +
                  status["completionTime"].get<std::string>() + R"("}])"));
  EXPECT_EQ(status["succeeded"], 1);
  EXPECT_EQ(status["ready"], 0);
  EXPECT_TRUE(wait_until(
      [&] {
        try {
          client().get(resources::jobs(), "default", "ttl");
          return false;
        } catch (const Error& e) {
          return e.kind() == ErrorKind::NotFound;
        }
      },
      std::chrono::seconds(4)));
  EXPECT_TRUE(client()
                  .list(resources::pods(), "default", {.label_selector = "job-name=ttl"})["items"]
                  .empty());
}

// --- delete -----------------------------------------------------------------------------------

TEST_F(SandboxDeleteTest, BackgroundCollectsOwnedDependents) {
  const json owner = client().create(resources::configmaps(), "default", configmap("owner"));
  client().create(resources::configmaps(), "default", owned_configmap("dep-1", owner));
  client().create(resources::configmaps(), "default", owned_configmap("dep-2", owner, false));
  client().create(resources::configmaps(), "default", configmap("unrelated"));

  client().remove(resources::configmaps(), "default", "owner",
                  {.propagation_policy = "Background"});
  EXPECT_TRUE(wait_until([&] {
    return names_of(client().list(resources::configmaps(), "default")) ==
           std::vector<std::string>{"unrelated"};
  })) << client().list(resources::configmaps(), "default").dump();
}

TEST_F(SandboxDeleteTest, OrphanKeepsDependentsAndDropsTheirOwnerReferences) {
  const json owner = client().create(resources::configmaps(), "default", configmap("owner"));
  const json other = client().create(resources::configmaps(), "default", configmap("other"));
  json dependent = owned_configmap("dep", owner);
  dependent["metadata"]["ownerReferences"].push_back(owner_reference(other, false));
  dependent["metadata"]["ownerReferences"][1]["controller"] = false;
  client().create(resources::configmaps(), "default", dependent);

  client().remove(resources::configmaps(), "default", "owner", {.propagation_policy = "Orphan"});
  ASSERT_TRUE(wait_until([&] {
    try {
      client().get(resources::configmaps(), "default", "owner");
      return false;
    } catch (const Error& e) {
      return e.kind() == ErrorKind::NotFound;
    }
  }));
  const json kept = client().get(resources::configmaps(), "default", "dep");
  ASSERT_EQ(kept["metadata"]["ownerReferences"].size(), 1u) << kept.dump();
  EXPECT_EQ(kept["metadata"]["ownerReferences"][0]["name"], "other");
}

TEST_F(SandboxDeleteTest, ForegroundDeletesDependentsBeforeTheOwner) {
  const json owner = client().create(resources::configmaps(), "default", configmap("owner"));
  client().create(resources::configmaps(), "default", owned_configmap("dep", owner));
  const std::string start =
      client().list(resources::configmaps(), "default")["metadata"]["resourceVersion"];

  const json deleting = client().remove(resources::configmaps(), "default", "owner",
                                        {.propagation_policy = "Foreground"});
  EXPECT_TRUE(deleting["metadata"].contains("deletionTimestamp")) << deleting.dump();

  // Watch until the owner is gone: first it is marked (deletionTimestamp and the
  // foregroundDeletion finalizer), then its dependent goes, then it does.
  std::vector<WatchEvent> events;
  kube::WatchOptions options;
  options.resource_version = start;
  options.timeout_seconds = 5;
  client().watch(resources::configmaps(), "default", options, [&](const WatchEvent& e) {
    events.push_back(e);
    return !(e.type == WatchEventType::Deleted && e.object["metadata"]["name"] == "owner");
  });
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(describe({events.front()}), std::vector<std::string>{"MODIFIED owner"});
  EXPECT_TRUE(events.front().object["metadata"].contains("deletionTimestamp"));
  EXPECT_THAT(events.front().object["metadata"].value("finalizers", json::array()),
              Contains("foregroundDeletion"));
  std::vector<std::string> deletions;
  for (const auto& d : describe(events)) {
    if (d.starts_with("DELETED"))
      deletions.push_back(d);
  }
  EXPECT_THAT(deletions, ElementsAre("DELETED dep", "DELETED owner"));
}

TEST_F(SandboxDeleteTest, ForegroundOwnerWaitsForABlockingDependentsFinalizer) {
  const json owner = client().create(resources::configmaps(), "default", configmap("owner"));
  json dependent = owned_configmap("dep", owner);
  dependent["metadata"]["finalizers"] = {"example.com/hold"};
  client().create(resources::configmaps(), "default", dependent);

  client().remove(resources::configmaps(), "default", "owner",
                  {.propagation_policy = "Foreground"});
  const json held_owner = client().get(resources::configmaps(), "default", "owner");
  EXPECT_TRUE(held_owner["metadata"].contains("deletionTimestamp"));
  const json held_dep = client().get(resources::configmaps(), "default", "dep");
  EXPECT_TRUE(held_dep["metadata"].contains("deletionTimestamp"));

  client().patch(resources::configmaps(), "default", "dep", PatchType::Merge,
                 {{"metadata", {{"finalizers", nullptr}}}});
  auto gone = [&](const std::string& name) {
    try {
      client().get(resources::configmaps(), "default", name);
      return false;
    } catch (const Error& e) {
      return e.kind() == ErrorKind::NotFound;
    }
  };
  EXPECT_TRUE(wait_until([&] { return gone("dep") && gone("owner"); }));
}

TEST_F(SandboxDeleteTest, PreconditionsMustMatch) {
  const json cm = client().create(resources::configmaps(), "default", configmap("a"));
  const Error uid = expect_error([&] {
    client().remove(resources::configmaps(), "default", "a",
                    {.precondition_uid = "00000000-0000-0000-0000-000000000000"});
  });
  EXPECT_EQ(uid.kind(), ErrorKind::Conflict);
  // rest.BeforeDelete's wording, kind and all.
  EXPECT_THAT(uid.message(),
              HasSubstr("Operation cannot be fulfilled on ConfigMap \"a\": the UID in the "
                        "precondition (00000000-0000-0000-0000-000000000000) does not match the "
                        "UID in record"));
  const Error rv = expect_error([&] {
    client().remove(resources::configmaps(), "default", "a",
                    {.precondition_resource_version = "1"});
  });
  EXPECT_EQ(rv.kind(), ErrorKind::Conflict);
  EXPECT_NO_THROW(client().remove(resources::configmaps(), "default", "a",
                                  {.precondition_uid = cm["metadata"]["uid"].get<std::string>()}));
}

// --- dry run ----------------------------------------------------------------------------------

TEST_F(SandboxDryRunTest, CreateUpdatePatchAndDeleteChangeNothing) {
  const json dry_created =
      client().create(resources::configmaps(), "default", configmap("dry"), {.dry_run = true});
  EXPECT_EQ(dry_created["metadata"]["name"], "dry");
  EXPECT_EQ(expect_error([&] { client().get(resources::configmaps(), "default", "dry"); }).kind(),
            ErrorKind::NotFound);

  const json real = client().create(resources::configmaps(), "default", configmap("real"));
  json changed = real;
  changed["data"]["key"] = "dry-run";
  EXPECT_EQ(client().update(resources::configmaps(), "default", changed,
                            {.dry_run = true})["data"]["key"],
            "dry-run");
  client().patch(resources::configmaps(), "default", "real", PatchType::Merge,
                 {{"data", {{"key", "dry-patch"}}}}, {.dry_run = true});
  client().remove(resources::configmaps(), "default", "real", {.dry_run = true});

  const json after = client().get(resources::configmaps(), "default", "real");
  EXPECT_EQ(after["data"]["key"], "value");
  EXPECT_EQ(after["metadata"]["resourceVersion"], real["metadata"]["resourceVersion"]);
  EXPECT_EQ(client().list(resources::configmaps(), "default")["metadata"]["resourceVersion"],
            real["metadata"]["resourceVersion"])
      << "a dry run must not advance the store";

  EXPECT_EQ(expect_error([&] {
              client().create(resources::configmaps(), "default", configmap("Bad_Name"),
                              {.dry_run = true});
            }).kind(),
            ErrorKind::Invalid)
      << "a dry run still validates";
}

TEST_F(SandboxDryRunTest, DryRunDeleteOfACrdKeepsItServed) {
  install_crd(client(), tfjob_crd(), resources::job(api::JobKind::TFJob));
  client().create(resources::job(api::JobKind::TFJob), "default", tfjob("mnist"));
  client().remove(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org",
                  {.dry_run = true});
  EXPECT_NO_THROW(client().require_served(resources::job(api::JobKind::TFJob)));
  EXPECT_EQ(
      client().get(resources::job(api::JobKind::TFJob), "default", "mnist")["metadata"]["name"],
      "mnist");
}

// --- authentication ---------------------------------------------------------------------------

TEST_F(SandboxAuthTest, AdminClientCertificateAuthenticates) {
  EXPECT_NO_THROW(client().list(resources::pods(), "default"));
  EXPECT_TRUE(sandbox().admin_config().auth.token.empty());
  EXPECT_FALSE(sandbox().admin_config().auth.client_cert_pem.empty());
}

TEST_F(SandboxAuthTest, BearerTokenAuthenticates) {
  Client with_token(local_.token_config(sandbox().admin_token()));
  EXPECT_NO_THROW(with_token.create(resources::configmaps(), "default", configmap("by-token")));
  EXPECT_EQ(client().get(resources::configmaps(), "default", "by-token")["metadata"]["name"],
            "by-token");
}

TEST_F(SandboxAuthTest, NoCredentialsIsUnauthorized) {
  Client anonymous(local_.anonymous_config());
  anonymous.set_retry_policy({.max_retries = 0});
  const Error e = expect_error([&] { anonymous.list(resources::pods(), "default"); });
  EXPECT_EQ(e.kind(), ErrorKind::Unauthorized);
  EXPECT_EQ(e.http_code(), 401);
  EXPECT_EQ(e.status()["reason"], "Unauthorized");
  // As with kube-apiserver's public-info-viewer role, /version needs no credentials.
  EXPECT_NO_THROW(anonymous.server_version());
}

TEST_F(SandboxAuthTest, WrongTokenIsUnauthorized) {
  Client wrong(local_.token_config("not-" + sandbox().admin_token()));
  wrong.set_retry_policy({.max_retries = 0});
  const Error e = expect_error([&] { wrong.get(resources::namespaces(), "", "default"); });
  EXPECT_EQ(e.kind(), ErrorKind::Unauthorized);
  EXPECT_EQ(e.http_code(), 401);
  EXPECT_THAT(e.message(), Not(HasSubstr(sandbox().admin_token())));
}

TEST_F(SandboxAuthTest, VerifiedClientCertificateWinsOverAWrongToken) {
  kube::RestConfig both = sandbox().admin_config();
  both.auth.token = "not-" + sandbox().admin_token();
  Client client_with_both(both);
  client_with_both.set_retry_policy({.max_retries = 0});
  EXPECT_NO_THROW(client_with_both.list(resources::pods(), "default"));
}

// --- fault injection --------------------------------------------------------------------------

TEST_F(SandboxFaultTest, FaultsEndpointSetsAndReportsFaults) {
  RawSandboxHttp http(sandbox().admin_config());
  const auto put =
      http.send("PUT", "/sandbox/faults", R"({"conflictOnUpdate":true,"latencyMilliseconds":5})");
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(json::parse(put.body)["conflictOnUpdate"], true);
  EXPECT_EQ(http.get_json("/sandbox/faults")["latencyMilliseconds"], 5);
  EXPECT_TRUE(sandbox().api().faults().conflict_on_update);

  const auto unknown = http.send("PUT", "/sandbox/faults", R"({"noSuchFault":1})");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_THAT(unknown.body, HasSubstr("noSuchFault"));

  RawSandboxHttp anonymous_http(local_.anonymous_config());
  EXPECT_EQ(anonymous_http.send("PUT", "/sandbox/faults", "{}").status, 401)
      << "faults are for authenticated callers only";
}

TEST_F(SandboxFaultTest, ThrottlingIsRetriedUntilItSucceeds) {
  client().create(resources::configmaps(), "default", configmap("a"));
  sandbox::Faults throttle;
  throttle.throttle_rate = 1.0;
  sandbox().api().set_faults(throttle);

  RawSandboxHttp http(sandbox().admin_config());
  const auto raw = http.send("GET", "/api/v1/namespaces/default/configmaps/a");
  EXPECT_EQ(raw.status, 429);
  EXPECT_EQ(raw.header("retry-after"), "1");
  EXPECT_EQ(json::parse(raw.body)["reason"], "TooManyRequests");

  // Lift the fault once a retry began. Retry-After is not waited out here (the client's own
  // tests cover that); added latency keeps each 429 slow enough to lift the fault in between.
  throttle.latency = std::chrono::milliseconds(50);
  sandbox().api().set_faults(throttle);
  kube::RetryPolicy policy;
  policy.max_retries = 6;
  policy.max_retry_after = std::chrono::seconds(0);
  Client throttled(sandbox().admin_config());
  throttled.set_retry_policy(policy);
  std::jthread lift([&] {
    wait_until([&] { return throttled.requests_sent() >= 2; });
    sandbox().api().set_faults({});
  });
  const json got = throttled.get(resources::configmaps(), "default", "a");
  EXPECT_EQ(got["metadata"]["name"], "a");
  EXPECT_GE(throttled.requests_sent(), 2u);
}

TEST_F(SandboxFaultTest, ServerErrorsAreRetriedForReadsOnly) {
  sandbox::Faults failing;
  failing.error_rate = 1.0;
  sandbox().api().set_faults(failing);
  client().set_retry_policy({.max_retries = 2, .base = std::chrono::milliseconds(1)});
  const std::uint64_t before = client().requests_sent();
  EXPECT_EQ(
      expect_error([&] { client().get(resources::configmaps(), "default", "a"); }).http_code(),
      500);
  EXPECT_EQ(client().requests_sent() - before, 3u);
  const Error write =
      expect_error([&] { client().create(resources::configmaps(), "default", configmap("a")); });
  EXPECT_EQ(write.kind(), ErrorKind::ServerError);
  EXPECT_EQ(client().requests_sent() - before, 4u) << "a create is not retried after a 500";
}

TEST_F(SandboxFaultTest, GoneOnWatchResumeMakesAResumingWatchRelist) {
  const json cm = client().create(resources::configmaps(), "default", configmap("a"));
  sandbox::Faults gone;
  gone.gone_on_watch_resume = true;
  sandbox().api().set_faults(gone);

  kube::WatchOptions resume;
  resume.resource_version = cm["metadata"]["resourceVersion"];
  resume.timeout_seconds = 5;
  const Error e = expect_error([&] {
    client().watch(resources::configmaps(), "default", resume,
                   [](const WatchEvent&) { return true; });
  });
  EXPECT_EQ(e.kind(), ErrorKind::Gone);
  EXPECT_EQ(e.http_code(), 410);

  // Relisting and watching without a version still works.
  kube::WatchOptions fresh;
  fresh.timeout_seconds = 5;
  EXPECT_THAT(describe(collect_events(client(), resources::configmaps(), "default", fresh, 1)),
              Contains("ADDED a"));
}

TEST_F(SandboxFaultTest, DroppedWatchesEndBeforeTheirTimeout) {
  sandbox::Faults drop;
  drop.drop_watches_after = std::chrono::seconds(1);
  sandbox().api().set_faults(drop);
  client().create(resources::configmaps(), "default", configmap("a"));

  kube::WatchOptions options;
  options.resource_version =
      client().list(resources::configmaps(), "default")["metadata"]["resourceVersion"];
  options.timeout_seconds = 30;
  options.allow_bookmarks = false;
  const auto started = std::chrono::steady_clock::now();
  const kube::WatchResult result = client().watch(resources::configmaps(), "default", options,
                                                  [](const WatchEvent&) { return true; });
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3))
      << "the watch outlived the injected drop";
  EXPECT_EQ(result.resource_version, options.resource_version);
}

TEST_F(SandboxFaultTest, ConflictOnUpdateRefusesUpdatesAndPatches) {
  json cm = client().create(resources::configmaps(), "default", configmap("a"));
  sandbox::Faults conflict;
  conflict.conflict_on_update = true;
  sandbox().api().set_faults(conflict);

  cm["data"]["key"] = "new";
  const Error update =
      expect_error([&] { client().update(resources::configmaps(), "default", cm); });
  EXPECT_EQ(update.kind(), ErrorKind::Conflict);
  EXPECT_EQ(update.http_code(), 409);
  EXPECT_EQ(expect_error([&] {
              client().patch(resources::configmaps(), "default", "a", PatchType::Merge,
                             {{"data", {{"key", "new"}}}});
            }).kind(),
            ErrorKind::Conflict);

  sandbox().api().set_faults({});
  EXPECT_EQ(client().update(resources::configmaps(), "default", cm)["data"]["key"], "new");
}

}  // namespace
}  // namespace trainctl
