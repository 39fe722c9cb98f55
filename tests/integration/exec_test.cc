// pods/exec through the real client: TLS through libcurl (CONNECT_ONLY), the WebSocket upgrade and
// the channel protocol, against WebSocketTestServer on 127.0.0.1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "error.h"
#include "kube/client.h"
#include "kube/exec_protocol.h"
#include "sandbox/pki.h"
#include "tests/support/expect_error.h"
#include "tests/support/https_test_server.h"
#include "tests/support/websocket_test_server.h"

namespace trainctl::kube {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using testing::expect_error;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::ServerSession;
using testing::TestPki;
using testing::WebSocketTestServer;

constexpr char kToken[] = "exec-s3cret-token-9f2c";
constexpr std::chrono::seconds kWait{5};

const ExecOptions kEcho{.container = "main", .command = {"sh", "-c", "echo hello"}};

/// A server with the shared test certificate that speaks `subprotocol` and runs `script`.
WebSocketTestServer::Options exec_server(std::string_view subprotocol,
                                         testing::ServerScript script) {
  WebSocketTestServer::Options options;
  options.certificate = TestPki::shared().server;
  options.subprotocol = std::string(subprotocol);
  options.exec_script = std::move(script);
  return options;
}

/// A server that answers every request, exec upgrades included, with `code` and a Status.
WebSocketTestServer::Options refusing_server(int code, std::string_view reason,
                                             std::string_view message) {
  WebSocketTestServer::Options options;
  options.certificate = TestPki::shared().server;
  options.refuse_upgrades = true;
  options.status = code;
  options.body = testing::failure_status(code, reason, message).dump();
  return options;
}

/// Reaches `server`, trusting the test CA, with a bearer token and no rate limit.
RestConfig config_for(const WebSocketTestServer& server) {
  RestConfig config;
  config.server = "https://" + server.host_port();
  config.tls.ca_pem = TestPki::shared().ca.cert_pem;
  config.qps = 0;
  config.auth.token = kToken;
  return config;
}

/// Client messages until the client's Close ("close") or the end of the stream.
std::vector<std::string> read_until_close(ServerSession& s) {
  std::vector<std::string> received;
  while (auto msg = s.read_message()) {
    if (msg->opcode == ws::Opcode::Close) {
      received.emplace_back("close");
      break;
    }
    received.push_back(msg->payload);
  }
  return received;
}

/// Waits for the server to finish its one connection and stops it, so what the script recorded
/// can be read.
void finish(WebSocketTestServer& server) {
  EXPECT_TRUE(server.wait_for_connections(1, kWait)) << "the exec connection did not end";
  server.stop();
}

// --- A command that runs ---------------------------------------------------------------------

TEST(ClientExecTest, RunsTheCommandUnderV4AndRoutesItsOutput) {
  std::vector<std::string> after_status;
  WebSocketTestServer server(exec_server(kExecProtocolV4, [&](ServerSession& s) {
    s.send_channel(ExecChannel::Stdout, "");  // v4 servers open each channel like this
    s.send_channel(ExecChannel::Stdout, "hello\n");
    s.send_channel(ExecChannel::Stderr, "a warning\n");
    s.send_channel(ExecChannel::Stdout, "bye\n");
    s.send_status(testing::success_status());
    after_status = read_until_close(s);
  }));

  const ExecOutcome outcome = Client(config_for(server)).exec("team-a", "trainer-0", kEcho);

  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(outcome.stdout_data, "hello\nbye\n");
  EXPECT_EQ(outcome.stderr_data, "a warning\n");
  finish(server);
  EXPECT_THAT(server.errors(), IsEmpty());
  // Without stdin the client sends nothing but its goodbye.
  EXPECT_THAT(after_status, ElementsAre("close"));
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].target,
            "/api/v1/namespaces/team-a/pods/trainer-0/exec?command=sh&command=-c&"
            "command=echo%20hello&container=main&stdout=true&stderr=true");
  EXPECT_EQ(requests[0].header("authorization"), std::string("Bearer ") + kToken);
  EXPECT_EQ(requests[0].header("host"), server.host_port());
  EXPECT_THAT(requests[0].header_tokens("sec-websocket-protocol"),
              ElementsAre("v5.channel.k8s.io", "v4.channel.k8s.io"));
}

