#include "sandbox/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/expect_error.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Type = kube::WatchEventType;

std::chrono::system_clock::time_point fixed_time() {
  using namespace std::chrono;
  return sys_days{year{2024} / 5 / 1} + hours{12};
}

const ResourceInfo kPods{"", "v1", "pods", "Pod", true, true};
const ResourceInfo kConfigMaps{"", "v1", "configmaps", "ConfigMap", true, false};
const ResourceInfo kServices{"", "v1", "services", "Service", true, true};
const ResourceInfo kNodes{"", "v1", "nodes", "Node", false, true};
const ResourceInfo kJobs{"batch", "v1", "jobs", "Job", true, true};
const ResourceInfo kTFJobs{"kubeflow.org", "v1", "tfjobs", "TFJob", true, true};
const ResourceInfo kPodGroups{
    "scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", true, false};

json pod(const std::string& name, json labels = json::object(), const std::string& ns = "default") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", std::move(labels)}}},
          {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
}

json owned_by(json obj, const json& owner, bool block = false) {
  json ref = {{"apiVersion", owner["apiVersion"]},
              {"kind", owner["kind"]},
              {"name", owner["metadata"]["name"]},
              {"uid", owner["metadata"]["uid"]}};
  if (block)
    ref["blockOwnerDeletion"] = true;
  obj["metadata"]["ownerReferences"].push_back(ref);
  return obj;
}

/// A batch Job the API server takes: one container that runs once.
json batch_job(const std::string& name) {
  return {{"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"template",
             {{"spec",
               {{"restartPolicy", "Never"},
                {"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}}}}}};
}

std::uint64_t rv_of(const json& obj) {
  return std::stoull(obj["metadata"]["resourceVersion"].get<std::string>());
}

class StoreTest : public ::testing::Test {
 protected:
  StoreTest() : store_(options()) {
    for (const auto& info : {kPods, kConfigMaps, kServices, kNodes, kJobs, kTFJobs, kPodGroups})
      store_.register_resource(info);
    store_.ensure_namespace("default");
  }

  static StoreOptions options(std::size_t window = 1000) {
    StoreOptions o;
    o.window = window;
    o.bookmark_interval = milliseconds(30);
    o.fresh_wait = milliseconds(300);
    o.now = fixed_time;
    return o;
  }

  std::shared_ptr<WatchStream> watch(const std::string& gr, const std::string& rv,
                                     const std::string& labels = "") {
    return store_.watch(gr, "", LabelSelector::parse(labels), FieldSelector{}, rv, false);
  }

  // The events a watch has queued right now.
  static std::vector<kube::WatchEvent> drain(WatchStream& w) {
    std::vector<kube::WatchEvent> out;
    while (auto e = w.next(milliseconds(0)))
      out.push_back(std::move(*e));
    return out;
  }

  // The types of the events a watch has queued right now.
  static std::vector<kube::WatchEventType> drain_types(WatchStream& w) {
    std::vector<kube::WatchEventType> types;
    for (const auto& e : drain(w))
      types.push_back(e.type);
    return types;
  }

  Store store_;
};

// --- create --------------------------------------------------------------------------------

TEST_F(StoreTest, CreateFillsSystemFields) {
  json created = store_.create("pods", pod("web"));
  const json& md = created["metadata"];
  EXPECT_TRUE(std::regex_match(md["uid"].get<std::string>(),
                               std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                          "[0-9a-f]{12}")));
  EXPECT_EQ(md["creationTimestamp"], "2024-05-01T12:00:00Z");
  EXPECT_FALSE(md.contains("generation"));  // kube-apiserver 1.26 gives pods none
  EXPECT_EQ(md["resourceVersion"], store_.current_resource_version());
  EXPECT_EQ(created["apiVersion"], "v1");
  EXPECT_EQ(created["kind"], "Pod");
  EXPECT_EQ(store_.get("pods", "default", "web"), created);

  json cm = store_.create("configmaps", {{"metadata", {{"name", "c"}, {"namespace", "default"}}}});
  EXPECT_FALSE(cm["metadata"].contains("generation"));  // not a type with generation
  EXPECT_EQ(cm["kind"], "ConfigMap");
  EXPECT_GT(rv_of(cm), rv_of(created));
}

TEST_F(StoreTest, CreateRequiresNameOrGenerateName) {
  json nameless = pod("");
  auto e = testing::expect_api_error([&] { store_.create("pods", nameless); });
  EXPECT_EQ(e.kind(), ErrorKind::Invalid);
  EXPECT_EQ(e.http_code(), 422);
  EXPECT_EQ(e.message(),
            "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required");
  EXPECT_EQ(e.api_status()["reason"], "Invalid");
  EXPECT_EQ(e.api_status()["details"]["kind"], "Pod");
  EXPECT_EQ(e.api_status()["details"]["causes"][0]["field"], "metadata.name");
  EXPECT_EQ(e.api_status()["details"]["causes"][0]["reason"], "FieldValueRequired");
}

TEST_F(StoreTest, CreateRejectsNamesThatAreNotDnsSubdomains) {
  auto e = testing::expect_api_error([&] { store_.create("pods", pod("Bad_Name")); });
  EXPECT_EQ(e.message(),
            "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase "
            "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex "
            "used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
  auto cr = testing::expect_api_error([&] {
    store_.create("tfjobs.kubeflow.org",
                  {{"metadata", {{"name", "Mnist"}, {"namespace", "default"}}}});
  });
  EXPECT_EQ(cr.message().substr(0, 41), "TFJob.kubeflow.org \"Mnist\" is invalid: me");
  EXPECT_EQ(cr.api_status()["details"]["group"], "kubeflow.org");
}

TEST_F(StoreTest, CreateRejectsLabelsAndAnnotationsTheServerRefuses) {
  json bad = pod("web");
  bad["metadata"]["labels"] = {{"a", "b=c"}};
  bad["metadata"]["annotations"] = {{"big", std::string(256 * 1024, 'x')}};
  auto e = testing::expect_api_error([&] { store_.create("pods", bad); });
  EXPECT_EQ(e.message(),
            "Pod \"web\" is invalid: [metadata.labels: Invalid value: \"b=c\": a valid label "
            "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  "
            "or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'), metadata.annotations: Too long: may "
            "not be more than 262144 bytes]");
  EXPECT_EQ(e.api_status()["details"]["causes"][1]["reason"], "FieldValueTooLong");
}

TEST_F(StoreTest, ServiceAndNamespaceNamesAreLabels) {
  auto svc = testing::expect_api_error([&] {
    store_.create("services", {{"metadata", {{"name", "1web"}, {"namespace", "default"}}}});
  });
  EXPECT_NE(svc.message().find("a DNS-1035 label must consist of"), std::string::npos);
  auto ns = testing::expect_api_error([&] {
    store_.create("namespaces", {{"metadata", {{"name", "team.a"}}}});
  });
  EXPECT_EQ(ns.message(),
            "Namespace \"team.a\" is invalid: metadata.name: Invalid value: \"team.a\": must not "
            "contain dots");
}

TEST_F(StoreTest, GenerateNameAppendsFiveCharacters) {
  json a = pod("");
  a["metadata"]["generateName"] = "worker-";
  json first = store_.create("pods", a);
  json second = store_.create("pods", a);
  const std::string name = first["metadata"]["name"];
  EXPECT_TRUE(std::regex_match(name, std::regex("worker-[bcdfghjklmnpqrstvwxz2456789]{5}")))
      << name;
  EXPECT_NE(name, second["metadata"]["name"].get<std::string>());
  a["metadata"]["generateName"] = "Bad_";
  auto e = testing::expect_api_error([&] { store_.create("pods", a); });
  EXPECT_EQ(e.api_status()["details"]["causes"][0]["field"], "metadata.generateName");
  EXPECT_EQ(e.api_status()["details"]["causes"][1]["field"], "metadata.name");
}

TEST_F(StoreTest, CreateOfExistingObjectIsAlreadyExists) {
  store_.create("pods", pod("web"));
  auto e = testing::expect_api_error([&] { store_.create("pods", pod("web")); });
  EXPECT_EQ(e.kind(), ErrorKind::AlreadyExists);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.message(), "pods \"web\" already exists");
  EXPECT_EQ(e.api_status()["details"], (json{{"name", "web"}, {"kind", "pods"}}));
  store_.create("tfjobs.kubeflow.org",
                {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  auto cr = testing::expect_api_error([&] {
    store_.create("tfjobs.kubeflow.org",
                  {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  });
  EXPECT_EQ(cr.message(), "tfjobs.kubeflow.org \"mnist\" already exists");
}

TEST_F(StoreTest, NamespacedObjectsNeedAnExistingNamespace) {
  auto missing = testing::expect_api_error([&] { store_.create("pods", pod("web", {}, "nope")); });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);
  EXPECT_EQ(missing.message(), "namespaces \"nope\" not found");
  auto unset = testing::expect_api_error([&] { store_.create("pods", pod("web", {}, "")); });
  EXPECT_EQ(unset.message(), "Pod \"web\" is invalid: metadata.namespace: Required value");
  // Cluster-scoped objects drop a namespace silently.
  json node = store_.create("nodes", {{"metadata", {{"name", "n1"}, {"namespace", "default"}}}});
  EXPECT_FALSE(node["metadata"].contains("namespace"));
  EXPECT_EQ(store_.get("nodes", "", "n1")["metadata"]["name"], "n1");
}

TEST_F(StoreTest, CreateWithResourceVersionIsRefused) {
  json p = pod("web");
  p["metadata"]["resourceVersion"] = "12";
  auto e = testing::expect_api_error([&] { store_.create("pods", p); });
  EXPECT_EQ(e.http_code(), 500);
  EXPECT_EQ(e.message(), "resourceVersion should not be set on objects to be created");
  // Checked by the storage, which a dry run never reaches (kube-apiserver answers 201 then).
  EXPECT_NO_THROW(store_.create("pods", p, /*dry_run=*/true));
}

TEST_F(StoreTest, DryRunCreateValidatesButStoresNothing) {
  auto w = watch("pods", "0");
  const std::string rv = store_.current_resource_version();
  json result = store_.create("pods", pod("web"), /*dry_run=*/true);
  EXPECT_FALSE(result["metadata"].contains("resourceVersion"));
  EXPECT_TRUE(result["metadata"].contains("uid"));
  EXPECT_EQ(store_.current_resource_version(), rv);
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "web"); }).kind(),
            ErrorKind::NotFound);
  EXPECT_TRUE(drain(*w).empty());
  EXPECT_EQ(testing::expect_api_error([&] { store_.create("pods", pod("Bad"), true); }).kind(),
            ErrorKind::Invalid);
}

TEST_F(StoreTest, PodStatusStartsPendingWithItsQosClass) {
  json p = pod("web");
  p["status"] = {{"phase", "Running"}};
  EXPECT_EQ(store_.create("pods", p)["status"],
            (json{{"phase", "Pending"}, {"qosClass", "BestEffort"}}));
  json g = pod("guaranteed");
  g["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", "1"}, {"memory", "1Gi"}}}};
  EXPECT_EQ(store_.create("pods", g)["status"]["qosClass"], "Guaranteed");
  json b = pod("burstable");
  b["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", "1"}}}};
  EXPECT_EQ(store_.create("pods", b)["status"]["qosClass"], "Burstable");
}

