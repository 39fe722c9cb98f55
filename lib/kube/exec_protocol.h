#pragma once

// Kubernetes' remote command protocol over WebSocket (pods/exec), subprotocols
// v4.channel.k8s.io and v5.channel.k8s.io: every binary message starts with a channel byte.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kube/websocket.h"

namespace trainctl::kube {

inline constexpr std::string_view kExecProtocolV4 = "v4.channel.k8s.io";
/// v4 plus a way to close one stream (stdin) while the others stay open.
inline constexpr std::string_view kExecProtocolV5 = "v5.channel.k8s.io";

/// The channel byte that starts every message.
enum class ExecChannel : std::uint8_t {
  Stdin = 0,
  Stdout = 1,
  Stderr = 2,
  Error = 3,  // one metav1.Status, sent when the command ends
  Resize = 4,
  Close = 255,  // v5 only: the payload names the channel the sender is done with
};

/// A message for `channel` carrying `data`.
std::string encode_channel(ExecChannel channel, std::string_view data);
std::string encode_stdin(std::string_view data);
/// A terminal resize event: {"Width":w,"Height":h} on channel 4.
std::string encode_resize(std::uint16_t width, std::uint16_t height);
/// v5: tells the server no more stdin will come, so the command sees end of file.
std::string encode_close_stdin();

/// The outcome of a remote command.
struct ExecResult {
  int exit_code = 0;
  /// What the command printed, for each stream that had no sink of its own.
  std::string stdout_data, stderr_data;
};

/// Receives output as it arrives; may be empty.
using ExecSink = std::function<void(std::string_view)>;

/// Reads the Status of the error channel: 0 for Success, the code of a NonZeroExitCode failure;
/// throws trainctl::Error for any other failure (kind from the Status code and reason) and
/// Error(Protocol) for something that is not a Status.
int exit_code_from_status(const nlohmann::json& status);

/// Routes the messages of one exec session to sinks and reads its final status.
class ExecStreamDecoder {
 public:
  /// Null sinks collect into result().
  ExecStreamDecoder(ExecSink on_stdout, ExecSink on_stderr);

  /// Takes one message. Empty messages and a bare channel byte (servers open each channel with
  /// one) are ignored, as are channels a client does not read. Returns true once the status
  /// has arrived on the error channel.
  bool handle(std::string_view message);

  /// The exit code, once the status has arrived.
  std::optional<int> exit_code() const { return exit_code_; }
  ExecResult& result() { return result_; }

 private:
  ExecSink on_stdout_, on_stderr_;
  ExecResult result_;
  std::optional<int> exit_code_;
};

/// Runs an exec session on an upgraded WebSocket: sends `stdin_data` (if any) on channel 0
/// (then closes stdin under v5), routes output until the status arrives or the server closes.
/// A server Close without a status means exit 0; an end without Close throws Error(Connection).
ExecResult run_exec_session(ws::WebSocketClient& socket, std::string_view stdin_data,
                            ExecSink on_stdout, ExecSink on_stderr);

/// The query string of a pods/exec request, without the leading '?':
/// `command=a&command=b&container=c&stdin=true&stdout=true&stderr=true`, percent-encoded.
/// Flags that are false are left out, as kubectl does.
std::string exec_query(const std::vector<std::string>& command, std::string_view container,
                       bool want_stdin, bool want_stdout, bool want_stderr, bool tty);

}  // namespace trainctl::kube
