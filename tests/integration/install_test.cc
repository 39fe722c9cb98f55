// trainctl install | uninstall through the real binary: the dry run offline, then against a
// sandbox (which stores Deployments and RBAC objects as a real API server does, without acting).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "api/manifest.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

const kube::Resource kDeployments{"apps", "v1", "deployments", true, "Deployment"};
const kube::Resource kClusterRoles{"rbac.authorization.k8s.io", "v1", "clusterroles", false,
                                   "ClusterRole"};
const kube::Resource kRoleBindings{"rbac.authorization.k8s.io", "v1", "rolebindings", true,
                                   "RoleBinding"};
const kube::Resource kServiceAccounts{"", "v1", "serviceaccounts", true, "ServiceAccount"};

/// Runs trainctl with `args` and no kubeconfig but the one given (none: an unreachable server).
testing::CommandResult trainctl(const std::string& args, const std::string& kubeconfig = "") {
  const std::string connection = kubeconfig.empty() ? std::string("--server https://127.0.0.1:1")
                                                    : fmt::format("--kubeconfig {}", kubeconfig);
  return testing::run_command(fmt::format("env -u KUBECONFIG HOME=/nonexistent {} {} {}",
                                          TRAINCTL_BINARY, connection, args));
}

std::vector<std::string> kinds_and_names(const std::vector<api::Manifest>& docs) {
  std::vector<std::string> out;
  for (const auto& d : docs)
    out.push_back(
        fmt::format("{}/{}", d.object.value("kind", ""), d.object["metadata"].value("name", "")));
  return out;
}

TEST(InstallDryRunTest, PrintsEveryObjectAsYamlWithoutAServer) {
  const auto r = trainctl("install --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto docs = api::parse_manifests(r.out, "stdout");
  EXPECT_THAT(
      kinds_and_names(docs),
      ::testing::ElementsAre(
          "CustomResourceDefinition/mpijobs.kubeflow.org",
          "CustomResourceDefinition/pytorchjobs.kubeflow.org",
          "CustomResourceDefinition/tfjobs.kubeflow.org",
          "CustomResourceDefinition/podgroups.scheduling.volcano.sh",
          "CustomResourceDefinition/queues.scheduling.volcano.sh",
          "CustomResourceDefinition/podgroups.scheduling.x-k8s.io", "Namespace/trainctl-system",
          "ServiceAccount/trainctl-controller", "ClusterRole/trainctl-controller",
          "ClusterRoleBinding/trainctl-controller", "Role/trainctl-controller-leader-election",
          "RoleBinding/trainctl-controller-leader-election", "Service/trainctl-controller-metrics",
          "Deployment/trainctl-controller"));
}

TEST(InstallDryRunTest, JsonIsOneListAndFlagsChangeNamespaceImageAndSelection) {
  const auto r = trainctl("install --dry-run -o json -n ml-ops --image reg.example/trainctl:9");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json list = json::parse(r.out);
  EXPECT_EQ(list["kind"], "List");
  ASSERT_EQ(list["items"].size(), 14u);
  const json& deployment = list["items"][13];
  EXPECT_EQ(deployment["metadata"]["namespace"], "ml-ops");
  EXPECT_EQ(deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "reg.example/trainctl:9");
  // Which image runs goes to stderr, so that stdout stays the objects.
  EXPECT_THAT(r.err, HasSubstr("deployment ml-ops/trainctl-controller runs image "
                               "reg.example/trainctl:9: every node must be able to pull it"));

  const auto crds = trainctl("install --dry-run --crds-only");
  ASSERT_EQ(crds.exit_code, 0) << crds.err;
  EXPECT_EQ(api::parse_manifests(crds.out, "stdout").size(), 6u);
  EXPECT_THAT(crds.err, Not(HasSubstr("runs image")));

  const auto bad = trainctl("install --dry-run -o wide");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("yaml or json"));
}

class InstallTest : public testing::SandboxTest {
 protected:
  testing::CommandResult run(const std::string& args) {
    return trainctl(args, sandbox().kubeconfig_path().string());
  }

  bool exists(const kube::Resource& r, const std::string& ns, const std::string& name) {
    try {
      client().get(r, ns, name);
      return true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      return false;
    }
  }
};

