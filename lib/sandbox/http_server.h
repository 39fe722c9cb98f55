#pragma once

// The sandbox's HTTPS/1.1 server on OpenSSL: optional client certificates, one thread per
// connection, chunked streaming (watch, logs -f) and the hand-over of a connection after
// "101 Switching Protocols" (pods/exec over WebSocket). cpp-httplib 0.11 can do neither of the
// last two under load, and this is the only HTTP server code in lib/.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainctl::kube::ws {
class ByteStream;
}

namespace trainctl::sandbox {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// Who the TLS peer proved to be with a client certificate (Kubernetes reads the CN as the user
/// name and each O as a group).
struct PeerCertificate {
  bool present = false;
  std::string common_name;
  std::vector<std::string> organizations;
};

/// One HTTP request, its body read in full.
struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?', still percent-encoded
  std::string query;   // after '?', as sent; empty when none
  /// Query parameters, percent-decoded, '+' read as a space.
  std::multimap<std::string, std::string> params;
  /// Names lower-cased; a repeated field's values joined with ", ".
  std::map<std::string, std::string> headers;
  /// Every header field in the order sent, names lower-cased (Impersonate-Group repeats).
  HeaderList header_fields;
  std::string body;
  int http_minor = 1;  // HTTP/1.<minor>
  PeerCertificate peer;
  /// The client's address, "127.0.0.1:54321": requests from one connection share it.
  std::string remote;

  /// The joined value of a header; empty when absent.
  std::string header(std::string_view lower_name) const;
  /// Each value of a repeated header field, in order.
  std::vector<std::string> header_values(std::string_view lower_name) const;
  /// The first value of a query parameter; empty when absent.
  std::string param(std::string_view name) const;
};

/// How a handler answers: one complete response, a chunked stream, or an upgrade to a raw byte
/// stream. Belongs to the handler's call; not for concurrent use from several threads.
class ResponseWriter {
 public:
  /// A complete response with a Content-Length (none for 204 and 304, no body to HEAD). The
  /// server frames the body itself, so Content-Length, Transfer-Encoding and Connection among
  /// `extra_headers` are dropped, except that "Connection: close" closes the connection after
  /// the response. A header name or value that could split the head throws
  /// std::invalid_argument. A client that has gone away is not an error here.
  void respond(int status, std::string_view content_type, std::string_view body,
               const HeaderList& extra_headers = {});

  /// Starts a streamed response (Transfer-Encoding: chunked; to an HTTP/1.0 client the body ends
  /// when the connection closes).
  void begin_stream(int status, std::string_view content_type,
                    const HeaderList& extra_headers = {});
  /// Sends one chunk at once. False once the client has gone away, a write failed or the server
  /// is stopping: a streaming loop ends then.
  bool write_chunk(std::string_view data);
  /// Ends the stream; the connection stays open for the next request. A handler that returns
  /// without calling it ends the stream implicitly.
  void end_stream();

  /// Sends "101 Switching Protocols" with `response_headers` and hands over the connection as a
  /// raw byte stream (first the bytes that arrived after the request, then the socket's). The
  /// connection is closed once the handler returns; reads and writes may run on two threads at
  /// once. Throws Error(Connection) when the 101 cannot be written.
  std::unique_ptr<kube::ws::ByteStream> upgrade(const HeaderList& response_headers);

  bool responded() const;
  /// False once the client has closed its side (as Go's server, a half-close counts as gone) or
  /// reset the connection, a write failed, or the server is stopping: lets a handler that waits
  /// (for watch events, say) notice between writes.
  bool client_connected() const;
  /// Requested when the server stops, so a handler can wait on it.
  std::stop_token stop_token() const;

  /// The state of one request and its response; only the server makes one.
  struct Exchange;
  explicit ResponseWriter(Exchange& exchange) : exchange_(exchange) {}

 private:
  Exchange& exchange_;
};

/// Serves one request. Runs on the connection's own thread, so it may block or stream for as
/// long as it needs; an exception it throws becomes a 500 Status (unless it already responded).
using Handler = std::function<void(const Request&, ResponseWriter&)>;

/// Where and how to listen.
struct HttpsServerConfig {
  std::string cert_pem;  // serving certificate, optionally followed by its chain
  std::string key_pem;
  /// When set, clients are asked (not required) for a certificate signed by one of these CAs; a
  /// certificate that does not verify fails the TLS handshake.
  std::string client_ca_pem;
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = an ephemeral port, see HttpsServer::port()
  std::size_t max_body = std::size_t{16} << 20;
  /// A connection on which nothing moves for this long is closed: idle keep-alive connections,
  /// slow requests, clients that stop reading and silent upgraded streams (reads then throw
  /// Error(Timeout)).
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(90)};
  /// Receives connection-level problems (failed TLS handshakes, malformed requests, handler
  /// exceptions); may be called from any connection thread. Empty = dropped.
  std::function<void(std::string_view)> error_log;
};

/// An HTTPS/1.1 server: TLS 1.2+ (ALPN http/1.1 only), keep-alive, pipelining, chunked request
/// bodies, Expect: 100-continue, and a thread per connection so that long streams never block
/// other clients.
class HttpsServer {
 public:
  HttpsServer(HttpsServerConfig config, Handler handler);
  ~HttpsServer();  // stop()
  HttpsServer(const HttpsServer&) = delete;
  HttpsServer& operator=(const HttpsServer&) = delete;

  /// Loads the certificates, binds, listens and starts accepting. Throws Error(Config) for a bad
  /// certificate or key and an address that cannot be bound. Once per server.
  void start();
  /// Stops accepting, cuts every connection (blocked reads wake, write_chunk() returns false,
  /// stop_token() is requested) and joins every thread, so it returns as soon as running
  /// handlers return: a handler that waits must watch stop_token() or client_connected().
  /// Idempotent; never call it from a handler.
  void stop();

  /// The bound port, once started.
  int port() const;
  /// Connections accepted and not yet closed.
  std::size_t open_connections() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

/// Decodes %XX escapes (invalid ones stay as they are); with `plus_as_space`, '+' becomes ' '.
std::string percent_decode(std::string_view s, bool plus_as_space = false);
/// Splits "a=1&b=x%20y&c" into decoded pairs (c maps to "").
std::multimap<std::string, std::string> parse_query(std::string_view query);

}  // namespace trainctl::sandbox
