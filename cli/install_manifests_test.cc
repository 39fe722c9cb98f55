#include "install_manifests.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "error.h"
#include "tests/support/temp_dir.h"
#include "trainctl/version.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::filesystem::path kPackaging = std::filesystem::path(TRAINCTL_SOURCE_DIR) / "packaging";

std::vector<std::string> kinds_of(const std::vector<json>& objects) {
  std::vector<std::string> kinds;
  for (const auto& o : objects) {
    if (kinds.empty() || kinds.back() != o["kind"])
      kinds.push_back(o["kind"]);
  }
  return kinds;
}

const json& find_object(const std::vector<json>& objects, const std::string& kind,
                        const std::string& name) {
  for (const auto& o : objects) {
    if (o["kind"] == kind && o["metadata"]["name"] == name)
      return o;
  }
  ADD_FAILURE() << kind << " " << name << " not among the install objects";
  static const json none;
  return none;
}

/// The one version of a packaged CRD, by its plural.
json crd_version(const std::string& plural) {
  for (const auto& o : install_objects({.crds_only = true})) {
    if (o["spec"]["names"]["plural"] == plural)
      return o["spec"]["versions"][0];
  }
  ADD_FAILURE() << "no CRD for " << plural;
  return {};
}

TEST(InstallManifestsTest, EmbeddedManifestsAreThePackagingFiles) {
  std::map<std::string, std::string> files;
  for (const std::filesystem::path dir : {"", "crds"}) {
    for (const auto& entry : std::filesystem::directory_iterator(kPackaging / dir)) {
      if (entry.path().extension() == ".yaml")
        files[(dir / entry.path().filename()).string()] = testing::TempDir::read(entry.path());
    }
  }
  std::map<std::string, std::string> embedded;
  for (const auto& m : embedded_manifests())
    embedded[std::string(m.path)] = std::string(m.text);
  EXPECT_EQ(embedded, files);
  EXPECT_TRUE(embedded.contains("rbac.yaml"));
  EXPECT_TRUE(embedded.contains("crds/kubeflow.org_tfjobs.yaml"));
}

TEST(InstallManifestsTest, ObjectsComeInDependencyOrder) {
  const std::vector<json> objects = install_objects({});
  EXPECT_THAT(kinds_of(objects),
              ElementsAre("CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole",
                          "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment"));
  std::set<std::string> crds;
  for (const auto& o : objects) {
    if (is_crd(o))
      crds.insert(o["metadata"]["name"]);
  }
  EXPECT_EQ(crds, (std::set<std::string>{"mpijobs.kubeflow.org", "pytorchjobs.kubeflow.org",
                                         "tfjobs.kubeflow.org", "podgroups.scheduling.volcano.sh",
                                         "queues.scheduling.volcano.sh",
                                         "podgroups.scheduling.x-k8s.io"}));
}

TEST(InstallManifestsTest, CrdsOnlyLeavesOutTheController) {
  const std::vector<json> objects = install_objects({.crds_only = true});
  EXPECT_EQ(objects.size(), 6u);
  EXPECT_THAT(kinds_of(objects), ElementsAre("CustomResourceDefinition"));
}

