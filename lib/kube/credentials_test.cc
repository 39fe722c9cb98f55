#include "kube/credentials.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "error.h"
#include "tests/support/expect_error.h"
#include "tests/support/fake_clock.h"
#include "tests/support/temp_dir.h"

namespace trainctl::kube {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr const char* kV1 = "client.authentication.k8s.io/v1";

/// Points this process's stdin at a file for the duration of a test, then restores it.
class StdinRedirect {
 public:
  explicit StdinRedirect(const fs::path& file) : saved_(::dup(STDIN_FILENO)) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    ::dup2(fd, STDIN_FILENO);
    ::close(fd);
  }
  ~StdinRedirect() {
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
  }

 private:
  int saved_;
};

class CredentialsTest : public ::testing::Test {
 protected:
  // 2030-01-01T00:00:00Z, so plugin expiry timestamps can be written as literals.
  CredentialsTest() { clock_.set_wall(std::chrono::system_clock::time_point(1893456000s)); }

  /// Writes an executable /bin/sh plugin. Each run appends a line to `runs`, saves its
  /// KUBERNETES_EXEC_INFO to `info.json` and can print "$RUN" (the run number) in its output.
  std::string plugin(const std::string& body) {
    const std::string script =
        "#!/bin/sh\n"
        "echo run >> \"$DIR/runs\"\n"
        "RUN=$(wc -l < \"$DIR/runs\" | tr -d ' ')\n"
        "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$DIR/info.json\"\n" +
        body;
    return dir_.write("plugin.sh", script, /*executable=*/true).string();
  }

  /// A plugin that prints a token "token-<run>" with the given extra status fields.
  std::string token_plugin(const std::string& extra_status = "") {
    return plugin(
        "cat <<EOF\n"
        "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
        "\"status\":{\"token\":\"token-$RUN\"" +
        extra_status + "}}\nEOF\n");
  }

  AuthConfig exec_auth(const std::string& command, const std::string& mode = "Never") {
    ExecPluginConfig exec;
    exec.api_version = kV1;
    exec.command = command;
    exec.interactive_mode = mode;
    exec.env = {{"DIR", dir_.path().string()}};
    AuthConfig auth;
    auth.exec = exec;
    return auth;
  }

  /// What a plugin wrote to `name` in the temp dir.
  std::string contents(const std::string& name) const {
    return testing::TempDir::read(dir_.path() / name);
  }
  /// The KUBERNETES_EXEC_INFO the last plugin run saw.
  nlohmann::json exec_info() const { return nlohmann::json::parse(contents("info.json")); }

  /// How many times the plugin ran: it appends one line to `runs` each time.
  int runs() const { return static_cast<int>(std::ranges::count(contents("runs"), '\n')); }

  std::unique_ptr<CredentialSource> source(const AuthConfig& auth, const TlsConfig& tls = {}) {
    return make_credential_source(auth, "https://api.example.com:6443", tls, clock_);
  }

  testing::TempDir dir_;
  testing::FakeClock clock_;
};

// ---- static credentials ------------------------------------------------------------------------

TEST_F(CredentialsTest, StaticTokenIsABearerHeader) {
  AuthConfig auth;
  auth.token = "abc";
  auto s = source(auth);
  EXPECT_EQ(s->current().authorization, "Bearer abc");
  EXPECT_FALSE(s->refresh_after_unauthorized(s->current()));
}

TEST_F(CredentialsTest, BasicAuthIsBase64UserColonPassword) {
  AuthConfig auth;
  auth.username = "alice";
  auth.password = "s3cret";
  EXPECT_EQ(source(auth)->current().authorization, "Basic YWxpY2U6czNjcmV0");
}

TEST_F(CredentialsTest, ClientCertificatePassesThrough) {
  AuthConfig auth;
  auth.client_cert_pem = "CERT";
  auth.client_key_pem = "KEY";
  const RequestCredentials certs_only = source(auth)->current();
  EXPECT_EQ(certs_only.authorization, "");
  EXPECT_EQ(certs_only.client_cert_pem, "CERT");
  EXPECT_EQ(certs_only.client_key_pem, "KEY");

  auth.token = "t";
  const RequestCredentials with_token = source(auth)->current();
  EXPECT_EQ(with_token.authorization, "Bearer t");
  EXPECT_EQ(with_token.client_cert_pem, "CERT");
}

