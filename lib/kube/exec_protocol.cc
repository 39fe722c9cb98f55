#include "kube/exec_protocol.h"

#include <fmt/format.h>

#include <charconv>

#include "error.h"
#include "json_access.h"

namespace trainctl::kube {
namespace {

using nlohmann::json;

// Stdin goes out in messages of this size, so one huge input does not become one huge frame.
constexpr std::size_t kStdinChunk = std::size_t{32} * 1024;

[[noreturn]] void protocol_error(std::string message) {
  throw Error(ErrorKind::Protocol, "exec: " + std::move(message));
}

// The exit code a NonZeroExitCode Status carries in details.causes[] (reason "ExitCode").
int exit_code_cause(const json& status) {
  const json* causes = nullptr;
  if (auto details = status.find("details"); details != status.end() && details->is_object()) {
    if (auto it = details->find("causes"); it != details->end() && it->is_array())
      causes = &*it;
  }
  if (causes == nullptr)
    protocol_error("a NonZeroExitCode status without details.causes");
  for (const json& cause : *causes) {
    if (!cause.is_object() || string_member(cause, "reason") != "ExitCode")
      continue;
    const std::string text = string_member(cause, "message");
    int code = -1;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), code);
    if (ec != std::errc() || ptr != text.data() + text.size() || code < 0) {
      protocol_error(fmt::format("invalid exit code {:?} in the status", text));
    }
    return code;
  }
  protocol_error("a NonZeroExitCode status without an ExitCode cause");
}

void percent_encode_into(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0x0F]);
    }
  }
}

}  // namespace

std::string encode_channel(ExecChannel channel, std::string_view data) {
  std::string out;
  out.reserve(data.size() + 1);
  out.push_back(static_cast<char>(channel));
  out.append(data);
  return out;
}

std::string encode_stdin(std::string_view data) {
  return encode_channel(ExecChannel::Stdin, data);
}

std::string encode_resize(std::uint16_t width, std::uint16_t height) {
  return encode_channel(ExecChannel::Resize, json{{"Width", width}, {"Height", height}}.dump());
}

std::string encode_close_stdin() {
  return encode_channel(ExecChannel::Close, std::string(1, static_cast<char>(ExecChannel::Stdin)));
}

int exit_code_from_status(const json& status) {
  if (!status.is_object())
    protocol_error("the error channel carried no Status object");
  const std::string outcome = string_member(status, "status");
  if (outcome == "Success")
    return 0;
  if (outcome != "Failure") {
    protocol_error(fmt::format("the error channel carried status {:?}", outcome));
  }
  if (string_member(status, "reason") == "NonZeroExitCode")
    return exit_code_cause(status);
  int code = 0;
  if (auto it = status.find("code"); it != status.end() && it->is_number_integer()) {
    code = it->get<int>();
  }
  // A failure without an HTTP code still happened on the server's side.
  throw Error::from_response(code > 0 ? code : 500, status.dump());
}

ExecStreamDecoder::ExecStreamDecoder(ExecSink on_stdout, ExecSink on_stderr)
    : on_stdout_(std::move(on_stdout)), on_stderr_(std::move(on_stderr)) {}

bool ExecStreamDecoder::handle(std::string_view message) {
  if (exit_code_)
    return true;
  // v4 servers open every channel with a message holding only its channel byte.
  if (message.size() <= 1)
    return false;
  const auto channel = static_cast<ExecChannel>(static_cast<std::uint8_t>(message[0]));
  const std::string_view data = message.substr(1);
  switch (channel) {
    case ExecChannel::Stdout:
      on_stdout_ ? on_stdout_(data) : void(result_.stdout_data.append(data));
      return false;
    case ExecChannel::Stderr:
      on_stderr_ ? on_stderr_(data) : void(result_.stderr_data.append(data));
      return false;
    case ExecChannel::Error: {
      const json status = json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (status.is_discarded()) {
        protocol_error(fmt::format("the error channel carried no Status: {:?}",
                                   std::string(data.substr(0, 200))));
      }
      exit_code_ = exit_code_from_status(status);
      result_.exit_code = *exit_code_;
      return true;
    }
    default:
      return false;  // stdin, resize or a channel from a newer protocol: nothing for a client
  }
}

ExecResult run_exec_session(ws::WebSocketClient& socket, std::string_view stdin_data,
                            ExecSink on_stdout, ExecSink on_stderr) {
  const std::string& protocol = socket.subprotocol();
  if (protocol != kExecProtocolV4 && protocol != kExecProtocolV5) {
    protocol_error(
        fmt::format("the server agreed to subprotocol {:?}, not {}", protocol, kExecProtocolV4));
  }
  ExecStreamDecoder decoder(std::move(on_stdout), std::move(on_stderr));
  if (!stdin_data.empty()) {
    for (std::size_t at = 0; at < stdin_data.size(); at += kStdinChunk) {
      socket.send(ws::Opcode::Binary, encode_stdin(stdin_data.substr(at, kStdinChunk)));
    }
    if (protocol == kExecProtocolV5)
      socket.send(ws::Opcode::Binary, encode_close_stdin());
  }
  while (std::optional<ws::Message> msg = socket.receive()) {
    if (msg->opcode != ws::Opcode::Binary)
      protocol_error("a text message on a binary protocol");
    if (!decoder.handle(msg->payload))
      continue;
    // The status is the last word; say goodbye, but the server may have hung up already.
    try {
      socket.send_close();
    } catch (const Error&) {
    }
    break;
  }
  // Without a status, only a normal Close means the command ended normally.
  if (!decoder.exit_code()) {
    const ws::CloseInfo& close = *socket.peer_close();
    if (close.code != ws::kCloseNormal && close.code != ws::kCloseNoStatus) {
      throw Error(ErrorKind::Connection,
                  fmt::format("exec: the server closed the session with code {}{}{}", close.code,
                              close.reason.empty() ? "" : ": ", close.reason));
    }
  }
  return std::move(decoder.result());
}

std::string exec_query(const std::vector<std::string>& command, std::string_view container,
                       bool want_stdin, bool want_stdout, bool want_stderr, bool tty) {
  std::string out;
  auto add = [&out](std::string_view key, std::string_view value) {
    if (!out.empty())
      out.push_back('&');
    out.append(key);
    out.push_back('=');
    percent_encode_into(out, value);
  };
  for (const auto& arg : command)
    add("command", arg);
  if (!container.empty())
    add("container", container);
  if (want_stdin)
    add("stdin", "true");
  if (want_stdout)
    add("stdout", "true");
  if (want_stderr)
    add("stderr", "true");
  if (tty)
    add("tty", "true");
  return out;
}

}  // namespace trainctl::kube
