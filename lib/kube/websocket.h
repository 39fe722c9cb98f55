#pragma once

// An RFC 6455 WebSocket client over an abstract byte stream. The transport (TLS through libcurl's
// CONNECT_ONLY mode in production, memory or a test socket in tests) stays behind ByteStream, so
// framing, the opening handshake and the closing handshake are tested without a network.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainctl::kube::ws {

enum class Opcode : std::uint8_t {
  Continuation = 0,
  Text = 1,
  Binary = 2,
  Close = 8,
  Ping = 9,
  Pong = 10,
};

/// One frame on the wire, already unmasked.
struct Frame {
  bool fin = true;
  Opcode opcode = Opcode::Binary;
  std::string payload;
};

/// The largest payload a frame or a reassembled message may carry unless configured otherwise.
inline constexpr std::size_t kDefaultMaxPayload = std::size_t{16} * 1024 * 1024;

/// Close codes of RFC 6455 §7.4.1 that trainctl sends or reports.
inline constexpr std::uint16_t kCloseNormal = 1000;
inline constexpr std::uint16_t kCloseProtocolError = 1002;
/// Reported (never sent) when a Close frame carried no status code.
inline constexpr std::uint16_t kCloseNoStatus = 1005;

/// Serialises a frame. Clients must pass a mask (§5.3); servers pass none.
std::string encode_frame(const Frame& frame, std::optional<std::array<std::uint8_t, 4>> mask);

/// Turns bytes into frames as they arrive, whatever the split of the byte stream.
class FrameDecoder {
 public:
  struct Options {
    std::size_t max_payload = kDefaultMaxPayload;
    /// True on the server side: frames must then be masked and are unmasked here. A client
    /// (false) must fail on a masked frame (§5.1).
    bool expect_masked = false;
  };

  FrameDecoder() = default;
  explicit FrameDecoder(Options options) : options_(options) {}

  void feed(std::string_view bytes);
  /// The next complete frame, or nullopt until more bytes are fed. Throws Error(Protocol) on a
  /// frame that breaks §5.2 (reserved bits, unknown opcode, oversized or fragmented control frame,
  /// payload over the limit, wrong masking).
  std::optional<Frame> next();
  /// Bytes fed but not yet returned as frames.
  std::size_t buffered() const { return buffer_.size() - pos_; }

 private:
  Options options_;
  std::string buffer_;
  std::size_t pos_ = 0;
};

/// What a Close frame said (§5.5.1).
struct CloseInfo {
  std::uint16_t code = kCloseNoStatus;
  std::string reason;
};

/// Parses a Close frame body; throws Error(Protocol) on a one-byte body, a code that may not be
/// sent on the wire, or a reason that is not UTF-8.
CloseInfo parse_close_payload(std::string_view payload);
/// Builds a Close frame body: the code in network order, then the reason (cut to fit 125 bytes).
std::string encode_close_payload(std::uint16_t code, std::string_view reason);

/// A complete message: a reassembled Text/Binary message, or a Ping, Pong or Close frame.
struct Message {
  Opcode opcode = Opcode::Binary;
  std::string payload;
  /// Set for Close messages only.
  std::optional<CloseInfo> close;
};

/// Reassembles fragmented data messages (§5.4) and passes control frames through, including
/// those interleaved between the fragments of a data message.
class MessageReader {
 public:
  explicit MessageReader(std::size_t max_message = kDefaultMaxPayload)
      : max_message_(max_message) {}

  /// Takes the next frame; returns a message once one is complete. Throws Error(Protocol) on a
  /// continuation without a start, a new data frame mid-message, an oversized message or a Text
  /// message that is not UTF-8.
  std::optional<Message> push(Frame frame);

 private:
  std::size_t max_message_;
  std::optional<Opcode> partial_opcode_;
  std::string partial_;
};

/// The Sec-WebSocket-Accept value a server must answer to this Sec-WebSocket-Key (§4.2.2).
std::string websocket_accept_key(std::string_view client_key);
/// A fresh Sec-WebSocket-Key: 16 random bytes, base64-encoded.
std::string make_client_key();

/// The transport under a WebSocket: a reliable, ordered byte stream (TLS socket, pipe, ...).
class ByteStream {
 public:
  virtual ~ByteStream();
  /// Writes every byte or throws trainctl::Error.
  virtual void write_all(std::string_view bytes) = 0;
  /// Reads at least one byte, blocking as needed; returns 0 at end of stream.
  virtual std::size_t read_some(char* buf, std::size_t n) = 0;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// A WebSocket client connection (RFC 6455) over a stream it does not own.
class WebSocketClient {
 public:
  explicit WebSocketClient(ByteStream& stream, std::size_t max_message = kDefaultMaxPayload);

  /// Sends the HTTP/1.1 Upgrade request and checks the answer. On 101 verifies
  /// Sec-WebSocket-Accept and that the chosen subprotocol is one offered; on any other status
  /// throws Error::from_response(code, body), so an API server's Status surfaces as such.
  void handshake(std::string_view host, std::string_view path_and_query, const HeaderList& headers,
                 const std::vector<std::string>& subprotocols);

  /// The subprotocol the server chose, empty when none.
  const std::string& subprotocol() const { return subprotocol_; }

  /// Sends one unfragmented message, masked with a fresh random key.
  void send(Opcode opcode, std::string_view payload);

  /// The next Text or Binary message. Answers Pings with Pongs; ignores Pongs. On the peer's
  /// Close answers with a Close (unless one was sent already) and returns nullopt, as it does on
  /// every call after. Throws Error(Connection) when the stream ends without a Close frame.
  std::optional<Message> receive();

  /// Sends a Close frame unless one was sent already, without waiting for the answer.
  void send_close(std::uint16_t code = kCloseNormal, std::string_view reason = {});

  /// The whole closing handshake: send_close(), then read until the peer's Close or the end of
  /// the stream, discarding data messages.
  void close(std::uint16_t code = kCloseNormal, std::string_view reason = {});

  /// What the peer's Close frame said, once one arrived.
  const std::optional<CloseInfo>& peer_close() const { return peer_close_; }

 private:
  std::optional<Message> next_message();
  void send_frame(const Frame& frame);

  ByteStream& stream_;
  FrameDecoder decoder_;
  MessageReader reader_;
  std::string subprotocol_;
  bool close_sent_ = false;
  std::optional<CloseInfo> peer_close_;
};

}  // namespace trainctl::kube::ws
