#include "kube/websocket.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "error.h"
#include "kube/exec_protocol.h"
#include "sandbox/pki.h"
#include "tests/support/expect_error.h"
#include "tests/support/https_test_server.h"
#include "tests/support/websocket_test_server.h"

namespace trainctl::kube::ws {
namespace {

using testing::expect_error;
using testing::RequestHead;
using testing::ScriptedPipeServer;
using testing::ServerSession;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values)
    out.push_back(static_cast<char>(v));
  return out;
}

// Runs `f`, which must throw trainctl::Error, and returns that error.
std::vector<Frame> decode_all(std::string_view wire, FrameDecoder::Options options = {}) {
  FrameDecoder decoder(options);
  decoder.feed(wire);
  std::vector<Frame> frames;
  while (auto frame = decoder.next())
    frames.push_back(std::move(*frame));
  return frames;
}

ErrorKind decode_error_kind(std::string_view wire, FrameDecoder::Options options = {}) {
  return expect_error([&] { decode_all(wire, options); }).kind();
}

// --- Framing ---------------------------------------------------------------------------------

TEST(EncodeFrame, MasksAsInRfc6455Example) {
  // RFC 6455 §5.7: a masked text message "Hello".
  const std::string wire = encode_frame(Frame{true, Opcode::Text, "Hello"},
                                        std::array<std::uint8_t, 4>{0x37, 0xfa, 0x21, 0x3d});
  EXPECT_EQ(wire, bytes({0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}));
}

TEST(EncodeFrame, UnmaskedAsInRfc6455Example) {
  EXPECT_EQ(encode_frame(Frame{true, Opcode::Text, "Hello"}, std::nullopt),
            bytes({0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f}));
  EXPECT_EQ(encode_frame(Frame{false, Opcode::Text, "Hel"}, std::nullopt),
            bytes({0x01, 0x03, 0x48, 0x65, 0x6c}));
}

TEST(EncodeFrame, UsesSixteenBitLengthFrom126Bytes) {
  const std::string at_125 =
      encode_frame(Frame{true, Opcode::Binary, std::string(125, 'a')}, std::nullopt);
  EXPECT_EQ(at_125.substr(0, 2), bytes({0x82, 125}));
  EXPECT_EQ(at_125.size(), 2u + 125u);

  const std::string at_256 =
      encode_frame(Frame{true, Opcode::Binary, std::string(256, 'a')}, std::nullopt);
  EXPECT_EQ(at_256.substr(0, 4), bytes({0x82, 126, 0x01, 0x00}));
  EXPECT_EQ(at_256.size(), 4u + 256u);

  const std::string at_65535 =
      encode_frame(Frame{true, Opcode::Binary, std::string(65535, 'a')}, std::nullopt);
  EXPECT_EQ(at_65535.substr(0, 4), bytes({0x82, 126, 0xff, 0xff}));
}

TEST(EncodeFrame, UsesSixtyFourBitLengthFrom65536Bytes) {
  const std::string wire = encode_frame(Frame{true, Opcode::Binary, std::string(65536, 'z')},
                                        std::array<std::uint8_t, 4>{1, 2, 3, 4});
  EXPECT_EQ(wire.substr(0, 10), bytes({0x82, 0xff, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00}));
  EXPECT_EQ(wire.substr(10, 4), bytes({1, 2, 3, 4}));
  EXPECT_EQ(wire.size(), 14u + 65536u);
}

TEST(FrameDecoder, RoundTripsMaskedFramesOfEveryLengthClass) {
  std::string wire;
  const std::vector<std::size_t> sizes = {0, 1, 125, 126, 65535, 65536, 70000};
  for (std::size_t size : sizes) {
    std::string payload(size, '\0');
    for (std::size_t i = 0; i < size; ++i)
      payload[i] = static_cast<char>(i * 7);
    wire +=
        encode_frame(Frame{true, Opcode::Binary, payload}, std::array<std::uint8_t, 4>{9, 8, 7, 6});
  }
  const auto frames = decode_all(wire, {.max_payload = kDefaultMaxPayload, .expect_masked = true});
  ASSERT_EQ(frames.size(), sizes.size());
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    ASSERT_EQ(frames[k].payload.size(), sizes[k]);
    for (std::size_t i = 0; i < sizes[k]; ++i) {
      ASSERT_EQ(frames[k].payload[i], static_cast<char>(i * 7)) << "frame " << k << " byte " << i;
    }
  }
}