// ---- token files -------------------------------------------------------------------------------

TEST_F(CredentialsTest, TokenFileIsTrimmedAndReReadAfterAMinute) {
  const fs::path file = dir_.write("token", "first\n");
  AuthConfig auth;
  auth.token_file = file.string();
  auth.client_cert_pem = "CERT";
  auth.client_key_pem = "KEY";
  auto s = source(auth);
  EXPECT_EQ(s->current().authorization, "Bearer first");
  EXPECT_EQ(s->current().client_cert_pem, "CERT");

  dir_.write("token", "second\n");
  clock_.advance(59s);
  EXPECT_EQ(s->current().authorization, "Bearer first");
  clock_.advance(1s);
  EXPECT_EQ(s->current().authorization, "Bearer second");
}

TEST_F(CredentialsTest, TokenFileIsReReadAfterUnauthorized) {
  const fs::path file = dir_.write("token", "old");
  AuthConfig auth;
  auth.token_file = file.string();
  auto s = source(auth);
  const RequestCredentials used = s->current();
  EXPECT_FALSE(s->refresh_after_unauthorized(used)) << "same token: a retry cannot help";
  dir_.write("token", "rotated\n");
  EXPECT_TRUE(s->refresh_after_unauthorized(used));
  EXPECT_EQ(s->current().authorization, "Bearer rotated");
}

TEST_F(CredentialsTest, UnreadableTokenFileIsAConfigErrorNamingIt) {
  AuthConfig auth;
  auth.token_file = (dir_.path() / "missing-token").string();
  auto s = source(auth);
  EXPECT_THAT(testing::config_error([&] { s->current(); }),
              HasSubstr((dir_.path() / "missing-token").string()));
}

TEST_F(CredentialsTest, TokenFileThatDisappearsKeepsTheLastToken) {
  const fs::path file = dir_.write("token", "kept");
  AuthConfig auth;
  auth.token_file = file.string();
  auto s = source(auth);
  EXPECT_EQ(s->current().authorization, "Bearer kept");
  fs::remove(file);
  clock_.advance(2min);
  EXPECT_EQ(s->current().authorization, "Bearer kept");
}

// ---- exec plugins ------------------------------------------------------------------------------

TEST_F(CredentialsTest, ExecPluginTokenIsCachedWithoutExpiry) {
  auto s = source(exec_auth(token_plugin()));
  EXPECT_EQ(s->current().authorization, "Bearer token-1");
  clock_.advance(24h);
  EXPECT_EQ(s->current().authorization, "Bearer token-1");
  EXPECT_EQ(runs(), 1);
}

TEST_F(CredentialsTest, ExecPluginReRunsAfterExpiry) {
  // The fake clock starts at 2030-01-01T00:00:00Z.
  auto s = source(exec_auth(token_plugin(",\"expirationTimestamp\":\"2030-01-01T00:05:00Z\"")));
  EXPECT_EQ(s->current().authorization, "Bearer token-1");
  clock_.advance(4min + 59s);
  EXPECT_EQ(s->current().authorization, "Bearer token-1");
  clock_.advance(1s);
  EXPECT_EQ(s->current().authorization, "Bearer token-2");
  EXPECT_EQ(runs(), 2);
}

TEST_F(CredentialsTest, ExecPluginExpiryHonoursTimeZoneOffsets) {
  // 01:05+01:00 is 00:05Z: five minutes after the fake clock's start.
  auto s =
      source(exec_auth(token_plugin(",\"expirationTimestamp\":\"2030-01-01T01:05:00.5+01:00\"")));
  s->current();
  clock_.advance(5min);
  s->current();
  EXPECT_EQ(runs(), 1);
  clock_.advance(1s);
  s->current();
  EXPECT_EQ(runs(), 2);
}

TEST_F(CredentialsTest, ExecPluginReRunsAfterUnauthorizedWithTheCachedCredential) {
  auto s = source(exec_auth(token_plugin()));
  const RequestCredentials first = s->current();
  EXPECT_TRUE(s->refresh_after_unauthorized(first));
  EXPECT_EQ(s->current().authorization, "Bearer token-2");
  EXPECT_EQ(runs(), 2);
}

