#pragma once

// HTTP/1.1 message syntax shared by the sandbox's server and the CLI's client
// (kube/direct_transport.h): token and field-value rules, heads, and bodies (fixed length,
// chunked, or to the end of the stream) read off a connection.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace trainctl {

/// A head (start line and fields) larger than this is refused (a server answers 431).
inline constexpr std::size_t kMaxHead = std::size_t{64} * 1024;
/// A chunk-size line with its extensions; longer is malformed.
inline constexpr std::size_t kMaxChunkLine = 4096;
/// What one read off a connection asks for.
inline constexpr std::size_t kReadSize = std::size_t{16} * 1024;

/// A message this side refuses: the status a server answers with (a client reports the message).
struct HttpFailure {
  int status;
  std::string message;
};

bool is_token_char(char c);

bool is_token(std::string_view s);

/// Header values may hold visible characters, spaces and tabs (and obs-text), never CR, LF, NUL.
bool is_field_value(std::string_view s);

/// Whether a comma-separated header value lists `token` (case-insensitively).
bool has_token(std::string_view value, std::string_view token);

/// Where the head ends in `buffer`: the index just past the blank line, or npos.
std::size_t find_head_end(std::string_view buffer);

/// The next line of `text` from `pos`, without its CRLF or LF; advances `pos` past it.
std::string_view next_line(std::string_view text, std::size_t& pos);

/// How a message body is framed.
struct BodyFraming {
  bool chunked = false;
  /// Read until the peer closes (a response with neither Content-Length nor chunked coding).
  bool to_end = false;
  std::size_t length = 0;
};

/// Reads messages off a connection; the bytes received and not yet used stay in `buffer`.
class MessageReader {
 public:
  /// Reads at most `n` bytes into `buf`: 0 at the end of the stream; throws Error(Timeout) when
  /// the peer is silent for too long, Error(Connection) when the connection fails.
  using ReadSome = std::function<std::size_t(char* buf, std::size_t n)>;
  /// Receives a body piece by piece; returning false ends the body early.
  using Sink = std::function<bool(std::string_view)>;

  MessageReader(ReadSome read, std::string& buffer) : read_(std::move(read)), buffer_(buffer) {}

  /// Reads the next head, blank lines before it skipped (RFC 9112 §2.2), into `head` (with its
  /// blank line). False when the stream ends, or idles out, before a byte of it. Throws
  /// HttpFailure{431} when it is over kMaxHead, Error when the connection fails within it.
  bool read_head(std::string& head);

  /// Whether read_head() returned false because the peer stayed silent.
  bool idled_out() const { return idled_out_; }

  /// Reads a body and hands it to `sink`; false when the sink ended it. Throws HttpFailure (413
  /// past `max_body`, 400 for a malformed chunk) and Error when the connection ends within it.
  bool read_body(const BodyFraming& framing, std::size_t max_body, const Sink& sink);

 private:
  bool fill();
  void need(std::size_t n);
  std::string read_line(std::size_t limit, std::string_view what);

  ReadSome read_;
  std::string& buffer_;
  bool idled_out_ = false;
};

}  // namespace trainctl