TEST(FrameDecoder, HandlesFramesSplitAtEveryByte) {
  const std::string wire =
      bytes({0x01, 0x03, 0x48, 0x65, 0x6c}) +  // "Hel", not final
      bytes({0x89, 0x02, 'h', 'i'}) +          // ping "hi"
      bytes({0x80, 0x02, 0x6c, 0x6f}) +        // "lo", final
      encode_frame(Frame{true, Opcode::Binary, std::string(300, 'b')}, std::nullopt) +
      encode_frame(Frame{true, Opcode::Binary, std::string(66000, 'c')}, std::nullopt);
  FrameDecoder decoder;
  std::vector<Frame> frames;
  for (char c : wire) {
    decoder.feed(std::string_view(&c, 1));
    while (auto frame = decoder.next())
      frames.push_back(std::move(*frame));
  }
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_FALSE(frames[0].fin);
  EXPECT_EQ(frames[0].opcode, Opcode::Text);
  EXPECT_EQ(frames[0].payload, "Hel");
  EXPECT_EQ(frames[1].opcode, Opcode::Ping);
  EXPECT_EQ(frames[1].payload, "hi");
  EXPECT_EQ(frames[2].opcode, Opcode::Continuation);
  EXPECT_EQ(frames[2].payload, "lo");
  EXPECT_EQ(frames[3].payload, std::string(300, 'b'));
  EXPECT_EQ(frames[4].payload, std::string(66000, 'c'));
  EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(FrameDecoder, ToleratesNonMinimalLengths) {
  const auto frames = decode_all(bytes({0x82, 126, 0x00, 0x03, 'a', 'b', 'c'}) +
                                 bytes({0x82, 127, 0, 0, 0, 0, 0, 0, 0, 0x01, 'd'}));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].payload, "abc");
  EXPECT_EQ(frames[1].payload, "d");
}

TEST(FrameDecoder, RejectsProtocolViolations) {
  EXPECT_EQ(decode_error_kind(bytes({0xC1, 0x00})), ErrorKind::Protocol) << "RSV1 set";
  EXPECT_EQ(decode_error_kind(bytes({0x91, 0x00})), ErrorKind::Protocol) << "RSV3 set";
  EXPECT_EQ(decode_error_kind(bytes({0x83, 0x00})), ErrorKind::Protocol) << "opcode 3";
  EXPECT_EQ(decode_error_kind(bytes({0x8B, 0x00})), ErrorKind::Protocol) << "opcode 0xB";
  EXPECT_EQ(decode_error_kind(bytes({0x09, 0x00})), ErrorKind::Protocol) << "fragmented ping";
  EXPECT_EQ(decode_error_kind(bytes({0x89, 126, 0x00, 0x7E})), ErrorKind::Protocol)
      << "126-byte ping";
  EXPECT_EQ(decode_error_kind(bytes({0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0})), ErrorKind::Protocol)
      << "64-bit length with the top bit set";
  EXPECT_EQ(decode_error_kind(bytes({0x81, 0x81, 1, 2, 3, 4, 'x'})), ErrorKind::Protocol)
      << "masked frame from a server";
  EXPECT_EQ(
      decode_error_kind(bytes({0x81, 0x01, 'x'}), {.max_payload = 100, .expect_masked = true}),
      ErrorKind::Protocol)
      << "unmasked frame from a client";
}

TEST(FrameDecoder, RejectsPayloadOverTheLimitBeforeItArrives) {
  FrameDecoder decoder({.max_payload = 1000, .expect_masked = false});
  decoder.feed(bytes({0x82, 126, 0x03, 0xE9}));  // announces 1001 bytes, sends none
  EXPECT_EQ(expect_error([&] { decoder.next(); }).kind(), ErrorKind::Protocol);

  FrameDecoder at_limit({.max_payload = 1000, .expect_masked = false});
  at_limit.feed(encode_frame(Frame{true, Opcode::Binary, std::string(1000, 'x')}, std::nullopt));
  EXPECT_TRUE(at_limit.next().has_value());
}