TEST_F(StoreTest, CustomResourceStatusIsDroppedOnCreateOnlyWithStatusSubresource) {
  json job = {{"metadata", {{"name", "j"}, {"namespace", "default"}}},
              {"spec", {{"x", 1}}},
              {"status", {{"phase", "Done"}}}};
  EXPECT_FALSE(store_.create("tfjobs.kubeflow.org", job).contains("status"));
  EXPECT_EQ(store_.create("podgroups.scheduling.volcano.sh", job)["status"]["phase"], "Done");
}

TEST_F(StoreTest, InvalidLabelsAreRejected) {
  auto e = testing::expect_api_error([&] {
    store_.create("pods", pod("web", {{"app", "not valid"}}));
  });
  EXPECT_EQ(e.message().substr(0, 80),
            "Pod \"web\" is invalid: metadata.labels: Invalid value: \"not valid\": a valid label");
}

TEST_F(StoreTest, NamespacesGetPhaseFinalizerAndNameLabel) {
  store_.ensure_namespace("kube-system");
  store_.ensure_namespace("kube-system");  // idempotent
  json ns = store_.get("namespaces", "", "kube-system");
  EXPECT_EQ(ns["status"]["phase"], "Active");
  EXPECT_EQ(ns["spec"]["finalizers"], json::array({"kubernetes"}));
  EXPECT_EQ(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "kube-system");
  EXPECT_FALSE(ns["metadata"].contains("generation"));
}

// --- update --------------------------------------------------------------------------------

