#include "kube/websocket.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "error.h"
#include "text.h"

namespace trainctl::kube::ws {
namespace {

// The GUID every WebSocket server appends to the client key (§1.3).
constexpr std::string_view kAcceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
constexpr std::size_t kMaxControlPayload = 125;
constexpr std::size_t kMaxResponseHead = std::size_t{64} * 1024;
// An error body only feeds an error message; more than this is not worth waiting for.
constexpr std::size_t kMaxErrorBody = std::size_t{1024} * 1024;

[[noreturn]] void protocol_error(std::string message) {
  throw Error(ErrorKind::Protocol, "websocket: " + std::move(message));
}

bool is_control(Opcode op) {
  return static_cast<std::uint8_t>(op) >= 8;
}

bool is_known_opcode(std::uint8_t op) {
  return op == 0 || op == 1 || op == 2 || op == 8 || op == 9 || op == 10;
}

std::array<std::uint8_t, 4> random_mask() {
  std::array<std::uint8_t, 4> mask{};
  if (RAND_bytes(mask.data(), static_cast<int>(mask.size())) != 1) {
    throw Error(ErrorKind::Connection, "websocket: the system random generator failed");
  }
  return mask;
}

// Strict UTF-8 check (no overlong forms, no surrogates, nothing above U+10FFFF), as §8.1 asks of
// Text messages and close reasons.
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t extra = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size())
      return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    if (cp >= 0xD800 && cp <= 0xDFFF)
      return false;
    i += extra + 1;
  }
  return true;
}

// Codes a peer may put on the wire (§7.4): registered ones and the 3000-4999 private range.
bool is_sendable_close_code(std::uint16_t code) {
  if (code >= 3000 && code <= 4999)
    return true;
  if (code >= 1000 && code <= 1003)
    return true;
  return code >= 1007 && code <= 1014;
}

// Splits a comma-separated header value into trimmed, non-empty tokens.
std::vector<std::string> split_tokens(std::string_view value) {
  std::vector<std::string> tokens;
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    std::string_view token = trim(value.substr(0, comma));
    if (!token.empty())
      tokens.emplace_back(token);
    if (comma == std::string_view::npos)
      break;
    value.remove_prefix(comma + 1);
  }
  return tokens;
}

void reject_line_breaks(std::string_view what, std::string_view value) {
  if (value.find_first_of("\r\n") != std::string_view::npos) {
    throw Error(ErrorKind::Config, fmt::format("websocket: {} contains a line break", what));
  }
}

/// The status line and headers of an HTTP/1.1 response; header names lower-cased.
struct ResponseHead {
  int code = 0;
  HeaderList headers;

  std::vector<std::string_view> values(std::string_view name) const {
    std::vector<std::string_view> out;
    for (const auto& [key, value] : headers) {
      if (key == name)
        out.push_back(value);
    }
    return out;
  }
  std::optional<std::string_view> value(std::string_view name) const {
    auto all = values(name);
    if (all.empty())
      return std::nullopt;
    return all.front();
  }
};

ResponseHead parse_response_head(std::string_view head) {
  ResponseHead out;
  std::size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  // "HTTP/1.1 101 Switching Protocols"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    protocol_error(fmt::format("the server did not answer with HTTP/1.x: {:?}",
                               std::string(status_line.substr(0, 80))));
  }
  const std::string_view code_text = status_line.substr(9, 3);
  auto [ptr, ec] = std::from_chars(code_text.data(), code_text.data() + code_text.size(), out.code);
  if (ec != std::errc() || ptr != code_text.data() + code_text.size()) {
    protocol_error(fmt::format("bad HTTP status line {:?}", std::string(status_line)));
  }
  while (eol != std::string_view::npos) {
    const std::size_t start = eol + 2;
    eol = head.find("\r\n", start);
    std::string_view line = head.substr(start, eol == std::string_view::npos ? eol : eol - start);
    if (line.empty())
      continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      protocol_error(fmt::format("bad HTTP header line {:?}", std::string(line.substr(0, 80))));
    }
    out.headers.emplace_back(to_lower(trim(line.substr(0, colon))),
                             std::string(trim(line.substr(colon + 1))));
  }
  return out;
}