// --- Messages --------------------------------------------------------------------------------

TEST(MessageReader, ReassemblesFragmentsAroundAnInterleavedPing) {
  MessageReader reader;
  EXPECT_FALSE(reader.push(Frame{false, Opcode::Text, "He"}));
  auto ping = reader.push(Frame{true, Opcode::Ping, "are you there"});
  ASSERT_TRUE(ping);
  EXPECT_EQ(ping->opcode, Opcode::Ping);
  EXPECT_EQ(ping->payload, "are you there");
  EXPECT_FALSE(reader.push(Frame{false, Opcode::Continuation, "l"}));
  auto text = reader.push(Frame{true, Opcode::Continuation, "lo"});
  ASSERT_TRUE(text);
  EXPECT_EQ(text->opcode, Opcode::Text);
  EXPECT_EQ(text->payload, "Hello");
  // The reader is ready for the next message.
  auto binary = reader.push(Frame{true, Opcode::Binary, std::string("\x01x", 2)});
  ASSERT_TRUE(binary);
  EXPECT_EQ(binary->opcode, Opcode::Binary);
}

TEST(MessageReader, RejectsBrokenFragmentation) {
  MessageReader orphan;
  EXPECT_EQ(expect_error([&] {
              orphan.push(Frame{true, Opcode::Continuation, "x"});
            }).kind(),
            ErrorKind::Protocol);

  MessageReader interrupted;
  interrupted.push(Frame{false, Opcode::Binary, "a"});
  EXPECT_EQ(expect_error([&] {
              interrupted.push(Frame{true, Opcode::Binary, "b"});
            }).kind(),
            ErrorKind::Protocol);

  MessageReader small(4);
  small.push(Frame{false, Opcode::Binary, "abc"});
  EXPECT_EQ(expect_error([&] {
              small.push(Frame{true, Opcode::Continuation, "de"});
            }).kind(),
            ErrorKind::Protocol);

  MessageReader text;
  EXPECT_EQ(expect_error([&] {
              text.push(Frame{true, Opcode::Text, "\xC3\x28"});
            }).kind(),
            ErrorKind::Protocol);
}

TEST(MessageReader, ReportsCloseWithCodeAndReason) {
  MessageReader reader;
  auto msg = reader.push(Frame{true, Opcode::Close, bytes({0x03, 0xE9}) + "going away"});
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->opcode, Opcode::Close);
  ASSERT_TRUE(msg->close);
  EXPECT_EQ(msg->close->code, 1001);
  EXPECT_EQ(msg->close->reason, "going away");
}

TEST(ClosePayload, ParsesCodesPerSection551) {
  EXPECT_EQ(parse_close_payload("").code, kCloseNoStatus);
  EXPECT_EQ(parse_close_payload(bytes({0x03, 0xE8})).code, 1000);
  EXPECT_EQ(parse_close_payload(bytes({0x0F, 0xA0}) + "app").code, 4000);
  EXPECT_EQ(parse_close_payload(bytes({0x0F, 0xA0}) + "app").reason, "app");
  EXPECT_EQ(parse_close_payload(bytes({0x03, 0xF3}) + "caf\xC3\xA9").reason, "caf\xC3\xA9");

  auto kind_of = [](std::string payload) {
    return expect_error([&] { parse_close_payload(payload); }).kind();
  };
  EXPECT_EQ(kind_of(bytes({0x03})), ErrorKind::Protocol) << "one-byte body";
  EXPECT_EQ(kind_of(bytes({0x03, 0xE7})), ErrorKind::Protocol) << "999";
  EXPECT_EQ(kind_of(bytes({0x03, 0xED})), ErrorKind::Protocol) << "1005 must not be sent";
  EXPECT_EQ(kind_of(bytes({0x03, 0xEE})), ErrorKind::Protocol) << "1006 must not be sent";
  EXPECT_EQ(kind_of(bytes({0x13, 0x88})), ErrorKind::Protocol) << "5000";
  EXPECT_EQ(kind_of(bytes({0x03, 0xE8, 0xFF})), ErrorKind::Protocol) << "reason not UTF-8";
}

