#pragma once

// HTTP/1.1 text for the HTTPS server: status lines and reasons, header checks, request heads,
// targets and bodies (fixed length or chunked) read off a connection. Not part of the server's
// interface.

#include "sandbox/http_connection.h"

namespace trainctl::sandbox {

// --- HTTP text ----------------------------------------------------------------------------------

/// The Status reason for a status this server answers by itself.
std::string_view status_reason(int status);

/// A metav1.Status body, so that Kubernetes clients show the message.
std::string status_body(int status, std::string_view message);

/// The Date header value (RFC 9110 IMF-fixdate), independent of the locale.
std::string http_date();

bool is_token_char(char c);

bool is_token(std::string_view s);

/// Header values may hold visible characters, spaces and tabs (and obs-text), never CR, LF, NUL.
bool is_field_value(std::string_view s);

/// Whether a comma-separated header value lists `token` (case-insensitively).
bool has_token(std::string_view value, std::string_view token);

/// A request this server refuses by itself: the status to answer with, then close.
struct HttpFailure {
  int status;
  std::string message;
};

/// Headers a handler may not set: the server frames the body itself.
bool is_framing_header(std::string_view lower_name);

/// Checks a handler's extra headers; reports whether one asks to close the connection.
bool check_extra_headers(const HeaderList& headers);

void append_extra_headers(std::string& out, const HeaderList& headers);

// --- Request parsing ----------------------------------------------------------------------------

/// Where the head ends in `buffer`: the index just past the blank line, or npos.
std::size_t find_head_end(std::string_view buffer);

/// The next line of `text` from `pos`, without its CRLF or LF; advances `pos` past it.
std::string_view next_line(std::string_view text, std::size_t& pos);

void parse_target(std::string_view target, Request& req);

/// Parses the request line and the header fields (the head without its blank line).
void parse_head(std::string_view head, Request& req);

/// How the request body is framed.
struct BodyFraming {
  bool chunked = false;
  std::size_t length = 0;
};

BodyFraming body_framing(const Request& req, std::size_t max_body);

/// Reads requests from a connection: the bytes received and not yet used stay in `buffer`.
class RequestReader {
 public:
  RequestReader(TlsSocket& socket, std::string& buffer, const HttpsServerConfig& config)
      : socket_(socket), buffer_(buffer), config_(config) {}

  /// Reads the next request head; false when the connection ends or idles out between requests.
  /// Throws HttpFailure for a request to refuse, Error when the connection fails mid-request.
  bool read_head(Request& req) {
    std::size_t end;
    while (true) {
      // Empty lines before a request line are to be ignored (RFC 9112 §2.2).
      const std::size_t start = buffer_.find_first_not_of("\r\n");
      buffer_.erase(0, start == std::string::npos ? buffer_.size() : start);
      end = find_head_end(buffer_);
      if (end != std::string::npos)
        break;
      if (buffer_.size() >= kMaxHead)
        throw HttpFailure{431, fmt::format("the request head is over {} bytes", kMaxHead)};
      if (buffer_.empty()) {
        try {
          if (!fill())
            return false;
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Timeout)
            throw;
          idled_out_ = true;  // an idle keep-alive connection
          return false;
        }
      } else if (!fill()) {
        throw Error(ErrorKind::Connection, "the client closed the connection mid-request");
      }
    }
    if (end > kMaxHead)
      throw HttpFailure{431, fmt::format("the request head is over {} bytes", kMaxHead)};
    parse_head(std::string_view(buffer_).substr(0, end), req);
    buffer_.erase(0, end);
    return true;
  }

  /// Whether read_head() returned false because the client stayed silent.
  bool idled_out() const { return idled_out_; }

  void read_body(const BodyFraming& framing, std::string& body) {
    if (!framing.chunked) {
      need(framing.length);
      body = buffer_.substr(0, framing.length);
      buffer_.erase(0, framing.length);
      return;
    }
    while (true) {
      const std::string line = read_line(kMaxChunkLine, "chunk size line");
      const std::string_view size_text = trim(std::string_view(line).substr(0, line.find(';')));
      std::size_t size = 0;
      const auto [ptr, ec] =
          std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
      if (size_text.empty() || size_text.size() > 15 || ec != std::errc() ||
          ptr != size_text.data() + size_text.size()) {
        throw HttpFailure{400, "malformed chunk size"};
      }
      if (size == 0)
        break;
      if (body.size() + size > config_.max_body) {
        throw HttpFailure{
            413, fmt::format("the request body is over the limit of {} bytes", config_.max_body)};
      }
      need(size);
      body.append(buffer_, 0, size);
      buffer_.erase(0, size);
      if (!read_line(2, "chunk end").empty())
        throw HttpFailure{400, "chunk data longer than its size"};
    }
    // Trailer fields are read and dropped.
    std::size_t trailers = 0;
    while (true) {
      const std::string line = read_line(kMaxHead, "trailer");
      if (line.empty())
        break;
      trailers += line.size();
      if (trailers > kMaxHead)
        throw HttpFailure{431, "the trailer fields are too large"};
    }
  }

 private:
  /// Reads more bytes into the buffer; false at the end of the stream.
  bool fill() {
    char buf[kReadSize];
    const std::size_t n = socket_.read_some(buf, sizeof buf, deadline_after(config_.idle_timeout));
    buffer_.append(buf, n);
    return n > 0;
  }

  void need(std::size_t n) {
    while (buffer_.size() < n) {
      if (!fill())
        throw Error(ErrorKind::Connection, "the client closed the connection mid-body");
    }
  }

  /// One line of a chunked body, without its CRLF.
  std::string read_line(std::size_t limit, std::string_view what) {
    std::size_t eol;
    while ((eol = buffer_.find('\n')) == std::string::npos) {
      if (buffer_.size() > limit + 1)
        throw HttpFailure{400, fmt::format("malformed chunked body: {} too long", what)};
      if (!fill())
        throw Error(ErrorKind::Connection, "the client closed the connection mid-body");
    }
    if (eol > limit + 1)
      throw HttpFailure{400, fmt::format("malformed chunked body: {} too long", what)};
    std::string line = buffer_.substr(0, eol);
    buffer_.erase(0, eol + 1);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    return line;
  }

  TlsSocket& socket_;
  std::string& buffer_;
  const HttpsServerConfig& config_;
  bool idled_out_ = false;
};

/// "HTTP/1.1 <status> <reason>\r\nDate: ...\r\n"
std::string status_line(int status);

}  // namespace trainctl::sandbox