// Decodes a complete chunked body; nullopt while the final chunk has not arrived.
std::optional<std::string> decode_chunked(std::string_view data) {
  std::string body;
  for (;;) {
    const std::size_t eol = data.find("\r\n");
    if (eol == std::string_view::npos)
      return std::nullopt;
    std::string_view size_text = data.substr(0, eol);
    size_text = size_text.substr(0, size_text.find(';'));
    std::size_t size = 0;
    auto [ptr, ec] =
        std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (ec != std::errc() || size_text.empty())
      protocol_error("bad chunk size in error response");
    data.remove_prefix(eol + 2);
    if (size == 0)
      return body;  // trailers, if any, do not matter here
    if (data.size() < size + 2)
      return std::nullopt;
    body.append(data.substr(0, size));
    data.remove_prefix(size + 2);
  }
}

std::string upgrade_request(std::string_view host, std::string_view path_and_query,
                            std::string_view key, const HeaderList& headers,
                            const std::vector<std::string>& subprotocols) {
  reject_line_breaks("the host", host);
  reject_line_breaks("the request path", path_and_query);
  std::string request = fmt::format(
      "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: {}\r\nSec-WebSocket-Version: 13\r\n",
      path_and_query, host, key);
  if (!subprotocols.empty()) {
    for (const auto& p : subprotocols)
      reject_line_breaks("a subprotocol", p);
    request += fmt::format("Sec-WebSocket-Protocol: {}\r\n", fmt::join(subprotocols, ", "));
  }
  for (const auto& [name, value] : headers) {
    reject_line_breaks(fmt::format("header {}", name), name);
    reject_line_breaks(fmt::format("header {}", name), value);
    request += fmt::format("{}: {}\r\n", name, value);
  }
  return request + "\r\n";
}

// Reads up to the blank line ending the response head; what came after it is left in `rest`.
ResponseHead read_response_head(ByteStream& stream, std::string& rest) {
  std::string received;
  std::size_t head_end = std::string::npos;
  char buf[4096];
  while ((head_end = received.find("\r\n\r\n")) == std::string::npos) {
    if (received.size() > kMaxResponseHead)
      protocol_error("HTTP response head too large");
    const std::size_t n = stream.read_some(buf, sizeof buf);
    if (n == 0) {
      throw Error(ErrorKind::Connection,
                  "websocket: the connection closed before the server answered the upgrade");
    }
    received.append(buf, n);
  }
  rest = received.substr(head_end + 4);
  return parse_response_head(std::string_view(received).substr(0, head_end));
}

// Reads the body of a refusal, delimited by Content-Length, chunked encoding or end of stream.
std::string read_error_body(ByteStream& stream, const ResponseHead& head, std::string data) {
  const auto encoding = head.value("transfer-encoding");
  const bool chunked = encoding && to_lower(*encoding).find("chunked") != std::string::npos;
  std::size_t wanted = kMaxErrorBody;
  if (const auto length = head.value("content-length"); length && !chunked) {
    std::from_chars(length->data(), length->data() + length->size(), wanted);
    wanted = std::min(wanted, kMaxErrorBody);
  }
  char buf[4096];
  for (;;) {
    if (chunked) {
      if (auto body = decode_chunked(data))
        return *body;
    } else if (data.size() >= wanted) {
      break;
    }
    if (data.size() > kMaxErrorBody)
      break;
    const std::size_t n = stream.read_some(buf, sizeof buf);
    if (n == 0)
      break;  // end of stream ends a body without a length
    data.append(buf, n);
  }
  return chunked ? std::string() : data.substr(0, std::min(wanted, data.size()));
}