TEST(ClosePayload, EncodesCodeAndCutsLongReasonsOnCharacterBoundaries) {
  EXPECT_EQ(encode_close_payload(1000, "bye"), bytes({0x03, 0xE8}) + "bye");
  const std::string long_reason = std::string(122, 'a') + "\xC3\xA9" + "zzz";  // é straddles 123
  const std::string body = encode_close_payload(1001, long_reason);
  EXPECT_LE(body.size(), 125u);
  EXPECT_EQ(body.substr(2), std::string(122, 'a'));
  EXPECT_EQ(parse_close_payload(body).code, 1001);
}

// --- Handshake keys --------------------------------------------------------------------------

TEST(HandshakeKeys, AcceptKeyMatchesRfc6455Example) {
  EXPECT_EQ(websocket_accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

TEST(HandshakeKeys, ClientKeyIsSixteenRandomBytesInBase64) {
  const std::string a = make_client_key();
  const std::string b = make_client_key();
  EXPECT_EQ(a.size(), 24u);
  EXPECT_TRUE(a.ends_with("==")) << a;
  EXPECT_NE(a, b);
}

// --- Client over an in-memory pipe -----------------------------------------------------------

const HeaderList kAuth = {{"Authorization", "Bearer abc123"}};
const std::vector<std::string> kProtocols = {"v4.channel.k8s.io", "v5.channel.k8s.io"};

TEST(WebSocketClient, HandshakeSendsUpgradeRequestAndRecordsChosenProtocol) {
  RequestHead seen;
  ScriptedPipeServer server([&](ServerSession& s) {
    seen = s.read_request_head();
    s.accept(seen, "v4.channel.k8s.io");
  });
  WebSocketClient client(server.client_stream());
  client.handshake("api.example:6443", "/api/v1/namespaces/ns/pods/p/exec?command=ls", kAuth,
                   kProtocols);
  EXPECT_EQ(server.finish(), "");
  EXPECT_EQ(client.subprotocol(), "v4.channel.k8s.io");
  EXPECT_EQ(seen.method, "GET");
  EXPECT_EQ(seen.target, "/api/v1/namespaces/ns/pods/p/exec?command=ls");
  EXPECT_EQ(seen.header("Host"), "api.example:6443");
  EXPECT_EQ(seen.header("Upgrade"), "websocket");
  EXPECT_EQ(seen.header("Connection"), "Upgrade");
  EXPECT_EQ(seen.header("Sec-WebSocket-Version"), "13");
  EXPECT_EQ(seen.header("Sec-WebSocket-Key").size(), 24u);
  EXPECT_EQ(seen.header("Sec-WebSocket-Protocol"), "v4.channel.k8s.io, v5.channel.k8s.io");
  EXPECT_EQ(seen.header("Authorization"), "Bearer abc123");
  EXPECT_TRUE(
      seen.raw.starts_with("GET /api/v1/namespaces/ns/pods/p/exec?command=ls HTTP/1.1\r\n"));
}

TEST(WebSocketClient, FeedsFramesThatArriveWithTheResponseHead) {
  ScriptedPipeServer server([](ServerSession& s) {
    const RequestHead head = s.read_request_head();
    // One write: the 101 and the first two frames, as servers often send them.
    s.write_raw(ServerSession::upgrade_response(head, "v4.channel.k8s.io") +
                encode_frame(Frame{true, Opcode::Binary, "first"}, std::nullopt) +
                encode_frame(Frame{true, Opcode::Text, "second"}, std::nullopt));
    s.send_close();
    s.read_frame();  // the client's Close
  });
  WebSocketClient client(server.client_stream());
  client.handshake("h", "/exec", {}, kProtocols);
  auto first = client.receive();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->opcode, Opcode::Binary);
  EXPECT_EQ(first->payload, "first");
  auto second = client.receive();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->opcode, Opcode::Text);
  EXPECT_EQ(second->payload, "second");
  EXPECT_FALSE(client.receive());
  EXPECT_EQ(server.finish(), "");
}