TEST_F(StoreTest, UpdateOfMissingObjectIsNotFoundExceptForCreateOnUpdateTypes) {
  auto e = testing::expect_api_error([&] { store_.update("pods", pod("ghost")); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.message(), "pods \"ghost\" not found");
  json svc = store_.update("services", {{"metadata", {{"name", "web"}, {"namespace", "default"}}},
                                        {"spec", {{"ports", {{{"port", 80}}}}}}});
  EXPECT_EQ(svc["kind"], "Service");
  EXPECT_EQ(store_.get("services", "default", "web")["metadata"]["uid"], svc["metadata"]["uid"]);
}

TEST_F(StoreTest, StaleResourceVersionIsAConflict) {
  json created = store_.create("pods", pod("web"));
  json first = created;
  first["metadata"]["labels"]["a"] = "1";
  store_.update("pods", first);
  json stale = created;
  stale["metadata"]["labels"]["a"] = "2";
  auto e = testing::expect_api_error([&] { store_.update("pods", stale); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.http_code(), 409);
  EXPECT_EQ(e.message(),
            "Operation cannot be fulfilled on pods \"web\": the object has been modified; please "
            "apply your changes to the latest version and try again");
  EXPECT_EQ(store_.get("pods", "default", "web")["metadata"]["labels"]["a"], "1");
}

TEST_F(StoreTest, UnconditionalUpdateIsForBuiltinsOnly) {
  json created = store_.create("pods", pod("web"));
  created["metadata"].erase("resourceVersion");
  created["metadata"]["labels"]["x"] = "y";
  EXPECT_EQ(store_.update("pods", created)["metadata"]["labels"]["x"], "y");

  json cr = store_.create("tfjobs.kubeflow.org",
                          {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  EXPECT_EQ(cr["metadata"]["generation"], 1);
  cr["metadata"].erase("resourceVersion");
  auto e = testing::expect_api_error([&] { store_.update("tfjobs.kubeflow.org", cr); });
  EXPECT_EQ(e.message(),
            "tfjobs.kubeflow.org \"mnist\" is invalid: metadata.resourceVersion: Invalid value: "
            "0x0: must be specified for an update");
}

TEST_F(StoreTest, SystemFieldsCannotBeChanged) {
  json created = store_.create("pods", pod("web"));
  json changed = created;
  changed["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z";
  changed["metadata"]["generation"] = 42;
  changed["metadata"]["labels"]["x"] = "1";
  json updated = store_.update("pods", changed);
  EXPECT_EQ(updated["metadata"]["creationTimestamp"], "2024-05-01T12:00:00Z");
  EXPECT_FALSE(updated["metadata"].contains("generation"));  // a type without one gets none
  // A patch cannot change the uid (ValidateObjectMetaUpdate); a PUT carrying another uid fails
  // its uid precondition first (see UpdateCarryingTheUidOfAnObjectThatIsGone).
  auto e = testing::expect_api_error([&] {
    store_.modify("pods", "default", "web", WritePart::Main,
                  [](json& obj) { obj["metadata"]["uid"] = "another"; });
  });
  EXPECT_EQ(e.message(),
            "Pod \"web\" is invalid: metadata.uid: Invalid value: \"another\": field is immutable");
}

// A PUT whose metadata.uid names an object that is gone fails the storage layer's uid
// precondition, as GuaranteedUpdate does in the real server: 409 Conflict with the etcd key.
TEST_F(StoreTest, UpdateCarryingTheUidOfAnObjectThatIsGone) {
  const json old = store_.create("pods", pod("web"));
  const std::string old_uid = old["metadata"]["uid"];
  store_.remove("pods", "default", "web");
  const json replacement = store_.create("pods", pod("web"));
  const std::string new_uid = replacement["metadata"]["uid"];
  ASSERT_NE(old_uid, new_uid);

  json stale = old;
  stale["metadata"]["resourceVersion"] = replacement["metadata"]["resourceVersion"];
  for (const WritePart part : {WritePart::Main, WritePart::Status}) {
    auto e = testing::expect_api_error([&] { store_.update("pods", stale, part); });
    EXPECT_EQ(e.kind(), ErrorKind::Conflict);
    EXPECT_EQ(e.http_code(), 409);
    EXPECT_EQ(e.api_status()["reason"], "Conflict");
    EXPECT_EQ(e.message(),
              "Operation cannot be fulfilled on pods \"web\": StorageError: invalid object, Code: "
              "4, Key: /registry/pods/default/web, ResourceVersion: 0, AdditionalErrorMsg: "
              "Precondition failed: UID in precondition: " +
                  old_uid + ", UID in object meta: " + new_uid);
    EXPECT_EQ(e.api_status()["details"], json({{"name", "web"}, {"kind", "pods"}}));
  }
  EXPECT_EQ(store_.get("pods", "default", "web")["metadata"]["uid"], new_uid);

  // Without a uid the write goes through; with the current one too.
  json current = replacement;
  current["metadata"]["labels"]["a"] = "1";
  EXPECT_EQ(store_.update("pods", current)["metadata"]["labels"]["a"], "1");

  // Gone altogether: the uid precondition still fails first, with no uid in object meta (as
  // kube-apiserver 1.26 answers); without a uid it is NotFound, as for a type a PUT cannot create.
  store_.remove("pods", "default", "web");
  auto missing = testing::expect_api_error([&] { store_.update("pods", stale); });
  EXPECT_EQ(missing.kind(), ErrorKind::Conflict);
  EXPECT_EQ(missing.message(),
            "Operation cannot be fulfilled on pods \"web\": StorageError: invalid object, Code: 4, "
            "Key: /registry/pods/default/web, ResourceVersion: 0, AdditionalErrorMsg: "
            "Precondition failed: UID in precondition: " +
                old_uid + ", UID in object meta: ");
  stale["metadata"].erase("uid");
  auto not_found = testing::expect_api_error([&] { store_.update("pods", stale); });
  EXPECT_EQ(not_found.kind(), ErrorKind::NotFound);
  EXPECT_EQ(not_found.message(), "pods \"web\" not found");
}

TEST_F(StoreTest, UidPreconditionConflictsNameTheEtcdKeyOfEachKindOfResource) {
  const json pg = store_.create(
      "podgroups.scheduling.volcano.sh",
      {{"metadata", {{"name", "pg"}, {"namespace", "default"}}}, {"spec", {{"minMember", 2}}}});
  json stale = pg;
  stale["metadata"]["uid"] = "0000";
  auto custom =
      testing::expect_api_error([&] { store_.update("podgroups.scheduling.volcano.sh", stale); });
  EXPECT_EQ(custom.message(),
            "Operation cannot be fulfilled on podgroups.scheduling.volcano.sh \"pg\": "
            "StorageError: invalid object, Code: 4, Key: "
            "/registry/scheduling.volcano.sh/podgroups/default/pg, ResourceVersion: 0, "
            "AdditionalErrorMsg: Precondition failed: UID in precondition: 0000, UID in object "
            "meta: " +
                pg["metadata"]["uid"].get<std::string>());
  EXPECT_EQ(custom.api_status()["details"],
            json({{"name", "pg"}, {"group", "scheduling.volcano.sh"}, {"kind", "podgroups"}}));

  const json node = store_.create("nodes", {{"metadata", {{"name", "n1"}}}});
  json stale_node = node;
  stale_node["metadata"]["uid"] = "0000";
  EXPECT_NE(testing::expect_api_error([&] { store_.update("nodes", stale_node); })
                .message()
                .find("Key: /registry/minions/n1, "),
            std::string::npos);

  // Services may be created by a PUT, so a missing one is compared with an empty object.
  const json svc = {{"metadata", {{"name", "s"}, {"namespace", "default"}, {"uid", "0000"}}},
                    {"spec", {{"ports", {{{"port", 80}}}}}}};
  auto e = testing::expect_api_error([&] { store_.update("services", svc); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.message(),
            "Operation cannot be fulfilled on services \"s\": StorageError: invalid object, "
            "Code: 4, Key: /registry/services/specs/default/s, ResourceVersion: 0, "
            "AdditionalErrorMsg: Precondition failed: UID in precondition: 0000, UID in object "
            "meta: ");
}

TEST_F(StoreTest, GenerationCountsSpecChangesOnly) {
  json created = store_.create(
      "tfjobs.kubeflow.org",
      {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}, {"spec", {{"a", 1}}}});
  EXPECT_EQ(created["metadata"]["generation"], 1);
  created["metadata"]["labels"]["a"] = "1";
  json labelled = store_.update("tfjobs.kubeflow.org", created);
  EXPECT_EQ(labelled["metadata"]["generation"], 1);
  labelled["spec"]["a"] = 2;
  json respec = store_.update("tfjobs.kubeflow.org", labelled);
  EXPECT_EQ(respec["metadata"]["generation"], 2);
  respec["status"] = {{"phase", "Running"}};
  EXPECT_EQ(
      store_.update("tfjobs.kubeflow.org", respec, WritePart::Status)["metadata"]["generation"], 2);
}

TEST_F(StoreTest, StatusSubresourceSplitsWrites) {
  json created = store_.create("pods", pod("web"));
  json main = created;
  main["status"] = {{"phase", "Running"}};
  main["metadata"]["labels"]["a"] = "1";
  json after_main = store_.update("pods", main);
  EXPECT_EQ(after_main["status"]["phase"], "Pending");  // kept
  EXPECT_EQ(after_main["metadata"]["labels"]["a"], "1");

  json status = after_main;
  status["status"] = {{"phase", "Running"}};
  status["spec"]["containers"][0]["image"] = "ignored";
  status["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "ignored"}, {"uid", "ignored"}}};
  status["metadata"]["labels"]["a"] = "2";
  json after_status = store_.update("pods", status, WritePart::Status);
  EXPECT_EQ(after_status["status"]["phase"], "Running");
  EXPECT_EQ(after_status["status"]["qosClass"], "BestEffort");  // backfilled
  EXPECT_EQ(after_status["spec"]["containers"][0]["image"], "busybox");
  EXPECT_FALSE(after_status["metadata"].contains("ownerReferences"));
  // As podStatusStrategy.PrepareForUpdate: pods/status takes the labels it is given.
  EXPECT_EQ(after_status["metadata"]["labels"]["a"], "2");
}

TEST_F(StoreTest, WithoutStatusSubresourceAPlainUpdateWritesStatus) {
  json pg = store_.create(
      "podgroups.scheduling.volcano.sh",
      {{"metadata", {{"name", "pg"}, {"namespace", "default"}}}, {"spec", {{"minMember", 2}}}});
  pg["status"] = {{"phase", "Running"}};
  json updated = store_.update("podgroups.scheduling.volcano.sh", pg);
  EXPECT_EQ(updated["status"]["phase"], "Running");
  EXPECT_EQ(updated["metadata"]["generation"], 2);  // custom resources count status then
}

TEST_F(StoreTest, NoOpUpdateKeepsResourceVersionAndEmitsNothing) {
  json created = store_.create("pods", pod("web"));
  auto w = watch("pods", created["metadata"]["resourceVersion"]);
  json same = store_.update("pods", created);
  EXPECT_EQ(same["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
  EXPECT_TRUE(drain(*w).empty());
  EXPECT_EQ(store_.current_resource_version(), created["metadata"]["resourceVersion"]);
}

TEST_F(StoreTest, ModifyRunsUnderTheLockAndAbortsOnThrow) {
  store_.create("pods", pod("web"));
  json out = *store_.modify("pods", "default", "web", WritePart::Main,
                            [](json& p) { p["metadata"]["labels"]["m"] = "1"; });
  EXPECT_EQ(out["metadata"]["labels"]["m"], "1");
  const std::string rv = store_.current_resource_version();
  EXPECT_THROW(store_.modify("pods", "default", "web", WritePart::Main,
                             [](json& p) {
                               p["metadata"]["labels"]["m"] = "2";
                               throw Error(ErrorKind::Invalid, "no");
                             }),
               Error);
  EXPECT_EQ(store_.current_resource_version(), rv);
  auto e = testing::expect_api_error([&] {
    store_.modify("pods", "default", "web", WritePart::Main,
                  [](json& p) { p["metadata"]["resourceVersion"] = "1"; });
  });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(testing::expect_api_error([&] {
              store_.modify("pods", "default", "nope", WritePart::Main, [](json&) {});
            }).message(),
            "pods \"nope\" not found");
}

// --- delete and finalizers -----------------------------------------------------------------

TEST_F(StoreTest, DeleteReturnsTheObjectAndWatchersSeeANewVersion) {
  json created = store_.create("pods", pod("web"));
  auto w = watch("pods", created["metadata"]["resourceVersion"]);
  DeleteResult result = store_.remove_detailed("pods", "default", "web");
  EXPECT_TRUE(result.deleted);
  EXPECT_GT(rv_of(result.object), rv_of(created));
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "web"); }).message(),
            "pods \"web\" not found");
  // An unscheduled pod's delete is graceful with period 0: marked first, then gone.
  auto events = drain(*w);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, Type::Modified);
  EXPECT_EQ(events[0].object["metadata"]["deletionGracePeriodSeconds"], 0);
  EXPECT_EQ(events[1].type, Type::Deleted);
  EXPECT_EQ(events[1].object["metadata"]["resourceVersion"],
            result.object["metadata"]["resourceVersion"]);
  EXPECT_EQ(testing::expect_api_error([&] { store_.remove("pods", "default", "web"); }).kind(),
            ErrorKind::NotFound);
}

TEST_F(StoreTest, DeletePreconditions) {
  json created = store_.create("pods", pod("web"));
  const std::string uid = created["metadata"]["uid"];
  auto bad_uid = testing::expect_api_error(
      [&] { store_.remove("pods", "default", "web", DeleteRequest{.precondition_uid = "x"}); });
  EXPECT_EQ(bad_uid.message(),
            "Operation cannot be fulfilled on Pod \"web\": the UID in the precondition (x) does "
            "not match the UID in record (" +
                uid + "). The object might have been deleted and then recreated");
  auto bad_rv = testing::expect_api_error([&] {
    store_.remove("pods", "default", "web", DeleteRequest{.precondition_resource_version = "1"});
  });
  EXPECT_EQ(bad_rv.kind(), ErrorKind::Conflict);
  EXPECT_NE(bad_rv.message().find("the ResourceVersion in the precondition (1) does not match"),
            std::string::npos);
  store_.remove("pods", "default", "web", DeleteRequest{.precondition_uid = uid});
  EXPECT_EQ(store_.object_count(), 1u);  // only the namespace is left

  // The object is gone: NotFound, whatever the precondition.
  auto gone = testing::expect_api_error(
      [&] { store_.remove("pods", "default", "web", DeleteRequest{.precondition_uid = uid}); });
  EXPECT_EQ(gone.kind(), ErrorKind::NotFound);
  EXPECT_EQ(gone.message(), "pods \"web\" not found");
}

TEST_F(StoreTest, NamespaceDeletePreconditionsUseTheNamespaceRegistrysWording) {
  const std::string uid =
      store_.create("namespaces", {{"metadata", {{"name", "team"}}}})["metadata"]["uid"];
  auto e = testing::expect_api_error(
      [&] { store_.remove("namespaces", "", "team", DeleteRequest{.precondition_uid = "x"}); });
  EXPECT_EQ(e.kind(), ErrorKind::Conflict);
  EXPECT_EQ(e.message(),
            "Operation cannot be fulfilled on namespaces \"team\": Precondition failed: UID in "
            "precondition: x, UID in object meta: " +
                uid);
  EXPECT_EQ(e.api_status()["details"], json({{"name", "team"}, {"kind", "namespaces"}}));
}

TEST_F(StoreTest, InvalidPropagationPolicy) {
  store_.create("pods", pod("web"));
  EXPECT_EQ(testing::expect_api_error([&] {
              store_.remove("pods", "default", "web", DeleteRequest{.propagation_policy = "Now"});
            }).message(),
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: "
            "\"Now\": supported values: \"Foreground\", \"Background\", \"Orphan\"");
}

TEST_F(StoreTest, FinalizersHoldTheObjectUntilAnUpdateRemovesThem) {
  json p = pod("web");
  p["metadata"]["finalizers"] = {"example.com/hold"};
  store_.create("pods", p);
  DeleteResult held = store_.remove_detailed("pods", "default", "web");
  EXPECT_FALSE(held.deleted);
  EXPECT_EQ(held.object["metadata"]["deletionTimestamp"], "2024-05-01T12:00:00Z");
  EXPECT_EQ(held.object["metadata"]["deletionGracePeriodSeconds"], 0);
  // A graceful deletion counts a generation only for types that have one (not pods).
  EXPECT_FALSE(held.object["metadata"].contains("generation"));
  // Deleting again changes nothing.
  EXPECT_EQ(store_.remove("pods", "default", "web"), held.object);

  json adding = held.object;
  adding["metadata"]["finalizers"].push_back("example.com/more");
  EXPECT_EQ(testing::expect_api_error([&] { store_.update("pods", adding); }).message(),
            "Pod \"web\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be "
            "added if the object is being deleted, found new finalizers "
            "[]string{\"example.com/more\"}");

  auto w = watch("pods", held.object["metadata"]["resourceVersion"]);
  json release = held.object;
  release["metadata"].erase("finalizers");
  store_.update("pods", release);
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "web"); }).kind(),
            ErrorKind::NotFound);
  auto events = drain(*w);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, Type::Deleted);
}