TEST_F(CredentialsTest, StaleUnauthorizedDoesNotDropANewerCredential) {
  auto s = source(exec_auth(token_plugin()));
  const RequestCredentials first = s->current();
  ASSERT_TRUE(s->refresh_after_unauthorized(first));
  EXPECT_EQ(s->current().authorization, "Bearer token-2");
  // Another request that was still using token-1 reports its 401 late.
  EXPECT_TRUE(s->refresh_after_unauthorized(first));
  EXPECT_EQ(s->current().authorization, "Bearer token-2");
  EXPECT_EQ(runs(), 2);
}

TEST_F(CredentialsTest, ExecInfoCarriesClusterInfoWhenAskedFor) {
  AuthConfig auth = exec_auth(token_plugin());
  auth.exec->provide_cluster_info = true;
  TlsConfig tls;
  tls.ca_pem = "CA-PEM";
  tls.server_name = "api.internal";
  source(auth, tls)->current();
  const nlohmann::json info = exec_info();
  EXPECT_EQ(info["apiVersion"], kV1);
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], "https://api.example.com:6443");
  EXPECT_EQ(info["spec"]["cluster"]["tls-server-name"], "api.internal");
  EXPECT_EQ(info["spec"]["cluster"]["certificate-authority-data"], "Q0EtUEVN");
  EXPECT_FALSE(info["spec"]["cluster"].contains("insecure-skip-tls-verify"));
}

TEST_F(CredentialsTest, ExecInfoOmitsClusterInfoByDefault) {
  source(exec_auth(token_plugin()))->current();
  const nlohmann::json info = exec_info();
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_FALSE(info["spec"].contains("cluster"));
}

TEST_F(CredentialsTest, ExecPluginGetsArgsAndEnvOnTopOfOurs) {
  ::setenv("TRAINCTL_TEST_PARENT", "from-parent", 1);
  ::setenv("TRAINCTL_TEST_CLASH", "from-parent", 1);
  AuthConfig auth = exec_auth(plugin(
      "echo \"$1 $2|$TRAINCTL_TEST_PARENT|$TRAINCTL_TEST_CLASH\" > \"$DIR/seen\"\n"
      "tr '\\0' '\\n' < /proc/$$/environ | grep -c '^TRAINCTL_TEST_CLASH=' >> \"$DIR/seen\"\n"
      "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"t\"}}'\n"));
  auth.exec->args = {"get-token", "--fast"};
  auth.exec->env.emplace_back("TRAINCTL_TEST_CLASH", "from-config");
  source(auth)->current();
  ::unsetenv("TRAINCTL_TEST_PARENT");
  ::unsetenv("TRAINCTL_TEST_CLASH");
  // One entry per name: a plugin that reads the first duplicate would see the parent's value.
  EXPECT_EQ(contents("seen"), "get-token --fast|from-parent|from-config\n1\n");
}

TEST_F(CredentialsTest, NeverInteractivePluginReadsDevNull) {
  const fs::path input = dir_.write("stdin.txt", "typed by a person\n");
  StdinRedirect redirect(input);
  AuthConfig auth = exec_auth(plugin("readlink /proc/self/fd/0 > \"$DIR/stdin\"\n" +
                                     std::string("echo '{\"apiVersion\":\"") + kV1 +
                                     "\",\"kind\":\"ExecCredential\",\"status\":{\"token\":"
                                     "\"t\"}}'\n"),
                              "Never");
  source(auth)->current();
  EXPECT_EQ(contents("stdin"), "/dev/null\n");
}

TEST_F(CredentialsTest, IfAvailablePluginWithoutATerminalIsNotInteractive) {
  const fs::path input = dir_.write("stdin.txt", "");
  StdinRedirect redirect(input);
  source(exec_auth(token_plugin(), "IfAvailable"))->current();
  const nlohmann::json info = exec_info();
  EXPECT_EQ(info["spec"]["interactive"], false);
}

TEST_F(CredentialsTest, AlwaysInteractivePluginNeedsATerminal) {
  StdinRedirect redirect("/dev/null");
  auto s = source(exec_auth(token_plugin(), "Always"));
  EXPECT_THAT(testing::credential_error([&] { s->current(); }), HasSubstr("not a terminal"));
  EXPECT_EQ(runs(), 0);
}