// Runs a handshake against a server that answers with `response` (after reading the request).
Error handshake_error(const std::function<std::string(const RequestHead&)>& response) {
  ScriptedPipeServer server(
      [&](ServerSession& s) { s.write_raw(response(s.read_request_head())); });
  WebSocketClient client(server.client_stream());
  Error e = expect_error([&] { client.handshake("h", "/exec", {}, {"v4.channel.k8s.io"}); });
  EXPECT_EQ(server.finish(), "");
  return e;
}

TEST(WebSocketClient, RejectsWrongAcceptKey) {
  Error e = handshake_error([](const RequestHead&) {
    return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
           "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n";
  });
  EXPECT_EQ(e.kind(), ErrorKind::Protocol);
  EXPECT_NE(e.message().find("Sec-WebSocket-Accept"), std::string::npos) << e.message();
}

TEST(WebSocketClient, RejectsSubprotocolThatWasNotOffered) {
  Error e = handshake_error([](const RequestHead& head) {
    return ServerSession::upgrade_response(head, "v5.channel.k8s.io");
  });
  EXPECT_EQ(e.kind(), ErrorKind::Protocol);
  EXPECT_NE(e.message().find("v5.channel.k8s.io"), std::string::npos) << e.message();
}

TEST(WebSocketClient, RejectsMoreThanOneChosenSubprotocol) {
  Error e = handshake_error([](const RequestHead& head) {
    return ServerSession::upgrade_response(head, "v4.channel.k8s.io, v4.channel.k8s.io");
  });
  EXPECT_EQ(e.kind(), ErrorKind::Protocol);
}

TEST(WebSocketClient, RejectsExtensionsThatWereNotOffered) {
  Error e = handshake_error([](const RequestHead& head) {
    std::string response = ServerSession::upgrade_response(head, "v4.channel.k8s.io");
    response.insert(response.size() - 2, "Sec-WebSocket-Extensions: permessage-deflate\r\n");
    return response;
  });
  EXPECT_EQ(e.kind(), ErrorKind::Protocol);
  EXPECT_NE(e.message().find("permessage-deflate"), std::string::npos) << e.message();
}

TEST(WebSocketClient, RejectsMissingUpgradeHeader) {
  Error e = handshake_error([](const RequestHead& head) {
    std::string response = ServerSession::upgrade_response(head, "");
    response.erase(response.find("Upgrade: websocket\r\n"), 20);
    return response;
  });
  EXPECT_EQ(e.kind(), ErrorKind::Protocol);
}

TEST(WebSocketClient, SurfacesForbiddenStatusFromTheServer) {
  const std::string status =
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":)"
      R"("pods \"p\" is forbidden: User \"bob\" cannot create resource \"pods/exec\"",)"
      R"("reason":"Forbidden","details":{"name":"p","kind":"pods"},"code":403})";
  Error e = handshake_error([&](const RequestHead&) {
    return fmt::format(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        status.size(), status);
  });
  EXPECT_EQ(e.kind(), ErrorKind::Forbidden);
  EXPECT_EQ(e.http_code(), 403);
  EXPECT_NE(e.message().find("cannot create resource \"pods/exec\""), std::string::npos)
      << e.message();
}

TEST(WebSocketClient, ReadsChunkedErrorBodies) {
  const std::string status =
      R"({"kind":"Status","status":"Failure","message":"pods \"p\" not found","reason":"NotFound","code":404})";
  Error e = handshake_error([&](const RequestHead&) {
    return fmt::format(
        "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: "
        "chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        10, status.substr(0, 10), status.size() - 10, status.substr(10));
  });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_NE(e.message().find("pods \"p\" not found"), std::string::npos) << e.message();
}

TEST(WebSocketClient, ReadsUnframedErrorBodiesToEndOfStream) {
  Error e = handshake_error([](const RequestHead&) {
    return std::string("HTTP/1.1 401 Unauthorized\r\n\r\nUnauthorized");
  });
  EXPECT_EQ(e.kind(), ErrorKind::Unauthorized);
  EXPECT_NE(e.message().find("Unauthorized"), std::string::npos);
}