TEST(InstallManifestsTest, PackagedDefaultsAreTrainctlSystem) {
  const std::vector<json> objects = install_objects({});
  const json& deployment = find_object(objects, "Deployment", "trainctl-controller");
  EXPECT_EQ(deployment["metadata"]["namespace"], "trainctl-system");
  EXPECT_EQ(deployment["spec"]["replicas"], 2);
  const json& container = deployment["spec"]["template"]["spec"]["containers"][0];
  EXPECT_THAT(container["command"], Contains("--leader-elect"));
  EXPECT_THAT(container["command"], Contains("--leader-elect-namespace=trainctl-system"));
  EXPECT_EQ(container["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(container["securityContext"]["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_EQ(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"], 65532);
  EXPECT_EQ(container["livenessProbe"]["httpGet"]["path"], "/healthz");
  EXPECT_EQ(container["readinessProbe"]["httpGet"]["path"], "/readyz");
  EXPECT_EQ(deployment["spec"]["template"]["spec"]["serviceAccountName"], "trainctl-controller");
}

TEST(InstallManifestsTest, NamespaceAndImageAreReplacedEverywhere) {
  const std::vector<json> objects = install_objects({.ns = "ml-ops", .image = "reg.io/tc:2"});
  EXPECT_EQ(find_object(objects, "Namespace", "ml-ops")["kind"], "Namespace");
  for (const auto& o : objects) {
    EXPECT_EQ(o.dump().find("trainctl-system"), std::string::npos) << o.dump();
  }
  EXPECT_EQ(
      find_object(objects, "ClusterRoleBinding", "trainctl-controller")["subjects"][0]["namespace"],
      "ml-ops");
  const json& container = find_object(
      objects, "Deployment", "trainctl-controller")["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "reg.io/tc:2");
  EXPECT_THAT(container["command"], Contains("--leader-elect-namespace=ml-ops"));
}

TEST(InstallManifestsTest, ClusterRoleGrantsWhatTheControllerUses) {
  const std::vector<json> objects = install_objects({});
  const json& role = find_object(objects, "ClusterRole", "trainctl-controller");
  auto verbs = [&](const std::string& group, const std::string& resource) {
    std::set<std::string> out;
    for (const auto& rule : role["rules"]) {
      if (std::find(rule["apiGroups"].begin(), rule["apiGroups"].end(), group) ==
              rule["apiGroups"].end() ||
          std::find(rule["resources"].begin(), rule["resources"].end(), resource) ==
              rule["resources"].end())
        continue;
      for (const auto& v : rule["verbs"])
        out.insert(v);
    }
    return out;
  };
  // ControllerTest.EveryRuleOfThePackagedRbacIsUsed checks every rule against the calls the
  // controller makes; these pin a few that matter to users reading the policy.
  EXPECT_EQ(verbs("kubeflow.org", "mpijobs/status"), (std::set<std::string>{"update"}));
  EXPECT_EQ(verbs("", "pods"),
            (std::set<std::string>{"create", "delete", "list", "watch", "patch"}));
  // The proxy terminator: exactly what the exec upgrade needs, and reading namespaces.
  EXPECT_EQ(verbs("", "pods/exec"), (std::set<std::string>{"create", "get"}));
  EXPECT_EQ(verbs("", "namespaces"), (std::set<std::string>{"list", "watch"}));
  EXPECT_TRUE(verbs("", "pods/log").empty());
  EXPECT_EQ(verbs("scheduling.volcano.sh", "queues/status"), (std::set<std::string>{"update"}));
  EXPECT_EQ(verbs("", "nodes"), (std::set<std::string>{"list", "watch"}));
  EXPECT_TRUE(verbs("coordination.k8s.io", "leases").empty());  // only in the Role
  EXPECT_EQ(
      find_object(objects, "Role", "trainctl-controller-leader-election")["rules"][0]["resources"],
      json::array({"leases"}));
}

/// apiextensions.k8s.io/v1 accepts only structural schemas: every node has a type, except
/// int-or-string ones; properties and additionalProperties exclude each other.
void expect_structural(const json& node, const std::string& path) {
  if (node.value("x-kubernetes-int-or-string", false)) {
    EXPECT_FALSE(node.contains("type")) << path;
  } else {
    EXPECT_TRUE(node.contains("type")) << path << " has no type";
  }
  EXPECT_FALSE(node.contains("properties") && node.contains("additionalProperties")) << path;
  if (node.contains("properties")) {
    for (const auto& [key, child] : node["properties"].items())
      expect_structural(child, path + "." + key);
  }
  if (node.contains("items"))
    expect_structural(node["items"], path + "[]");
  if (node.value("additionalProperties", json()).is_object())
    expect_structural(node["additionalProperties"], path + "{}");
}

TEST(InstallManifestsTest, CrdSchemasAreStructural) {
  for (const auto& crd : install_objects({.crds_only = true})) {
    for (const auto& v : crd["spec"]["versions"])
      expect_structural(v["schema"]["openAPIV3Schema"], crd["metadata"]["name"]);
  }
}

TEST(InstallManifestsTest, CrdsCarryTheUpstreamFieldsAndSubresources) {
  const json tf = crd_version("tfjobs");
  const json& tf_spec = tf["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
  EXPECT_TRUE(tf_spec.contains("successPolicy"));
  EXPECT_TRUE(tf_spec["runPolicy"]["properties"].contains("schedulingPolicy"));
  EXPECT_EQ(tf_spec["tfReplicaSpecs"]["additionalProperties"]["properties"]["template"]
                   ["x-kubernetes-preserve-unknown-fields"],
            true);
  EXPECT_EQ(tf["additionalPrinterColumns"][0]["jsonPath"], ".status.conditions[-1:].type");
  EXPECT_TRUE(tf["subresources"].contains("status"));

  const json pt = crd_version("pytorchjobs");
  const json& pt_spec = pt["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
  EXPECT_TRUE(pt_spec.contains("nprocPerNode"));
  EXPECT_TRUE(pt_spec["elasticPolicy"]["properties"].contains("rdzvBackend"));

  const json mpi = crd_version("mpijobs");
  EXPECT_EQ(mpi["name"], "v2beta1");
  const json& mpi_spec = mpi["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
  for (const char* field : {"slotsPerWorker", "mpiImplementation", "launcherCreationPolicy",
                            "sshAuthMountPath", "runLauncherAsWorker", "mpiReplicaSpecs"}) {
    EXPECT_TRUE(mpi_spec.contains(field)) << field;
  }
  const json& status = mpi["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
  for (const char* field :
       {"conditions", "replicaStatuses", "startTime", "completionTime", "lastReconcileTime"}) {
    EXPECT_TRUE(status.contains(field)) << field;
  }

  EXPECT_FALSE(crd_version("podgroups").contains("subresources"));  // as Volcano's own CRD
  EXPECT_TRUE(crd_version("queues")["subresources"].contains("status"));
}

TEST(InstallManifestsTest, ResourcesAndNamesOfPackagedObjects) {
  const std::vector<json> objects = install_objects({});
  const json& queues =
      find_object(objects, "CustomResourceDefinition", "queues.scheduling.volcano.sh");
  const kube::Resource defined = defined_resource(queues);
  EXPECT_EQ(defined.display_name(), "queues.scheduling.volcano.sh/v1beta1");
  EXPECT_FALSE(defined.namespaced);
  EXPECT_EQ(display_name(queues),
            "customresourcedefinition.apiextensions.k8s.io/queues.scheduling.volcano.sh");
  EXPECT_EQ(display_name(find_object(objects, "ServiceAccount", "trainctl-controller")),
            "serviceaccount/trainctl-controller");
  EXPECT_EQ(resource_of(find_object(objects, "Deployment", "trainctl-controller")).api_version(),
            "apps/v1");
  EXPECT_THROW(resource_of({{"kind", "Ingress"}, {"metadata", {{"name", "x"}}}}), Error);
}

TEST(InstallManifestsTest, PackagedImageIsWhatPackagingImageTags) {
  // packaging/image tags its image trainctl:<project version>; the Deployment must name it.
  const std::vector<json> objects = install_objects({});
  const json& container = find_object(
      objects, "Deployment", "trainctl-controller")["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["image"], fmt::format("trainctl:{}", kVersion));
}

TEST(InstallManifestsTest, ImageNoticeSaysHowToBuildAndPushThePackagedImage) {
  const InstallSettings settings;
  const std::string notice = image_notice(install_objects(settings), settings);
  EXPECT_THAT(notice, HasSubstr(fmt::format(
                          "deployment trainctl-system/trainctl-controller runs image trainctl:{}, "
                          "the packaged default, which no public registry serves",
                          kVersion)));
  EXPECT_THAT(notice, HasSubstr("packaging/image"));
  EXPECT_THAT(notice,
              HasSubstr(fmt::format(
                  "skopeo copy oci:build/image/oci:{0} docker://REGISTRY/trainctl:{0}", kVersion)));
  EXPECT_THAT(notice,
              HasSubstr(fmt::format("trainctl install --image REGISTRY/trainctl:{}", kVersion)));
}

TEST(InstallManifestsTest, ImageNoticeNamesAChosenImageAndNothingForCrdsOnly) {
  const InstallSettings chosen{.ns = "ml-ops", .image = "reg.io/tc:2"};
  const std::string notice = image_notice(install_objects(chosen), chosen);
  EXPECT_THAT(notice, HasSubstr("deployment ml-ops/trainctl-controller runs image reg.io/tc:2: "
                                "every node must be able to pull it"));
  EXPECT_THAT(notice, HasSubstr("packaging/image --tag reg.io/tc:2"));
  EXPECT_THAT(notice, HasSubstr("skopeo copy oci:build/image/oci:2 docker://reg.io/tc:2"));
  EXPECT_THAT(notice, Not(HasSubstr("packaged default")));

  // A digest or an untagged name (the colon is a registry's port) has no tag to build.
  for (const std::string image : {"reg.io/tc@sha256:0123abcd", "reg.io:5000/tc"}) {
    const InstallSettings pinned{.image = image};
    const std::string text = image_notice(install_objects(pinned), pinned);
    EXPECT_THAT(text, HasSubstr("runs image " + image + ": every node must be able to pull it"));
    EXPECT_THAT(text, Not(HasSubstr("skopeo"))) << image;
  }

  const InstallSettings crds{.crds_only = true};
  EXPECT_EQ(image_notice(install_objects(crds), crds), "");
}

}  // namespace
}  // namespace trainctl::cli