TEST(ClientExecTest, ServerChoosingV5Works) {
  WebSocketTestServer server(exec_server(kExecProtocolV5, [](ServerSession& s) {
    s.send_channel(ExecChannel::Stdout, "from v5");
    s.send_status(testing::success_status());
    read_until_close(s);
  }));

  const ExecOutcome outcome = Client(config_for(server)).exec("ns", "pod", kEcho);

  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(outcome.stdout_data, "from v5");
  finish(server);
  EXPECT_THAT(server.errors(), IsEmpty());
}

// -v 6 logs the exec upgrade like any request, the token masked from 7 on.
TEST(ClientExecTest, VerbosityLogsTheUpgradeWithoutTheToken) {
  WebSocketTestServer server(exec_server(kExecProtocolV5, [](ServerSession& s) {
    s.send_status(testing::success_status());
    read_until_close(s);
  }));
  RestConfig config = config_for(server);
  config.verbosity = 7;
  std::ostringstream log;
  std::streambuf* const saved = std::cerr.rdbuf(log.rdbuf());
  Client(config).exec("ns", "pod", kEcho);
  std::cerr.rdbuf(saved);
  finish(server);
  EXPECT_THAT(log.str(), ContainsRegex("GET https://127.0.0.1:[0-9]+/api/v1/namespaces/ns/pods/"
                                       "pod/exec\\?[^ ]* 101 [^\n]*in [0-9]+ milliseconds\n"));
  EXPECT_THAT(log.str(), HasSubstr("Authorization: Bearer <masked>"));
  EXPECT_THAT(log.str(), Not(HasSubstr(kToken)));
}

// --- Stdin -----------------------------------------------------------------------------------

TEST(ClientExecTest, StdinArrivesOnChannelZeroAndIsClosedUnderV5) {
  std::vector<std::string> received;
  WebSocketTestServer server(exec_server(kExecProtocolV5, [&](ServerSession& s) {
    // A command like `cat` answers only once its input has ended.
    for (;;) {
      auto msg = s.read_message();
      if (!msg)
        throw std::runtime_error("the client hung up before closing stdin");
      received.push_back(msg->payload);
      if (msg->payload == encode_close_stdin())
        break;
    }
    s.send_channel(ExecChannel::Stdout, "read " + std::to_string(received.front().size() - 1));
    s.send_status(testing::success_status());
    read_until_close(s);
  }));

  ExecOptions options{.container = "main", .command = {"cat"}, .stdin_data = "line 1\nline 2\n"};
  const ExecOutcome outcome = Client(config_for(server)).exec("ns", "pod", options);

  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(outcome.stdout_data, "read 14");
  finish(server);
  EXPECT_THAT(server.errors(), IsEmpty());
  EXPECT_THAT(received,
              ElementsAre(std::string("\0line 1\nline 2\n", 15), std::string("\xff\0", 2)));
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].query,
            "command=cat&container=main&stdin=true&stdout=true&"
            "stderr=true");
}

TEST(ClientExecTest, StdinArrivesOnChannelZeroUnderV4WithoutAClose) {
  std::vector<std::string> received;
  WebSocketTestServer server(exec_server(kExecProtocolV4, [&](ServerSession& s) {
    auto input = s.read_message();
    if (!input)
      throw std::runtime_error("no stdin message");
    received.push_back(input->payload);
    s.send_status(testing::success_status());
    for (auto& more : read_until_close(s))
      received.push_back(std::move(more));
  }));

  ExecOptions options{.command = {"cat"}, .stdin_data = "payload"};
  const ExecOutcome outcome = Client(config_for(server)).exec("ns", "pod", options);

  EXPECT_EQ(outcome.exit_code, 0);
  finish(server);
  EXPECT_THAT(server.errors(), IsEmpty());
  // v4 has no way to close stdin: the channel-255 message must not be sent.
  EXPECT_THAT(received, ElementsAre(std::string("\0payload", 8), "close"));
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].query, "command=cat&stdin=true&stdout=true&stderr=true");
}