TEST(WebSocketClient, ConnectionClosedBeforeResponseIsAConnectionError) {
  Error e = handshake_error([](const RequestHead&) { return std::string("HTTP/1.1 101 Swi"); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
}

TEST(WebSocketClient, RejectsLineBreaksInHeaders) {
  auto [client_end, server_end] = testing::make_pipe_pair();
  WebSocketClient client(*client_end);
  Error e = expect_error([&] {
    client.handshake("h", "/exec", {{"Authorization", "Bearer x\r\nX-Evil: 1"}}, {});
  });
  EXPECT_EQ(e.kind(), ErrorKind::Config);
}

// An upgraded client on a pipe, for tests of the data phase.
struct Upgraded {
  explicit Upgraded(std::function<void(ServerSession&)> script)
      : server([script = std::move(script)](ServerSession& s) {
          s.accept(s.read_request_head(), "v4.channel.k8s.io");
          script(s);
        }),
        client(server.client_stream()) {
    client.handshake("h", "/exec", {}, {"v4.channel.k8s.io"});
  }
  ScriptedPipeServer server;
  WebSocketClient client;
};

TEST(WebSocketClient, AnswersPingWithPongAndMasksEveryFrame) {
  std::optional<Frame> pong;
  std::optional<Message> sent;
  Upgraded ws([&](ServerSession& s) {
    s.send(Opcode::Ping, "keepalive-42");
    s.send(Opcode::Binary, "data");
    pong = s.read_frame();  // unmasked client frames would throw here
    sent = s.read_message();
  });
  auto msg = ws.client.receive();
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->payload, "data");
  ws.client.send(Opcode::Binary, std::string(200, 'q'));
  EXPECT_EQ(ws.server.finish(), "");
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->opcode, Opcode::Pong);
  EXPECT_EQ(pong->payload, "keepalive-42");
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->payload, std::string(200, 'q'));
}

TEST(WebSocketClient, UsesAFreshMaskForEveryFrame) {
  auto [client_end, server_end] = testing::make_pipe_pair();
  WebSocketClient client(*client_end);
  client.send(Opcode::Binary, "same payload");
  client.send(Opcode::Binary, "same payload");
  char buf[256];
  const std::size_t n = server_end->read_some(buf, sizeof buf);
  const std::string wire(buf, n);
  ASSERT_EQ(wire.size(), 2 * (2 + 4 + 12));
  EXPECT_EQ(static_cast<std::uint8_t>(wire[1]) & 0x80, 0x80) << "mask bit";
  EXPECT_NE(wire.substr(2, 4), wire.substr(20, 4)) << "masking keys";
  EXPECT_NE(wire.substr(6, 12), "same payload") << "payload sent in clear";
}

TEST(WebSocketClient, AnswersCloseWithCloseAndReportsCodeAndReason) {
  std::optional<Frame> reply;
  Upgraded ws([&](ServerSession& s) {
    s.send_close(1001, "apiserver shutting down");
    reply = s.read_frame();
  });
  EXPECT_FALSE(ws.client.receive());
  EXPECT_FALSE(ws.client.receive()) << "stays closed";
  ASSERT_TRUE(ws.client.peer_close());
  EXPECT_EQ(ws.client.peer_close()->code, 1001);
  EXPECT_EQ(ws.client.peer_close()->reason, "apiserver shutting down");
  EXPECT_EQ(ws.server.finish(), "");
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->opcode, Opcode::Close);
  EXPECT_EQ(parse_close_payload(reply->payload).code, 1001);
  EXPECT_EQ(expect_error([&] { ws.client.send(Opcode::Binary, "late"); }).kind(),
            ErrorKind::Protocol);
}

TEST(WebSocketClient, EndOfStreamWithoutCloseIsAConnectionError) {
  Upgraded ws([](ServerSession& s) { s.send(Opcode::Binary, "partial"); });
  ASSERT_TRUE(ws.client.receive());
  EXPECT_EQ(expect_error([&] { ws.client.receive(); }).kind(), ErrorKind::Connection);
}

