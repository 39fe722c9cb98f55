#include "kube/exec_protocol.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "error.h"
#include "kube/websocket.h"
#include "tests/support/expect_error.h"
#include "tests/support/websocket_test_server.h"

namespace trainctl::kube {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::RequestHead;
using testing::ScriptedPipeServer;
using testing::ServerSession;
using ws::Opcode;

std::string msg(ExecChannel channel, std::string_view data = {}) {
  return encode_channel(channel, data);
}

// --- Query and messages ----------------------------------------------------------------------

TEST(ExecQuery, RepeatsCommandAndPercentEncodesAsKubectlDoes) {
  EXPECT_EQ(exec_query({"sh", "-c", "echo hi && exit 3"}, "istio-proxy", false, true, true, false),
            "command=sh&command=-c&command=echo%20hi%20%26%26%20exit%203&container=istio-proxy"
            "&stdout=true&stderr=true");
  EXPECT_EQ(
      exec_query({"curl", "-X", "POST", "http://localhost:15020/quitquitquit"}, "", true, true,
                 false, true),
      "command=curl&command=-X&command=POST&command=http%3A%2F%2Flocalhost%3A15020%2Fquitquitquit"
      "&stdin=true&stdout=true&tty=true");
  EXPECT_EQ(exec_query({"a=b", "caf\xC3\xA9"}, "c", false, false, false, false),
            "command=a%3Db&command=caf%C3%A9&container=c");
}

TEST(ExecMessages, StartWithTheChannelByte) {
  EXPECT_EQ(encode_stdin("input"), std::string("\x00input", 6));
  EXPECT_EQ(encode_close_stdin(), std::string("\xFF\x00", 2));
  const std::string resize = encode_resize(120, 40);
  ASSERT_FALSE(resize.empty());
  EXPECT_EQ(resize[0], '\x04');
  EXPECT_EQ(json::parse(resize.substr(1)), (json{{"Width", 120}, {"Height", 40}}));
}

// --- Status ----------------------------------------------------------------------------------

TEST(ExitCodeFromStatus, SuccessIsZero) {
  EXPECT_EQ(exit_code_from_status(testing::success_status()), 0);
}

TEST(ExitCodeFromStatus, NonZeroExitCodeCarriesTheCode) {
  EXPECT_EQ(exit_code_from_status(testing::exit_code_status(3)), 3);
  EXPECT_EQ(exit_code_from_status(testing::exit_code_status(137)), 137);
}

TEST(ExitCodeFromStatus, OtherFailuresThrowWithTheServersMessage) {
  Error internal = expect_error([] {
    exit_code_from_status(testing::failure_status(
        500, "InternalError",
        "Internal error occurred: error executing command in container: container not found"));
  });
  EXPECT_EQ(internal.kind(), ErrorKind::ServerError);
  EXPECT_NE(internal.message().find("container not found"), std::string::npos)
      << internal.message();
  EXPECT_EQ(internal.reason(), "InternalError");

  Error missing = expect_error([] {
    exit_code_from_status(testing::failure_status(404, "NotFound", "pods \"x\" not found"));
  });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);

  Error no_code = expect_error([] {
    exit_code_from_status(json{{"status", "Failure"}, {"message", "something broke"}});
  });
  EXPECT_EQ(no_code.kind(), ErrorKind::ServerError);
  EXPECT_NE(no_code.message().find("something broke"), std::string::npos);
}

TEST(ExitCodeFromStatus, MalformedStatusIsAProtocolError) {
  auto kind_of = [](json status) {
    return expect_error([&] { exit_code_from_status(status); }).kind();
  };
  EXPECT_EQ(kind_of(json::array()), ErrorKind::Protocol);
  EXPECT_EQ(kind_of(json{{"status", "Maybe"}}), ErrorKind::Protocol);
  EXPECT_EQ(kind_of(json{{"status", "Failure"}, {"reason", "NonZeroExitCode"}}),
            ErrorKind::Protocol);
  json bad_code = testing::exit_code_status(3);
  bad_code["details"]["causes"][0]["message"] = "three";
  EXPECT_EQ(kind_of(bad_code), ErrorKind::Protocol);
}

// --- Stream decoder --------------------------------------------------------------------------