TEST_F(StoreTest, CreatingOverATerminatingObjectSaysItIsBeingDeleted) {
  json p = pod("web");
  p["metadata"]["finalizers"] = {"example.com/hold"};
  store_.create("pods", p);
  store_.remove("pods", "default", "web");
  EXPECT_EQ(testing::expect_api_error([&] { store_.create("pods", pod("web")); }).message(),
            "object is being deleted: pods \"web\" already exists");
}

TEST_F(StoreTest, BackgroundDeletionCollectsDependents) {
  json owner = store_.create("tfjobs.kubeflow.org",
                             {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  store_.create("pods", owned_by(pod("mnist-worker-0"), owner, true));
  store_.create("pods", owned_by(pod("mnist-worker-1"), owner));
  json other =
      store_.create("configmaps", {{"metadata", {{"name", "keep"}, {"namespace", "default"}}}});
  json shared = owned_by(owned_by(pod("shared"), owner), other);
  store_.create("pods", shared);

  store_.remove("tfjobs.kubeflow.org", "default", "mnist");
  EXPECT_EQ(
      testing::expect_api_error([&] { store_.get("pods", "default", "mnist-worker-0"); }).kind(),
      ErrorKind::NotFound);
  EXPECT_EQ(
      testing::expect_api_error([&] { store_.get("pods", "default", "mnist-worker-1"); }).kind(),
      ErrorKind::NotFound);
  // A dependent with another live owner only loses the reference.
  json survivor = store_.get("pods", "default", "shared");
  ASSERT_EQ(survivor["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(survivor["metadata"]["ownerReferences"][0]["uid"], other["metadata"]["uid"]);
}

TEST_F(StoreTest, ForegroundDeletionWaitsForBlockingDependents) {
  json owner = store_.create("tfjobs.kubeflow.org",
                             {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  json held = owned_by(pod("held"), owner, /*block=*/true);
  held["metadata"]["finalizers"] = {"example.com/hold"};
  store_.create("pods", held);
  store_.create("pods", owned_by(pod("free"), owner, true));
  auto w = watch("tfjobs.kubeflow.org", owner["metadata"]["resourceVersion"]);

  DeleteResult result = store_.remove_detailed("tfjobs.kubeflow.org", "default", "mnist",
                                               DeleteRequest{.propagation_policy = "Foreground"});
  EXPECT_FALSE(result.deleted);
  EXPECT_EQ(result.object["metadata"]["finalizers"], json::array({"foregroundDeletion"}));
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "free"); }).kind(),
            ErrorKind::NotFound);
  EXPECT_TRUE(store_.get("pods", "default", "held")["metadata"].contains("deletionTimestamp"));
  EXPECT_NO_THROW(store_.get("tfjobs.kubeflow.org", "default", "mnist"));

  store_.modify("pods", "default", "held", WritePart::Main,
                [](json& p) { p["metadata"].erase("finalizers"); });
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "held"); }).kind(),
            ErrorKind::NotFound);
  EXPECT_EQ(testing::expect_api_error([&] {
              store_.get("tfjobs.kubeflow.org", "default", "mnist");
            }).kind(),
            ErrorKind::NotFound);
  EXPECT_EQ(drain_types(*w), (std::vector<Type>{Type::Modified, Type::Modified, Type::Deleted}));
}