TEST(WebSocketClient, CloseSendsCodeAndWaitsForThePeersClose) {
  std::optional<Message> got;
  Upgraded ws([&](ServerSession& s) {
    s.send(Opcode::Binary, "unread");  // discarded by close()
    got = s.read_message();
    s.send_close(1000, "");
  });
  ws.client.close(1000, "done");
  ASSERT_TRUE(ws.client.peer_close());
  EXPECT_EQ(ws.client.peer_close()->code, 1000);
  EXPECT_EQ(ws.server.finish(), "");
  ASSERT_TRUE(got);
  ASSERT_TRUE(got->close);
  EXPECT_EQ(got->close->code, 1000);
  EXPECT_EQ(got->close->reason, "done");
}

TEST(WebSocketClient, FailsOnMaskedServerFrameAndTellsThePeer) {
  std::optional<Frame> reply;
  Upgraded ws([&](ServerSession& s) {
    s.write_raw(encode_frame(Frame{true, Opcode::Binary, "masked"},
                             std::array<std::uint8_t, 4>{1, 2, 3, 4}));
    reply = s.read_frame();
  });
  EXPECT_EQ(expect_error([&] { ws.client.receive(); }).kind(), ErrorKind::Protocol);
  EXPECT_EQ(ws.server.finish(), "");
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->opcode, Opcode::Close);
  EXPECT_EQ(parse_close_payload(reply->payload).code, kCloseProtocolError);
}

// --- Over real TLS, against the test server --------------------------------------------------

