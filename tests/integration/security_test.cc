// Nothing secret is ever printed: a whole run of the CLI and the controller at -v 9 (every
// request with its headers) shows no token, client key, ExecCredential, Secret data or SSH key.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/support/background_command.h"
#include "tests/support/exec_kubeconfig.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "text.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kMpiJob = R"(apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: secretive}
spec:
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.5"}}
        spec: {containers: [{name: launcher, image: hvd:1, command: [mpirun, python, train.py]}]}
    Worker:
      replicas: 2
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: forever}}
        spec: {containers: [{name: worker, image: hvd:1}]}
)";

/// A line from the middle of a PEM block: no header, and long enough to be found only if leaked.
std::string pem_body_line(const std::string& pem) {
  std::istringstream in(pem);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines.at(lines.size() / 2);
}

TEST(SecretsTest, NothingSecretIsPrintedByAWholeRunAtVerbosityNine) {
  testing::LocalSandbox local;
  testing::install_training_crds(local.client());
  testing::TempDir dir;
  const kube::RestConfig admin = local.sandbox().admin_config();
  const std::string token = local.sandbox().admin_token();

  // The user authenticates through an exec plugin; its ExecCredential carries the token.
  const std::string credential = json{
      {"apiVersion", "client.authentication.k8s.io/v1"},
      {"kind", "ExecCredential"},
      {"status", {{"token", token}}}}.dump();
  const std::string plugin =
      dir.write("plugin.sh", "#!/bin/sh\necho '" + credential + "'\n", /*executable=*/true)
          .string();
  const std::string ca = dir.write("ca.crt", admin.tls.ca_pem).string();
  const std::string exec_config =
      dir.write("exec-config", testing::exec_plugin_kubeconfig(admin.server, plugin, ca)).string();
  const std::string cert_config = local.sandbox().kubeconfig_path().string();

  std::string printed;
  testing::BackgroundCommand controller({TRAINCTL_BINARY, "controller", "--kubeconfig", exec_config,
                                         "--gang-scheduler", "none", "-v", "9"});
  ASSERT_TRUE(controller.wait_for("caches synced", std::chrono::seconds(20)))
      << controller.output();
  const auto run = [&](const std::string& config, const std::string& args) {
    const testing::CommandResult r = testing::run_command(
        fmt::format("env -u KUBECONFIG HOME=/nonexistent {} {} -v 9 --kubeconfig {}",
                    TRAINCTL_BINARY, args, config));
    printed += r.out + r.err;
    return r;
  };
  const std::string manifest = dir.write("job.yaml", kMpiJob).string();
  const testing::CommandResult submitted =
      run(exec_config, "submit -f " + manifest + " --wait --logs --timeout 60s");
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out << submitted.err;
  const json ssh = local.client().get(kube::resources::secrets(), "default", "secretive-ssh");
  for (const char* args :
       {"list", "get mpijob/secretive -o yaml", "get mpijob/secretive", "logs mpijob/secretive",
        "why mpijob/secretive", "events mpijob/secretive"})
    run(exec_config, args);
  run(cert_config, "list -A");
  run(cert_config, "get mpijob/secretive -o json");
  run(exec_config, "delete mpijob secretive");
  controller.stop();
  printed += controller.output();

  ASSERT_THAT(printed, HasSubstr("Authorization: Bearer <masked>"));  // -v 9 did log requests
  EXPECT_THAT(printed, Not(HasSubstr(token)));
  EXPECT_THAT(printed, Not(HasSubstr("ExecCredential")));
  EXPECT_THAT(printed, Not(HasSubstr(pem_body_line(admin.auth.client_key_pem))));
  for (const auto& [key, value] : ssh["data"].items()) {
    EXPECT_THAT(printed, Not(HasSubstr(value.get<std::string>()))) << key;
    const std::string decoded = base64_decode(value.get<std::string>()).value_or("");
    EXPECT_THAT(printed, Not(HasSubstr(pem_body_line(decoded)))) << key;
  }
}

}  // namespace
}  // namespace trainctl
