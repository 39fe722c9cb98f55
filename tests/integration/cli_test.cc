// The trainctl binary, run as a user runs it: flags, kubeconfig files, output and exit codes.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "tests/support/https_test_server.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

/// A server URL where nothing listens.
constexpr const char* kNoServer = "https://127.0.0.1:1";

using RunResult = testing::CommandResult;

/// Runs trainctl with no KUBECONFIG and no home; `out` holds both streams, as a user sees them.
RunResult run_cli(const std::string& args, const std::string& env = "") {
  RunResult r = testing::run_command(
      fmt::format("env -u KUBECONFIG HOME=/nonexistent {} {} {}", env, TRAINCTL_BINARY, args));
  r.out += r.err;
  return r;
}

class CliTest : public ::testing::Test {
 protected:
  /// Writes a kubeconfig whose current context "test" (namespace team-a) reaches `server_url`
  /// with a bearer `token`, trusting the test CA; a second context "other" has no namespace.
  std::string kubeconfig_for(const std::string& server_url, const std::string& token) {
    dir_.write("ca.crt", testing::TestPki::shared().ca.cert_pem);
    const std::string yaml = fmt::format(R"(apiVersion: v1
kind: Config
current-context: test
clusters:
- name: local
  cluster:
    server: {}
    certificate-authority: ca.crt
users:
- name: tester
  user:
    token: {}
contexts:
- name: test
  context: {{cluster: local, user: tester, namespace: team-a}}
- name: other
  context: {{cluster: local, user: tester}}
)",
                                         server_url, token);
    return dir_.write("config", yaml).string();
  }

  testing::TempDir dir_;
};

TEST_F(CliTest, VersionClientPrintsTheBuildVersion) {
  RunResult r = run_cli("version --client");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Client Version: v0."));
}

TEST_F(CliTest, UnknownFlagIsAUsageErrorWithExitCode2) {
  RunResult r = run_cli("version --no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("no-such-flag"));
}

TEST_F(CliTest, VersionReportsTheServerThroughKubeconfigWithABearerToken) {
  testing::HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer cli-token") {
      res.status = 401;
      return;
    }
    res.set_content(R"({"gitVersion":"v1.31.2"})", "application/json");
  });
  server.start();
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  RunResult r = run_cli("version --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Server Version: v1.31.2"));

  RunResult json = run_cli("version -o json", "KUBECONFIG=" + config);
  EXPECT_THAT(json.out, HasSubstr("\"gitVersion\": \"v1.31.2\""));
}

TEST_F(CliTest, ConfigViewRedactsTokens) {
  const std::string config = kubeconfig_for(kNoServer, "very-secret-token");
  RunResult r = run_cli("config view --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("very-secret-token")));
  EXPECT_THAT(r.out, HasSubstr("REDACTED"));
  RunResult raw = run_cli("config view --raw --kubeconfig " + config);
  EXPECT_THAT(raw.out, HasSubstr("very-secret-token"));
}

TEST_F(CliTest, ConfigViewResolvedShowsNamespaceAndSource) {
  const std::string config = kubeconfig_for(kNoServer, "t");
  RunResult r = run_cli("config view --resolved --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("namespace: team-a"));
  EXPECT_THAT(r.out, HasSubstr("auth: bearer token"));
  EXPECT_THAT(r.out, HasSubstr(config));
  RunResult flag = run_cli("config view --resolved -n other-ns --kubeconfig " + config);
  EXPECT_THAT(flag.out, HasSubstr("namespace: other-ns"));
}

TEST_F(CliTest, GetContextsAndUseContextWriteTheRightFile) {
  const std::string config = kubeconfig_for(kNoServer, "t");
  RunResult list = run_cli("config get-contexts --kubeconfig " + config);
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("*         test"));
  RunResult use = run_cli("config use-context other --kubeconfig " + config);
  EXPECT_EQ(use.exit_code, 0) << use.out;
  EXPECT_THAT(run_cli("config current-context --kubeconfig " + config).out, HasSubstr("other"));
  RunResult missing = run_cli("config use-context nope --kubeconfig " + config);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.out, HasSubstr("nope"));
}

TEST_F(CliTest, MissingKubeconfigIsAConfigErrorNamingThePath) {
  RunResult r = run_cli("config view --resolved --kubeconfig /nonexistent/kubeconfig");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("/nonexistent/kubeconfig"));
}

TEST_F(CliTest, VersionSaysWhyTheServerIsUnreachable) {
  const std::string config = kubeconfig_for(kNoServer, "t");
  RunResult r = run_cli("version --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0);  // version still prints the client's, and says why not the server's
  EXPECT_THAT(r.out, HasSubstr("server version unavailable"));
}

// A credential plugin that fails is an authentication failure: exit code 3 (API or connection
// error), as for any server the user cannot reach; the kubeconfig itself was valid.
TEST_F(CliTest, FailingExecCredentialPluginExitsThree) {
  const std::string plugin =
      dir_.write("plugin.sh", "#!/bin/sh\necho 'no login' >&2\nexit 1\n", true).string();
  const std::string config = dir_.write("exec-config", fmt::format(R"(apiVersion: v1
kind: Config
current-context: test
clusters:
- {{name: local, cluster: {{server: "{}"}}}}
users:
- name: tester
  user:
    exec: {{apiVersion: client.authentication.k8s.io/v1, command: "{}", interactiveMode: Never}}
contexts:
- {{name: test, context: {{cluster: local, user: tester}}}}
)",
                                                                   kNoServer, plugin))
                                 .string();
  RunResult r = run_cli("list --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("exec plugin " + plugin + ": failed with exit code 1"));
}

}  // namespace
}  // namespace trainctl