TEST_F(StoreTest, OrphanDeletionKeepsDependentsWithoutTheReference) {
  json owner = store_.create("jobs.batch", batch_job("launcher"));
  store_.create("pods", owned_by(pod("launcher-x"), owner, true));
  DeleteResult result = store_.remove_detailed("jobs.batch", "default", "launcher",
                                               DeleteRequest{.propagation_policy = "Orphan"});
  EXPECT_TRUE(result.deleted);
  json orphan = store_.get("pods", "default", "launcher-x");
  EXPECT_FALSE(orphan["metadata"].contains("ownerReferences"));
}

// kube-controller-manager's garbage collector sees a new dependent whose owner does not exist (a
// "virtual" owner the API server confirms absent) and deletes it: a controller whose create raced
// the owner's deletion leaves no orphan. The create itself succeeds (201).
TEST_F(StoreTest, ADependentCreatedForAnOwnerThatIsGoneIsCollected) {
  json owner = store_.create("tfjobs.kubeflow.org",
                             {{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}});
  store_.remove("tfjobs.kubeflow.org", "default", "mnist");
  auto w = watch("podgroups.scheduling.volcano.sh", store_.current_resource_version());

  const json created =
      store_.create("podgroups.scheduling.volcano.sh",
                    owned_by({{"metadata", {{"name", "mnist"}, {"namespace", "default"}}}}, owner,
                             /*block=*/true));
  EXPECT_EQ(created["metadata"]["name"], "mnist");
  EXPECT_EQ(testing::expect_api_error([&] {
              store_.get("podgroups.scheduling.volcano.sh", "default", "mnist");
            }).kind(),
            ErrorKind::NotFound);
  EXPECT_EQ(drain_types(*w), (std::vector<Type>{Type::Added, Type::Deleted}));

  // An owner uid that never existed is as gone.
  json never = owner;
  never["metadata"]["uid"] = "00000000-0000-4000-8000-000000000000";
  store_.create("pods", owned_by(pod("stray"), never));
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "stray"); }).kind(),
            ErrorKind::NotFound);
}

// With several owners a dependent is deleted only when all are gone; while one lives it only
// loses the references to the others.
TEST_F(StoreTest, ADependentWithALiveOwnerOnlyLosesTheReferenceToTheGoneOne) {
  json gone = store_.create("tfjobs.kubeflow.org",
                            {{"metadata", {{"name", "old"}, {"namespace", "default"}}}});
  store_.remove("tfjobs.kubeflow.org", "default", "old");
  json live =
      store_.create("configmaps", {{"metadata", {{"name", "keep"}, {"namespace", "default"}}}});
  store_.create("pods", owned_by(owned_by(pod("shared"), gone), live));
  const json kept = store_.get("pods", "default", "shared");
  ASSERT_EQ(kept["metadata"]["ownerReferences"].size(), 1u) << kept.dump();
  EXPECT_EQ(kept["metadata"]["ownerReferences"][0]["uid"], live["metadata"]["uid"]);

  // A dependent of a live owner is left as created.
  const json child = store_.create("pods", owned_by(pod("child"), live));
  EXPECT_EQ(store_.get("pods", "default", "child"), child);
}

// An update that points a dependent at an owner that is gone makes it garbage too, as the graph
// builder treats a changed ownerReferences list.
TEST_F(StoreTest, AnUpdateNamingAnOwnerThatIsGoneCollectsTheDependent) {
  json gone = store_.create("tfjobs.kubeflow.org",
                            {{"metadata", {{"name", "old"}, {"namespace", "default"}}}});
  store_.remove("tfjobs.kubeflow.org", "default", "old");
  store_.create("pods", pod("adopted"));
  store_.modify("pods", "default", "adopted", WritePart::Main,
                [&](json& p) { p = owned_by(std::move(p), gone); });
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "adopted"); }).kind(),
            ErrorKind::NotFound);
}

TEST_F(StoreTest, JobsOrphanTheirPodsByDefault) {
  json job = store_.create("jobs.batch", batch_job("a"));
  store_.create("pods", owned_by(pod("a-1"), job));
  store_.remove("jobs.batch", "default", "a");
  EXPECT_NO_THROW(store_.get("pods", "default", "a-1"));

  job = store_.create("jobs.batch", batch_job("b"));
  store_.create("pods", owned_by(pod("b-1"), job));
  store_.remove("jobs.batch", "default", "b", DeleteRequest{.propagation_policy = "Background"});
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "default", "b-1"); }).kind(),
            ErrorKind::NotFound);
}

TEST_F(StoreTest, DeletingANamespaceDeletesItsContent) {
  store_.ensure_namespace("team-a");
  store_.create("pods", pod("p1", {}, "team-a"));
  json held = pod("p2", {}, "team-a");
  held["metadata"]["finalizers"] = {"example.com/hold"};
  store_.create("pods", held);
  store_.create("pods", pod("other"));
  auto w = watch("namespaces", store_.current_resource_version());

  DeleteResult result = store_.remove_detailed("namespaces", "", "team-a");
  EXPECT_FALSE(result.deleted);
  EXPECT_EQ(result.object["status"]["phase"], "Terminating");
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("pods", "team-a", "p1"); }).kind(),
            ErrorKind::NotFound);
  EXPECT_NO_THROW(store_.get("pods", "default", "other"));
  auto forbidden =
      testing::expect_api_error([&] { store_.create("pods", pod("p3", {}, "team-a")); });
  EXPECT_EQ(forbidden.http_code(), 403);
  EXPECT_EQ(forbidden.message(),
            "pods \"p3\" is forbidden: unable to create new content in namespace team-a because "
            "it is being terminated");

  store_.modify("pods", "team-a", "p2", WritePart::Main,
                [](json& p) { p["metadata"].erase("finalizers"); });
  EXPECT_EQ(testing::expect_api_error([&] { store_.get("namespaces", "", "team-a"); }).kind(),
            ErrorKind::NotFound);
  auto events = drain(*w);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().type, Type::Modified);
  EXPECT_EQ(events.back().type, Type::Deleted);
}

TEST_F(StoreTest, SystemNamespacesCannotBeDeleted) {
  auto e = testing::expect_api_error([&] { store_.remove("namespaces", "", "default"); });
  EXPECT_EQ(e.http_code(), 403);
  EXPECT_EQ(e.message(), "namespaces \"default\" is forbidden: this namespace may not be deleted");
}

