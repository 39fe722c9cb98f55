#pragma once

// Test support for pods/exec over WebSocket: the server side of a WebSocket connection, driven by
// a script a test writes, over an in-memory pipe or over a real TLS socket on loopback.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kube/exec_protocol.h"
#include "kube/websocket.h"
#include "sandbox/pki.h"

namespace trainctl::testing {

/// An HTTP/1.1 request head as the server received it.
struct RequestHead {
  std::string method;
  std::string target;  // path and query, as sent
  std::string path;
  std::string query;             // without '?'
  kube::ws::HeaderList headers;  // names as sent
  std::string raw;
  /// Subject of the verified client certificate (RFC 2253), empty when none was presented.
  std::string client_subject;

  /// The values of a header, case-insensitively, in order.
  std::vector<std::string> header_values(std::string_view name) const;
  /// The comma-separated tokens of every value of a header, trimmed, in order (e.g. the
  /// subprotocols a client offered).
  std::vector<std::string> header_tokens(std::string_view name) const;
  /// The first value of a header, case-insensitively; empty when absent.
  std::string header(std::string_view name) const;
};

/// Parses "GET /p?q HTTP/1.1\r\nName: value\r\n..." (without the final blank line or with it).
RequestHead parse_request_head(std::string_view raw);

/// One end of an in-memory duplex pipe: what one end writes, the other reads. A read that waits
/// more than 10 seconds throws Error(Timeout), so a deadlocked test fails rather than hangs.
class PipeStream final : public kube::ws::ByteStream {
 public:
  struct Buffer;
  PipeStream(std::shared_ptr<Buffer> in, std::shared_ptr<Buffer> out);
  ~PipeStream() override;

  /// Throws Error(Connection) once the other end is gone.
  void write_all(std::string_view bytes) override;
  std::size_t read_some(char* buf, std::size_t n) override;
  /// Ends this end's output: the other end reads end of stream after what was written.
  void close_write();

 private:
  std::shared_ptr<Buffer> in_, out_;
};

/// Two connected pipe ends (client, server).
std::pair<std::unique_ptr<PipeStream>, std::unique_ptr<PipeStream>> make_pipe_pair();

/// The server side of one connection, for test scripts: reads the request head, answers it, reads
/// client frames (which must be masked, else Error(Protocol)) and sends unmasked frames, valid or
/// deliberately broken.
class ServerSession {
 public:
  explicit ServerSession(kube::ws::ByteStream& stream);

  /// Reads a request head; throws Error(Connection) at end of stream. Later bytes stay buffered
  /// for read_frame().
  RequestHead read_request_head();

  /// The 101 answer to an upgrade request, choosing `subprotocol` (none when empty).
  static std::string upgrade_response(const RequestHead& request, std::string_view subprotocol);
  void accept(const RequestHead& request, std::string_view subprotocol);
  /// A complete non-upgrade response with a Content-Length (Connection: close).
  void respond(int code, std::string_view body, std::string_view content_type = "application/json");

  void write_raw(std::string_view bytes);
  void send_frame(const kube::ws::Frame& frame);
  void send(kube::ws::Opcode opcode, std::string_view payload);
  /// One exec message: the channel byte, then data.
  void send_channel(kube::ExecChannel channel, std::string_view data);
  /// The final metav1.Status on the error channel.
  void send_status(const nlohmann::json& status);
  void send_close(std::uint16_t code = kube::ws::kCloseNormal, std::string_view reason = {});

  /// The next client frame, unmasked; nullopt at end of stream.
  std::optional<kube::ws::Frame> read_frame();
  /// The next client message (data messages reassembled; control frames as they come); nullopt
  /// at end of stream.
  std::optional<kube::ws::Message> read_message();

 private:
  kube::ws::ByteStream& stream_;
  kube::ws::FrameDecoder decoder_;
  kube::ws::MessageReader reader_;
  std::string pending_;  // read past the request head, not yet fed to the decoder
};

/// Status objects as the API server and kubelet send them.
nlohmann::json success_status();
nlohmann::json exit_code_status(int exit_code);
nlohmann::json failure_status(int code, std::string_view reason, std::string_view message);

using ServerScript = std::function<void(ServerSession&)>;

/// Runs a server script on its own thread against the server end of an in-memory pipe; the test
/// drives the client end. The script's exception, if any, is kept for the test to check.
class ScriptedPipeServer {
 public:
  explicit ScriptedPipeServer(ServerScript script);
  ~ScriptedPipeServer();

  kube::ws::ByteStream& client_stream() { return *client_; }
  /// Hangs up the client end and waits for the script; returns its failure message, if any.
  std::string finish();

 private:
  std::unique_ptr<PipeStream> client_, server_;
  std::thread thread_;
  std::string error_;
  bool finished_ = false;
};

/// A TLS server on 127.0.0.1 (ephemeral port) that plays the API server's part in pods/exec:
/// a WebSocket upgrade to a path containing "/exec" offering the configured subprotocol gets a
/// 101 and the exec script (unless upgrades are refused); any other request gets the configured
/// status and body. One thread per connection; a connection whose client stays silent for 10
/// seconds fails (see errors()), so a deadlocked test fails rather than hangs.
class WebSocketTestServer {
 public:
  struct Options {
    /// The serving certificate, e.g. TestPki::shared().server (tests/support/https_test_server.h).
    sandbox::CertifiedKey certificate;
    /// When set, clients must present a certificate this CA (PEM, one or more) signed.
    std::string client_ca_pem;
    std::string subprotocol = std::string(kube::kExecProtocolV4);
    ServerScript exec_script;
    /// Answers exec upgrades with `status` and `body` too, as an API server does when the user
    /// may not exec or the pod does not exist.
    bool refuse_upgrades = false;
    int status = 404;
    std::string body =
        R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)"
        R"("message":"the server could not find the requested resource","reason":"NotFound",)"
        R"("details":{},"code":404})";
  };

  /// Starts listening; throws when the certificate or key does not load.
  explicit WebSocketTestServer(Options options);
  ~WebSocketTestServer();
  WebSocketTestServer(const WebSocketTestServer&) = delete;
  WebSocketTestServer& operator=(const WebSocketTestServer&) = delete;

  int port() const { return port_; }
  /// "127.0.0.1:<port>", for a Host header or a server URL.
  std::string host_port() const;
  void set_exec_script(ServerScript script);
  void set_response(int status, std::string body);

  /// Request heads in the order they arrived.
  std::vector<RequestHead> requests() const;
  /// What went wrong inside connections (TLS handshakes, scripts), in order.
  std::vector<std::string> errors() const;
  /// Waits until `n` connections have finished (true) or `timeout` passes (false).
  bool wait_for_connections(std::size_t n, std::chrono::milliseconds timeout) const;

  /// Stops accepting, cuts open connections and joins every thread. Idempotent.
  void stop();

 private:
  struct Tls;
  void accept_loop();
  void serve(int fd);
  void record_error(std::string message);

  std::unique_ptr<Tls> tls_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;

  mutable std::mutex mu_;
  mutable std::condition_variable finished_cv_;
  Options options_;
  std::vector<RequestHead> requests_;
  std::vector<std::string> errors_;
  std::vector<std::thread> connections_;
  std::vector<int> open_fds_;
  std::size_t finished_ = 0;
};

}  // namespace trainctl::testing
