// The Kubernetes API semantics trainctl relies on, checked against whatever server the
// ApiServerTest fixture connects to: an in-process sandbox (in CI), or the cluster that
// TRAINCTL_TEST_KUBECONFIG names (`ctest -L real`), each test in a namespace of its own. Object
// metadata, errors, list, watch, updates and patches, deletion and garbage collection, dry run.
// What only the sandbox has (its faults, credentials, watch window) is in sandbox_api_test.cc.
//
// A real cluster differs from the sandbox in what its own controllers do (kube-controller-manager
// publishes kube-root-ca.crt into every namespace and collects garbage a moment later, its
// resourceVersions advance with every lease renewal); the checks hold for both.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "api/status.h"
#include "error.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "tests/support/api_objects.h"
#include "tests/support/api_server_fixture.h"
#include "tests/support/expect_error.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl {
namespace {

using kube::PatchType;
using kube::WatchEvent;
using kube::WatchEventType;
using nlohmann::json;
using testing::collect_events;
using testing::condition_status;
using testing::configmap;
using ::testing::Contains;
using testing::describe;
using ::testing::ElementsAre;
using testing::exists;
using testing::expect_error;
using testing::find_resource;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::kSettleTimeout;
using ::testing::MatchesRegex;
using testing::names_of;
using ::testing::Not;
using testing::owner_reference;
using testing::pod_manifest;
using testing::RawSandboxHttp;
using ::testing::SizeIs;
using testing::tfjob;
using ::testing::UnorderedElementsAre;
using testing::wait_until;

namespace resources = kube::resources;

using ApiMetadataTest = testing::ApiServerTest;
using ApiErrorTest = testing::ApiServerTest;
using ApiListTest = testing::ApiServerTest;
using ApiWatchTest = testing::ApiServerTest;
using ApiWriteTest = testing::ApiServerTest;
using ApiDeleteTest = testing::ApiServerTest;
using ApiDryRunTest = testing::ApiServerTest;

// --- helpers ----------------------------------------------------------------------------------

json owned_configmap(const std::string& name, const json& owner, bool block = true) {
  json cm = configmap(name);
  cm["metadata"]["ownerReferences"] = json::array({owner_reference(owner, block)});
  return cm;
}

/// The names of a ConfigMap list's items but the kube-root-ca.crt that kube-controller-manager
/// publishes into every namespace (the sandbox too).
std::vector<std::string> configmap_names(const json& list) {
  std::vector<std::string> names = names_of(list);
  std::erase(names, testing::kRootCaConfigMap);
  return names;
}

/// A PriorityClass named `name` with `fields` (value, globalDefault, ...).
json priority_class(const std::string& name, const json& fields) {
  json pc = {{"apiVersion", "scheduling.k8s.io/v1"},
             {"kind", "PriorityClass"},
             {"metadata", {{"name", name}}}};
  pc.update(fields);
  return pc;
}

std::uint64_t rv_of(const json& object) {
  return std::stoull(object["metadata"]["resourceVersion"].get<std::string>());
}

/// A pod with two containers that no scheduler touches (and so no kubelet either).
json unscheduled_two_container_pod(const std::string& name) {
  json pod = pod_manifest(name);
  pod["spec"]["schedulerName"] = "manual-scheduler";
  pod["spec"]["containers"].push_back({{"name", "helper"}, {"image", "busybox:1.36"}});
  return pod;
}

/// A pod bound to a node that does not exist, so no kubelet ends its graceful deletion.
json pod_on_absent_node(const std::string& name, std::int64_t grace_seconds = 30) {
  json pod = pod_manifest(name);
  pod["spec"]["nodeName"] = "trainctl-test-absent-node";
  pod["spec"]["terminationGracePeriodSeconds"] = grace_seconds;
  return pod;
}

/// Seconds from one RFC 3339 timestamp to another.
std::int64_t seconds_between(const json& from, const json& to) {
  const auto parse = [](const json& t) {
    const auto parsed = api::parse_timestamp(t.get<std::string>());
    EXPECT_TRUE(parsed) << t;
    return parsed.value_or(std::chrono::system_clock::time_point{});
  };
  return std::chrono::duration_cast<std::chrono::seconds>(parse(to) - parse(from)).count();
}

/// "TYPE name grace" for each event: the deletionGracePeriodSeconds the event carries, or "-".
std::vector<std::string> describe_grace(const std::vector<WatchEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    const json& md = e.object["metadata"];
    const std::string grace =
        md.contains("deletionGracePeriodSeconds") ? md["deletionGracePeriodSeconds"].dump() : "-";
    out.push_back(fmt::format("{} {} {}", kube::to_string(e.type), md.value("name", ""), grace));
  }
  return out;
}

// --- metadata ---------------------------------------------------------------------------------