// --- How a command ends ----------------------------------------------------------------------

TEST(ClientExecTest, NonZeroExitCodeIsTheOutcomesExitCode) {
  WebSocketTestServer server(exec_server(kExecProtocolV4, [](ServerSession& s) {
    s.send_channel(ExecChannel::Stderr, "no such file\n");
    s.send_status(testing::exit_code_status(3));
    read_until_close(s);
  }));

  const ExecOutcome outcome = Client(config_for(server)).exec("ns", "pod", kEcho);

  EXPECT_EQ(outcome.exit_code, 3);
  EXPECT_EQ(outcome.stderr_data, "no such file\n");
  finish(server);
  EXPECT_THAT(server.errors(), IsEmpty());
}

TEST(ClientExecTest, FailureStatusIsAnErrorWithTheServersMessage) {
  WebSocketTestServer server(exec_server(kExecProtocolV5, [](ServerSession& s) {
    s.send_status(testing::failure_status(
        500, "InternalError", "error executing command in container: container not found"));
    read_until_close(s);
  }));

  Error e = expect_error([&] { Client(config_for(server)).exec("ns", "pod", kEcho); });

  EXPECT_EQ(e.kind(), ErrorKind::ServerError);
  EXPECT_EQ(e.http_code(), 500);
  EXPECT_THAT(e.message(), HasSubstr("container not found"));
  finish(server);
}

TEST(ClientExecTest, ServerHangingUpMidSessionIsAConnectionError) {
  WebSocketTestServer server(exec_server(kExecProtocolV4, [](ServerSession& s) {
    s.send_channel(ExecChannel::Stdout, "partial");
    // Drops the connection without a status, a Close or a TLS close_notify.
    throw std::runtime_error("hanging up");
  }));

  Error e = expect_error([&] { Client(config_for(server)).exec("ns", "pod", kEcho); });

  EXPECT_EQ(e.kind(), ErrorKind::Connection) << e.what();
  finish(server);
  EXPECT_THAT(server.errors(), ElementsAre("hanging up"));
}

TEST(ClientExecTest, SilentServerTimesOutWithTheRequestTimeout) {
  WebSocketTestServer server(exec_server(kExecProtocolV4, [](ServerSession& s) {
    read_until_close(s);  // accepts, then says nothing
  }));
  RestConfig config = config_for(server);
  config.timeout = std::chrono::milliseconds(300);

  const auto start = std::chrono::steady_clock::now();
  Error e = expect_error([&] { Client(config).exec("ns", "pod", kEcho); });

  EXPECT_EQ(e.kind(), ErrorKind::Timeout) << e.what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  finish(server);
}

// --- Refused upgrades ------------------------------------------------------------------------

TEST(ClientExecTest, ForbiddenUpgradeCarriesTheServersMessage) {
  WebSocketTestServer server(refusing_server(
      403, "Forbidden",
      R"(pods "trainer-0" is forbidden: User "alice" cannot create resource "pods/exec")"));

  Error e = expect_error([&] { Client(config_for(server)).exec("team-a", "trainer-0", kEcho); });

  EXPECT_EQ(e.kind(), ErrorKind::Forbidden);
  EXPECT_EQ(e.http_code(), 403);
  EXPECT_THAT(e.message(), HasSubstr(R"(User "alice" cannot create resource "pods/exec")"));
  finish(server);
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].path, "/api/v1/namespaces/team-a/pods/trainer-0/exec");
}

TEST(ClientExecTest, MissingPodIsNotFound) {
  WebSocketTestServer server(refusing_server(404, "NotFound", R"(pods "ghost" not found)"));

  Error e = expect_error([&] { Client(config_for(server)).exec("ns", "ghost", kEcho); });

  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_THAT(e.message(), HasSubstr(R"(pods "ghost" not found)"));
  finish(server);
}

// --- Client certificates ---------------------------------------------------------------------