TEST_F(InstallTest, InstallServesTheCrdsAndCreatesTheController) {
  const auto r = run("install");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org "
                               "serverside-applied"));
  EXPECT_THAT(r.out, HasSubstr("deployment.apps/trainctl-controller serverside-applied"));
  EXPECT_THAT(r.err, HasSubstr("runs image trainctl:"));
  EXPECT_THAT(r.err, HasSubstr("the packaged default, which no public registry serves"));
  EXPECT_THAT(r.err, HasSubstr("packaging/image"));
  for (const auto& res :
       {kube::resources::job(api::JobKind::TFJob), kube::resources::job(api::JobKind::PyTorchJob),
        kube::resources::job(api::JobKind::MPIJob), kube::resources::podgroups(),
        kube::resources::queues()}) {
    EXPECT_NO_THROW(client().require_served(res)) << res.display_name();
  }
  const json deployment = client().get(kDeployments, "trainctl-system", "trainctl-controller");
  EXPECT_EQ(deployment["spec"]["replicas"], 2);
  EXPECT_TRUE(exists(kClusterRoles, "", "trainctl-controller"));
  EXPECT_TRUE(exists(kRoleBindings, "trainctl-system", "trainctl-controller-leader-election"));
  EXPECT_TRUE(exists(kServiceAccounts, "trainctl-system", "trainctl-controller"));
  EXPECT_TRUE(exists(kube::resources::namespaces(), "", "trainctl-system"));
  // The served kinds take jobs at once.
  EXPECT_NO_THROW(client().create(kube::resources::queues(), "",
                                  {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                                   {"kind", "Queue"},
                                   {"metadata", {{"name", "team-a"}}},
                                   {"spec", {{"weight", 1}}}}));
}

TEST_F(InstallTest, SecondInstallChangesNothing) {
  ASSERT_EQ(run("install").exit_code, 0);
  const json before = client().get(kDeployments, "trainctl-system", "trainctl-controller");
  const json role_before = client().get(kClusterRoles, "", "trainctl-controller");
  const auto again = run("install");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const json after = client().get(kDeployments, "trainctl-system", "trainctl-controller");
  EXPECT_EQ(after["metadata"]["uid"], before["metadata"]["uid"]);
  EXPECT_EQ(after["spec"], before["spec"]);
  EXPECT_EQ(client().get(kClusterRoles, "", "trainctl-controller")["rules"], role_before["rules"]);
}

TEST_F(InstallTest, InstallUpgradesTheImageInPlace) {
  ASSERT_EQ(run("install").exit_code, 0);
  const json before = client().get(kDeployments, "trainctl-system", "trainctl-controller");
  ASSERT_EQ(run("install --image reg.example/trainctl:2").exit_code, 0);
  const json after = client().get(kDeployments, "trainctl-system", "trainctl-controller");
  EXPECT_EQ(after["metadata"]["uid"], before["metadata"]["uid"]);
  EXPECT_EQ(after["spec"]["template"]["spec"]["containers"][0]["image"], "reg.example/trainctl:2");
}

TEST_F(InstallTest, UninstallRemovesEverything) {
  ASSERT_EQ(run("install").exit_code, 0);
  const auto r = run("uninstall");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("deployment.apps/trainctl-controller deleted"));
  EXPECT_FALSE(exists(kDeployments, "trainctl-system", "trainctl-controller"));
  EXPECT_FALSE(exists(kClusterRoles, "", "trainctl-controller"));
  EXPECT_FALSE(exists(kube::resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org"));
  EXPECT_THROW(client().require_served(kube::resources::job(api::JobKind::TFJob)), Error);
  // Nothing left to delete is still success.
  const auto again = run("uninstall");
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST_F(InstallTest, UninstallKeepCrdsKeepsTheJobKinds) {
  ASSERT_EQ(run("install").exit_code, 0);
  const auto r = run("uninstall --keep-crds");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(exists(kDeployments, "trainctl-system", "trainctl-controller"));
  EXPECT_TRUE(exists(kube::resources::custom_resource_definitions(), "", "tfjobs.kubeflow.org"));
  EXPECT_NO_THROW(client().require_served(kube::resources::job(api::JobKind::TFJob)));
}

TEST_F(InstallTest, SandboxDiscoveryServesDeploymentsAndRbac) {
  const json apps = client().discover("apps", "v1");
  bool deployments = false, status = false;
  for (const auto& r : apps["resources"]) {
    deployments = deployments || r["name"] == "deployments";
    status = status || r["name"] == "deployments/status";
  }
  EXPECT_TRUE(deployments) << apps.dump();
  EXPECT_TRUE(status) << apps.dump();
  const json rbac = client().discover("rbac.authorization.k8s.io", "v1");
  std::set<std::string> names;
  for (const auto& r : rbac["resources"])
    names.insert(r["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"clusterroles", "clusterrolebindings", "roles",
                                          "rolebindings"}));
}

}  // namespace
}  // namespace trainctl