TEST_F(ApiMetadataTest, CreateSetsUidCreationTimestampAndResourceVersion) {
  json requested = configmap("a");
  requested["metadata"]["uid"] = "chosen-by-the-client";
  requested["metadata"]["creationTimestamp"] = "2001-01-01T00:00:00Z";
  const json a = client().create(resources::configmaps(), ns(), requested);
  const json b = client().create(resources::configmaps(), ns(), configmap("b"));

  const std::string uid = a["metadata"]["uid"];
  EXPECT_THAT(uid, MatchesRegex("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
  EXPECT_NE(uid, b["metadata"]["uid"]);
  EXPECT_THAT(a["metadata"]["creationTimestamp"].get<std::string>(),
              MatchesRegex("20[2-9][0-9]-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"));
  EXPECT_FALSE(a["metadata"]["resourceVersion"].get<std::string>().empty());
  EXPECT_EQ(a["metadata"]["namespace"], ns());
  EXPECT_EQ(client().get(resources::configmaps(), ns(), "a")["metadata"]["uid"], uid);
}

TEST_F(ApiMetadataTest, ResourceVersionIncreasesAcrossAllResourceTypes) {
  const json cm = client().create(resources::configmaps(), ns(), configmap("a"));
  const json secret =
      client().create(resources::secrets(), ns(),
                      {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s"}}}});
  testing::install_training_crds(client());
  const json job = client().create(resources::job(api::JobKind::TFJob), ns(), tfjob("mnist"));
  json changed = cm;
  changed["data"]["key"] = "other";
  const json updated = client().update(resources::configmaps(), ns(), changed);

  EXPECT_LT(rv_of(cm), rv_of(secret));
  EXPECT_LT(rv_of(secret), rv_of(job));
  EXPECT_LT(rv_of(job), rv_of(updated));
  const json list = client().list(resources::configmaps(), ns());
  EXPECT_GE(std::stoull(list["metadata"]["resourceVersion"].get<std::string>()), rv_of(updated));
}

TEST_F(ApiMetadataTest, GenerationIsBumpedBySpecChangesOnly) {
  testing::install_training_crds(client());
  json job = client().create(resources::job(api::JobKind::TFJob), ns(), tfjob("mnist", 2));
  EXPECT_EQ(job["metadata"]["generation"], 1);

  job["metadata"]["labels"] = {{"team", "vision"}};
  job = client().update(resources::job(api::JobKind::TFJob), ns(), job);
  EXPECT_EQ(job["metadata"]["generation"], 1) << "a label change is not a spec change";

  job["status"] = {{"conditions", json::array({{{"type", "Created"}, {"status", "True"}}})}};
  job = client().update_status(resources::job(api::JobKind::TFJob), ns(), job);
  EXPECT_EQ(job["metadata"]["generation"], 1) << "a status write is not a spec change";

  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4;
  job = client().update(resources::job(api::JobKind::TFJob), ns(), job);
  EXPECT_EQ(job["metadata"]["generation"], 2);
  job = client().patch(resources::job(api::JobKind::TFJob), ns(), "mnist", PatchType::Merge,
                       {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  EXPECT_EQ(job["metadata"]["generation"], 3);
}

TEST_F(ApiMetadataTest, GenerateNameMakesAFreshNameEachTime) {
  json request = configmap("");
  request["metadata"].erase("name");
  request["metadata"]["generateName"] = "worker-";
  const std::string first =
      client().create(resources::configmaps(), ns(), request)["metadata"]["name"];
  const std::string second =
      client().create(resources::configmaps(), ns(), request)["metadata"]["name"];
  EXPECT_THAT(first, MatchesRegex("worker-[a-z0-9]{5}"));
  EXPECT_THAT(second, MatchesRegex("worker-[a-z0-9]{5}"));
  EXPECT_NE(first, second);
  EXPECT_EQ(client().get(resources::configmaps(), ns(), first)["metadata"]["generateName"],
            "worker-");
}

TEST_F(ApiMetadataTest, LabelsAnnotationsAndOwnerReferencesAreKept) {
  const json owner = client().create(resources::configmaps(), ns(), configmap("owner"));
  json dependent = owned_configmap("dependent", owner);
  dependent["metadata"]["labels"] = {{"training.kubeflow.org/job-name", "mnist"}};
  dependent["metadata"]["annotations"] = {{"example.com/note", "kept"}};
  client().create(resources::configmaps(), ns(), dependent);

  const json got = client().get(resources::configmaps(), ns(), "dependent");
  EXPECT_EQ(got["metadata"]["ownerReferences"], dependent["metadata"]["ownerReferences"]);
  EXPECT_EQ(got["metadata"]["labels"]["training.kubeflow.org/job-name"], "mnist");
  EXPECT_EQ(got["metadata"]["annotations"]["example.com/note"], "kept");
}

TEST_F(ApiMetadataTest, FinalizersHoldDeletionUntilRemoved) {
  json held = configmap("held");
  held["metadata"]["finalizers"] = {"example.com/hold"};
  const json created = client().create(resources::configmaps(), ns(), held);

  const json deleting = client().remove(resources::configmaps(), ns(), "held");
  EXPECT_TRUE(deleting["metadata"].contains("deletionTimestamp")) << deleting.dump();
  const json still = client().get(resources::configmaps(), ns(), "held");
  EXPECT_TRUE(still["metadata"].contains("deletionTimestamp"));
  EXPECT_THAT(still["metadata"]["finalizers"], ElementsAre("example.com/hold"));

  client().patch(resources::configmaps(), ns(), "held", PatchType::Merge,
                 {{"metadata", {{"finalizers", nullptr}}}});
  EXPECT_EQ(expect_error([&] { client().get(resources::configmaps(), ns(), "held"); }).kind(),
            ErrorKind::NotFound);

  kube::WatchOptions from_create;
  from_create.resource_version = created["metadata"]["resourceVersion"];
  // As kube-apiserver: the DELETE sets deletionTimestamp (MODIFIED); the write that empties the
  // finalizers of a terminating object deletes it instead of storing it (DELETED only).
  const auto events = collect_events(client(), resources::configmaps(), ns(), from_create, 2);
  EXPECT_THAT(describe(events), ElementsAre("MODIFIED held", "DELETED held"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].object["metadata"].contains("deletionTimestamp"));
}

// --- errors -----------------------------------------------------------------------------------

TEST_F(ApiErrorTest, MissingObjectIsNotFoundWithAStatusNamingIt) {
  const Error e = expect_error([&] { client().get(resources::pods(), ns(), "nope"); });
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

TEST_F(ApiErrorTest, CreatingAnExistingNameIsAlreadyExists) {
  client().create(resources::configmaps(), ns(), configmap("a"));
  const Error e =
      expect_error([&] { client().create(resources::configmaps(), ns(), configmap("a")); });
  EXPECT_EQ(e.kind(), ErrorKind::AlreadyExists);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.status()["reason"], "AlreadyExists");
  EXPECT_EQ(e.status()["message"], "configmaps \"a\" already exists");
}

TEST_F(ApiErrorTest, StaleResourceVersionIsAConflict) {
  const json v1 = client().create(resources::configmaps(), ns(), configmap("a"));
  json first = v1;
  first["data"]["key"] = "first";
  client().update(resources::configmaps(), ns(), first);

  json stale = v1;
  stale["data"]["key"] = "second";
  const Error e = expect_error([&] { client().update(resources::configmaps(), ns(), stale); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.status()["reason"], "Conflict");
  EXPECT_THAT(e.message(), HasSubstr("Operation cannot be fulfilled on configmaps \"a\": the "
                                     "object has been modified"));
  EXPECT_EQ(client().get(resources::configmaps(), ns(), "a")["data"]["key"], "first");
}

// A resourceVersion that is not a number is the storage's parse error, a 500 without a reason,
// on an update and a patch alike; one written with leading zeros is the same version.
TEST_F(ApiErrorTest, AResourceVersionThatIsNotANumberIsAnInternalError) {
  const json created = client().create(resources::configmaps(), ns(), configmap("a"));
  const auto refused = [&](const std::string& version, bool patch) {
    json written = created;
    written["metadata"]["resourceVersion"] = version;
    const Error e = expect_error([&] {
      if (patch)
        client().patch(resources::configmaps(), ns(), "a", kube::PatchType::Merge,
                       {{"metadata", {{"resourceVersion", version}}}});
      else
        client().update(resources::configmaps(), ns(), written);
    });
    EXPECT_EQ(e.http_code(), 500);
    EXPECT_FALSE(e.status().contains("reason")) << e.status().dump();
    return e.status()["message"].get<std::string>();
  };
  EXPECT_EQ(refused("abc", false), "strconv.ParseUint: parsing \"abc\": invalid syntax");
  EXPECT_EQ(refused("-5", true), "strconv.ParseUint: parsing \"-5\": invalid syntax");
  EXPECT_EQ(refused("99999999999999999999", false),
            "strconv.ParseUint: parsing \"99999999999999999999\": value out of range");
  json padded = created;
  padded["metadata"]["resourceVersion"] =
      "00" + created["metadata"]["resourceVersion"].get<std::string>();
  padded["data"]["key"] = "padded";
  EXPECT_EQ(client().update(resources::configmaps(), ns(), padded)["data"]["key"], "padded");
}

TEST_F(ApiErrorTest, UpdateCarryingTheUidOfARecreatedObjectIsAPreconditionConflict) {
  const json old = client().create(resources::configmaps(), ns(), configmap("a"));
  client().remove(resources::configmaps(), ns(), "a");
  const json now = client().create(resources::configmaps(), ns(), configmap("a"));

  json stale = old;
  stale["metadata"]["resourceVersion"] = now["metadata"]["resourceVersion"];
  const Error e = expect_error([&] { client().update(resources::configmaps(), ns(), stale); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.status()["reason"], "Conflict");
  EXPECT_EQ(e.status()["message"],
            "Operation cannot be fulfilled on configmaps \"a\": StorageError: invalid object, "
            "Code: 4, Key: /registry/configmaps/" +
                ns() +
                "/a, ResourceVersion: 0, "
                "AdditionalErrorMsg: Precondition failed: UID in precondition: " +
                old["metadata"]["uid"].get<std::string>() +
                ", UID in object meta: " + now["metadata"]["uid"].get<std::string>());

  // Deleted and not re-created: still the precondition conflict, with no uid in object meta
  // (checked on kube-apiserver 1.26); without a uid the PUT is a plain 404.
  client().remove(resources::configmaps(), ns(), "a");
  const Error gone = expect_error([&] { client().update(resources::configmaps(), ns(), stale); });
  EXPECT_EQ(gone.kind(), ErrorKind::Conflict);
  EXPECT_THAT(
      gone.status()["message"].get<std::string>(),
      ::testing::EndsWith("Precondition failed: UID in precondition: " +
                          old["metadata"]["uid"].get<std::string>() + ", UID in object meta: "));
  stale["metadata"].erase("uid");
  const Error missing =
      expect_error([&] { client().update(resources::configmaps(), ns(), stale); });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);
  EXPECT_EQ(missing.status()["message"], "configmaps \"a\" not found");
}

TEST_F(ApiErrorTest, BadNameIsInvalidNamingTheField) {
  const Error e =
      expect_error([&] { client().create(resources::configmaps(), ns(), configmap("Bad_Name")); });
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
      expect_error([&] { client().create(resources::configmaps(), ns(), nameless); });
  EXPECT_EQ(missing.kind(), ErrorKind::Invalid);
  EXPECT_THAT(missing.message(), HasSubstr("metadata.name: Required value"));
}

TEST_F(ApiErrorTest, PodWithoutImageIsInvalidNamingTheField) {
  json pod = pod_manifest("no-image");
  pod["spec"]["containers"][0].erase("image");
  const Error e = expect_error([&] { client().create(resources::pods(), ns(), pod); });
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

// The mistakes that left a job's pods refused on a real cluster while the sandbox ran them: a
// GPU requested without a limit (or unlike it), a fraction of a GPU, a negative quantity, an
// environment variable name starting with a digit. Each is a 422 naming the field, on both.
TEST_F(ApiErrorTest, PodsTheServerCannotRunAreInvalidNamingTheField) {
  const auto refused = [&](const json& resources, const json& env) {
    json pod = pod_manifest("refused");
    pod["spec"]["containers"][0]["resources"] = resources;
    if (!env.is_null())
      pod["spec"]["containers"][0]["env"] = env;
    const Error e = expect_error([&] { client().create(resources::pods(), ns(), pod); });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    return e.status()["message"].get<std::string>();
  };
  const std::string prefix = "Pod \"refused\" is invalid: spec.containers[0].";
  EXPECT_EQ(refused({{"requests", {{"nvidia.com/gpu", 1}}}}, nullptr),
            prefix +
                "resources.limits: Required value: Limit must be set for non overcommitable "
                "resources");
  EXPECT_EQ(
      refused({{"requests", {{"nvidia.com/gpu", "1"}}}, {"limits", {{"nvidia.com/gpu", "2"}}}},
              nullptr),
      prefix +
          "resources.requests: Invalid value: \"1\": must be equal to nvidia.com/gpu "
          "limit");
  EXPECT_EQ(refused({{"requests", {{"cpu", "2"}}}, {"limits", {{"cpu", "1"}}}}, nullptr),
            prefix +
                "resources.requests: Invalid value: \"2\": must be less than or equal to "
                "cpu limit");
  // A limit without a request is requested too, before validation: reported for both.
  EXPECT_EQ(refused({{"limits", {{"cpu", "-1"}}}}, nullptr),
            "Pod \"refused\" is invalid: [spec.containers[0].resources.limits[cpu]: Invalid "
            "value: \"-1\": must be greater than or equal to 0, spec.containers[0].resources."
            "requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0]");
  // The real server prints the quantity as Go's struct dump: only the ends are compared.
  EXPECT_THAT(refused({{"limits", {{"nvidia.com/gpu", "0.5"}}}}, nullptr),
              ::testing::AllOf(::testing::StartsWith("Pod \"refused\" is invalid: "
                                                     "[spec.containers[0].resources.limits[nvidia."
                                                     "com/gpu]: Invalid value: "),
                               ::testing::HasSubstr(": must be an integer, spec.containers[0]."
                                                    "resources.requests[nvidia.com/gpu]: Invalid "
                                                    "value: "),
                               ::testing::EndsWith(": must be an integer]")));
  EXPECT_EQ(refused(json::object(), {{{"name", "1BAD"}, {"value", "x"}}}),
            prefix +
                "env[0].name: Invalid value: \"1BAD\": a valid environment variable name "
                "must consist of alphabetic characters, digits, '_', '-', or '.', and must "
                "not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
                "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')");
  // Allowed: a CPU request under its limit, GPUs as a limit alone or an equal request, hugepages
  // and other native resources.
  json pod = pod_manifest("runs");
  pod["spec"]["containers"][0]["resources"] = {
      {"requests", {{"cpu", "500m"}, {"nvidia.com/gpu", "2"}}},
      {"limits", {{"cpu", "1"}, {"nvidia.com/gpu", "2"}, {"example.com/fpga", "1"}}}};
  pod["spec"]["containers"][0]["env"] = {{{"name", "_OK.x-1"}, {"value", "1"}}};
  const json created = client().create(resources::pods(), ns(), pod);
  // A pod's limits are requested too (the fpga's); a pod template's are not (a batch Job's).
  EXPECT_EQ(created["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"], "1");
  json job = {
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata", {{"name", "limits-only"}}},
      {"spec",
       {{"template",
         {{"spec",
           {{"restartPolicy", "Never"},
            {"containers", json::array({{{"name", "c"},
                                         {"image", "busybox"},
                                         {"resources", {{"limits", {{"cpu", "1"}}}}}}})}}}}}}}};
  const json stored = client().create(resources::jobs(), ns(), job, {.dry_run = true});
  EXPECT_FALSE(
      stored["spec"]["template"]["spec"]["containers"][0]["resources"].contains("requests"))
      << stored.dump();
}

/// The causes of a 422 as "reason field: message", in the server's order.
std::vector<std::string> causes_of(const Error& e) {
  std::vector<std::string> out;
  for (const auto& c : e.status()["details"]["causes"]) {
    out.push_back(fmt::format("{} {}: {}", c.value("reason", ""), c.value("field", ""),
                              c.value("message", "")));
  }
  return out;
}

/// A container of a test pod: `name` running busybox, with `extra` fields.
json container(const std::string& name, const json& extra = json::object()) {
  json c = {{"name", name}, {"image", "busybox:1.36"}};
  c.update(extra);
  return c;
}

/// A batch/v1 Job whose pod template runs `containers` once, with `pod_spec` fields besides.
json batch_job(const std::string& name, const json& containers,
               const json& pod_spec = json::object()) {
  json spec = {{"restartPolicy", "Never"}, {"containers", containers}};
  spec.update(pod_spec);
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", {{"name", name}}},
          {"spec", {{"template", {{"spec", std::move(spec)}}}}}};
}

constexpr const char* kLabelValueRule =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

// Mistakes in a pod's spec that kube-apiserver 1.26 refuses and the sandbox ran: a mount of a
// volume the pod does not have, two containers (app or init) of one name, two ports of one name
// or a name that is no IANA service name, a node selector that is no label, a toleration that
// says Exists and gives a value. Each is a 422 in the server's words, causes in its order.
TEST_F(ApiErrorTest, PodSpecMistakesAreInvalidInTheServersWords) {
  const auto refused = [&](const json& spec) {
    json pod = pod_manifest("refused");
    pod["spec"].update(spec);
    const Error e =
        expect_error([&] { client().create(resources::pods(), ns(), pod, {.dry_run = true}); });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    EXPECT_EQ(e.status()["reason"], "Invalid");
    return e;
  };
  const json mounts_x = {{"volumeMounts", {{{"name", "x"}, {"mountPath", "/x"}}}}};
  const Error missing = refused({{"containers", {container("main", mounts_x)}}});
  EXPECT_EQ(
      missing.status()["message"],
      "Pod \"refused\" is invalid: spec.containers[0].volumeMounts[0].name: Not found: \"x\"");
  EXPECT_THAT(causes_of(missing),
              ElementsAre("FieldValueNotFound spec.containers[0].volumeMounts[0].name: Not "
                          "found: \"x\""));

  // Each container's own checks come first, then whether its name is taken; an init container's
  // name may not be an app container's either.
  const Error init =
      refused({{"initContainers",
                {container("main", {{"volumeMounts", {{{"name", "y"}, {"mountPath", "/y"}}}}})}}});
  EXPECT_THAT(causes_of(init),
              ElementsAre("FieldValueNotFound spec.initContainers[0].volumeMounts[0].name: Not "
                          "found: \"y\"",
                          "FieldValueDuplicate spec.initContainers[0].name: Duplicate value: "
                          "\"main\""));
  const Error twins =
      refused({{"containers", {container("main"), container("main", {{"image", ""}})}}});
  EXPECT_EQ(twins.status()["message"],
            "Pod \"refused\" is invalid: [spec.containers[1].image: Required value, "
            "spec.containers[1].name: Duplicate value: \"main\"]");
  EXPECT_THAT(
      causes_of(twins),
      ElementsAre("FieldValueRequired spec.containers[1].image: Required value",
                  "FieldValueDuplicate spec.containers[1].name: Duplicate value: \"main\""));

  // Port names are unique within a container (a bad one is not counted) and IANA service names.
  const Error ports =
      refused({{"containers",
                {container("main", {{"ports",
                                     {{{"name", "http"}, {"containerPort", 80}},
                                      {{"name", "http"}, {"containerPort", 81}},
                                      {{"name", "Http_x"}, {"containerPort", 82}},
                                      {{"name", "abcdefghijklmnop"}, {"containerPort", 83}}}}})}}});
  EXPECT_THAT(causes_of(ports),
              ElementsAre("FieldValueDuplicate spec.containers[0].ports[1].name: Duplicate value: "
                          "\"http\"",
                          "FieldValueInvalid spec.containers[0].ports[2].name: Invalid value: "
                          "\"Http_x\": must contain only alpha-numeric characters (a-z, 0-9), and "
                          "hyphens (-)",
                          "FieldValueInvalid spec.containers[0].ports[3].name: Invalid value: "
                          "\"abcdefghijklmnop\": must be no more than 15 characters"));

  // One entry, so the order of the causes does not depend on Go's map order.
  const Error selector = refused({{"nodeSelector", {{"a/b/c", "-x"}}}});
  EXPECT_THAT(causes_of(selector),
              ElementsAre("FieldValueInvalid spec.nodeSelector: Invalid value: \"a/b/c\": a "
                          "qualified name must consist of alphanumeric characters, '-', '_' or "
                          "'.', and must start and end with an alphanumeric character (e.g. "
                          "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                          "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
                          "subdomain prefix and '/' (e.g. 'example.com/MyName')",
                          std::string("FieldValueInvalid spec.nodeSelector: Invalid value: "
                                      "\"-x\": ") +
                              kLabelValueRule));

  const Error toleration =
      refused({{"tolerations", {{{"key", "k"}, {"operator", "Exists"}, {"value", "v"}}}}});
  EXPECT_EQ(toleration.status()["message"],
            "Pod \"refused\" is invalid: spec.tolerations[0].operator: Invalid value: "
            "core.Toleration{Key:\"k\", Operator:\"Exists\", Value:\"v\", Effect:\"\", "
            "TolerationSeconds:(*int64)(nil)}: value must be empty when `operator` is 'Exists'");
  EXPECT_EQ(toleration.status()["details"]["causes"][0]["field"], "spec.tolerations[0].operator");

  // What the server takes: a mount of a declared volume, one port name in two containers, label
  // selectors, an Exists toleration without a value and an Equal one with a label value.
  json pod = pod_manifest("accepted");
  pod["spec"]["volumes"] = {{{"name", "x"}, {"emptyDir", json::object()}}};
  pod["spec"]["containers"] = {
      container("main", {{"ports", {{{"name", "http"}, {"containerPort", 80}}}},
                         {"volumeMounts", {{{"name", "x"}, {"mountPath", "/x"}}}}}),
      container("sidecar", {{"ports", {{{"name", "http"}, {"containerPort", 81}}}}})};
  pod["spec"]["initContainers"] = {container("setup", mounts_x)};
  pod["spec"]["nodeSelector"] = {{"example.com/pool", "gpu_a-1.x"}, {"empty", ""}};
  pod["spec"]["tolerations"] = {{{"operator", "Exists"}},
                                {{"key", "k"}, {"operator", "Equal"}, {"value", "v"}}};
  EXPECT_NO_THROW(client().create(resources::pods(), ns(), pod, {.dry_run = true}));
}

// A Job's pod template is checked as a pod's spec is, under spec.template.spec.
TEST_F(ApiErrorTest, JobPodTemplateMistakesAreInvalidInTheServersWords) {
  const json job =
      batch_job("refused",
                {container("main", {{"volumeMounts", {{{"name", "x"}, {"mountPath", "/x"}}}},
                                    {"ports",
                                     {{{"name", "a"}, {"containerPort", 1}},
                                      {{"name", "a"}, {"containerPort", 2}}}}}),
                 container("main")},
                {{"nodeSelector", {{"a", "-"}}},
                 {"tolerations", {{{"operator", "Exists"}, {"value", "v"}}}}});
  const Error e =
      expect_error([&] { client().create(resources::jobs(), ns(), job, {.dry_run = true}); });
  EXPECT_EQ(e.http_code(), 422) << e.message();
  const std::string path = "spec.template.spec.";
  EXPECT_EQ(e.status()["message"],
            "Job.batch \"refused\" is invalid: [" + path +
                "containers[0].ports[1].name: Duplicate value: \"a\", " + path +
                "containers[0].volumeMounts[0].name: Not found: \"x\", " + path +
                "containers[1].name: Duplicate value: \"main\", " + path +
                "nodeSelector: Invalid value: \"-\": " + kLabelValueRule + ", " + path +
                "tolerations[0].operator: Invalid value: core.Toleration{Key:\"\", "
                "Operator:\"Exists\", Value:\"v\", Effect:\"\", TolerationSeconds:(*int64)(nil)}: "
                "value must be empty when `operator` is 'Exists']");
  EXPECT_THAT(
      causes_of(e),
      ElementsAre(HasSubstr("FieldValueDuplicate " + path + "containers[0].ports[1].name"),
                  HasSubstr("FieldValueNotFound " + path + "containers[0].volumeMounts[0].name"),
                  HasSubstr("FieldValueDuplicate " + path + "containers[1].name"),
                  HasSubstr("FieldValueInvalid " + path + "nodeSelector"),
                  HasSubstr("FieldValueInvalid " + path + "tolerations[0].operator")));
}

// ValidatePod, ValidateJob and ValidateService check the metadata and the spec together: one 422
// lists both, the metadata first.
TEST_F(ApiErrorTest, BadMetadataAndABadSpecAreReportedTogether) {
  json pod = pod_manifest("Bad_Name");
  pod["spec"]["containers"][0].erase("image");
  const Error named =
      expect_error([&] { client().create(resources::pods(), ns(), pod, {.dry_run = true}); });
  EXPECT_EQ(named.status()["message"],
            "Pod \"Bad_Name\" is invalid: [metadata.name: Invalid value: \"Bad_Name\": a "
            "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
            "regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), "
            "spec.containers[0].image: Required value]");

  json labelled = pod_manifest("labelled");
  labelled["metadata"]["labels"] = {{"a", "b c"}};
  labelled["spec"]["containers"][0]["volumeMounts"] = {{{"name", "x"}, {"mountPath", "/x"}}};
  const Error both =
      expect_error([&] { client().create(resources::pods(), ns(), labelled, {.dry_run = true}); });
  EXPECT_THAT(
      causes_of(both),
      ElementsAre(std::string("FieldValueInvalid metadata.labels: Invalid value: \"b c\": ") +
                      kLabelValueRule,
                  "FieldValueNotFound spec.containers[0].volumeMounts[0].name: Not found: "
                  "\"x\""));

  const json job = batch_job("Bad_Name", json::array({container("main", {{"image", ""}})}));
  const Error job_error =
      expect_error([&] { client().create(resources::jobs(), ns(), job, {.dry_run = true}); });
  EXPECT_THAT(causes_of(job_error),
              ElementsAre(HasSubstr("FieldValueInvalid metadata.name: Invalid value: \"Bad_Name\""),
                          "FieldValueRequired spec.template.spec.containers[0].image: Required "
                          "value"));

  const json service = {{"apiVersion", "v1"},
                        {"kind", "Service"},
                        {"metadata", {{"name", "s"}, {"labels", {{"a", "-"}}}}},
                        {"spec", {{"ports", {{{"port", 80}}, {{"port", 81}}}}}}};
  const Error svc = expect_error(
      [&] { client().create(resources::services(), ns(), service, {.dry_run = true}); });
  EXPECT_THAT(causes_of(svc),
              ElementsAre(std::string("FieldValueInvalid metadata.labels: Invalid value: \"-\": ") +
                              kLabelValueRule,
                          "FieldValueRequired spec.ports[0].name: Required value",
                          "FieldValueRequired spec.ports[1].name: Required value"));
}

// validateServicePort: several ports each need a name, names are DNS-1123 labels (not IANA
// service names: 16 characters or digits only are taken) and unique, ports and targetPorts are
// 1 to 65535 (a named targetPort an IANA service name), the protocol TCP, UDP or SCTP.
TEST_F(ApiErrorTest, ServicePortMistakesAreInvalidInTheServersWords) {
  const auto service = [](const json& ports) {
    return json{{"apiVersion", "v1"},
                {"kind", "Service"},
                {"metadata", {{"name", "s"}}},
                {"spec", {{"selector", {{"app", "web"}}}, {"ports", ports}}}};
  };
  const auto refused = [&](const json& ports) {
    const Error e = expect_error(
        [&] { client().create(resources::services(), ns(), service(ports), {.dry_run = true}); });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    EXPECT_EQ(e.status()["reason"], "Invalid");
    return e.status()["message"].get<std::string>();
  };
  const std::string prefix = "Service \"s\" is invalid: ";
  EXPECT_EQ(refused({{{"port", 80}}, {{"port", 81}, {"name", "b"}}}),
            prefix + "spec.ports[0].name: Required value");
  EXPECT_EQ(refused({{{"port", 80}, {"name", "a"}}, {{"port", 81}, {"name", "a"}}}),
            prefix + "spec.ports[1].name: Duplicate value: \"a\"");
  EXPECT_EQ(refused({{{"port", 80}, {"name", "Http_x"}}}),
            prefix +
                "spec.ports[0].name: Invalid value: \"Http_x\": a lowercase RFC 1123 label must "
                "consist of lower case alphanumeric characters or '-', and must start and end "
                "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')");
  EXPECT_EQ(refused({{{"port", 80}, {"protocol", "tcp"}}}),
            prefix +
                "spec.ports[0].protocol: Unsupported value: \"tcp\": supported values: \"SCTP\", "
                "\"TCP\", \"UDP\"");
  EXPECT_EQ(refused({{{"port", 80}, {"targetPort", "Bad_Name"}}}),
            prefix +
                "spec.ports[0].targetPort: Invalid value: \"Bad_Name\": must contain only "
                "alpha-numeric characters (a-z, 0-9), and hyphens (-)");
  // A missing targetPort is the port, so a bad port is reported for both.
  EXPECT_EQ(refused({{{"port", 70000}}}),
            prefix +
                "[spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, "
                "inclusive, spec.ports[0].targetPort: Invalid value: 70000: must be between 1 "
                "and 65535, inclusive]");
  EXPECT_EQ(refused({{{"port", 0}, {"protocol", "XX"}}, {{"port", 70000}, {"name", "Bad_"}}}),
            prefix +
                "[spec.ports[0].name: Required value, spec.ports[0].port: Invalid value: 0: must "
                "be between 1 and 65535, inclusive, spec.ports[0].protocol: Unsupported value: "
                "\"XX\": supported values: \"SCTP\", \"TCP\", \"UDP\", spec.ports[0].targetPort: "
                "Invalid value: 0: must be between 1 and 65535, inclusive, spec.ports[1].name: "
                "Invalid value: \"Bad_\": a lowercase RFC 1123 label must consist of lower case "
                "alphanumeric characters or '-', and must start and end with an alphanumeric "
                "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?'), spec.ports[1].port: Invalid value: 70000: must "
                "be between 1 and 65535, inclusive, spec.ports[1].targetPort: Invalid value: "
                "70000: must be between 1 and 65535, inclusive]");

  // Taken: a 16-character or all-digit name, a targetPort of 0 or "" and an empty protocol
  // (defaulted to the port and TCP).
  const json created = client().create(
      resources::services(), ns(),
      service({{{"port", 80}, {"name", "abcdefghijklmnop"}, {"targetPort", 0}, {"protocol", ""}},
               {{"port", 81}, {"name", "123"}, {"targetPort", ""}}}),
      {.dry_run = true});
  EXPECT_EQ(created["spec"]["ports"], json::parse(R"([
      {"name": "abcdefghijklmnop", "port": 80, "protocol": "TCP", "targetPort": 80},
      {"name": "123", "port": 81, "protocol": "TCP", "targetPort": 81}])"));
}

// IP families as a single-stack IPv4 cluster takes them (kube-apiserver 1.26's words): the policy
// and family names, no family twice, several families only with a dual-stack policy; dual stack
// and IPv6 only for a headless Service without a selector, which gets both families.
TEST_F(ApiErrorTest, IpFamiliesAreThoseOfASingleStackCluster) {
  const auto service = [](const json& fields, bool selector = true) {
    json spec = {{"ports", {{{"port", 80}}}}};
    if (selector)
      spec["selector"] = {{"app", "web"}};
    spec.update(fields);
    return json{{"apiVersion", "v1"},
                {"kind", "Service"},
                {"metadata", {{"name", "s"}}},
                {"spec", std::move(spec)}};
  };
  const auto refused = [&](const json& object) {
    const Error e = expect_error(
        [&] { client().create(resources::services(), ns(), object, {.dry_run = true}); });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    return e.status()["message"].get<std::string>();
  };
  const std::string prefix = "Service \"s\" is invalid: ";
  EXPECT_EQ(refused(service({{"ipFamilyPolicy", "Whatever"}})),
            prefix +
                "spec.ipFamilyPolicy: Unsupported value: \"Whatever\": supported values: "
                "\"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"");
  EXPECT_EQ(refused(service({{"ipFamilies", {"IPv5"}}})),
            prefix +
                "spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: "
                "\"IPv4\", \"IPv6\"");
  EXPECT_EQ(refused(service({{"ipFamilies", {"IPv4", "IPv4"}}})),
            prefix + "spec.ipFamilies[1]: Duplicate value: \"IPv4\"");
  // Several families with SingleStack: said only of valid families, and then alone.
  EXPECT_EQ(refused(service({{"ipFamilyPolicy", "SingleStack"}, {"ipFamilies", {"IPv4", "IPv4"}}})),
            prefix + "spec.ipFamilies[1]: Duplicate value: \"IPv4\"");
  EXPECT_EQ(refused(service({{"ipFamilyPolicy", "SingleStack"}, {"ipFamilies", {"IPv4", "IPv6"}}})),
            prefix +
                "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' "
                "or 'PreferDualStack' when multiple IP families are specified");
  EXPECT_EQ(refused(service({{"ipFamilyPolicy", "Whatever"}, {"ipFamilies", {"IPv5"}}})),
            prefix +
                "[spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", "
                "\"IPv6\", spec.ipFamilyPolicy: Unsupported value: \"Whatever\": supported "
                "values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"]");
  EXPECT_EQ(refused(service({{"ipFamilyPolicy", "RequireDualStack"}})),
            prefix +
                "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not "
                "configured for dual-stack services");
  EXPECT_EQ(refused(service({{"clusterIP", "None"}, {"ipFamilyPolicy", "RequireDualStack"}})),
            prefix +
                "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not "
                "configured for dual-stack services");
  // Checked before anything else and reported alone: the bad name and port are not mentioned.
  json bad_too = service({{"ipFamilyPolicy", "RequireDualStack"}, {"ports", {{{"port", 70000}}}}});
  bad_too["metadata"]["name"] = "Bad_Name";
  EXPECT_EQ(refused(bad_too),
            "Service \"Bad_Name\" is invalid: spec.ipFamilyPolicy: Invalid value: "
            "\"RequireDualStack\": this cluster is not configured for dual-stack services");
  EXPECT_EQ(
      refused(service({{"ipFamilies", {"IPv4", "IPv6"}}, {"ipFamilyPolicy", "PreferDualStack"}})),
      prefix + "spec.ipFamilies[1]: Invalid value: \"IPv6\": not configured on this cluster");

  const auto families = [&](const json& object) {
    const json created =
        client().create(resources::services(), ns(), object, {.dry_run = true})["spec"];
    return json{created["ipFamilyPolicy"], created["ipFamilies"]};
  };
  EXPECT_EQ(families(service({{"ipFamilyPolicy", "PreferDualStack"}})),
            json::parse(R"(["PreferDualStack", ["IPv4"]])"));
  EXPECT_EQ(families(service({{"clusterIP", "None"}, {"ipFamilyPolicy", "RequireDualStack"}},
                             /*selector=*/false)),
            json::parse(R"(["RequireDualStack", ["IPv4", "IPv6"]])"));
  EXPECT_EQ(families(service({{"clusterIP", "None"}, {"ipFamilies", {"IPv6"}}}, false)),
            json::parse(R"(["RequireDualStack", ["IPv6", "IPv4"]])"));

  // An update's families are checked as a create's, before anything else and alone.
  const json stored = client().create(resources::services(), ns(), service(json::object()));
  const auto update_refused = [&](const json& fields) {
    json updated = stored;
    updated["spec"].update(fields);
    updated["spec"]["ports"][0]["port"] = 70000;
    updated["metadata"]["labels"] = {{"bad key!", "x"}};
    const Error e = expect_error([&] { client().update(resources::services(), ns(), updated); });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    return e.status()["message"].get<std::string>();
  };
  EXPECT_EQ(update_refused({{"ipFamilyPolicy", "RequireDualStack"}}),
            prefix +
                "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not "
                "configured for dual-stack services");
  EXPECT_EQ(update_refused({{"ipFamilies", {"IPv4", "IPv5"}}}),
            prefix +
                "spec.ipFamilies[1]: Unsupported value: \"IPv5\": supported values: \"IPv4\", "
                "\"IPv6\"");
}

// A quantity resource.Quantity cannot read fails the decoding of the whole body: 400 naming the
// kind, in a pod or a Job's template, before defaulting or validation. Ports default to TCP.
TEST_F(ApiErrorTest, QuantitiesTheDecoderCannotReadAreABadRequest) {
  const auto refused = [&](const json& cpu) {
    json pod = pod_manifest("bad-quantity");
    pod["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", cpu}}}};
    const Error e = expect_error([&] { client().create(resources::pods(), ns(), pod); });
    EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
    EXPECT_EQ(e.http_code(), 400);
    return e.status()["message"].get<std::string>();
  };
  const std::string format =
      "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular "
      "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
  EXPECT_EQ(refused("abc"), format);
  EXPECT_EQ(refused(true), format);
  EXPECT_EQ(refused("1mm"),
            "Pod in version \"v1\" cannot be handled as a Pod: unable to parse quantity's suffix");

  json job = {{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", {{"name", "bad-quantity"}}},
              {"spec",
               {{"template",
                 {{"spec",
                   {{"restartPolicy", "Never"},
                    {"containers",
                     json::array({{{"name", "c"},
                                   {"image", "busybox"},
                                   {"ports", json::array({{{"containerPort", 80}}})},
                                   {"resources", {{"requests", {{"memory", "1Gx"}}}}}}})}}}}}}}};
  const Error e = expect_error([&] { client().create(resources::jobs(), ns(), job); });
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_EQ(e.status()["message"],
            "Job in version \"v1\" cannot be handled as a Job: quantities must match the "
            "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");

  json& container = job["spec"]["template"]["spec"]["containers"][0];
  container["resources"] = {{"requests", {{"memory", "1Gi"}}}};
  const json stored = client().create(resources::jobs(), ns(), job, {.dry_run = true});
  EXPECT_EQ(stored["spec"]["template"]["spec"]["containers"][0]["ports"],
            json::parse(R"([{"containerPort": 80, "protocol": "TCP"}])"));
  json pod = pod_manifest("ports");
  pod["spec"]["containers"][0]["ports"] = {{{"containerPort", 8080}, {"protocol", "UDP"}},
                                           {{"containerPort", 2222}, {"name", "ssh"}}};
  const json created = client().create(resources::pods(), ns(), pod, {.dry_run = true});
  EXPECT_EQ(created["spec"]["containers"][0]["ports"], json::parse(R"([
      {"containerPort": 8080, "protocol": "UDP"},
      {"containerPort": 2222, "name": "ssh", "protocol": "TCP"}])"));
}

// What json.Unmarshal into the Go types cannot hold is a 400 naming the Go struct, the field's
// path and its type, in a pod, a Job's template or any object's metadata.
TEST_F(ApiErrorTest, BodiesTheGoTypesCannotHoldAreABadRequestNamingTheField) {
  const auto refused = [&](const kube::Resource& r, const json& object) {
    const Error e = expect_error([&] { client().create(r, ns(), object, {.dry_run = true}); });
    EXPECT_EQ(e.http_code(), 400) << e.message();
    return e.status()["message"].get<std::string>();
  };
  const auto pod = [&](const json& container, const json& spec = json::object()) {
    json p = pod_manifest("typed");
    p["spec"]["containers"][0].update(container);
    p["spec"].update(spec);
    return refused(resources::pods(), p);
  };
  const std::string prefix =
      "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal ";
  EXPECT_EQ(pod({{"image", true}}),
            prefix + "bool into Go struct field Container.spec.containers.image of type string");
  EXPECT_EQ(
      pod({{"command", {1}}}),
      prefix + "number into Go struct field Container.spec.containers.command of type string");
  EXPECT_EQ(pod({{"ports", {{{"containerPort", 1.5}}}}}),
            prefix +
                "number 1.5 into Go struct field ContainerPort.spec.containers.ports."
                "containerPort of type int32");
  EXPECT_EQ(pod({{"ports", {{{"containerPort", 80.0}}}}}),
            prefix +
                "number 80.0 into Go struct field ContainerPort.spec.containers.ports."
                "containerPort of type int32");
  EXPECT_EQ(pod({{"ports", {{"a", 1}}}}),
            prefix +
                "object into Go struct field Container.spec.containers.ports of type "
                "[]v1.ContainerPort");
  EXPECT_EQ(pod(json::object(), {{"tolerations", {{{"tolerationSeconds", "60"}}}}}),
            prefix +
                "string into Go struct field Toleration.spec.tolerations.tolerationSeconds of "
                "type int64");
  EXPECT_EQ(
      pod(json::object(), {{"restartPolicy", 5}}),
      prefix + "number into Go struct field PodSpec.spec.restartPolicy of type v1.RestartPolicy");
  // What the admission plugins read: refused by the decoder before they run.
  EXPECT_EQ(pod(json::object(), {{"preemptionPolicy", 5}}),
            prefix +
                "number into Go struct field PodSpec.spec.preemptionPolicy of type "
                "v1.PreemptionPolicy");
  EXPECT_EQ(pod(json::object(), {{"serviceAccount", 5}}),
            prefix + "number into Go struct field PodSpec.spec.serviceAccount of type string");
  EXPECT_EQ(pod(json::object(), {{"imagePullSecrets", {{{"name", 5}}}}}),
            prefix +
                "number into Go struct field LocalObjectReference.spec.imagePullSecrets.name of "
                "type string");
  const auto typed_class = [&](const json& fields) {
    const Error e = expect_error([&] {
      client().create(resources::priority_classes(), "", priority_class(ns() + "-typed", fields),
                      {.dry_run = true});
    });
    EXPECT_EQ(e.http_code(), 400) << e.message();
    return e.status()["message"].get<std::string>();
  };
  const std::string pc_prefix =
      "PriorityClass in version \"v1\" cannot be handled as a "
      "PriorityClass: json: cannot unmarshal string into Go struct field "
      "PriorityClass.";
  EXPECT_EQ(typed_class({{"value", "abc"}}), pc_prefix + "value of type int32");
  EXPECT_EQ(typed_class({{"globalDefault", "yes"}}), pc_prefix + "globalDefault of type bool");
  json labelled = pod_manifest("typed");
  labelled["metadata"]["labels"] = {{"team", 1}};
  EXPECT_EQ(refused(resources::pods(), labelled),
            prefix + "number into Go struct field ObjectMeta.metadata.labels of type string");

  json job = {{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", {{"name", "typed"}}},
              {"spec",
               {{"template",
                 {{"spec",
                   {{"restartPolicy", "Never"},
                    {"containers", json::array({{{"name", "c"}, {"image", false}}})}}}}}}}};
  EXPECT_EQ(refused(resources::jobs(), job),
            "Job in version \"v1\" cannot be handled as a Job: json: cannot unmarshal bool into "
            "Go struct field Container.spec.template.spec.containers.image of type string");
  const auto service = [&](const json& spec) {
    return refused(resources::services(), {{"apiVersion", "v1"},
                                           {"kind", "Service"},
                                           {"metadata", {{"name", "typed"}}},
                                           {"spec", spec}});
  };
  const std::string svc =
      "Service in version \"v1\" cannot be handled as a Service: json: cannot unmarshal ";
  EXPECT_EQ(service({{"ports", {{{"port", "80"}}}}}),
            svc + "string into Go struct field ServicePort.spec.ports.port of type int32");
  EXPECT_EQ(service({{"ports", 5}}),
            svc + "number into Go struct field ServiceSpec.spec.ports of type []v1.ServicePort");
  EXPECT_EQ(service({{"ipFamilies", 5}}),
            svc + "number into Go struct field ServiceSpec.spec.ipFamilies of type []v1.IPFamily");
  EXPECT_EQ(service({{"ipFamilies", {5}}}),
            svc + "number into Go struct field ServiceSpec.spec.ipFamilies of type v1.IPFamily");
  EXPECT_EQ(
      service({{"ipFamilyPolicy", 5}}),
      svc +
          "number into Go struct field ServiceSpec.spec.ipFamilyPolicy of type v1.IPFamilyPolicy");
  EXPECT_EQ(service({{"selector", {{"a", 1}}}}),
            svc + "number into Go struct field ServiceSpec.spec.selector of type string");
  EXPECT_EQ(service({{"clusterIPs", {5}}}),
            svc + "number into Go struct field ServiceSpec.spec.clusterIPs of type string");
  EXPECT_EQ(service({{"type", 5}}),
            svc + "number into Go struct field ServiceSpec.spec.type of type v1.ServiceType");
  json cm = configmap("typed");
  cm["metadata"]["annotations"] = {{"a", true}};
  EXPECT_EQ(refused(resources::configmaps(), cm),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal "
            "bool into Go struct field ObjectMeta.metadata.annotations of type string");
}

TEST_F(ApiErrorTest, ConfigMapDataThatIsNotStringsIsABadRequest) {
  // The server cannot decode the body into a v1.ConfigMap (data is map[string]string): 400
  // BadRequest with the decoder's words (handlers/rest.go transformDecodeError) on a create or
  // an update.
  json cm = configmap("numbers");
  cm["data"]["replicas"] = 3;
  Error e = expect_error([&] { client().create(resources::configmaps(), ns(), cm); });
  EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
  EXPECT_EQ(e.status(), json::parse(R"({
      "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
      "message": "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string",
      "reason": "BadRequest", "code": 400})"));

  cm["data"] = {{"nested", {{"a", "b"}}}};
  EXPECT_THAT(
      expect_error([&] { client().create(resources::configmaps(), ns(), cm); }).message(),
      HasSubstr("cannot unmarshal object into Go struct field ConfigMap.data of type string"));
  cm["data"] = json::array({"a"});
  EXPECT_THAT(expect_error([&] { client().create(resources::configmaps(), ns(), cm); }).message(),
              HasSubstr("cannot unmarshal array into Go struct field ConfigMap.data of type "
                        "map[string]string"));

  // A null value decodes as an empty string.
  cm["data"] = {{"empty", nullptr}, {"text", "x"}};
  json created = client().create(resources::configmaps(), ns(), cm);
  EXPECT_EQ(created["data"], json({{"empty", ""}, {"text", "x"}}));

  created["data"]["flag"] = true;
  EXPECT_THAT(
      expect_error([&] { client().update(resources::configmaps(), ns(), created); }).message(),
      HasSubstr("cannot unmarshal bool into Go struct field ConfigMap.data of type string"));
  // A patch whose result does not decode is applyPatchToCurrentObject's 422 on `patch`.
  const Error patched = expect_error([&] {
    client().patch(resources::configmaps(), ns(), "numbers", kube::PatchType::Merge,
                   {{"binaryData", {{"blob", 1}}}});
  });
  EXPECT_EQ(patched.kind(), ErrorKind::Invalid);
  EXPECT_EQ(patched.http_code(), 422);
  EXPECT_EQ(patched.status()["details"].size(), 1u) << "only causes: no kind, no name";
  EXPECT_EQ(patched.status()["details"]["causes"][0]["field"], "patch");
  // The server's whole message (the client shortens what it prints to 512 characters, and a real
  // server's object JSON, managedFields and all, pushes the decoder's words past that).
  const std::string message = patched.status()["message"];
  EXPECT_EQ(message.rfind(" \"\" is invalid: patch: Invalid value: \"{", 0), 0u) << message;
  EXPECT_THAT(message, HasSubstr("\": json: cannot unmarshal number into Go struct field "
                                 "ConfigMap.binaryData of type []uint8"));
}

// A Secret's data is []byte: base64 the decoder reads strictly (400 naming the byte) and the
// server writes back canonically; stringData is written into data and not kept. Keys of both
// kinds are config keys; a typed Secret needs its keys (422 naming them).
TEST_F(ApiErrorTest, SecretAndConfigMapDataAreDecodedAndCheckedAsTheServerDoes) {
  const auto secret = [](json data, json string_data = nullptr, std::string type = "") {
    json s = {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s"}}}};
    s["data"] = std::move(data);
    if (!string_data.is_null())
      s["stringData"] = std::move(string_data);
    if (!type.empty())
      s["type"] = type;
    return s;
  };
  const auto refused = [&](const kube::Resource& r, const json& object) {
    const Error e = expect_error([&] { client().create(r, ns(), object, {.dry_run = true}); });
    return std::to_string(e.http_code()) + " " + e.status()["message"].get<std::string>();
  };
  EXPECT_EQ(refused(resources::secrets(), secret({{"a", "YWJ"}})),
            "400 Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at "
            "input byte 0");
  EXPECT_EQ(refused(resources::secrets(), secret({{"a", "YWJjZA==x"}})),
            "400 Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at "
            "input byte 8");
  EXPECT_EQ(refused(resources::secrets(), secret(json::object(), {{"a", 5}})),
            "400 Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal "
            "number into Go struct field Secret.stringData of type string");
  EXPECT_EQ(refused(resources::secrets(), secret({{"a", "YWJj"}}, {{"bad key", "x"}})),
            "422 Secret \"s\" is invalid: data[bad key]: Invalid value: \"bad key\": a valid "
            "config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
            "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
            "'[-._a-zA-Z0-9]+')");
  EXPECT_EQ(refused(resources::secrets(), secret({{"a", "YWJj"}}, nullptr, "kubernetes.io/tls")),
            "422 Secret \"s\" is invalid: [data[tls.crt]: Required value, data[tls.key]: "
            "Required value]");
  const json stored = client().create(
      resources::secrets(), ns(),
      secret({{"a", "YWJj\n"}, {"b", "YR=="}, {"c", "eA=="}}, {{"c", "yy"}, {"d", "zz"}}),
      {.dry_run = true});
  EXPECT_EQ(stored["data"], json({{"a", "YWJj"}, {"b", "YQ=="}, {"c", "eXk="}, {"d", "eno="}}));
  EXPECT_FALSE(stored.contains("stringData")) << stored.dump();

  json cm = configmap("c");
  cm["data"] = {{"a", "x"}};
  cm["binaryData"] = {{"a", "eA=="}};
  EXPECT_EQ(refused(resources::configmaps(), cm),
            "422 ConfigMap \"c\" is invalid: data[a]: Invalid value: \"a\": duplicate of key "
            "present in binaryData");
  cm["binaryData"] = {{"b", "eA="}};
  EXPECT_EQ(refused(resources::configmaps(), cm),
            "400 ConfigMap in version \"v1\" cannot be handled as a ConfigMap: illegal base64 "
            "data at input byte 3");
}

// The pod admission plugins' refusals: 403 Forbidden naming the pod as the request did, before
// any field of the pod is validated.
TEST_F(ApiErrorTest, PodAdmissionPluginsRefuseAsForbidden) {
  const auto refused = [&](const json& pod) {
    const Error e =
        expect_error([&] { client().create(resources::pods(), ns(), pod, {.dry_run = true}); });
    EXPECT_EQ(e.http_code(), 403) << e.message();
    EXPECT_EQ(e.status()["reason"], "Forbidden");
    EXPECT_EQ(e.status()["details"]["kind"], "pods");
    return e.status()["message"].get<std::string>();
  };
  json stranger = pod_manifest("p");
  stranger["spec"]["serviceAccountName"] = "nobody";
  EXPECT_EQ(refused(stranger), fmt::format("pods \"p\" is forbidden: error looking up service "
                                           "account {}/nobody: serviceaccount \"nobody\" not found",
                                           ns()));
  // Named by its generateName; before the bad name and the missing image are looked at.
  json generated = stranger;
  generated["metadata"] = {{"generateName", "Bad_"}};
  generated["spec"]["containers"][0].erase("image");
  EXPECT_EQ(refused(generated), fmt::format("pods \"Bad_\" is forbidden: error looking up "
                                            "service account {}/nobody: serviceaccount "
                                            "\"nobody\" not found",
                                            ns()));
  json unknown_class = pod_manifest("p");
  unknown_class["spec"]["priorityClassName"] = ns() + "-none";
  EXPECT_EQ(
      refused(unknown_class),
      fmt::format("pods \"p\" is forbidden: no PriorityClass with name {}-none was found", ns()));
  json own_priority = pod_manifest("p");
  own_priority["spec"]["priority"] = 7;
  EXPECT_EQ(refused(own_priority),
            "pods \"p\" is forbidden: the integer value of priority (7) must not be provided in "
            "pod spec; priority admission controller computed 0 from the given PriorityClass name");
  json own_policy = pod_manifest("p");
  own_policy["spec"]["preemptionPolicy"] = "Never";
  EXPECT_EQ(refused(own_policy),
            "pods \"p\" is forbidden: the string value of PreemptionPolicy (Never) must not be "
            "provided in pod spec; priority admission controller computed PreemptLowerPriority "
            "from the given PriorityClass name");
}

// What ValidatePriorityClass refuses: `system-` names but the system classes as they are, a user
// class above 1000000000, an unknown preemption policy.
TEST_F(ApiErrorTest, PriorityClassesTheServerReservesAreInvalid) {
  const auto refused = [&](const std::string& name, std::int64_t value, json fields) {
    fields["value"] = value;
    const Error e = expect_error([&] {
      client().create(resources::priority_classes(), "", priority_class(name, fields),
                      {.dry_run = true});
    });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    return e.status()["message"].get<std::string>();
  };
  const std::string reserved =
      "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for "
      "system use only. error: ";
  EXPECT_EQ(refused("system-foo", 5, json::object()),
            "PriorityClass.scheduling.k8s.io \"system-foo\" is invalid: " + reserved +
                "system-foo is not a known system priority class");
  EXPECT_EQ(refused("system-node-critical", 5, json::object()),
            "PriorityClass.scheduling.k8s.io \"system-node-critical\" is invalid: " + reserved +
                "value of system-node-critical PriorityClass must be 2000001000");
  EXPECT_EQ(refused(ns() + "-big", 1'000'000'001, json::object()),
            fmt::format("PriorityClass.scheduling.k8s.io \"{}-big\" is invalid: value: Forbidden: "
                        "maximum allowed value of a user defined priority is 1000000000",
                        ns()));
  EXPECT_EQ(refused(ns() + "-odd", 1, {{"preemptionPolicy", "Sometimes"}}),
            fmt::format("PriorityClass.scheduling.k8s.io \"{}-odd\" is invalid: preemptionPolicy: "
                        "Unsupported value: \"Sometimes\": supported values: "
                        "\"PreemptLowerPriority\", \"Never\"",
                        ns()));
  // A class without a value is one of value 0.
  const json zero =
      client().create(resources::priority_classes(), "",
                      priority_class(ns() + "-zero", json::object()), {.dry_run = true});
  EXPECT_EQ(zero.value("value", 0), 0);
}

TEST_F(ApiErrorTest, MissingNamespaceIsNotFound) {
  const std::string nowhere = ns() + "-missing";
  const Error e =
      expect_error([&] { client().create(resources::configmaps(), nowhere, configmap("a")); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.http_code(), 404);
  EXPECT_EQ(e.status()["message"], "namespaces \"" + nowhere + "\" not found");
}

TEST_F(ApiErrorTest, NamespaceInTheBodyMustMatchTheUrl) {
  json cm = configmap("a");
  cm["metadata"]["namespace"] = "kube-system";
  const Error e = expect_error([&] { client().create(resources::configmaps(), ns(), cm); });
  EXPECT_EQ(e.kind(), ErrorKind::BadRequest);
  EXPECT_EQ(e.http_code(), 400);
  EXPECT_THAT(e.message(), HasSubstr("does not match the namespace sent on the request"));
}

TEST_F(ApiErrorTest, UnsupportedMethodIs405) {
  client().create(resources::configmaps(), ns(), configmap("a"));
  const Error e = expect_error([&] {
    client().patch(resources::pods(), ns(), "any", PatchType::Merge, json::object(),
                   {.subresource = "log"});
  });
  EXPECT_EQ(e.kind(), ErrorKind::MethodNotAllowed);
  EXPECT_EQ(e.http_code(), 405);
  EXPECT_EQ(e.status()["reason"], "MethodNotAllowed");

  RawSandboxHttp http(config());
  const auto put_collection =
      http.send("PUT", "/api/v1/namespaces/" + ns() + "/configmaps", configmap("a").dump());
  EXPECT_EQ(put_collection.status, 405);
  EXPECT_EQ(json::parse(put_collection.body)["reason"], "MethodNotAllowed");
}

// authorization.k8s.io/v1's reviews, which `kubectl auth can-i` sends: never stored, answered at
// once (201 with a status), only created; invalid ones refused in the real server's words. The
// caller is the cluster's admin, whom both servers allow everything.
TEST_F(ApiErrorTest, AccessReviewsAreAnsweredNotStored) {
  const auto review = [](const std::string& plural, const std::string& kind, bool namespaced) {
    return kube::Resource{.group = "authorization.k8s.io",
                          .version = "v1",
                          .plural = plural,
                          .namespaced = namespaced,
                          .kind = kind};
  };
  const kube::Resource self = review("selfsubjectaccessreviews", "SelfSubjectAccessReview", false);
  const json pods = {{"namespace", ns()}, {"verb", "create"}, {"resource", "pods"}};
  const json allowed = client().create(self, "",
                                       {{"apiVersion", "authorization.k8s.io/v1"},
                                        {"kind", "SelfSubjectAccessReview"},
                                        {"spec", {{"resourceAttributes", pods}}}});
  EXPECT_EQ(allowed["status"]["allowed"], true);
  EXPECT_EQ(allowed["spec"]["resourceAttributes"], pods);
  EXPECT_TRUE(allowed["metadata"]["creationTimestamp"].is_null());

  const auto invalid = [&](const kube::Resource& resource, const std::string& in_ns,
                           const json& spec) {
    const Error e = expect_error([&] {
      client().create(
          resource, in_ns,
          {{"apiVersion", "authorization.k8s.io/v1"}, {"kind", resource.kind}, {"spec", spec}});
    });
    EXPECT_EQ(e.http_code(), 422) << e.message();
    return e.status()["message"].get<std::string>();
  };
  EXPECT_EQ(invalid(self, "", json::object()),
            ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: "
            "\"null\": exactly one of nonResourceAttributes or resourceAttributes must be "
            "specified");
  EXPECT_EQ(invalid(self, "",
                    {{"resourceAttributes", pods},
                     {"nonResourceAttributes", {{"verb", "get"}, {"path", "/x"}}}}),
            ".authorization.k8s.io \"\" is invalid: spec.nonResourceAttributes: Invalid value: "
            "authorization.NonResourceAttributes{Path:\"/x\", Verb:\"get\"}: cannot be "
            "specified in combination with resourceAttributes");
  EXPECT_EQ(invalid(review("subjectaccessreviews", "SubjectAccessReview", false), "",
                    {{"resourceAttributes", pods}}),
            ".authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least "
            "one of user or group must be specified");
  const kube::Resource local =
      review("localsubjectaccessreviews", "LocalSubjectAccessReview", true);
  EXPECT_EQ(
      invalid(local, ns(),
              {{"user", "bob"}, {"resourceAttributes", {{"verb", "get"}, {"resource", "pods"}}}}),
      ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid "
      "value: \"\": must match metadata.namespace");
  EXPECT_EQ(invalid(local, ns(), {{"user", "bob"}, {"nonResourceAttributes", {{"path", "/x"}}}}),
            ".authorization.k8s.io \"\" is invalid: spec.nonResourceAttributes: Invalid value: "
            "authorization.NonResourceAttributes{Path:\"/x\", Verb:\"\"}: disallowed on this "
            "kind of request");

  // What `kubectl auth can-i --list` asks: the rules in a namespace, one it must name.
  const kube::Resource rules = review("selfsubjectrulesreviews", "SelfSubjectRulesReview", false);
  const json listed = client().create(rules, "",
                                      {{"apiVersion", "authorization.k8s.io/v1"},
                                       {"kind", "SelfSubjectRulesReview"},
                                       {"spec", {{"namespace", ns()}}}});
  EXPECT_THAT(listed["status"]["resourceRules"],
              Contains(json({{"verbs", {"*"}}, {"apiGroups", {"*"}}, {"resources", {"*"}}})));
  const Error no_namespace = expect_error([&] {
    client().create(rules, "",
                    {{"apiVersion", "authorization.k8s.io/v1"},
                     {"kind", "SelfSubjectRulesReview"},
                     {"spec", json::object()}});
  });
  EXPECT_EQ(no_namespace.http_code(), 400);
  EXPECT_EQ(no_namespace.status()["message"], "no namespace on request");

  // Nothing to read back: a list is not allowed, a name is not found.
  RawSandboxHttp http(config());
  const auto list = http.send("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "");
  EXPECT_EQ(list.status, 405);
  EXPECT_EQ(json::parse(list.body)["reason"], "MethodNotAllowed");
  EXPECT_EQ(http.send("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews/x", "").status,
            404);
  const json discovery = client().discover("authorization.k8s.io", "v1");
  for (const auto& r : discovery["resources"]) {
    EXPECT_EQ(r["verbs"], json({"create"})) << r;
    EXPECT_EQ(r["singularName"], "") << r;
  }
  EXPECT_EQ(discovery["resources"].size(), 4u);
}

TEST_F(ApiErrorTest, StrategicMergeOnACustomResourceIs415) {
  testing::install_training_crds(client());
  client().create(resources::job(api::JobKind::TFJob), ns(), tfjob("mnist"));
  const Error e = expect_error([&] {
    client().patch(resources::job(api::JobKind::TFJob), ns(), "mnist", PatchType::Strategic,
                   {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  });
  EXPECT_EQ(e.kind(), ErrorKind::UnsupportedMediaType);
  EXPECT_EQ(e.http_code(), 415);
  EXPECT_EQ(e.status()["reason"], "UnsupportedMediaType");
  EXPECT_THAT(e.message(), HasSubstr("application/merge-patch+json"));
  EXPECT_THAT(e.message(), Not(HasSubstr("strategic")));

  client().create(resources::configmaps(), ns(), configmap("a"));
  RawSandboxHttp http(config());
  const auto unknown = http.send("PATCH", "/api/v1/namespaces/" + ns() + "/configmaps/a",
                                 R"({"data":{"k":"v"}})", "text/plain");
  EXPECT_EQ(unknown.status, 415);
}

// --- list -------------------------------------------------------------------------------------

TEST_F(ApiListTest, ServicesPrintAsTheServersTable) {
  // What `kubectl create service clusterip web --tcp=80:80 --tcp=443:8443` sends.
  const json service = client().create(
      resources::services(), ns(),
      {{"apiVersion", "v1"},
       {"kind", "Service"},
       {"metadata", {{"name", "web"}, {"labels", {{"app", "web"}}}}},
       {"spec",
        {{"type", "ClusterIP"},
         {"selector", {{"app", "web"}}},
         {"ports",
          {{{"name", "80-80"}, {"port", 80}, {"protocol", "TCP"}, {"targetPort", 80}},
           {{"name", "443-8443"}, {"port", 443}, {"protocol", "TCP"}, {"targetPort", 8443}}}}}}});
  RawSandboxHttp http(config());
  const std::string accept =
      "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta."
      "k8s.io,application/json";
  const auto list = http.send("GET", "/api/v1/namespaces/" + ns() + "/services?limit=500", "", "",
                              {{"Accept", accept}});
  ASSERT_EQ(list.status, 200) << list.body;
  const json table = json::parse(list.body);
  ASSERT_EQ(table["rows"].size(), 1u) << list.body;
  json cells = table["rows"][0]["cells"];
  ASSERT_EQ(cells.size(), 7u) << cells.dump();
  EXPECT_EQ(cells[0], "web");
  EXPECT_EQ(cells[1], "ClusterIP");
  EXPECT_THAT(cells[2].get<std::string>(), MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_EQ(cells[2], service["spec"]["clusterIP"]);
  EXPECT_EQ(cells[3], "<none>");
  EXPECT_EQ(cells[4], "80/TCP,443/TCP");
  EXPECT_THAT(cells[5].get<std::string>(), MatchesRegex("[0-9]+s"));
  EXPECT_EQ(cells[6], "app=web");

  const auto one = http.send("GET", "/api/v1/namespaces/" + ns() + "/services/web", "", "",
                             {{"Accept", accept}});
  ASSERT_EQ(one.status, 200) << one.body;
  json one_cells = json::parse(one.body)["rows"][0]["cells"];
  ASSERT_EQ(one_cells.size(), 7u) << one.body;
  // The same row, but for the AGE, which may have ticked on between the two reads.
  one_cells.erase(5);
  cells.erase(5);
  EXPECT_EQ(one_cells, cells);
}

// The service account controller gives every namespace a `default` ServiceAccount (pods name
// it unless they say otherwise); `kubectl get sa` prints how many secrets each lists.
TEST_F(ApiListTest, EveryNamespaceHasADefaultServiceAccountPrintedWithItsSecrets) {
  RawSandboxHttp http(config());
  const auto one = http.send("GET", "/api/v1/namespaces/default/serviceaccounts/default", "", "",
                             {{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}});
  ASSERT_EQ(one.status, 200) << one.body;
  const json table = json::parse(one.body);
  std::vector<std::string> columns;
  for (const json& c : table["columnDefinitions"])
    columns.push_back(c["name"]);
  EXPECT_EQ(columns, (std::vector<std::string>{"Name", "Secrets", "Age"}));
  ASSERT_EQ(table["rows"].size(), 1u) << one.body;
  EXPECT_EQ(table["rows"][0]["cells"][0], "default");
  EXPECT_EQ(table["rows"][0]["cells"][1], 0);
}

TEST_F(ApiListTest, LabelSelectorsSupportEveryOperator) {
  client().create(resources::configmaps(), ns(),
                  configmap("web-front", {{"app", "web"}, {"tier", "front"}}));
  client().create(resources::configmaps(), ns(),
                  configmap("web-back", {{"app", "web"}, {"tier", "back"}}));
  client().create(resources::configmaps(), ns(), configmap("db", {{"app", "db"}}));
  client().create(resources::configmaps(), ns(), configmap("plain"));
  auto select = [&](const std::string& selector) {
    return configmap_names(
        client().list(resources::configmaps(), ns(), {.label_selector = selector}));
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

TEST_F(ApiListTest, FieldSelectorsOnPods) {
  const std::string other = create_namespace();
  // No scheduler or kubelet touches these pods: the test binds one and sets its phase itself.
  json placed = unscheduled_two_container_pod("placed");
  placed["spec"]["nodeName"] = "trainctl-test-node";
  placed = client().create(resources::pods(), ns(), placed);
  placed["status"]["phase"] = "Running";
  client().update_status(resources::pods(), ns(), placed);
  client().create(resources::pods(), ns(), unscheduled_two_container_pod("stuck"));
  client().create(resources::pods(), other, unscheduled_two_container_pod("stuck"));

  // "first/NAME" and "other/NAME" for the pods of the test's two namespaces that `selector`
  // selects in `in` (a shared cluster has pods of its own).
  auto select = [&](std::string_view in, const std::string& selector) {
    std::vector<std::string> out;
    const json list = client().list(resources::pods(), in, {.field_selector = selector});
    for (const auto& pod : list["items"]) {
      const std::string pod_ns = pod["metadata"]["namespace"];
      if (pod_ns == ns() || pod_ns == other)
        out.push_back((pod_ns == ns() ? "first/" : "other/") +
                      pod["metadata"]["name"].get<std::string>());
    }
    return out;
  };
  EXPECT_THAT(select(ns(), "metadata.name=stuck"), ElementsAre("first/stuck"));
  EXPECT_THAT(select("", "metadata.name=stuck"),
              UnorderedElementsAre("first/stuck", "other/stuck"));
  EXPECT_THAT(select("", "metadata.namespace=" + other), ElementsAre("other/stuck"));
  EXPECT_THAT(select(ns(), "status.phase=Running"), ElementsAre("first/placed"));
  EXPECT_THAT(select("", "status.phase=Pending"),
              UnorderedElementsAre("first/stuck", "other/stuck"));
  EXPECT_THAT(select("", "spec.nodeName=trainctl-test-node"), ElementsAre("first/placed"));
  EXPECT_THAT(select(ns(), "spec.nodeName="), ElementsAre("first/stuck"));
  EXPECT_THAT(select("", "status.phase!=Pending,metadata.namespace=" + ns()),
              ElementsAre("first/placed"));

  const Error bad = expect_error(
      [&] { client().list(resources::pods(), ns(), {.field_selector = "spec.image=x"}); });
  EXPECT_EQ(bad.kind(), ErrorKind::BadRequest);
  EXPECT_THAT(bad.message(), HasSubstr("field label not supported: spec.image"));
}

TEST_F(ApiListTest, LimitAndContinuePageThroughAConsistentSnapshot) {
  for (int i = 0; i < 7; ++i)
    client().create(resources::configmaps(), ns(), configmap("cm-" + std::to_string(i)));

  // On a real cluster the namespace's kube-root-ca.crt is listed too, after the cm-*.
  const std::size_t total = client().list(resources::configmaps(), ns())["items"].size();
  const json first = client().list(resources::configmaps(), ns(), {.limit = 3});
  EXPECT_THAT(names_of(first), ElementsAre("cm-0", "cm-1", "cm-2"));
  const std::string token = first["metadata"].value("continue", "");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(first["metadata"]["remainingItemCount"], total - 3);

  // Pages after the first show the list as it was when the first was read.
  client().create(resources::configmaps(), ns(), configmap("cm-9-late"));
  client().remove(resources::configmaps(), ns(), "cm-5");
  const json second =
      client().list(resources::configmaps(), ns(), {.limit = 3, .continue_token = token});
  EXPECT_THAT(names_of(second), ElementsAre("cm-3", "cm-4", "cm-5"));
  EXPECT_EQ(second["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"]);

  const json all = client().list_all(resources::configmaps(), ns(), {.limit = 2});
  EXPECT_THAT(configmap_names(all),
              ElementsAre("cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "cm-6", "cm-9-late"));
  EXPECT_FALSE(all["metadata"].contains("continue"));
}

TEST_F(ApiListTest, ListCarriesTheResourceVersionItWasReadAt) {
  const json created = client().create(resources::configmaps(), ns(), configmap("a"));
  const json list = client().list(resources::configmaps(), ns());
  EXPECT_EQ(list["kind"], "ConfigMapList");
  EXPECT_EQ(list["apiVersion"], "v1");
  const std::uint64_t list_rv = std::stoull(list["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_GE(list_rv, rv_of(created));

  EXPECT_THAT(configmap_names(client().list(resources::configmaps(), ns(),
                                            {.resource_version = std::to_string(list_rv)})),
              ElementsAre("a"));
}

TEST_F(ApiListTest, AVersionNotReachedIsWaitedForThenRefusedAsTheWatchCacheDoes) {
  const json created = client().create(resources::configmaps(), ns(), configmap("a"));
  const std::uint64_t current =
      std::stoull(client()
                      .list(resources::configmaps(), ns())["metadata"]["resourceVersion"]
                      .get<std::string>());
  const std::string wanted = std::to_string(current + 1000);
  // What kube-apiserver 1.26 answers after waiting 3 s for its cache, Retry-After header included.
  RawSandboxHttp http(config());
  const auto start = std::chrono::steady_clock::now();
  const auto response =
      http.send("GET", "/api/v1/namespaces/" + ns() + "/configmaps?resourceVersion=" + wanted);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(2900));
  EXPECT_LT(waited, std::chrono::seconds(6));
  EXPECT_EQ(response.status, 504);
  EXPECT_EQ(response.header("retry-after"), "1");
  const json status = json::parse(response.body);
  EXPECT_EQ(status["reason"], "Timeout");
  // "current" is the newest version the server's cache of the resource has seen: at least the
  // ConfigMap's, at most the newest after the refusal (a real server's versions count every
  // other write too, and its cache follows them while it waits).
  std::smatch match;
  const std::string message = status.value("message", "");
  ASSERT_TRUE(
      std::regex_match(message, match,
                       std::regex(fmt::format(
                           "Timeout: Too large resource version: {}, current: ([0-9]+)", wanted))))
      << message;
  const std::uint64_t newest = rv_of(client().list(resources::configmaps(), ns()));
  EXPECT_GE(std::stoull(match[1]), rv_of(created)) << message;
  EXPECT_LE(std::stoull(match[1]), newest) << message;
  EXPECT_EQ(
      status["details"],
      (json{{"causes",
             {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
            {"retryAfterSeconds", 1}}));
  // The client does not retry it: the server already waited, and one that lost its data (a
  // restore, a restart) never gets there.
  const auto sent = client().requests_sent();
  const Error refused = expect_error(
      [&] { client().list(resources::configmaps(), ns(), {.resource_version = wanted}); });
  EXPECT_EQ(client().requests_sent(), sent + 1);
  EXPECT_TRUE(kube::is_too_large_resource_version(refused)) << refused.what();
  EXPECT_EQ(refused.kind(), ErrorKind::Timeout);

  // A version that is no number: the real server's 500 without a reason, for lists and watches.
  for (const std::string& path :
       {"/api/v1/namespaces/" + ns() + "/configmaps?resourceVersion=abc",
        "/api/v1/namespaces/" + ns() + "/configmaps?watch=true&resourceVersion=abc"}) {
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

// kube-apiserver's framing: one event per line, `type` before `object`; a burst of events may
// share a write (the server flushes once it has none at hand), and every watcher of a resource
// read as stored gets the same bytes (the watch cache encodes an event once for all of them).
TEST_F(ApiWatchTest, EventsGoOutOnePerLineTypeFirstAndTheSameBytesToEveryWatcher) {
  const std::string start =
      client().list(resources::configmaps(), ns())["metadata"]["resourceVersion"];
  for (const char* name : {"a", "b", "c"})
    client().create(resources::configmaps(), ns(), configmap(name));
  RawSandboxHttp http(config());
  const std::string path = "/api/v1/namespaces/" + ns() +
                           "/configmaps?watch=true&timeoutSeconds=1&resourceVersion=" + start;
  const auto lines_of = [&](const std::vector<std::pair<std::string, std::string>>& headers) {
    const kube::HttpResponse response = http.send("GET", path, {}, {}, headers);
    EXPECT_EQ(response.status, 200);
    std::vector<std::string> lines;
    for (std::size_t at = 0, end; (end = response.body.find('\n', at)) != std::string::npos;
         at = end + 1)
      lines.push_back(response.body.substr(at, end - at));
    return lines;
  };
  const std::vector<std::string> first = lines_of({});
  ASSERT_THAT(first, SizeIs(3));
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_THAT(first[i], ::testing::StartsWith(R"({"type":"ADDED","object":{)")) << first[i];
    EXPECT_EQ(json::parse(first[i])["object"]["metadata"]["name"], std::string(1, 'a' + i));
  }
  EXPECT_EQ(lines_of({}), first);
  // As kubectl get -w reads it (Table rows, for this watch alone): framed the same way.
  const std::vector<std::string> rows =
      lines_of({{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}});
  ASSERT_THAT(rows, SizeIs(3));
  for (const std::string& row : rows) {
    EXPECT_THAT(row, ::testing::StartsWith(R"({"type":"ADDED","object":{)")) << row;
    EXPECT_EQ(json::parse(row)["object"]["kind"], "Table");
  }
}

TEST_F(ApiWatchTest, FromAResourceVersionEveryLaterEventArrivesInOrder) {
  client().create(resources::configmaps(), ns(), configmap("before"));
  const std::string start =
      client().list(resources::configmaps(), ns())["metadata"]["resourceVersion"];
  const json a = client().create(resources::configmaps(), ns(), configmap("a"));
  json changed = a;
  changed["data"]["key"] = "changed";
  client().update(resources::configmaps(), ns(), changed);
  client().remove(resources::configmaps(), ns(), "a");

  kube::WatchOptions options;
  options.resource_version = start;
  const auto events = collect_events(client(), resources::configmaps(), ns(), options, 3);
  EXPECT_THAT(describe(events), ElementsAre("ADDED a", "MODIFIED a", "DELETED a"));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].object["data"]["key"], "changed");
  EXPECT_EQ(events[0].object["apiVersion"], "v1");
  EXPECT_EQ(events[0].object["kind"], "ConfigMap");
  EXPECT_LT(rv_of(events[0].object), rv_of(events[1].object));
  EXPECT_LT(rv_of(events[1].object), rv_of(events[2].object));
}

TEST_F(ApiWatchTest, WithoutAResourceVersionExistingObjectsArriveFirstThenLiveEvents) {
  client().create(resources::configmaps(), ns(), configmap("old", {{"app", "web"}}));
  client().create(resources::configmaps(), ns(), configmap("other", {{"app", "db"}}));
  std::vector<WatchEvent> events;
  std::jthread writer;
  kube::WatchOptions options;
  options.label_selector = "app=web";
  options.timeout_seconds = 5;
  client().watch(resources::configmaps(), ns(), options, [&](const WatchEvent& e) {
    if (e.type == WatchEventType::Bookmark)
      return true;
    events.push_back(e);
    if (events.size() == 1) {
      writer = std::jthread([this] {
        client().create(resources::configmaps(), ns(), configmap("skipped", {{"app", "db"}}));
        client().create(resources::configmaps(), ns(), configmap("new", {{"app", "web"}}));
      });
    }
    return events.size() < 2;
  });
  EXPECT_THAT(describe(events), ElementsAre("ADDED old", "ADDED new"));
}

// A bookmark carries the newest version the server's cache of the resource has seen, and only once
// that is newer than where the watch started (kube-apiserver's cacheWatcher sends nothing older, so
// on a quiet cluster none comes): ConfigMaps written in another namespace while the watch runs
// move it on without an event in this one.
TEST_F(ApiWatchTest, BookmarksArriveWhenAskedFor) {
  const json cm = client().create(resources::configmaps(), ns(), configmap("a"));
  const std::string elsewhere = create_namespace();
  std::jthread writer([&](const std::stop_token& stop) {
    for (int i = 0; !stop.stop_requested(); ++i) {
      client().create(resources::configmaps(), elsewhere, configmap("b-" + std::to_string(i)));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::vector<WatchEvent> bookmarks;
  kube::WatchOptions options;
  options.resource_version = cm["metadata"]["resourceVersion"];
  options.allow_bookmarks = true;
  options.timeout_seconds = 5;  // kube-apiserver sends one 2 s before the end at the latest
  client().watch(resources::configmaps(), ns(), options, [&](const WatchEvent& e) {
    if (e.type == WatchEventType::Bookmark)
      bookmarks.push_back(e);
    return bookmarks.empty();
  });
  writer.request_stop();
  ASSERT_THAT(bookmarks, SizeIs(1)) << "no BOOKMARK within the watch's 5 s";
  EXPECT_EQ(bookmarks[0].object["kind"], "ConfigMap");
  EXPECT_GT(rv_of(bookmarks[0].object), rv_of(cm));
}

TEST_F(ApiWatchTest, BookmarksDoNotArriveUnasked) {
  kube::WatchOptions options;
  options.resource_version =
      client().list(resources::configmaps(), ns())["metadata"]["resourceVersion"];
  options.allow_bookmarks = false;
  options.timeout_seconds = 1;  // the sandbox would have sent one after 1 s of silence
  std::size_t bookmarks = 0;
  client().watch(resources::configmaps(), ns(), options, [&](const WatchEvent& e) {
    bookmarks += e.type == WatchEventType::Bookmark ? 1 : 0;
    return true;
  });
  EXPECT_EQ(bookmarks, 0u);
}

TEST_F(ApiWatchTest, TimeoutSecondsEndsTheWatch) {
  kube::WatchOptions options;
  options.resource_version = client().list(resources::pods(), ns())["metadata"]["resourceVersion"];
  options.timeout_seconds = 1;
  options.allow_bookmarks = false;
  const auto started = std::chrono::steady_clock::now();
  const kube::WatchResult result =
      client().watch(resources::pods(), ns(), options, [](const WatchEvent&) { return true; });
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.events, 0u);
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::milliseconds(2500));
}

// --- update and patch -------------------------------------------------------------------------

TEST_F(ApiWriteTest, UpdateSucceedsOnlyFromTheCurrentResourceVersion) {
  const json v1 = client().create(resources::configmaps(), ns(), configmap("a"));
  json next = v1;
  next["data"]["key"] = "two";
  const json v2 = client().update(resources::configmaps(), ns(), next);
  EXPECT_GT(rv_of(v2), rv_of(v1));
  EXPECT_EQ(v2["data"]["key"], "two");

  next["data"]["key"] = "three";  // still carries v1's resourceVersion
  EXPECT_EQ(expect_error([&] { client().update(resources::configmaps(), ns(), next); }).kind(),
            ErrorKind::Conflict);

  // A built-in object updated without a resourceVersion is written unconditionally.
  next["metadata"].erase("resourceVersion");
  EXPECT_EQ(client().update(resources::configmaps(), ns(), next)["data"]["key"], "three");
}

TEST_F(ApiWriteTest, MergePatchSetsAndRemovesFields) {
  json cm = configmap("a", {{"app", "web"}, {"tier", "front"}});
  cm["data"]["other"] = "x";
  client().create(resources::configmaps(), ns(), cm);
  const json patched =
      client().patch(resources::configmaps(), ns(), "a", PatchType::Merge,
                     {{"metadata", {{"labels", {{"tier", nullptr}, {"team", "vision"}}}}},
                      {"data", {{"key", "new"}}}});
  EXPECT_EQ(patched["metadata"]["labels"], json({{"app", "web"}, {"team", "vision"}}));
  EXPECT_EQ(patched["data"], json({{"key", "new"}, {"other", "x"}}));

  const Error stale = expect_error([&] {
    client().patch(resources::configmaps(), ns(), "a", PatchType::Merge,
                   {{"metadata", {{"resourceVersion", "1"}}}, {"data", {{"key", "stale"}}}});
  });
  EXPECT_EQ(stale.kind(), ErrorKind::Conflict) << "a resourceVersion in a patch is a precondition";
  EXPECT_EQ(expect_error([&] {
              client().patch(resources::configmaps(), ns(), "missing", PatchType::Merge,
                             {{"data", {{"k", "v"}}}});
            }).kind(),
            ErrorKind::NotFound);
}

// ObjectMeta's maps and lists are omitted when empty (omitempty): an object created with empty
// labels, annotations, finalizers and ownerReferences comes back without them, built-in or
// custom, and a merge patch removing the last annotation leaves none (not `{}`). Found writing
// PodGroups' annotations as merge patches: the sandbox kept `annotations: {}`.
TEST_F(ApiWriteTest, EmptyMetadataMapsAndListsAreOmitted) {
  testing::install_training_crds(client());
  json cm = configmap("empty");
  json group = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                {"kind", "PodGroup"},
                {"metadata", {{"name", "empty"}}},
                {"spec", {{"minMember", 1}}}};
  for (json* o : {&cm, &group}) {
    (*o)["metadata"]["labels"] = json::object();
    (*o)["metadata"]["annotations"] = json::object();
    (*o)["metadata"]["finalizers"] = json::array();
    (*o)["metadata"]["ownerReferences"] = json::array();
  }
  for (const auto& [resource, object] :
       {std::pair{resources::configmaps(), cm}, std::pair{resources::podgroups(), group}}) {
    const json created = client().create(resource, ns(), object);
    for (const char* key : {"labels", "annotations", "finalizers", "ownerReferences"})
      EXPECT_FALSE(created["metadata"].contains(key)) << resource.plural << ": " << key;
    client().patch(resource, ns(), "empty", PatchType::Merge,
                   {{"metadata", {{"annotations", {{"note", "x"}}}}}});
    const json patched = client().patch(
        resource, ns(), "empty", PatchType::Merge,
        {{"metadata",
          {{"annotations", {{"note", nullptr}}},
           {"resourceVersion",
            client().get(resource, ns(), "empty")["metadata"]["resourceVersion"]}}}});
    EXPECT_FALSE(patched["metadata"].contains("annotations")) << patched["metadata"].dump();
    EXPECT_FALSE(client().get(resource, ns(), "empty")["metadata"].contains("annotations"));
  }
}

// What a single-stack IPv4 kube-apiserver 1.26 fills in: a Service's traffic policy and IP
// families (a headless one without a selector gets both families, RequireDualStack), none of
// that nor a cluster IP for an ExternalName one, no empty `ports`; a Secret's type Opaque; no
// empty data maps.
// kube-apiserver's ServiceAccount, Priority and DefaultTolerationSeconds admission plugins, in
// that order, on every pod created (a dry run too).
TEST_F(ApiWriteTest, PodsGetTheirServiceAccountTokenPriorityAndDefaultTolerations) {
  const std::string token_path = "/var/run/secrets/kubernetes.io/serviceaccount";
  json pod = pod_manifest("p");
  pod["spec"]["initContainers"] = {{{"name", "init"}, {"image", "busybox:1.36"}}};
  const json spec = client().create(resources::pods(), ns(), pod, {.dry_run = true})["spec"];
  EXPECT_EQ(spec["serviceAccountName"], "default");
  EXPECT_EQ(spec["serviceAccount"], "default");  // the deprecated name, written back
  ASSERT_EQ(spec["volumes"].size(), 1u) << spec.dump();
  const std::string volume = spec["volumes"][0]["name"];
  EXPECT_THAT(volume, MatchesRegex("kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}"));
  EXPECT_EQ(spec["volumes"][0]["projected"], json::parse(R"({"defaultMode": 420, "sources": [
      {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
      {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
      {"downwardAPI": {"items": [{"path": "namespace",
                                  "fieldRef": {"apiVersion": "v1",
                                               "fieldPath": "metadata.namespace"}}]}}]})"));
  const json mount = {{"name", volume}, {"readOnly", true}, {"mountPath", token_path}};
  EXPECT_EQ(spec["containers"][0]["volumeMounts"], json::array({mount}));
  EXPECT_EQ(spec["initContainers"][0]["volumeMounts"], json::array({mount}));
  EXPECT_EQ(spec["priority"], 0);
  EXPECT_EQ(spec["preemptionPolicy"], "PreemptLowerPriority");
  const json default_tolerations = json::parse(R"([
      {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
       "tolerationSeconds": 300},
      {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
       "tolerationSeconds": 300}])");
  EXPECT_EQ(spec["tolerations"], default_tolerations);

  // An account that mounts no token and names a pull secret, named by the deprecated field.
  const kube::Resource service_accounts{"", "v1", "serviceaccounts", true, "ServiceAccount"};
  client().create(service_accounts, ns(),
                  {{"apiVersion", "v1"},
                   {"kind", "ServiceAccount"},
                   {"metadata", {{"name", "quiet"}}},
                   {"automountServiceAccountToken", false},
                   {"imagePullSecrets", {{{"name", "registry"}}}}});
  json quiet = pod_manifest("q");
  quiet["spec"]["serviceAccount"] = "quiet";
  // Tolerating every taint of every effect tolerates both.
  quiet["spec"]["tolerations"] = {{{"operator", "Exists"}}};
  const json quiet_spec =
      client().create(resources::pods(), ns(), quiet, {.dry_run = true})["spec"];
  EXPECT_EQ(quiet_spec["serviceAccountName"], "quiet");
  EXPECT_EQ(quiet_spec["serviceAccount"], "quiet");
  EXPECT_FALSE(quiet_spec.contains("volumes")) << quiet_spec.dump();
  EXPECT_FALSE(quiet_spec["containers"][0].contains("volumeMounts"));
  EXPECT_EQ(quiet_spec["imagePullSecrets"], json::parse(R"([{"name": "registry"}])"));
  EXPECT_EQ(quiet_spec["tolerations"], json::parse(R"([{"operator": "Exists"}])"));

  // The pod's choice wins over the account's; a container with its own mount at the token path
  // keeps it alone; a NoSchedule toleration of not-ready does not count.
  json mounted = pod_manifest("m");
  mounted["spec"]["serviceAccountName"] = "quiet";
  mounted["spec"]["automountServiceAccountToken"] = true;
  mounted["spec"]["imagePullSecrets"] = {{{"name", "mine"}}};
  mounted["spec"]["volumes"] = {{{"name", "own"}, {"emptyDir", json::object()}}};
  mounted["spec"]["containers"][0]["volumeMounts"] = {{{"name", "own"}, {"mountPath", token_path}}};
  mounted["spec"]["containers"].push_back({{"name", "side"}, {"image", "busybox:1.36"}});
  mounted["spec"]["tolerations"] = {
      {{"key", "node.kubernetes.io/not-ready"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}};
  const json mounted_spec =
      client().create(resources::pods(), ns(), mounted, {.dry_run = true})["spec"];
  ASSERT_EQ(mounted_spec["volumes"].size(), 2u) << mounted_spec.dump();
  const std::string token_volume = mounted_spec["volumes"][1]["name"];
  EXPECT_THAT(token_volume, MatchesRegex("kube-api-access-.{5}"));
  EXPECT_EQ(mounted_spec["containers"][0]["volumeMounts"],
            json::parse(R"([{"name": "own", "mountPath": ")" + token_path + R"("}])"));
  EXPECT_EQ(mounted_spec["containers"][1]["volumeMounts"],
            json::array({{{"name", token_volume}, {"readOnly", true}, {"mountPath", token_path}}}));
  EXPECT_EQ(mounted_spec["imagePullSecrets"], json::parse(R"([{"name": "mine"}])"));
  ASSERT_EQ(mounted_spec["tolerations"].size(), 3u) << mounted_spec.dump();
  EXPECT_EQ(mounted_spec["tolerations"][1], default_tolerations[0]);

  // A PriorityClass: its value and preemption policy (defaulted on the class) go to its pods.
  const std::string high = ns() + "-high", low = ns() + "-low";
  for (const auto& [name, value, policy] :
       {std::tuple{high, 1000, json("Never")}, std::tuple{low, 10, json()}}) {
    json fields = {{"value", value}};
    if (!policy.is_null())
      fields["preemptionPolicy"] = policy;
    const json created =
        client().create(resources::priority_classes(), "", priority_class(name, fields));
    delete_at_teardown(resources::priority_classes(), name);
    EXPECT_EQ(created["metadata"]["generation"], 1);
    EXPECT_EQ(created["preemptionPolicy"],
              policy.is_null() ? json("PreemptLowerPriority") : policy);
  }
  json urgent = pod_manifest("u");
  urgent["spec"]["priorityClassName"] = high;
  urgent["spec"]["priority"] = 1000;  // what the class says may be given
  const json urgent_spec =
      client().create(resources::pods(), ns(), urgent, {.dry_run = true})["spec"];
  EXPECT_EQ(urgent_spec["priority"], 1000);
  EXPECT_EQ(urgent_spec["preemptionPolicy"], "Never");
  RawSandboxHttp http(config());
  const auto table = http.send("GET", "/apis/scheduling.k8s.io/v1/priorityclasses", "", "",
                               {{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}});
  ASSERT_EQ(table.status, 200) << table.body;
  const json printed = json::parse(table.body);
  bool listed = false;
  for (const json& row : printed["rows"])
    if (row["cells"][0] == high) {
      listed = true;
      EXPECT_EQ(row["cells"][1], 1000);
      EXPECT_EQ(row["cells"][2], false);
    }
  EXPECT_TRUE(listed) << printed.dump();
  std::vector<std::string> headers;
  for (const json& column : printed["columnDefinitions"])
    headers.push_back(column["name"]);
  EXPECT_THAT(headers, ElementsAre("Name", "Value", "Global-Default", "Age"));

  // Pods have no generation (kube-apiserver 1.26); the namespace holds the CA bundle the token
  // volume projects.
  const json created = client().create(resources::pods(), ns(), pod_manifest("g"));
  EXPECT_FALSE(created["metadata"].contains("generation")) << created["metadata"].dump();
  EXPECT_TRUE(wait_until(
      [&] { return exists(client(), resources::configmaps(), ns(), testing::kRootCaConfigMap); },
      kSettleTimeout));
}

// The global default PriorityClass: the class of pods that name none; one only. Read from
// kube-apiserver 1.26 by hand; run on the sandbox alone, since on a shared cluster a global
// default would reach every other test's pods meanwhile.
TEST_F(ApiWriteTest, PodsWithoutAClassGetTheGlobalDefaultOfWhichThereIsOne) {
  if (!on_sandbox())
    GTEST_SKIP() << "a global default class would reach the pods of tests running beside it";
  const auto global_default = [](const std::string& name, int value) {
    return priority_class(name, {{"value", value}, {"globalDefault", true}});
  };
  client().create(resources::priority_classes(), "", global_default("everyday", 50));
  delete_at_teardown(resources::priority_classes(), "everyday");
  const json spec =
      client().create(resources::pods(), ns(), pod_manifest("p"), {.dry_run = true})["spec"];
  EXPECT_EQ(spec["priorityClassName"], "everyday");
  EXPECT_EQ(spec["priority"], 50);
  EXPECT_EQ(spec["preemptionPolicy"], "PreemptLowerPriority");
  const Error e = expect_error(
      [&] { client().create(resources::priority_classes(), "", global_default("second", 60)); });
  EXPECT_EQ(e.http_code(), 403);
  EXPECT_EQ(e.status()["message"],
            "priorityclasses.scheduling.k8s.io \"second\" is forbidden: PriorityClass everyday is "
            "already marked as default. Only one default can exist");
  EXPECT_EQ(e.status()["details"], json::parse(R"({"name": "second", "group": "scheduling.k8s.io",
                            "kind": "priorityclasses"})"));
}

TEST_F(ApiWriteTest, ServicesSecretsAndConfigMapsGetTheServersDefaults) {
  const auto service = [&](const std::string& name, const json& spec) {
    const json made = client().create(resources::services(), ns(),
                                      {{"apiVersion", "v1"},
                                       {"kind", "Service"},
                                       {"metadata", {{"name", name}}},
                                       {"spec", spec}});
    json result = made["spec"];
    if (result.value("clusterIP", "") != "None")  // allocated: differs between servers
      for (const char* key : {"clusterIP", "clusterIPs"})
        result.erase(key);
    return result;
  };
  const json port = json::array({{{"port", 80}, {"protocol", "TCP"}, {"targetPort", 80}}});
  EXPECT_EQ(service("plain", {{"selector", {{"a", "b"}}}, {"ports", {{{"port", 80}}}}}),
            json({{"internalTrafficPolicy", "Cluster"},
                  {"ipFamilies", {"IPv4"}},
                  {"ipFamilyPolicy", "SingleStack"},
                  {"ports", port},
                  {"selector", {{"a", "b"}}},
                  {"sessionAffinity", "None"},
                  {"type", "ClusterIP"}}));
  EXPECT_EQ(service("headless", {{"clusterIP", "None"}, {"selector", {{"a", "b"}}}}),
            json({{"clusterIP", "None"},
                  {"clusterIPs", {"None"}},
                  {"internalTrafficPolicy", "Cluster"},
                  {"ipFamilies", {"IPv4"}},
                  {"ipFamilyPolicy", "SingleStack"},
                  {"selector", {{"a", "b"}}},
                  {"sessionAffinity", "None"},
                  {"type", "ClusterIP"}}));
  EXPECT_EQ(service("selectorless", {{"clusterIP", "None"}, {"ports", {{{"port", 80}}}}}),
            json({{"clusterIP", "None"},
                  {"clusterIPs", {"None"}},
                  {"internalTrafficPolicy", "Cluster"},
                  {"ipFamilies", {"IPv4", "IPv6"}},
                  {"ipFamilyPolicy", "RequireDualStack"},
                  {"ports", port},
                  {"sessionAffinity", "None"},
                  {"type", "ClusterIP"}}));
  EXPECT_EQ(service("external", {{"type", "ExternalName"}, {"externalName", "example.com"}}),
            json({{"externalName", "example.com"},
                  {"sessionAffinity", "None"},
                  {"type", "ExternalName"}}));

  json secret = client().create(resources::secrets(), ns(),
                                {{"apiVersion", "v1"},
                                 {"kind", "Secret"},
                                 {"metadata", {{"name", "s"}}},
                                 {"data", json::object()}});
  EXPECT_EQ(secret.value("type", ""), "Opaque");
  EXPECT_FALSE(secret.contains("data")) << secret.dump();
  json cm = configmap("empty-data");
  cm["data"] = json::object();
  cm["binaryData"] = json::object();
  const json made = client().create(resources::configmaps(), ns(), cm);
  EXPECT_FALSE(made.contains("data") || made.contains("binaryData")) << made.dump();
}

TEST_F(ApiWriteTest, JsonPatchAppliesOperationsInOrder) {
  client().create(resources::configmaps(), ns(), configmap("a", {{"app", "web"}}));
  const json patched = client().patch(
      resources::configmaps(), ns(), "a", PatchType::Json,
      json::array({{{"op", "test"}, {"path", "/data/key"}, {"value", "value"}},
                   {{"op", "add"}, {"path", "/metadata/labels/team"}, {"value", "vision"}},
                   {{"op", "remove"}, {"path", "/metadata/labels/app"}},
                   {{"op", "replace"}, {"path", "/data/key"}, {"value", "replaced"}}}));
  EXPECT_EQ(patched["metadata"]["labels"], json({{"team", "vision"}}));
  EXPECT_EQ(patched["data"]["key"], "replaced");

  const Error failed = expect_error([&] {
    client().patch(resources::configmaps(), ns(), "a", PatchType::Json,
                   json::array({{{"op", "test"}, {"path", "/data/key"}, {"value", "value"}},
                                {{"op", "add"}, {"path", "/data/x"}, {"value", "y"}}}));
  });
  EXPECT_EQ(failed.kind(), ErrorKind::Invalid);
  EXPECT_EQ(failed.http_code(), 422);
  EXPECT_FALSE(client().get(resources::configmaps(), ns(), "a")["data"].contains("x"))
      << "a failed test operation applies nothing";
}

TEST_F(ApiWriteTest, StrategicMergePatchMergesContainersByName) {
  client().create(resources::pods(), ns(), unscheduled_two_container_pod("p"));
  const json patched = client().patch(
      resources::pods(), ns(), "p", PatchType::Strategic,
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

TEST_F(ApiWriteTest, ApplyPatchCreatesThenMerges) {
  const json applied =
      client().patch(resources::configmaps(), ns(), "applied", PatchType::Apply,
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

  const json merged = client().patch(resources::configmaps(), ns(), "applied", PatchType::Apply,
                                     {{"apiVersion", "v1"},
                                      {"kind", "ConfigMap"},
                                      {"metadata", {{"name", "applied"}}},
                                      {"data", {{"b", "2"}}}},
                                     {.field_manager = "other-manager"});
  EXPECT_EQ(merged["data"], json({{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(merged["metadata"]["labels"]["app"], "web");
  EXPECT_EQ(merged["metadata"]["uid"], applied["metadata"]["uid"]);
}

TEST_F(ApiWriteTest, StatusSubresourceSplitsSpecAndStatusWritesOfACustomResource) {
  testing::install_training_crds(client());
  json job = client().create(resources::job(api::JobKind::TFJob), ns(), tfjob("mnist", 2));

  json both = job;
  both["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3;
  both["status"] = {{"conditions", json::array({{{"type", "Running"}, {"status", "True"}}})}};
  job = client().update(resources::job(api::JobKind::TFJob), ns(), both);
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 3);
  EXPECT_EQ(condition_status(job, "Running"), "") << "a main write must not touch status";

  both = job;
  both["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 9;
  both["status"] = {{"conditions", json::array({{{"type", "Running"}, {"status", "True"}}})}};
  job = client().update_status(resources::job(api::JobKind::TFJob), ns(), both);
  EXPECT_EQ(condition_status(job, "Running"), "True");
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 3)
      << "a status write must not touch spec";

  job = client().patch(resources::job(api::JobKind::TFJob), ns(), "mnist", PatchType::Merge,
                       {{"status", {{"replicaStatuses", {{"Worker", {{"active", 3}}}}}}}},
                       {.subresource = "status"});
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"]["active"], 3);
  EXPECT_EQ(
      condition_status(client().get(resources::job(api::JobKind::TFJob), ns(), "mnist", "status"),
                       "Running"),
      "True");
}

// A Scale without a resourceVersion is written against whatever the object is by then, as
// ScaleREST.Update runs in GuaranteedUpdate, which retries its read-modify-write on a conflict:
// the job's status written meanwhile (a controller) must not fail the HPA's scale patch.
TEST_F(ApiWriteTest, AScaleWithoutResourceVersionIsNoConflictWithWritesMeanwhile) {
  testing::install_training_crds(client());
  client().create(resources::job(api::JobKind::PyTorchJob), ns(),
                  {{"apiVersion", "kubeflow.org/v1"},
                   {"kind", "PyTorchJob"},
                   {"metadata", {{"name", "busy"}}},
                   {"spec", {{"pytorchReplicaSpecs", {{"Worker", {{"replicas", 1}}}}}}}});
  std::atomic<bool> done = false;
  std::thread status_writer([&] {
    for (int i = 0; !done; ++i) {
      client().patch(resources::job(api::JobKind::PyTorchJob), ns(), "busy", PatchType::Merge,
                     {{"status", {{"replicaStatuses", {{"Worker", {{"active", i}}}}}}}},
                     {.subresource = "status"});
    }
  });
  int conflicts = 0;
  for (int replicas = 1; replicas <= 150; ++replicas) {
    try {
      client().patch(resources::job(api::JobKind::PyTorchJob), ns(), "busy", PatchType::Merge,
                     {{"spec", {{"replicas", replicas}}}}, {.subresource = "scale"});
    } catch (const Error& e) {
      conflicts += e.kind() == ErrorKind::Conflict;
    }
  }
  done = true;
  status_writer.join();
  EXPECT_EQ(conflicts, 0);
  EXPECT_EQ(client().get(resources::job(api::JobKind::PyTorchJob), ns(),
                         "busy")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"],
            150);
}

// apiextensions-apiserver registry/customresource/etcd.go: ScaleREST Get/Update and
// scaleFromCustomResource; validator.go ValidateScaleSpec.
TEST_F(ApiWriteTest, ScaleSubresourceReadsAndWritesTheCrdsReplicaPaths) {
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
  job = client().create(resources::job(api::JobKind::PyTorchJob), ns(), job);
  client().patch(
      resources::job(api::JobKind::PyTorchJob), ns(), "ddp", PatchType::Merge,
      {{"status", {{"replicaStatuses", {{"Worker", {{"active", 2}, {"selector", "a=b"}}}}}}}},
      {.subresource = "status"});

  json scale = client().get(resources::job(api::JobKind::PyTorchJob), ns(), "ddp", "scale");
  EXPECT_EQ(scale["kind"], "Scale");
  EXPECT_EQ(scale["apiVersion"], "autoscaling/v1");
  EXPECT_EQ(scale["metadata"]["uid"], job["metadata"]["uid"]);
  EXPECT_EQ(scale["spec"], json({{"replicas", 2}}));
  EXPECT_EQ(scale["status"], json({{"replicas", 2}, {"selector", "a=b"}}));

  scale = client().patch(resources::job(api::JobKind::PyTorchJob), ns(), "ddp", PatchType::Merge,
                         {{"spec", {{"replicas", 4}}}}, {.subresource = "scale"});
  EXPECT_EQ(scale["spec"]["replicas"], 4);
  EXPECT_EQ(client().get(resources::job(api::JobKind::PyTorchJob), ns(),
                         "ddp")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"],
            4);

  RawSandboxHttp http(config());
  const std::string path = "/apis/kubeflow.org/v1/namespaces/" + ns() + "/pytorchjobs/ddp/scale";
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
              client().get(resources::job(api::JobKind::TFJob), ns(), "ddp", "scale");
            }).kind(),
            ErrorKind::NotFound);
}

TEST_F(ApiWriteTest, StatusSubresourceSplitsSpecAndStatusWritesOfAPod) {
  json pod = client().create(resources::pods(), ns(), unscheduled_two_container_pod("p"));
  EXPECT_EQ(pod["status"]["phase"], "Pending");

  json both = pod;
  both["metadata"]["labels"] = {{"seen", "yes"}};
  both["status"]["phase"] = "Running";
  pod = client().update(resources::pods(), ns(), both);
  EXPECT_EQ(pod["metadata"]["labels"]["seen"], "yes");
  EXPECT_EQ(pod["status"]["phase"], "Pending") << "a main write must not touch status";

  // podStatusStrategy.PrepareForUpdate keeps the stored spec and ownerReferences; the labels
  // and annotations are the write's, as in a main write.
  const json owner = client().create(resources::configmaps(), ns(), configmap("owner"));
  both = pod;
  both["spec"]["containers"][0]["image"] = "busybox:9";
  both["metadata"]["ownerReferences"] = json::array({owner_reference(owner)});
  both["metadata"]["labels"] = {{"seen", "changed"}};
  both["status"]["phase"] = "Running";
  pod = client().update_status(resources::pods(), ns(), both);
  EXPECT_EQ(pod["status"]["phase"], "Running");
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], "busybox:1.36")
      << "a status write must not touch spec";
  EXPECT_FALSE(pod["metadata"].contains("ownerReferences"))
      << "a status write must not touch ownerReferences";
  EXPECT_EQ(pod["metadata"]["labels"], json({{"seen", "changed"}}));
}

// --- delete -----------------------------------------------------------------------------------

TEST_F(ApiDeleteTest, BackgroundCollectsOwnedDependents) {
  const json owner = client().create(resources::configmaps(), ns(), configmap("owner"));
  client().create(resources::configmaps(), ns(), owned_configmap("dep-1", owner));
  client().create(resources::configmaps(), ns(), owned_configmap("dep-2", owner, false));
  client().create(resources::configmaps(), ns(), configmap("unrelated"));

  client().remove(resources::configmaps(), ns(), "owner", {.propagation_policy = "Background"});
  // The garbage collector deletes them a moment later.
  EXPECT_TRUE(wait_until(
      [&] {
        return configmap_names(client().list(resources::configmaps(), ns())) ==
               std::vector<std::string>{"unrelated"};
      },
      kSettleTimeout))
      << client().list(resources::configmaps(), ns()).dump();
}

TEST_F(ApiDeleteTest, OrphanKeepsDependentsAndDropsTheirOwnerReferences) {
  const json owner = client().create(resources::configmaps(), ns(), configmap("owner"));
  const json other = client().create(resources::configmaps(), ns(), configmap("other"));
  json dependent = owned_configmap("dep", owner);
  dependent["metadata"]["ownerReferences"].push_back(owner_reference(other, false));
  dependent["metadata"]["ownerReferences"][1]["controller"] = false;
  client().create(resources::configmaps(), ns(), dependent);

  client().remove(resources::configmaps(), ns(), "owner", {.propagation_policy = "Orphan"});
  ASSERT_TRUE(wait_until([&] { return !exists(client(), resources::configmaps(), ns(), "owner"); },
                         kSettleTimeout));
  const json kept = client().get(resources::configmaps(), ns(), "dep");
  ASSERT_EQ(kept["metadata"]["ownerReferences"].size(), 1u) << kept.dump();
  EXPECT_EQ(kept["metadata"]["ownerReferences"][0]["name"], "other");
}

TEST_F(ApiDeleteTest, ForegroundDeletesDependentsBeforeTheOwner) {
  const json owner = client().create(resources::configmaps(), ns(), configmap("owner"));
  client().create(resources::configmaps(), ns(), owned_configmap("dep", owner));
  const std::string start =
      client().list(resources::configmaps(), ns())["metadata"]["resourceVersion"];

  const json deleting =
      client().remove(resources::configmaps(), ns(), "owner", {.propagation_policy = "Foreground"});
  EXPECT_TRUE(deleting["metadata"].contains("deletionTimestamp")) << deleting.dump();

  // Watch until the owner is gone: first it is marked (deletionTimestamp and the
  // foregroundDeletion finalizer), then its dependent goes, then it does.
  std::vector<WatchEvent> events;
  kube::WatchOptions options;
  options.resource_version = start;
  options.timeout_seconds = kSettleTimeout.count();
  client().watch(resources::configmaps(), ns(), options, [&](const WatchEvent& e) {
    if (e.type == WatchEventType::Bookmark)
      return true;
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

TEST_F(ApiDeleteTest, ForegroundOwnerWaitsForABlockingDependentsFinalizer) {
  const json owner = client().create(resources::configmaps(), ns(), configmap("owner"));
  json dependent = owned_configmap("dep", owner);
  dependent["metadata"]["finalizers"] = {"example.com/hold"};
  client().create(resources::configmaps(), ns(), dependent);

  client().remove(resources::configmaps(), ns(), "owner", {.propagation_policy = "Foreground"});
  const json held_owner = client().get(resources::configmaps(), ns(), "owner");
  EXPECT_TRUE(held_owner["metadata"].contains("deletionTimestamp"));
  // The garbage collector deletes the dependent (a moment later), which its finalizer holds.
  json held_dep;
  EXPECT_TRUE(wait_until(
      [&] {
        held_dep = client().get(resources::configmaps(), ns(), "dep");
        return held_dep["metadata"].contains("deletionTimestamp");
      },
      kSettleTimeout))
      << held_dep.dump();
  EXPECT_TRUE(client().get(resources::configmaps(), ns(), "owner")["metadata"].contains(
      "deletionTimestamp"))
      << "the owner waits for its dependent";

  client().patch(resources::configmaps(), ns(), "dep", PatchType::Merge,
                 {{"metadata", {{"finalizers", nullptr}}}});
  auto gone = [&](const std::string& name) {
    return !exists(client(), resources::configmaps(), ns(), name);
  };
  EXPECT_TRUE(wait_until([&] { return gone("dep") && gone("owner"); }, kSettleTimeout));
}

TEST_F(ApiDeleteTest, PreconditionsMustMatch) {
  const json cm = client().create(resources::configmaps(), ns(), configmap("a"));
  const Error uid = expect_error([&] {
    client().remove(resources::configmaps(), ns(), "a",
                    {.precondition_uid = "00000000-0000-0000-0000-000000000000"});
  });
  EXPECT_EQ(uid.kind(), ErrorKind::Conflict);
  // rest.BeforeDelete's wording, kind and all.
  EXPECT_THAT(uid.message(),
              HasSubstr("Operation cannot be fulfilled on ConfigMap \"a\": the UID in the "
                        "precondition (00000000-0000-0000-0000-000000000000) does not match the "
                        "UID in record"));
  const Error rv = expect_error([&] {
    client().remove(resources::configmaps(), ns(), "a", {.precondition_resource_version = "1"});
  });
  EXPECT_EQ(rv.kind(), ErrorKind::Conflict);
  EXPECT_NO_THROW(client().remove(resources::configmaps(), ns(), "a",
                                  {.precondition_uid = cm["metadata"]["uid"].get<std::string>()}));
}

// Pods are deleted gracefully (registry/rest/delete.go BeforeDelete, registry/core/pod/strategy.go
// CheckGracefulDelete): a pod a kubelet runs is marked and stays until the kubelet deletes it with
// grace period 0.

TEST_F(ApiDeleteTest, ABoundPodIsMarkedWithItsGracePeriodAndStays) {
  const json created = client().create(resources::pods(), ns(), pod_on_absent_node("p", 12));
  const json deleting = client().remove(resources::pods(), ns(), "p");
  EXPECT_EQ(deleting["metadata"]["deletionGracePeriodSeconds"], 12) << deleting.dump();
  // deletionTimestamp is the time of the delete plus the pod's terminationGracePeriodSeconds.
  const std::int64_t until_deadline = seconds_between(created["metadata"]["creationTimestamp"],
                                                      deleting["metadata"]["deletionTimestamp"]);
  EXPECT_GE(until_deadline, 12);
  EXPECT_LE(until_deadline, 12 + kSettleTimeout.count());
  const json still = client().get(resources::pods(), ns(), "p");
  EXPECT_EQ(still["metadata"]["deletionTimestamp"], deleting["metadata"]["deletionTimestamp"]);
  EXPECT_EQ(still["metadata"]["uid"], created["metadata"]["uid"]);
  EXPECT_EQ(still["status"]["phase"], "Pending");
  client().remove(resources::pods(), ns(), "p", {.grace_period_seconds = 0});
}

TEST_F(ApiDeleteTest, ALaterDeleteMayShortenTheGracePeriodButNotLengthenIt) {
  const json created = client().create(resources::pods(), ns(), pod_on_absent_node("p", 12));
  const json first = client().remove(resources::pods(), ns(), "p");
  const json longer = client().remove(resources::pods(), ns(), "p", {.grace_period_seconds = 60});
  EXPECT_EQ(longer["metadata"]["deletionGracePeriodSeconds"], 12);
  EXPECT_EQ(longer["metadata"]["deletionTimestamp"], first["metadata"]["deletionTimestamp"]);
  EXPECT_EQ(longer["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"])
      << "a longer period changes nothing";
  // The shorter period counts from when the deletion began: the deadline moves 12 - 3 s earlier.
  const json shorter = client().remove(resources::pods(), ns(), "p", {.grace_period_seconds = 3});
  EXPECT_EQ(shorter["metadata"]["deletionGracePeriodSeconds"], 3);
  EXPECT_EQ(seconds_between(shorter["metadata"]["deletionTimestamp"],
                            first["metadata"]["deletionTimestamp"]),
            9);
  // The kubelet's final delete: period 0 with the pod's uid as precondition.
  client().remove(resources::pods(), ns(), "p",
                  {.precondition_uid = created["metadata"]["uid"].get<std::string>(),
                   .grace_period_seconds = 0});
  EXPECT_FALSE(exists(client(), resources::pods(), ns(), "p"));

  kube::WatchOptions from_create;
  from_create.resource_version = created["metadata"]["resourceVersion"];
  const auto events = collect_events(client(), resources::pods(), ns(), from_create, 4);
  EXPECT_THAT(describe_grace(events),
              ElementsAre("MODIFIED p 12", "MODIFIED p 3", "MODIFIED p 0", "DELETED p 0"));
}

TEST_F(ApiDeleteTest, TheRequestedGracePeriodWinsOverThePodsAndANegativeOneIsOneSecond) {
  client().create(resources::pods(), ns(), pod_on_absent_node("asked", 30));
  client().create(resources::pods(), ns(), pod_on_absent_node("negative", 30));
  const json asked = client().remove(resources::pods(), ns(), "asked", {.grace_period_seconds = 5});
  EXPECT_EQ(asked["metadata"]["deletionGracePeriodSeconds"], 5);
  const json negative =
      client().remove(resources::pods(), ns(), "negative", {.grace_period_seconds = -7});
  EXPECT_EQ(negative["metadata"]["deletionGracePeriodSeconds"], 1);
  // Also as a query parameter, which must be a number.
  client().create(resources::pods(), ns(), pod_on_absent_node("query", 30));
  RawSandboxHttp http(config());
  const std::string path = "/api/v1/namespaces/" + ns() + "/pods/query?gracePeriodSeconds=";
  const auto bad = http.send("DELETE", path + "soon");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["message"], "strconv.ParseInt: parsing \"soon\": invalid syntax");
  const auto by_query = http.send("DELETE", path + "4");
  EXPECT_EQ(json::parse(by_query.body)["metadata"]["deletionGracePeriodSeconds"], 4);
  for (const char* name : {"asked", "negative", "query"})
    client().remove(resources::pods(), ns(), name, {.grace_period_seconds = 0});
}

TEST_F(ApiDeleteTest, AnUnscheduledOrFinishedPodIsDeletedAtOnce) {
  const json waiting =
      client().create(resources::pods(), ns(), unscheduled_two_container_pod("waiting"));
  json done = client().create(resources::pods(), ns(), pod_on_absent_node("done"));
  done["status"]["phase"] = "Succeeded";
  client().update_status(resources::pods(), ns(), done);

  client().remove(resources::pods(), ns(), "waiting");
  client().remove(resources::pods(), ns(), "done");
  EXPECT_FALSE(exists(client(), resources::pods(), ns(), "waiting"));
  EXPECT_FALSE(exists(client(), resources::pods(), ns(), "done"));

  // Still a graceful delete, with period 0: marked (MODIFIED), then gone.
  kube::WatchOptions from_create;
  from_create.resource_version = waiting["metadata"]["resourceVersion"];
  from_create.field_selector = "metadata.name=waiting";
  const auto events = collect_events(client(), resources::pods(), ns(), from_create, 2);
  EXPECT_THAT(describe_grace(events), ElementsAre("MODIFIED waiting 0", "DELETED waiting 0"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].object["metadata"].contains("deletionTimestamp"));
}

TEST_F(ApiDeleteTest, FinalizersHoldAPodAfterItsGracePeriodAndTheGracePeriodHoldsItToo) {
  json held = pod_on_absent_node("held");
  held["metadata"]["finalizers"] = {"example.com/hold"};
  client().create(resources::pods(), ns(), held);
  held["metadata"]["name"] = "graceful";
  client().create(resources::pods(), ns(), held);
  const json no_finalizers = {{"metadata", {{"finalizers", nullptr}}}};

  // Grace period over, finalizer left: the pod stays until the finalizer goes.
  const json marked = client().remove(resources::pods(), ns(), "held", {.grace_period_seconds = 0});
  EXPECT_EQ(marked["metadata"]["deletionGracePeriodSeconds"], 0);
  EXPECT_TRUE(exists(client(), resources::pods(), ns(), "held"));
  client().patch(resources::pods(), ns(), "held", PatchType::Merge, no_finalizers);
  EXPECT_FALSE(exists(client(), resources::pods(), ns(), "held"));

  // Finalizer gone within the grace period: the pod stays until its final delete.
  client().remove(resources::pods(), ns(), "graceful");
  client().patch(resources::pods(), ns(), "graceful", PatchType::Merge, no_finalizers);
  const json waiting = client().get(resources::pods(), ns(), "graceful");
  EXPECT_EQ(waiting["metadata"]["deletionGracePeriodSeconds"], 30);
  client().remove(resources::pods(), ns(), "graceful", {.grace_period_seconds = 0});
  EXPECT_FALSE(exists(client(), resources::pods(), ns(), "graceful"));
}

// --- dry run ----------------------------------------------------------------------------------

TEST_F(ApiDryRunTest, CreateUpdatePatchAndDeleteChangeNothing) {
  const json dry_created =
      client().create(resources::configmaps(), ns(), configmap("dry"), {.dry_run = true});
  EXPECT_EQ(dry_created["metadata"]["name"], "dry");
  EXPECT_EQ(expect_error([&] { client().get(resources::configmaps(), ns(), "dry"); }).kind(),
            ErrorKind::NotFound);

  const json real = client().create(resources::configmaps(), ns(), configmap("real"));
  json changed = real;
  changed["data"]["key"] = "dry-run";
  EXPECT_EQ(
      client().update(resources::configmaps(), ns(), changed, {.dry_run = true})["data"]["key"],
      "dry-run");
  client().patch(resources::configmaps(), ns(), "real", PatchType::Merge,
                 {{"data", {{"key", "dry-patch"}}}}, {.dry_run = true});
  client().remove(resources::configmaps(), ns(), "real", {.dry_run = true});

  const json after = client().get(resources::configmaps(), ns(), "real");
  EXPECT_EQ(after["data"]["key"], "value");
  EXPECT_EQ(after["metadata"]["resourceVersion"], real["metadata"]["resourceVersion"]);
  kube::WatchOptions since_create;
  since_create.resource_version = real["metadata"]["resourceVersion"];
  since_create.timeout_seconds = 1;
  since_create.allow_bookmarks = false;
  EXPECT_THAT(describe(collect_events(client(), resources::configmaps(), ns(), since_create, 1)),
              IsEmpty())
      << "a dry run must write nothing a watcher sees";

  EXPECT_EQ(expect_error([&] {
              client().create(resources::configmaps(), ns(), configmap("Bad_Name"),
                              {.dry_run = true});
            }).kind(),
            ErrorKind::Invalid)
      << "a dry run still validates";
}

TEST_F(ApiDryRunTest, DryRunDeleteOfACrdKeepsItServed) {
  testing::install_training_crds(client());
  client().create(resources::job(api::JobKind::TFJob), ns(), tfjob("mnist"));
  client().remove(resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org",
                  {.dry_run = true});
  EXPECT_NO_THROW(client().require_served(resources::job(api::JobKind::TFJob)));
  EXPECT_EQ(client().get(resources::job(api::JobKind::TFJob), ns(), "mnist")["metadata"]["name"],
            "mnist");
}

}  // namespace
}  // namespace trainctl