TEST_F(CredentialsTest, ExecPluginClientCertificate) {
  auto s = source(
      exec_auth(plugin("echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
                       "\"ExecCredential\",\"status\":{\"clientCertificateData\":\"PLUGIN-CERT\","
                       "\"clientKeyData\":\"PLUGIN-KEY\"}}'\n")));
  const RequestCredentials c = s->current();
  EXPECT_EQ(c.authorization, "");
  EXPECT_EQ(c.client_cert_pem, "PLUGIN-CERT");
  EXPECT_EQ(c.client_key_pem, "PLUGIN-KEY");
}

TEST_F(CredentialsTest, ExecPluginTokenKeepsConfiguredClientCertificate) {
  AuthConfig auth = exec_auth(token_plugin());
  auth.client_cert_pem = "STATIC-CERT";
  auth.client_key_pem = "STATIC-KEY";
  const RequestCredentials c = source(auth)->current();
  EXPECT_EQ(c.authorization, "Bearer token-1");
  EXPECT_EQ(c.client_cert_pem, "STATIC-CERT");
  EXPECT_EQ(c.client_key_pem, "STATIC-KEY");
}

TEST_F(CredentialsTest, FailingPluginIsAnErrorWithoutItsOutput) {
  const std::string command = plugin(
      "echo '{\"status\":{\"token\":\"leaked-secret\"}}'\n"
      "exit 3\n");
  const std::string message =
      testing::credential_error([&] { source(exec_auth(command))->current(); });
  EXPECT_THAT(message, HasSubstr("exec plugin " + command + ": failed with exit code 3"));
  EXPECT_THAT(message, Not(HasSubstr("leaked-secret")));
}

TEST_F(CredentialsTest, MissingPluginShowsTheInstallHint) {
  AuthConfig auth = exec_auth("trainctl-test-no-such-plugin");
  auth.exec->install_hint = "Install it with: apt install the-plugin";
  const std::string message = testing::credential_error([&] { source(auth)->current(); });
  EXPECT_THAT(message, HasSubstr("exec plugin trainctl-test-no-such-plugin: executable not found"));
  EXPECT_THAT(message, HasSubstr("apt install the-plugin"));
}

TEST_F(CredentialsTest, BadJsonIsAnErrorThatDoesNotQuoteTheOutput) {
  const std::string message = testing::credential_error(
      [&] { source(exec_auth(plugin("echo 'token: secret-abc'\n")))->current(); });
  EXPECT_THAT(message, HasSubstr("not valid JSON"));
  EXPECT_THAT(message, Not(HasSubstr("secret-abc")));
}

TEST_F(CredentialsTest, PluginMustAnswerInTheConfiguredApiVersion) {
  const std::string message = testing::credential_error([&] {
    source(exec_auth(plugin("echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
                            "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n")))
        ->current();
  });
  EXPECT_THAT(message, HasSubstr("plugin returned version client.authentication.k8s.io/v1beta1"));
}

TEST_F(CredentialsTest, PluginOutputIsValidated) {
  auto error_for = [&](const std::string& status) {
    return testing::credential_error([&] {
      source(exec_auth(plugin("echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                              "\"kind\":\"ExecCredential\"" +
                              status + "}'\n")))
          ->current();
    });
  };
  EXPECT_THAT(error_for(""), HasSubstr("didn't return a status"));
  EXPECT_THAT(error_for(",\"status\":{}"), HasSubstr("didn't return a token or cert/key pair"));
  EXPECT_THAT(error_for(",\"status\":{\"clientCertificateData\":\"C\"}"),
              HasSubstr("only certificate or key"));
  EXPECT_THAT(error_for(",\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"tomorrow\"}"),
              HasSubstr("\"tomorrow\" is not an RFC 3339 time"));
}

TEST_F(CredentialsTest, ConcurrentCallersShareOnePluginRun) {
  auto s = source(exec_auth(plugin(
      "sleep 0.3\n"
      "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"shared\"}}'\n")));
  std::vector<std::thread> threads;
  std::vector<std::string> seen(6);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] { seen[i] = s->current().authorization; });
  }
  for (auto& t : threads)
    t.join();
  for (const auto& auth : seen)
    EXPECT_EQ(auth, "Bearer shared");
  EXPECT_EQ(runs(), 1);
}

}  // namespace
}  // namespace trainctl::kube