// Checks a 101 answer (§4.1) and returns the subprotocol the server chose, empty when none.
std::string check_upgrade(const ResponseHead& head, std::string_view key,
                          const std::vector<std::string>& offered) {
  const auto upgrade = head.value("upgrade");
  if (!upgrade || to_lower(*upgrade) != "websocket")
    protocol_error("the 101 response lacks \"Upgrade: websocket\"");
  bool connection_upgrade = false;
  for (auto value : head.values("connection")) {
    for (const auto& token : split_tokens(value))
      connection_upgrade = connection_upgrade || to_lower(token) == "upgrade";
  }
  if (!connection_upgrade)
    protocol_error("the 101 response lacks \"Connection: Upgrade\"");
  const auto accept = head.value("sec-websocket-accept");
  if (!accept || *accept != websocket_accept_key(key))
    protocol_error("the server's Sec-WebSocket-Accept does not match the key sent");
  for (auto value : head.values("sec-websocket-extensions")) {
    if (!split_tokens(value).empty()) {
      protocol_error(
          fmt::format("the server chose extension {:?}, none was offered", std::string(value)));
    }
  }
  std::vector<std::string> chosen;
  for (auto value : head.values("sec-websocket-protocol")) {
    for (auto& token : split_tokens(value))
      chosen.push_back(std::move(token));
  }
  if (chosen.empty())
    return {};
  if (chosen.size() > 1)
    protocol_error("the server chose more than one subprotocol");
  if (std::find(offered.begin(), offered.end(), chosen[0]) == offered.end()) {
    protocol_error(
        fmt::format("the server chose subprotocol {:?}, which was not offered", chosen[0]));
  }
  return chosen[0];
}

}  // namespace

ByteStream::~ByteStream() = default;

std::string encode_frame(const Frame& frame, std::optional<std::array<std::uint8_t, 4>> mask) {
  const std::size_t size = frame.payload.size();
  std::string out;
  out.reserve(size + 14);
  out.push_back(
      static_cast<char>((frame.fin ? 0x80 : 0x00) | static_cast<std::uint8_t>(frame.opcode)));
  const std::uint8_t mask_bit = mask ? 0x80 : 0x00;
  if (size < 126) {
    out.push_back(static_cast<char>(mask_bit | size));
  } else if (size <= 0xFFFF) {
    out.push_back(static_cast<char>(mask_bit | 126));
    out.push_back(static_cast<char>(size >> 8));
    out.push_back(static_cast<char>(size & 0xFF));
  } else {
    out.push_back(static_cast<char>(mask_bit | 127));
    for (int shift = 56; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((static_cast<std::uint64_t>(size) >> shift) & 0xFF));
    }
  }
  if (!mask) {
    out.append(frame.payload);
    return out;
  }
  out.append(reinterpret_cast<const char*>(mask->data()), mask->size());
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(static_cast<char>(frame.payload[i] ^ (*mask)[i % 4]));
  }
  return out;
}

void FrameDecoder::feed(std::string_view bytes) {
  // Drop consumed bytes before growing, so a long-lived stream does not keep its history.
  if (pos_ > 0 && pos_ >= buffer_.size() / 2) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  buffer_.append(bytes);
}

std::optional<Frame> FrameDecoder::next() {
  const std::string_view in = std::string_view(buffer_).substr(pos_);
  if (in.size() < 2)
    return std::nullopt;
  const auto b0 = static_cast<std::uint8_t>(in[0]);
  const auto b1 = static_cast<std::uint8_t>(in[1]);
  // Validate what the first two bytes tell before waiting for the rest.
  if (b0 & 0x70)
    protocol_error("frame has reserved bits set (no extension was negotiated)");
  const std::uint8_t op = b0 & 0x0F;
  if (!is_known_opcode(op))
    protocol_error(fmt::format("unknown opcode {:#x}", op));
  Frame frame;
  frame.fin = (b0 & 0x80) != 0;
  frame.opcode = static_cast<Opcode>(op);
  const bool masked = (b1 & 0x80) != 0;
  if (masked != options_.expect_masked) {
    protocol_error(masked ? "a server must not mask its frames" : "a client must mask its frames");
  }
  const std::uint8_t len7 = b1 & 0x7F;
  if (is_control(frame.opcode)) {
    if (!frame.fin)
      protocol_error("control frames must not be fragmented");
    if (len7 > kMaxControlPayload)
      protocol_error("control frame payload over 125 bytes");
  }
  const std::size_t len_bytes = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
  const std::size_t header = 2 + len_bytes + (masked ? 4 : 0);
  if (in.size() < header)
    return std::nullopt;
  std::uint64_t length = len7;
  if (len_bytes > 0) {
    length = 0;
    for (std::size_t i = 0; i < len_bytes; ++i) {
      length = (length << 8) | static_cast<std::uint8_t>(in[2 + i]);
    }
    if (length >> 63)
      protocol_error("64-bit payload length has its top bit set");
  }
  if (length > options_.max_payload) {
    protocol_error(fmt::format("frame of {} bytes exceeds the limit of {} bytes", length,
                               options_.max_payload));
  }
  if (in.size() - header < length)
    return std::nullopt;
  frame.payload.assign(in.substr(header, static_cast<std::size_t>(length)));
  if (masked) {
    const std::string_view key = in.substr(2 + len_bytes, 4);
    for (std::size_t i = 0; i < frame.payload.size(); ++i)
      frame.payload[i] = static_cast<char>(frame.payload[i] ^ key[i % 4]);
  }
  pos_ += header + static_cast<std::size_t>(length);
  if (pos_ == buffer_.size()) {
    buffer_.clear();
    pos_ = 0;
  }
  return frame;
}