TEST(ExecStreamDecoder, RoutesOutputAndIgnoresEmptyMessages) {
  std::string out, err;
  ExecStreamDecoder decoder([&](std::string_view d) { out += d; },
                            [&](std::string_view d) { err += d; });
  // Servers open each channel with a bare channel byte; the error channel's must not be taken
  // for a status.
  for (auto channel : {ExecChannel::Stdout, ExecChannel::Stderr, ExecChannel::Error}) {
    EXPECT_FALSE(decoder.handle(msg(channel)));
  }
  EXPECT_FALSE(decoder.handle(""));
  EXPECT_FALSE(decoder.handle(msg(ExecChannel::Stdout, "one ")));
  EXPECT_FALSE(decoder.handle(msg(ExecChannel::Stderr, "oops")));
  EXPECT_FALSE(decoder.handle(msg(ExecChannel::Stdout, "two")));
  EXPECT_FALSE(decoder.handle(msg(ExecChannel::Resize, "{}")));
  EXPECT_FALSE(decoder.exit_code());
  EXPECT_TRUE(decoder.handle(msg(ExecChannel::Error, testing::exit_code_status(2).dump())));
  EXPECT_EQ(decoder.exit_code(), 2);
  EXPECT_EQ(out, "one two");
  EXPECT_EQ(err, "oops");
  EXPECT_TRUE(decoder.result().stdout_data.empty()) << "went to the sink";
}

TEST(ExecStreamDecoder, CollectsIntoTheResultWithoutSinks) {
  ExecStreamDecoder decoder(nullptr, nullptr);
  decoder.handle(msg(ExecChannel::Stdout, "out"));
  decoder.handle(msg(ExecChannel::Stderr, "err"));
  EXPECT_EQ(decoder.result().stdout_data, "out");
  EXPECT_EQ(decoder.result().stderr_data, "err");
}

TEST(ExecStreamDecoder, ErrorChannelWithoutJsonIsAProtocolError) {
  ExecStreamDecoder decoder(nullptr, nullptr);
  EXPECT_EQ(expect_error([&] { decoder.handle(msg(ExecChannel::Error, "plain text")); }).kind(),
            ErrorKind::Protocol);
}

// --- Sessions over an in-memory pipe ---------------------------------------------------------

/// A client upgraded against a scripted server choosing `protocol`.
struct Session {
  Session(std::function<void(ServerSession&)> script, std::string protocol = "v4.channel.k8s.io")
      : server([script = std::move(script), protocol](ServerSession& s) {
          s.accept(s.read_request_head(), protocol);
          script(s);
        }),
        client(server.client_stream()) {
    client.handshake("h", "/exec", {}, {"v4.channel.k8s.io", "v5.channel.k8s.io"});
  }

  ExecResult run(std::string_view stdin_data = {}) {
    return run_exec_session(
        client, stdin_data, [&](std::string_view d) { out += d; },
        [&](std::string_view d) { err += d; });
  }

  ScriptedPipeServer server;
  ws::WebSocketClient client;
  std::string out, err;
};

// What a kubelet sends on a v4 connection: a bare byte per channel to open them.
void open_channels(ServerSession& s) {
  for (auto channel : {ExecChannel::Stdin, ExecChannel::Stdout, ExecChannel::Stderr,
                       ExecChannel::Error, ExecChannel::Resize}) {
    s.send_channel(channel, "");
  }
}

TEST(RunExecSession, SendsStdinOnChannelZeroAndReturnsTheExitCode) {
  std::vector<std::string> received;
  Session session([&](ServerSession& s) {
    open_channels(s);
    auto input = s.read_message();
    if (input)
      received.push_back(input->payload);
    s.send_channel(ExecChannel::Stdout, "stdout line\n");
    s.send_channel(ExecChannel::Stderr, "stderr line\n");
    s.send_status(testing::exit_code_status(3));
    s.send_close();
    if (auto bye = s.read_message())
      received.push_back(bye->close ? "close" : "other");
  });
  const ExecResult result = session.run("quit\n");
  EXPECT_EQ(session.server.finish(), "");
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(session.out, "stdout line\n");
  EXPECT_EQ(session.err, "stderr line\n");
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0], std::string("\x00quit\n", 6));
  EXPECT_EQ(received[1], "close") << "the client says goodbye after the status";
}