TEST_F(StoreTest, DryRunDeleteChangesNothing) {
  store_.create("pods", pod("web"));
  const std::string rv = store_.current_resource_version();
  DeleteResult result =
      store_.remove_detailed("pods", "default", "web", DeleteRequest{.dry_run = true});
  EXPECT_TRUE(result.deleted);
  EXPECT_EQ(store_.current_resource_version(), rv);
  EXPECT_NO_THROW(store_.get("pods", "default", "web"));
}

TEST_F(StoreTest, DeleteCollectionBySelector) {
  store_.create("pods", pod("a", {{"app", "x"}}));
  store_.create("pods", pod("b", {{"app", "x"}}));
  store_.create("pods", pod("c", {{"app", "y"}}));
  auto removed = store_.remove_collection(
      "pods", ListRequest{.ns = "default", .labels = LabelSelector::parse("app=x")});
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(store_.list("pods", {}).items.size(), 1u);
}

// --- list ----------------------------------------------------------------------------------

TEST_F(StoreTest, ListSortsFiltersAndReportsTheCurrentVersion) {
  store_.ensure_namespace("a-b");
  store_.ensure_namespace("a");
  store_.create("pods", pod("z", {{"app", "web"}}, "a"));
  store_.create("pods", pod("y", {{"app", "db"}}, "a"));
  store_.create("pods", pod("x", {{"app", "web"}}, "a-b"));
  ListPage all = store_.list("pods", {});
  std::vector<std::string> names;
  for (const auto& item : all.items)
    names.push_back(item["metadata"]["namespace"].get<std::string>() + "/" +
                    item["metadata"]["name"].get<std::string>());
  // etcd's key order: "a-b/x" < "a/y" because '-' sorts before '/'.
  EXPECT_EQ(names, (std::vector<std::string>{"a-b/x", "a/y", "a/z"}));
  EXPECT_EQ(all.resource_version, store_.current_resource_version());
  EXPECT_TRUE(all.continue_token.empty());

  EXPECT_EQ(store_.list("pods", ListRequest{.ns = "a"}).items.size(), 2u);
  EXPECT_EQ(
      store_.list("pods", ListRequest{.labels = LabelSelector::parse("app=web")}).items.size(), 2u);
  auto by_field = store_.list(
      "pods", ListRequest{.fields = FieldSelector::parse("metadata.name=y,status.phase=Pending")});
  ASSERT_EQ(by_field.items.size(), 1u);
  EXPECT_EQ(by_field.items[0]["metadata"]["name"], "y");
}

TEST_F(StoreTest, PagesComeFromOneConsistentSnapshot) {
  for (const char* name : {"p1", "p2", "p3", "p4", "p5"})
    store_.create("pods", pod(name));
  ListPage first = store_.list("pods", ListRequest{.ns = "default", .limit = 2});
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(first.remaining_item_count, 3);
  ASSERT_FALSE(first.continue_token.empty());

  // Changes after the first page do not show on later pages.
  store_.remove("pods", "default", "p3");
  store_.create("pods", pod("p2a"));
  store_.modify("pods", "default", "p4", WritePart::Main,
                [](json& p) { p["metadata"]["labels"]["late"] = "1"; });

  ListPage second = store_.list(
      "pods", ListRequest{.ns = "default", .limit = 2, .continue_token = first.continue_token});
  ASSERT_EQ(second.items.size(), 2u);
  EXPECT_EQ(second.items[0]["metadata"]["name"], "p3");
  EXPECT_EQ(second.items[1]["metadata"]["name"], "p4");
  EXPECT_FALSE(second.items[1]["metadata"]["labels"].contains("late"));
  EXPECT_EQ(second.resource_version, first.resource_version);
  ListPage third = store_.list(
      "pods", ListRequest{.ns = "default", .limit = 2, .continue_token = second.continue_token});
  ASSERT_EQ(third.items.size(), 1u);
  EXPECT_EQ(third.items[0]["metadata"]["name"], "p5");
  EXPECT_TRUE(third.continue_token.empty());
  EXPECT_FALSE(third.remaining_item_count.has_value());
}

TEST_F(StoreTest, PagingWithSelectorsHasNoRemainingCount) {
  for (const char* name : {"p1", "p2", "p3"})
    store_.create("pods", pod(name, {{"app", "web"}}));
  ListPage page =
      store_.list("pods", ListRequest{.labels = LabelSelector::parse("app=web"), .limit = 1});
  EXPECT_EQ(page.items.size(), 1u);
  EXPECT_FALSE(page.continue_token.empty());
  EXPECT_FALSE(page.remaining_item_count.has_value());
}

TEST_F(StoreTest, ContinueTokensExpireWithTheWindow) {
  Store small(options(/*window=*/3));
  small.register_resource(kPods);
  small.ensure_namespace("default");
  for (const char* name : {"p1", "p2", "p3"})
    small.create("pods", pod(name));
  ListPage first = small.list("pods", ListRequest{.limit = 1});
  for (const char* name : {"q1", "q2", "q3", "q4"})
    small.create("pods", pod(name));
  auto e = testing::expect_api_error(
      [&] { small.list("pods", ListRequest{.limit = 1, .continue_token = first.continue_token}); });
  EXPECT_EQ(e.kind(), ErrorKind::Gone);
  EXPECT_EQ(e.http_code(), 410);
  EXPECT_EQ(e.api_status()["reason"], "Expired");
  EXPECT_EQ(e.message().substr(0, 66),
            "The provided continue parameter is too old to display a consistent");
  // The Status carries a token to continue inconsistently from the current state.
  const std::string resume = e.api_status()["metadata"]["continue"];
  ListPage rest = small.list("pods", ListRequest{.continue_token = resume});
  EXPECT_EQ(rest.items.front()["metadata"]["name"], "p2");

  EXPECT_EQ(testing::expect_api_error([&] {
              small.list("pods", ListRequest{.continue_token = "garbage!"});
            }).kind(),
            ErrorKind::BadRequest);
}

TEST_F(StoreTest, ListAtAResourceVersion) {
  json a = store_.create("pods", pod("a"));
  store_.create("pods", pod("b"));
  const std::string at = a["metadata"]["resourceVersion"];
  ListPage exact =
      store_.list("pods", ListRequest{.resource_version = at, .resource_version_match = "Exact"});
  ASSERT_EQ(exact.items.size(), 1u);
  EXPECT_EQ(exact.resource_version, at);
  EXPECT_EQ(store_.list("pods", ListRequest{.resource_version = at}).items.size(), 2u);
}

TEST_F(StoreTest, ListFromAVersionNotReachedWaitsThenAnswersTooLarge) {
  // As the watch cache (waitUntilFreshAndBlock, then storage.NewTooLargeResourceVersionError).
  const auto start = std::chrono::steady_clock::now();
  auto e = testing::expect_api_error(
      [&] { store_.list("pods", ListRequest{.resource_version = "999999"}); });
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
  EXPECT_EQ(e.kind(), ErrorKind::Timeout);
  EXPECT_EQ(
      e.api_status(),
      (json{
          {"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", json::object()},
          {"status", "Failure"},
          {"message", "Timeout: Too large resource version: 999999, current: " +
                          store_.current_resource_version()},
          {"reason", "Timeout"},
          {"details",
           {{"causes",
             {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
            {"retryAfterSeconds", 1}}},
          {"code", 504}}));
  // NotOlderThan says the same as the default.
  EXPECT_EQ(testing::expect_api_error([&] {
              store_.list("pods", ListRequest{.resource_version = "999999",
                                              .resource_version_match = "NotOlderThan"});
            }).http_code(),
            504);
}

TEST_F(StoreTest, ListFromAVersionNotReachedAnswersOnceTheStoreGetsThere) {
  const std::uint64_t wanted = std::stoull(store_.current_resource_version()) + 2;
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    store_.create("pods", pod("a"));
    store_.create("pods", pod("b"));
  });
  const ListPage page =
      store_.list("pods", ListRequest{.resource_version = std::to_string(wanted)});
  writer.join();
  EXPECT_GE(std::stoull(page.resource_version), wanted);
  EXPECT_EQ(page.items.size(), 2u);
}