/// A TLS client connection made with a plain OpenSSL BIO, as a ByteStream.
class TlsClientStream final : public ByteStream {
 public:
  TlsClientStream(int port, const std::string& ca_pem, const sandbox::CertifiedKey* client_cert) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    BIO* ca_bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
    while (X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), ca);
      X509_free(ca);
    }
    BIO_free(ca_bio);
    ERR_clear_error();
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (client_cert != nullptr) {
      BIO* cert_bio = BIO_new_mem_buf(client_cert->cert_pem.data(),
                                      static_cast<int>(client_cert->cert_pem.size()));
      X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
      BIO* key_bio = BIO_new_mem_buf(client_cert->key_pem.data(),
                                     static_cast<int>(client_cert->key_pem.size()));
      EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
      SSL_CTX_use_certificate(ctx_, cert);
      SSL_CTX_use_PrivateKey(ctx_, key);
      X509_free(cert);
      EVP_PKEY_free(key);
      BIO_free(cert_bio);
      BIO_free(key_bio);
    }
    bio_ = BIO_new_ssl_connect(ctx_);
    SSL* ssl = nullptr;
    BIO_get_ssl(bio_, &ssl);
    SSL_set_mode(ssl, SSL_MODE_AUTO_RETRY);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
    const std::string target = "127.0.0.1:" + std::to_string(port);
    BIO_set_conn_hostname(bio_, target.c_str());
    if (BIO_do_connect(bio_) <= 0 || BIO_do_handshake(bio_) <= 0) {
      throw Error(ErrorKind::Connection, "test client: TLS connect failed");
    }
  }
  ~TlsClientStream() override {
    BIO_free_all(bio_);
    SSL_CTX_free(ctx_);
  }

  void write_all(std::string_view data) override {
    while (!data.empty()) {
      const int n = BIO_write(bio_, data.data(), static_cast<int>(data.size()));
      if (n <= 0)
        throw Error(ErrorKind::Connection, "test client: TLS write failed");
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  std::size_t read_some(char* buf, std::size_t n) override {
    const int got = BIO_read(bio_, buf, static_cast<int>(n));
    if (got > 0)
      return static_cast<std::size_t>(got);
    SSL* ssl = nullptr;
    BIO_get_ssl(bio_, &ssl);
    if (SSL_get_error(ssl, got) == SSL_ERROR_ZERO_RETURN)
      return 0;
    throw Error(ErrorKind::Connection, "test client: TLS read failed");
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  BIO* bio_ = nullptr;
};

TEST(WebSocketTestServer, RunsExecScriptOverTlsWithClientCertificates) {
  const testing::TestPki& pki = testing::TestPki::shared();
  // Kubernetes reads the user from CN and the groups from O.
  const sandbox::CertifiedKey alice = sandbox::issue_certificate(
      pki.ca, {.common_name = "alice", .organizations = {"devs"}, .client_auth = true});
  testing::WebSocketTestServer::Options options;
  options.certificate = pki.server;
  options.client_ca_pem = pki.ca.cert_pem;
  options.exec_script = [](ServerSession& s) {
    auto input = s.read_message();
    if (!input)
      throw std::runtime_error("no stdin message");
    s.send_channel(ExecChannel::Stdout, "got:" + input->payload.substr(1));
    s.send_channel(ExecChannel::Stderr, "warning");
    s.send_status(testing::exit_code_status(3));
    s.send_close();
  };
  testing::WebSocketTestServer server(std::move(options));

  std::string out, err;
  ExecResult result;
  {
    TlsClientStream stream(server.port(), pki.ca.cert_pem, &alice);
    WebSocketClient client(stream);
    const std::string path = "/api/v1/namespaces/team-a/pods/job-worker-0/exec?" +
                             exec_query({"cat"}, "main", true, true, true, false);
    client.handshake(server.host_port(), path, kAuth, {"v4.channel.k8s.io"});
    result = run_exec_session(
        client, "hello", [&](std::string_view d) { out += d; },
        [&](std::string_view d) { err += d; });
  }  // hang up, as the real client does once the session is over

  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(out, "got:hello");
  EXPECT_EQ(err, "warning");
  ASSERT_TRUE(server.wait_for_connections(1, std::chrono::seconds(5)));
  server.stop();
  EXPECT_TRUE(server.errors().empty()) << server.errors().front();
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path, "/api/v1/namespaces/team-a/pods/job-worker-0/exec");
  EXPECT_EQ(requests[0].query, "command=cat&container=main&stdin=true&stdout=true&stderr=true");
  EXPECT_EQ(requests[0].header("authorization"), "Bearer abc123");
  EXPECT_EQ(requests[0].header("sec-websocket-protocol"), "v4.channel.k8s.io");
  EXPECT_EQ(requests[0].client_subject, "CN=alice,O=devs");
}

TEST(WebSocketTestServer, AnswersOtherRequestsWithTheConfiguredStatus) {
  const testing::TestPki& pki = testing::TestPki::shared();
  testing::WebSocketTestServer::Options options;
  options.certificate = pki.server;
  options.status = 403;
  options.body = testing::failure_status(403, "Forbidden", "exec is not allowed here").dump();
  testing::WebSocketTestServer server(std::move(options));

  TlsClientStream stream(server.port(), pki.ca.cert_pem, nullptr);
  WebSocketClient client(stream);
  // Offers only a protocol the server does not speak, so it is not an exec upgrade.
  Error e = expect_error([&] {
    client.handshake(server.host_port(), "/api/v1/namespaces/ns/pods/p/exec", {}, {"v9.example"});
  });
  EXPECT_EQ(e.kind(), ErrorKind::Forbidden);
  EXPECT_NE(e.message().find("exec is not allowed here"), std::string::npos) << e.message();
  server.stop();
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(WebSocketTestServer, RefusesClientsWithoutACertificateWhenOneIsRequired) {
  const testing::TestPki& pki = testing::TestPki::shared();
  testing::WebSocketTestServer::Options options;
  options.certificate = pki.server;
  options.client_ca_pem = pki.ca.cert_pem;
  testing::WebSocketTestServer server(std::move(options));

  Error e = expect_error([&] {
    // TLS 1.3 may report the refusal only when the client first reads.
    TlsClientStream stream(server.port(), pki.ca.cert_pem, nullptr);
    WebSocketClient client(stream);
    client.handshake(server.host_port(), "/exec", {}, {"v4.channel.k8s.io"});
  });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  ASSERT_TRUE(server.wait_for_connections(1, std::chrono::seconds(5)));
  server.stop();
  EXPECT_TRUE(server.requests().empty());
  ASSERT_EQ(server.errors().size(), 1u);
  EXPECT_NE(server.errors()[0].find("TLS handshake failed"), std::string::npos)
      << server.errors()[0];
}

}  // namespace
}  // namespace trainctl::kube::ws