TEST(RunExecSession, SuccessStatusIsExitZero) {
  Session session([](ServerSession& s) {
    s.send_channel(ExecChannel::Stdout, "ok");
    s.send_status(testing::success_status());
  });
  const ExecResult result = session.run();
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(session.out, "ok");
  EXPECT_EQ(session.server.finish(), "");
}

TEST(RunExecSession, SendsNothingWithoutStdin) {
  std::optional<ws::Message> first;
  Session session([&](ServerSession& s) {
    s.send_status(testing::success_status());
    first = s.read_message();
  });
  session.run();
  EXPECT_EQ(session.server.finish(), "");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->opcode, Opcode::Close) << "the first client message is its goodbye";
}

// Everything the client sent up to its Close: the stdin side of a session. The client sends all
// its stdin before it reads, so a script can answer first and read afterwards.
std::vector<std::string> read_until_close(ServerSession& s) {
  std::vector<std::string> payloads;
  while (auto m = s.read_message()) {
    if (m->opcode == Opcode::Close)
      break;
    payloads.push_back(m->payload);
  }
  return payloads;
}

TEST(RunExecSession, SplitsLargeStdinIntoChannelZeroMessages) {
  const std::string input(100 * 1024, 'i');
  std::vector<std::string> received;
  Session session([&](ServerSession& s) {
    s.send_status(testing::success_status());
    received = read_until_close(s);
  });
  session.run(input);
  EXPECT_EQ(session.server.finish(), "");
  EXPECT_GT(received.size(), 1u);
  std::string reassembled;
  for (const auto& payload : received) {
    ASSERT_FALSE(payload.empty());
    EXPECT_EQ(payload[0], '\x00') << "stdin channel";
    reassembled += payload.substr(1);
  }
  EXPECT_EQ(reassembled, input);
}

TEST(RunExecSession, ClosesStdinUnderV5) {
  std::vector<std::string> received;
  Session session(
      [&](ServerSession& s) {
        s.send_status(testing::success_status());
        received = read_until_close(s);
      },
      "v5.channel.k8s.io");
  session.run("data");
  EXPECT_EQ(session.server.finish(), "");
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0], std::string("\x00"
                                     "data",
                                     5));
  EXPECT_EQ(received[1], std::string("\xFF\x00", 2));
}

TEST(RunExecSession, DoesNotCloseStdinUnderV4) {
  std::vector<std::string> received;
  Session session([&](ServerSession& s) {
    s.send_status(testing::success_status());
    received = read_until_close(s);
  });
  session.run("data");
  EXPECT_EQ(session.server.finish(), "");
  ASSERT_EQ(received.size(), 1u) << "v4 has no close channel";
}

TEST(RunExecSession, FailureStatusThrowsTheServersError) {
  Session session([](ServerSession& s) {
    s.send_status(testing::failure_status(
        500, "InternalError", "error executing command in container: container not found"));
  });
  Error e = expect_error([&] { session.run(); });
  EXPECT_EQ(e.kind(), ErrorKind::ServerError);
  EXPECT_NE(e.message().find("container not found"), std::string::npos) << e.message();
}

TEST(RunExecSession, NormalCloseWithoutStatusIsExitZero) {
  Session session([](ServerSession& s) {
    s.send_channel(ExecChannel::Stdout, "bye");
    s.send_close(1000, "");
  });
  EXPECT_EQ(session.run().exit_code, 0);
  EXPECT_EQ(session.out, "bye");
}

TEST(RunExecSession, AbnormalCloseWithoutStatusIsAConnectionError) {
  Session session([](ServerSession& s) { s.send_close(1011, "kubelet went away"); });
  Error e = expect_error([&] { session.run(); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  EXPECT_NE(e.message().find("kubelet went away"), std::string::npos) << e.message();
}

TEST(RunExecSession, EndOfStreamWithoutCloseOrStatusIsAConnectionError) {
  Session session([](ServerSession& s) { s.send_channel(ExecChannel::Stdout, "cut"); });
  EXPECT_EQ(expect_error([&] { session.run(); }).kind(), ErrorKind::Connection);
  EXPECT_EQ(session.out, "cut");
}

TEST(RunExecSession, RequiresTheChannelProtocol) {
  Session session([](ServerSession&) {}, "");
  EXPECT_EQ(session.client.subprotocol(), "");
  EXPECT_EQ(expect_error([&] { session.run(); }).kind(), ErrorKind::Protocol);
}

}  // namespace
}  // namespace trainctl::kube