CloseInfo parse_close_payload(std::string_view payload) {
  CloseInfo info;
  if (payload.empty())
    return info;
  if (payload.size() == 1)
    protocol_error("Close frame body of one byte");
  info.code = static_cast<std::uint16_t>((static_cast<std::uint8_t>(payload[0]) << 8) |
                                         static_cast<std::uint8_t>(payload[1]));
  if (!is_sendable_close_code(info.code)) {
    protocol_error(fmt::format("invalid close code {}", info.code));
  }
  info.reason.assign(payload.substr(2));
  if (!is_valid_utf8(info.reason))
    protocol_error("close reason is not valid UTF-8");
  return info;
}

std::string encode_close_payload(std::uint16_t code, std::string_view reason) {
  std::size_t keep = std::min(reason.size(), kMaxControlPayload - 2);
  // Never cut a UTF-8 sequence in half.
  while (keep < reason.size() && keep > 0 &&
         (static_cast<std::uint8_t>(reason[keep]) & 0xC0) == 0x80) {
    --keep;
  }
  std::string out;
  out.push_back(static_cast<char>(code >> 8));
  out.push_back(static_cast<char>(code & 0xFF));
  out.append(reason.substr(0, keep));
  return out;
}

std::optional<Message> MessageReader::push(Frame frame) {
  if (is_control(frame.opcode)) {
    Message msg{frame.opcode, std::move(frame.payload), std::nullopt};
    if (msg.opcode == Opcode::Close)
      msg.close = parse_close_payload(msg.payload);
    return msg;
  }
  if (frame.opcode == Opcode::Continuation) {
    if (!partial_opcode_)
      protocol_error("continuation frame without a message to continue");
  } else {
    if (partial_opcode_)
      protocol_error("new data frame before the fragmented message ended");
    partial_opcode_ = frame.opcode;
    partial_.clear();
  }
  if (partial_.size() + frame.payload.size() > max_message_) {
    protocol_error(fmt::format("message exceeds the limit of {} bytes", max_message_));
  }
  partial_.append(frame.payload);
  if (!frame.fin)
    return std::nullopt;
  Message msg{*partial_opcode_, std::move(partial_), std::nullopt};
  partial_opcode_.reset();
  partial_.clear();
  if (msg.opcode == Opcode::Text && !is_valid_utf8(msg.payload)) {
    protocol_error("text message is not valid UTF-8");
  }
  return msg;
}