TEST_F(StoreTest, WaitForAVersionEndsWhenTheServerStops) {
  StoreOptions o = options();
  o.fresh_wait = std::chrono::seconds(30);
  Store store(o);
  store.register_resource(kPods);
  std::stop_source stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(50));
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  auto e = testing::expect_api_error([&] {
    store.list("pods", ListRequest{.resource_version = "999", .stop = stop.get_token()});
  });
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(e.http_code(), 504);
  // Already stopped: no wait at all.
  EXPECT_EQ(testing::expect_api_error([&] {
              store.list("pods", ListRequest{.resource_version = "999", .stop = stop.get_token()});
            }).http_code(),
            504);
}

TEST_F(StoreTest, ListsEtcdServesRefuseAVersionNotReachedAtOnce) {
  const std::string current = store_.current_resource_version();
  const auto start = std::chrono::steady_clock::now();
  // A limit sends a list with a version to etcd. Not older than: the revision etcd answered at is
  // checked, a 504 without a retry hint.
  auto not_older = testing::expect_api_error([&] {
    store_.list("pods", ListRequest{.limit = 1,
                                    .resource_version = "999999",
                                    .resource_version_match = "NotOlderThan"});
  });
  EXPECT_EQ(not_older.http_code(), 504);
  EXPECT_EQ(not_older.message(),
            "Timeout: Too large resource version: 999999, current: " + current);
  EXPECT_FALSE(not_older.api_status()["details"].contains("retryAfterSeconds"));
  // The legacy default with a limit, and Exact, read at that revision: etcd refuses a future one
  // and the server passes its error on as a 500 without a reason (kubernetes#132358).
  for (const ListRequest& exact :
       {ListRequest{.limit = 1, .resource_version = "999999"},
        ListRequest{.resource_version = "999999", .resource_version_match = "Exact"}}) {
    auto e = testing::expect_api_error([&] { store_.list("pods", exact); });
    EXPECT_EQ(e.http_code(), 500);
    EXPECT_EQ(e.message(), "etcdserver: mvcc: required revision is a future revision");
    EXPECT_FALSE(e.api_status().contains("reason"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(300));
}

TEST_F(StoreTest, AResourceVersionThatIsNoNumberIsRefusedAsTheRealServerDoes) {
  // The watch cache passes the versioner's field error on uninterpreted: a 500 without a reason
  // (kubernetes#101350); etcd-served lists wrap it in a 400.
  const std::string invalid =
      "resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax";
  auto cached = testing::expect_api_error(
      [&] { store_.list("pods", ListRequest{.resource_version = "abc"}); });
  EXPECT_EQ(cached.http_code(), 500);
  EXPECT_EQ(cached.message(), invalid);
  EXPECT_FALSE(cached.api_status().contains("reason"));
  auto from_etcd = testing::expect_api_error(
      [&] { store_.list("pods", ListRequest{.limit = 5, .resource_version = "abc"}); });
  EXPECT_EQ(from_etcd.http_code(), 400);
  EXPECT_EQ(from_etcd.api_status()["reason"], "BadRequest");
  EXPECT_EQ(from_etcd.message(), "invalid resource version: " + invalid);
  auto watched = testing::expect_api_error([&] { watch("pods", "-1"); });
  EXPECT_EQ(watched.http_code(), 500);
  EXPECT_EQ(watched.message(),
            "resourceVersion: Invalid value: \"-1\": strconv.ParseUint: parsing \"-1\": invalid "
            "syntax");
  EXPECT_EQ(testing::expect_api_error([&] { watch("pods", "99999999999999999999"); }).message(),
            "resourceVersion: Invalid value: \"99999999999999999999\": strconv.ParseUint: parsing "
            "\"99999999999999999999\": value out of range");
}

// --- watch ---------------------------------------------------------------------------------

TEST_F(StoreTest, WatchFromNowSendsCurrentObjectsThenLiveEvents) {
  store_.create("pods", pod("a"));
  store_.create("pods", pod("b"));
  for (const std::string rv : {"", "0"}) {
    auto w = watch("pods", rv);
    auto initial = drain(*w);
    ASSERT_EQ(initial.size(), 2u) << "rv=" << rv;
    EXPECT_EQ(initial[0].type, Type::Added);
    EXPECT_EQ(initial[1].object["metadata"]["name"], "b");
  }
  auto w = watch("pods", "");
  drain(*w);
  store_.modify("pods", "default", "a", WritePart::Main,
                [](json& p) { p["metadata"]["labels"]["x"] = "1"; });
  store_.remove("pods", "default", "b");
  auto live = drain(*w);
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[0].type, Type::Modified);
  EXPECT_EQ(live[1].type, Type::Modified);  // b marked for deletion
  EXPECT_EQ(live[2].type, Type::Deleted);
  EXPECT_EQ(w->resource_version(), store_.current_resource_version());
}

TEST_F(StoreTest, WatchFromAVersionReplaysTheWindow) {
  json a = store_.create("pods", pod("a"));
  store_.create("pods", pod("b"));
  store_.create("configmaps", {{"metadata", {{"name", "c"}, {"namespace", "default"}}}});
  store_.remove("pods", "default", "a");
  auto w = watch("pods", a["metadata"]["resourceVersion"]);
  auto events = drain(*w);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, Type::Added);
  EXPECT_EQ(events[0].object["metadata"]["name"], "b");
  EXPECT_EQ(events[1].type, Type::Modified);  // a marked for deletion
  EXPECT_EQ(events[2].type, Type::Deleted);
}

TEST_F(StoreTest, WatchFromBeforeTheWindowIsGone) {
  Store small(options(/*window=*/2));
  small.register_resource(kPods);
  small.ensure_namespace("default");
  for (const char* name : {"a", "b", "c"})
    small.create("pods", pod(name));
  auto e = testing::expect_api_error(
      [&] { small.watch("pods", "", LabelSelector{}, FieldSelector{}, "2", false); });
  EXPECT_EQ(e.kind(), ErrorKind::Gone);
  EXPECT_EQ(e.http_code(), 410);
  EXPECT_EQ(e.api_status()["reason"], "Expired");
  EXPECT_EQ(e.message(), "too old resource version: 2 (3)");
  EXPECT_NO_THROW(small.watch("pods", "", LabelSelector{}, FieldSelector{}, "3", false));
}

TEST_F(StoreTest, ObjectsMovingInAndOutOfASelectorAreAddedAndDeleted) {
  json a = store_.create("pods", pod("a", {{"app", "web"}}));
  auto w = watch("pods", a["metadata"]["resourceVersion"], "app=web");
  json moved = *store_.modify("pods", "default", "a", WritePart::Main,
                              [](json& p) { p["metadata"]["labels"]["app"] = "db"; });
  store_.modify("pods", "default", "a", WritePart::Main,
                [](json& p) { p["metadata"]["labels"]["app"] = "web"; });
  store_.modify("pods", "default", "a", WritePart::Main,
                [](json& p) { p["metadata"]["labels"]["other"] = "db"; });
  auto events = drain(*w);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, Type::Deleted);
  // The last state that matched, stamped with the version of the change.
  EXPECT_EQ(events[0].object["metadata"]["labels"]["app"], "web");
  EXPECT_EQ(events[0].object["metadata"]["resourceVersion"], moved["metadata"]["resourceVersion"]);
  EXPECT_EQ(events[1].type, Type::Added);
  EXPECT_EQ(events[2].type, Type::Modified);
}

TEST_F(StoreTest, WatchFiltersByNamespaceAndFields) {
  store_.ensure_namespace("other");
  auto w = store_.watch("pods", "default", LabelSelector{},
                        FieldSelector::parse("metadata.name!=skip"), "", false);
  store_.create("pods", pod("a", {}, "other"));
  store_.create("pods", pod("skip"));
  store_.create("pods", pod("b"));
  auto events = drain(*w);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].object["metadata"]["name"], "b");
}