TEST(ClientExecTest, ClientCertificateIsPresentedWhenTheServerRequiresOne) {
  const TestPki& pki = TestPki::shared();
  // Kubernetes reads the user from CN and the groups from O.
  const sandbox::CertifiedKey alice = sandbox::issue_certificate(
      pki.ca, {.common_name = "alice", .organizations = {"devs"}, .client_auth = true});
  auto options = exec_server(kExecProtocolV4, [](ServerSession& s) {
    s.send_channel(ExecChannel::Stdout, "hi alice");
    s.send_status(testing::success_status());
    read_until_close(s);
  });
  options.client_ca_pem = pki.ca.cert_pem;
  WebSocketTestServer server(std::move(options));

  RestConfig config = config_for(server);
  config.auth = {};
  config.auth.client_cert_pem = alice.cert_pem;
  config.auth.client_key_pem = alice.key_pem;
  const ExecOutcome outcome = Client(config).exec("ns", "pod", kEcho);

  EXPECT_EQ(outcome.stdout_data, "hi alice");
  finish(server);
  EXPECT_THAT(server.errors(), IsEmpty());
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].client_subject, "CN=alice,O=devs");
  EXPECT_EQ(requests[0].header("authorization"), "");
}

TEST(ClientExecTest, WithoutAClientCertificateARequiringServerRefusesTheConnection) {
  auto options = exec_server(kExecProtocolV4, nullptr);
  options.client_ca_pem = TestPki::shared().ca.cert_pem;
  WebSocketTestServer server(std::move(options));

  Error e = expect_error([&] { Client(config_for(server)).exec("ns", "pod", kEcho); });

  EXPECT_EQ(e.kind(), ErrorKind::Connection) << e.what();
  finish(server);
  EXPECT_THAT(server.requests(), IsEmpty());
}

// --- Secrets stay secret ---------------------------------------------------------------------

TEST(ClientExecTest, TokensNeverAppearInErrors) {
  std::vector<Error> errors;
  auto collect = [&](WebSocketTestServer& server, const std::function<void(RestConfig&)>& adjust) {
    RestConfig config = config_for(server);
    adjust(config);
    errors.push_back(expect_error([&] { Client(config).exec("ns", "pod", kEcho); }));
  };
  auto keep = [](RestConfig&) {};
  {
    WebSocketTestServer server(refusing_server(401, "Unauthorized", "Unauthorized"));
    collect(server, keep);
  }
  {
    WebSocketTestServer server(refusing_server(403, "Forbidden", "exec is not allowed"));
    collect(server, keep);
  }
  {
    WebSocketTestServer server(exec_server(kExecProtocolV4, [](ServerSession& s) {
      s.send_status(testing::failure_status(500, "InternalError", "container not found"));
    }));
    collect(server, keep);
  }
  {
    WebSocketTestServer server(exec_server(kExecProtocolV4, [](ServerSession& s) {
      s.send_channel(ExecChannel::Stdout, "partial");
      throw std::runtime_error("hanging up");
    }));
    collect(server, keep);
  }
  {
    // A token with a line break would smuggle a header into the upgrade request.
    WebSocketTestServer server(exec_server(kExecProtocolV4, nullptr));
    collect(server, [](RestConfig& c) { c.auth.token = std::string(kToken) + "\r\nX-Evil: 1"; });
  }
  {
    WebSocketTestServer server(exec_server(kExecProtocolV4, nullptr));
    const std::string closed_port = "https://" + server.host_port();
    server.stop();
    collect(server, [&](RestConfig& c) { c.server = closed_port; });
  }

  ASSERT_EQ(errors.size(), 6u);
  EXPECT_EQ(errors[0].kind(), ErrorKind::Unauthorized);
  EXPECT_EQ(errors[1].kind(), ErrorKind::Forbidden);
  EXPECT_EQ(errors[2].kind(), ErrorKind::ServerError);
  EXPECT_EQ(errors[3].kind(), ErrorKind::Connection);
  EXPECT_EQ(errors[4].kind(), ErrorKind::Config);
  EXPECT_EQ(errors[5].kind(), ErrorKind::Connection);
  for (const Error& e : errors) {
    EXPECT_THAT(e.what(), Not(HasSubstr(kToken)));
    EXPECT_THAT(e.message(), Not(HasSubstr(kToken)));
    EXPECT_THAT(e.status().dump(), Not(HasSubstr(kToken)));
  }
}

}  // namespace
}  // namespace trainctl::kube
