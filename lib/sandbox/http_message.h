#pragma once

// HTTP/1.1 text for the HTTPS server: status lines and reasons, header checks, request heads,
// targets and bodies (fixed length or chunked) read off a connection. Not part of the server's
// interface.

#include "http1.h"
#include "sandbox/http_connection.h"

namespace trainctl::sandbox {

// --- HTTP text ----------------------------------------------------------------------------------

/// The Status reason for a status this server answers by itself.
std::string_view status_reason(int status);

/// A metav1.Status body, so that Kubernetes clients show the message.
std::string status_body(int status, std::string_view message);

/// The Date header value (RFC 9110 IMF-fixdate), independent of the locale.
std::string http_date();

/// Headers a handler may not set: the server frames the body itself.
bool is_framing_header(std::string_view lower_name);

/// Checks a handler's extra headers; reports whether one asks to close the connection.
bool check_extra_headers(const HeaderList& headers);

void append_extra_headers(std::string& out, const HeaderList& headers);

// --- Request parsing ----------------------------------------------------------------------------

void parse_target(std::string_view target, Request& req);

/// Parses the request line and the header fields (the head without its blank line).
void parse_head(std::string_view head, Request& req);

BodyFraming body_framing(const Request& req, std::size_t max_body);

/// Reads requests from a connection: the bytes received and not yet used stay in `buffer`.
class RequestReader {
 public:
  RequestReader(TlsSocket& socket, std::string& buffer, const HttpsServerConfig& config)
      : reader_(
            [&socket, &config](char* buf, std::size_t n) {
              return socket.read_some(buf, n, deadline_after(config.idle_timeout));
            },
            buffer),
        config_(config) {}

  /// Reads the next request head; false when the connection ends or idles out between requests.
  /// Throws HttpFailure for a request to refuse, Error when the connection fails mid-request.
  bool read_head(Request& req) {
    std::string head;
    if (!reader_.read_head(head))
      return false;
    parse_head(head, req);
    return true;
  }

  /// Whether read_head() returned false because the client stayed silent.
  bool idled_out() const { return reader_.idled_out(); }

  void read_body(const BodyFraming& framing, std::string& body) {
    reader_.read_body(framing, config_.max_body, [&body](std::string_view piece) {
      body.append(piece);
      return true;
    });
  }

 private:
  MessageReader reader_;
  const HttpsServerConfig& config_;
};

/// "HTTP/1.1 <status> <reason>\r\nDate: ...\r\n"
std::string status_line(int status);

}  // namespace trainctl::sandbox
