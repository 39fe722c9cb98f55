// What only the sandbox has or does, driven through kube::Client over HTTPS against an in-process
// sandbox: its discovery documents, CustomResourceDefinitions, internal errors, watch window,
// batch/v1 Jobs run by its scripted kubelet, its credentials and its fault injection. The API
// semantics that hold on any server (metadata, errors, list, watch, writes, deletion, dry run)
// are checked in api_semantics_test.cc, against a sandbox or a real cluster.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
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
#include "tests/support/api_objects.h"
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
using testing::collect_events;
using testing::condition_status;
using testing::configmap;
using ::testing::Contains;
using testing::describe;
using ::testing::ElementsAre;
using testing::expect_error;
using testing::find_resource;
using ::testing::HasSubstr;
using testing::LocalSandbox;
using testing::names_of;
using ::testing::Not;
using testing::owner_reference;
using testing::RawSandboxHttp;
using ::testing::StartsWith;
using testing::tfjob;
using testing::wait_until;

namespace resources = kube::resources;

using SandboxDiscoveryTest = testing::SandboxTest;
using SandboxCrdTest = testing::SandboxTest;
using SandboxAuthTest = testing::SandboxTest;
using SandboxFaultTest = testing::SandboxTest;
using SandboxJobTest = testing::SandboxTest;

// --- helpers ----------------------------------------------------------------------------------

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

// --- internal errors --------------------------------------------------------------------------

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

// --- the watch window -------------------------------------------------------------------------

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
  // The sandbox's job controller writes the job's status meanwhile, and an update from an older
  // read is refused with 409 before it is validated (as by kube-apiserver): each update is made
  // again from a fresh read until it is not a conflict.
  auto update_error = [&](const std::function<void(json&)>& change) {
    while (true) {
      json changed = client().get(resources::jobs(), "default", "fixed");
      change(changed);
      Error e = expect_error([&] { client().update(resources::jobs(), "default", changed); });
      if (e.kind() != ErrorKind::Conflict)
        return e;
    }
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
  json updated;
  while (updated.is_null()) {
    json same = client().get(resources::jobs(), "default", "fixed");
    same["spec"]["parallelism"] = 3;
    same["spec"]["activeDeadlineSeconds"] = 600;
    try {
      updated = client().update(resources::jobs(), "default", same);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Conflict)
        throw;
    }
  }
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

/// A watch of configmaps in "default" on its own thread, noting each event and when it came.
class WatchRecorder {
 public:
  struct Arrival {
    std::chrono::steady_clock::time_point at;
    std::string what;  // "ADDED a", "BOOKMARK "
    std::uint64_t resource_version = 0;
  };

  WatchRecorder(Client& client, kube::WatchOptions options)
      : thread_([this, &client, options](std::stop_token stop) {
          client.watch(
              resources::configmaps(), "default", options,
              [this](WatchEvent& e) {
                const json& meta = e.object["metadata"];
                std::lock_guard lock(mu_);
                arrivals_.push_back(
                    {std::chrono::steady_clock::now(),
                     fmt::format("{} {}", kube::to_string(e.type), meta.value("name", "")),
                     std::stoull(meta.value("resourceVersion", "0"))});
                return true;
              },
              stop);
        }) {}