TEST_F(StoreTest, IdleWatchesGetBookmarks) {
  store_.create("pods", pod("a"));
  auto w = store_.watch("pods", "", LabelSelector{}, FieldSelector{}, "", /*bookmarks=*/true);
  EXPECT_EQ(w->next(milliseconds(0))->type, Type::Added);
  auto bookmark = w->next(milliseconds(2000));
  ASSERT_TRUE(bookmark);
  EXPECT_EQ(bookmark->type, Type::Bookmark);
  EXPECT_EQ(bookmark->object,
            (json{{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"metadata", {{"resourceVersion", store_.current_resource_version()}}}}));
  auto plain = store_.watch("pods", "", LabelSelector{}, FieldSelector{}, "", false);
  drain(*plain);
  EXPECT_FALSE(plain->next(milliseconds(100)));
}

TEST_F(StoreTest, AWatchFromAVersionNotReachedStaysSilentUntilTheStorePassesIt) {
  // kube-apiserver 1.26 accepts such a watch and its cacheWatcher drops every event up to the
  // version asked for: a client that resumes on a server that lost its data hears nothing.
  const std::uint64_t now = std::stoull(store_.current_resource_version());
  auto w = store_.watch(
      "pods", WatchRequest{.resource_version = std::to_string(now + 2), .bookmarks = true});
  store_.create("pods", pod("a"));
  EXPECT_FALSE(w->next(milliseconds(150))) << "while the store is behind: not even bookmarks";
  store_.create("pods", pod("b"));
  store_.create("pods", pod("c"));
  // Bookmarks may come now (the store reached the version); the first event is c's.
  std::optional<kube::WatchEvent> first;
  while ((first = w->next(milliseconds(1000))) && first->type == Type::Bookmark) {
  }
  ASSERT_TRUE(first);
  EXPECT_EQ(first->type, Type::Added);
  EXPECT_EQ(first->object["metadata"]["name"], "c");
}

TEST_F(StoreTest, InitialEventsEndWithAnAnnotatedBookmark) {
  store_.create("pods", pod("a"));
  auto w = store_.watch("pods", WatchRequest{.bookmarks = true, .send_initial_events = true});
  auto added = w->next(milliseconds(0));
  ASSERT_TRUE(added);
  EXPECT_EQ(added->type, Type::Added);
  auto end = w->next(milliseconds(0));
  ASSERT_TRUE(end);
  EXPECT_EQ(end->type, Type::Bookmark);
  EXPECT_EQ(end->object["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
  auto none = store_.watch("pods", WatchRequest{.send_initial_events = false});
  EXPECT_TRUE(drain(*none).empty());
}

TEST_F(StoreTest, EveryWatcherGetsEveryEvent) {
  constexpr int kWatchers = 60;
  constexpr int kWrites = 300;
  std::vector<std::shared_ptr<WatchStream>> watchers;
  for (int i = 0; i < kWatchers; ++i)
    watchers.push_back(watch("pods", ""));
  std::atomic<int> complete{0};
  std::vector<std::thread> readers;
  for (auto& w : watchers) {
    readers.emplace_back([&, w] {
      int seen = 0;
      std::uint64_t last = 0;
      while (seen < kWrites) {
        auto e = w->next_shared(milliseconds(2000));
        if (!e)
          break;
        const auto rv = rv_of(*e->object);
        if (rv <= last)
          break;  // out of order
        last = rv;
        ++seen;
      }
      if (seen == kWrites)
        ++complete;
    });
  }
  std::thread writer([&] {
    for (int i = 0; i < kWrites; ++i)
      store_.create("pods", pod("p" + std::to_string(i)));
  });
  writer.join();
  for (auto& t : readers)
    t.join();
  EXPECT_EQ(complete.load(), kWatchers);
}

TEST_F(StoreTest, SerializedEventsAreEncodedOnceForAllWatchers) {
  auto a = watch("pods", "");
  auto b = watch("pods", "");
  json created = store_.create("pods", pod("web"));
  auto first = a->next_serialized(milliseconds(1000));
  auto second = b->next_serialized(milliseconds(1000));
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->type, Type::Added);
  EXPECT_EQ(*first->line, "{\"type\":\"ADDED\",\"object\":" + created.dump() + "}");
  EXPECT_EQ(first->line.get(), second->line.get());  // the same bytes
  EXPECT_EQ(kube::parse_watch_event(*second->line).object, created);
}

/// A store that drops a watcher once 10 events wait for it, with pods in "default".
std::unique_ptr<Store> store_of_short_watch_queues(StoreOptions o) {
  o.max_watch_queue = 10;
  auto store = std::make_unique<Store>(o);
  store->register_resource(kPods);
  store->ensure_namespace("default");
  return store;
}

TEST_F(StoreTest, SlowWatchersAreDropped) {
  const auto store = store_of_short_watch_queues(options());
  auto w = store->watch("pods", "", LabelSelector{}, FieldSelector{}, "", false);
  for (int i = 0; i < 15; ++i)
    store->create("pods", pod("p" + std::to_string(i)));
  EXPECT_TRUE(w->overflowed());
  EXPECT_FALSE(w->closed());  // queued events can still be read
  EXPECT_EQ(drain(*w).size(), 10u);
  EXPECT_TRUE(w->closed());
  // The store starts at 1, the namespace took 2, the ten delivered pods 3..12: re-watch from 12.
  EXPECT_EQ(w->resource_version(), "12");
}

TEST_F(StoreTest, TheSandboxsOwnLoopsWatchWithoutALimit) {
  const auto store = store_of_short_watch_queues(options());
  auto w = store->watch("pods", WatchRequest{.resource_version = store->current_resource_version(),
                                             .unbounded = true});
  for (int i = 0; i < 15; ++i)
    store->create("pods", pod("p" + std::to_string(i)));
  EXPECT_FALSE(w->overflowed());
  EXPECT_EQ(drain(*w).size(), 15u);
  EXPECT_FALSE(w->closed());
}

TEST_F(StoreTest, ClosingAndUnregisteringEndWatches) {
  auto w = watch("pods", "");
  w->close();
  EXPECT_TRUE(w->closed());
  EXPECT_FALSE(w->next(milliseconds(10)));

  store_.create("tfjobs.kubeflow.org", {{"metadata", {{"name", "a"}, {"namespace", "default"}}}});
  auto cr = watch("tfjobs.kubeflow.org", store_.current_resource_version());
  store_.unregister_resource("tfjobs.kubeflow.org");
  auto events = drain(*cr);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, Type::Deleted);
  EXPECT_TRUE(cr->closed());
  EXPECT_FALSE(store_.resource("tfjobs.kubeflow.org"));
  EXPECT_EQ(testing::expect_api_error([&] { store_.list("tfjobs.kubeflow.org", {}); }).http_code(),
            404);
}

TEST_F(StoreTest, ConcurrentWritersGetDistinctVersions) {
  constexpr int kThreads = 4;
  constexpr int kEach = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        store_.create("pods", pod("t" + std::to_string(t) + "-" + std::to_string(i)));
    });
  }
  for (auto& t : threads)
    t.join();
  ListPage all = store_.list("pods", {});
  ASSERT_EQ(all.items.size(), static_cast<std::size_t>(kThreads * kEach));
  std::set<std::uint64_t> versions;
  for (const auto& item : all.items)
    versions.insert(rv_of(item));
  EXPECT_EQ(versions.size(), all.items.size());
}

TEST(ApiErrorTest, StatusObjects) {
  Error plain(ErrorKind::Gone, "too old resource version: 1 (5)", 410);
  json status = status_object(plain);
  EXPECT_EQ(status["reason"], "Expired");
  EXPECT_EQ(status["code"], 410);
  EXPECT_EQ(status["kind"], "Status");
  EXPECT_EQ(status["status"], "Failure");
  ApiError api(ErrorKind::NotFound, 404, "NotFound", "pods \"x\" not found",
               json{{"name", "x"}, {"kind", "pods"}});
  EXPECT_EQ(status_object(api)["details"]["name"], "x");
  EXPECT_EQ(status_object(Error(ErrorKind::BadRequest, "bad"))["code"], 400);
}

}  // namespace
}  // namespace trainctl::sandbox