std::string websocket_accept_key(std::string_view client_key) {
  const std::string input = std::string(client_key) + std::string(kAcceptGuid);
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  return base64_encode(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
}

std::string make_client_key() {
  unsigned char nonce[16];
  if (RAND_bytes(nonce, sizeof nonce) != 1) {
    throw Error(ErrorKind::Connection, "websocket: the system random generator failed");
  }
  return base64_encode(std::string_view(reinterpret_cast<const char*>(nonce), sizeof nonce));
}

WebSocketClient::WebSocketClient(ByteStream& stream, std::size_t max_message)
    : stream_(stream),
      decoder_(FrameDecoder::Options{.max_payload = max_message, .expect_masked = false}),
      reader_(max_message) {}

void WebSocketClient::handshake(std::string_view host, std::string_view path_and_query,
                                const HeaderList& headers,
                                const std::vector<std::string>& subprotocols) {
  const std::string key = make_client_key();
  stream_.write_all(upgrade_request(host, path_and_query, key, headers, subprotocols));
  std::string rest;
  const ResponseHead head = read_response_head(stream_, rest);
  if (head.code != 101) {
    // The server refused the upgrade; its body (an API Status) says why.
    throw Error::from_response(head.code, read_error_body(stream_, head, std::move(rest)));
  }
  subprotocol_ = check_upgrade(head, key, subprotocols);
  decoder_.feed(rest);
}

void WebSocketClient::send_frame(const Frame& frame) {
  stream_.write_all(encode_frame(frame, random_mask()));
}

void WebSocketClient::send(Opcode opcode, std::string_view payload) {
  if (close_sent_)
    protocol_error("cannot send after the Close frame");
  if (opcode == Opcode::Continuation || opcode == Opcode::Close) {
    protocol_error("send() takes whole messages; use close() to close");
  }
  if (is_control(opcode) && payload.size() > kMaxControlPayload) {
    protocol_error("control frame payload over 125 bytes");
  }
  send_frame(Frame{true, opcode, std::string(payload)});
}

std::optional<Message> WebSocketClient::next_message() {
  try {
    for (;;) {
      while (auto frame = decoder_.next()) {
        if (auto msg = reader_.push(std::move(*frame)))
          return msg;
      }
      char buf[16 * 1024];
      const std::size_t n = stream_.read_some(buf, sizeof buf);
      if (n == 0)
        return std::nullopt;
      decoder_.feed(std::string_view(buf, n));
    }
  } catch (const Error& e) {
    // §7.1.7: tell the peer why before failing the connection; it may be gone already.
    if (e.kind() == ErrorKind::Protocol && !close_sent_) {
      close_sent_ = true;
      try {
        send_frame(Frame{true, Opcode::Close, encode_close_payload(kCloseProtocolError, "")});
      } catch (const Error&) {
      }
    }
    throw;
  }
}

std::optional<Message> WebSocketClient::receive() {
  while (!peer_close_) {
    std::optional<Message> msg = next_message();
    if (!msg) {
      throw Error(ErrorKind::Connection, "websocket: the connection ended without a Close frame");
    }
    switch (msg->opcode) {
      case Opcode::Ping:
        if (!close_sent_)
          send_frame(Frame{true, Opcode::Pong, std::move(msg->payload)});
        break;
      case Opcode::Pong:
        break;
      case Opcode::Close:
        peer_close_ = msg->close;
        if (!close_sent_) {
          close_sent_ = true;
          // Echo the code (§5.5.1). The peer may hang up right after its Close; that is fine.
          const std::string body = peer_close_->code == kCloseNoStatus
                                       ? std::string()
                                       : encode_close_payload(peer_close_->code, "");
          try {
            send_frame(Frame{true, Opcode::Close, body});
          } catch (const Error&) {
          }
        }
        return std::nullopt;
      default:
        return msg;
    }
  }
  return std::nullopt;
}

void WebSocketClient::send_close(std::uint16_t code, std::string_view reason) {
  if (close_sent_)
    return;
  close_sent_ = true;
  send_frame(Frame{true, Opcode::Close, encode_close_payload(code, reason)});
}

void WebSocketClient::close(std::uint16_t code, std::string_view reason) {
  send_close(code, reason);
  while (!peer_close_) {
    std::optional<Message> msg = next_message();
    if (!msg)
      return;  // the peer hung up without its Close: nothing left to wait for
    if (msg->opcode == Opcode::Close)
      peer_close_ = msg->close;
  }
}

}  // namespace trainctl::kube::ws