  std::vector<Arrival> arrivals() const {
    std::lock_guard lock(mu_);
    return arrivals_;
  }
  /// When `what` arrived; nullopt while it has not.
  std::optional<std::chrono::steady_clock::time_point> arrived(const std::string& what) const {
    std::lock_guard lock(mu_);
    for (const Arrival& a : arrivals_)
      if (a.what == what)
        return a.at;
    return std::nullopt;
  }
  /// The events but bookmarks, in the order they came.
  std::vector<std::string> events() const {
    std::vector<std::string> result;
    for (const Arrival& a : arrivals())
      if (!a.what.starts_with("BOOKMARK"))
        result.push_back(a.what);
    return result;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Arrival> arrivals_;
  std::jthread thread_;  // last: stops and joins before the rest goes
};

// watchDelayMilliseconds: a watch opened without a version gets the initial list, then each
// create, every one at least the delay after it happened (the watch's start for the list), in
// the order they happened, bookmarks included. Writes are not held: each create returns, and a
// GET shows it, before its event reaches the watch.
TEST_F(SandboxFaultTest, WatchDelayHoldsBackEveryEventInOrderButNoWrite) {
  constexpr std::chrono::milliseconds kDelay{800};
  client().create(resources::configmaps(), "default", configmap("before"));
  RawSandboxHttp http(sandbox().admin_config());
  const auto put = http.send("PUT", "/sandbox/faults", R"({"watchDelayMilliseconds":800})");
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(http.get_json("/sandbox/faults")["watchDelayMilliseconds"], 800);

  const auto opened = std::chrono::steady_clock::now();
  WatchRecorder watch(client(), {.field_selector = "metadata.name!=kube-root-ca.crt",
                                 .timeout_seconds = 60,
                                 .allow_bookmarks = true});
  // The watch is open once its initial list has come.
  ASSERT_TRUE(wait_until([&] { return watch.arrived("ADDED before").has_value(); },
                         std::chrono::seconds(20)));
  EXPECT_GE(*watch.arrived("ADDED before") - opened, kDelay) << "the initial list came early";
  std::map<std::string, std::chrono::steady_clock::time_point> written;
  for (const std::string name : {"a", "b", "c"}) {
    written[name] = std::chrono::steady_clock::now();
    client().create(resources::configmaps(), "default", configmap(name));
    EXPECT_FALSE(watch.arrived("ADDED " + name)) << "the create of " << name << " waited";
    EXPECT_NO_THROW(client().get(resources::configmaps(), "default", name))
        << "a GET does not show " << name;
  }
  ASSERT_TRUE(
      wait_until([&] { return watch.arrived("ADDED c").has_value(); }, std::chrono::seconds(20)));
  EXPECT_THAT(watch.events(), ElementsAre("ADDED before", "ADDED a", "ADDED b", "ADDED c"));
  for (const auto& [name, at] : written)
    EXPECT_GE(*watch.arrived("ADDED " + name) - at, kDelay) << name << " came early";
  std::uint64_t newest = 0;
  for (const auto& a : watch.arrivals()) {
    EXPECT_GE(a.resource_version, newest) << a.what << " went back in resourceVersion";
    newest = std::max(newest, a.resource_version);
  }
}

// PUT /sandbox/faults reaches watches already open: turned on, it holds their next event; turned
// off, what they hold goes out.
TEST_F(SandboxFaultTest, WatchDelaySetAtRuntimeHoldsAndReleasesOpenWatches) {
  RawSandboxHttp http(sandbox().admin_config());
  const std::string version =
      client().list(resources::configmaps(), "default")["metadata"]["resourceVersion"];
  WatchRecorder watch(
      client(), {.resource_version = version, .timeout_seconds = 120, .allow_bookmarks = false});
  client().create(resources::configmaps(), "default", configmap("prompt"));
  ASSERT_TRUE(wait_until([&] { return watch.arrived("ADDED prompt").has_value(); },
                         std::chrono::seconds(20)));

  ASSERT_EQ(http.send("PUT", "/sandbox/faults", R"({"watchDelayMilliseconds":600000})").status,
            200);
  client().create(resources::configmaps(), "default", configmap("held"));
  EXPECT_FALSE(
      wait_until([&] { return watch.arrived("ADDED held").has_value(); }, std::chrono::seconds(2)))
      << "an open watch did not take up the delay";
  ASSERT_EQ(http.send("PUT", "/sandbox/faults", "{}").status, 200);
  EXPECT_TRUE(
      wait_until([&] { return watch.arrived("ADDED held").has_value(); }, std::chrono::seconds(20)))
      << "turning the delay off did not release what the watch held";
  EXPECT_THAT(watch.events(), ElementsAre("ADDED prompt", "ADDED held"));
}

TEST_F(SandboxFaultTest, WatchDelayOtherThanWholeMillisecondsIsRefusedNamingTheField) {
  RawSandboxHttp http(sandbox().admin_config());
  for (const std::string bad : {"-1", "\"500ms\"", "1.5", "600001", "true"}) {
    const auto put =
        http.send("PUT", "/sandbox/faults", R"({"watchDelayMilliseconds":)" + bad + "}");
    EXPECT_EQ(put.status, 400) << bad;
    EXPECT_EQ(json::parse(put.body, nullptr, false).value("message", ""),
              "watchDelayMilliseconds: must be a whole number from 0 to 600000, not " + bad);
  }
  EXPECT_EQ(sandbox().api().faults().watch_delay, std::chrono::milliseconds(0))
      << "a refused PUT changed the faults";
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
