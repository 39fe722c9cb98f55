#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kube/credentials.h"
#include "kube/rest_config.h"

namespace trainctl::kube {

namespace ws {
class ByteStream;
}

/// One HTTP request to the API server; `path` includes the query string.
struct HttpRequest {
  std::string method = "GET";
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// Overrides the config's per-request timeout; 0 = use the config's.
  std::chrono::milliseconds timeout{0};
};

/// A complete response, or the head of a streamed one.
struct HttpResponse {
  int status = 0;
  std::string body;
  /// Header names lower-cased; a repeated field's values joined with ", ".
  std::map<std::string, std::string> headers;
  /// The negotiated HTTP version: 11 or 2.
  int http_version = 0;

  std::string header(const std::string& lower_name) const;
};

/// The texts of a Warning header's values (RFC 7234: `299 - "text"` or `299 - "text" "date"`,
/// several joined by commas), unquoted, as client-go's ParseWarningHeaders reads them; a value
/// that does not parse is left out.
std::vector<std::string> warning_texts(std::string_view header);

/// Receives a streamed 2xx response body as it arrives; returning false ends the stream.
using BodySink = std::function<bool(std::string_view)>;

/// What the request log says of one request at `verbosity` (kubectl's -v, client-go's
/// round_trippers): "" below 6; `GET https://host/api/v1/pods 200 OK in 12 milliseconds` (or
/// `... failed in 3 milliseconds: why`) from 6; the request headers from 7 and the response
/// headers from 8, each on its own indented line. Authorization values are masked
/// (`Bearer <masked>`); bodies are never included, as they may hold Secrets.
std::string format_request_log(int verbosity, const HttpRequest& request, const std::string& url,
                               const std::vector<std::pair<std::string, std::string>>& headers,
                               const HttpResponse* response, std::string_view error,
                               std::chrono::milliseconds elapsed);

/// HTTPS to one API server. With Transport::Direct (the CLI's), over HTTP/1.1 connections of its
/// own (direct_transport.h), libcurl loaded only for an exec stream, a proxy or plain http://.
/// Otherwise over libcurl: TLS from the rest config, HTTP/2 when the server offers it. Requests
/// (`send`) from any number of threads go through one libcurl multi handle on a thread of the
/// transport's own, so concurrent requests are streams of one HTTP/2 connection, as client-go's
/// are. Once a server has answered in HTTP/1.1 (the sandbox), a request that finds the multiplexer
/// busy is sent from its caller's thread over a keep-alive connection of a pooled handle instead:
/// one thread driving a connection per request in flight measured slower (a controller
/// materialising jobs on the sandbox reached 0.4 of a raw client's write rate that way, 0.7 this
/// way); requests one after another still keep one connection. Long streams
/// (`stream`: watches, followed logs) each keep a connection of their own, so a slow reader never
/// holds up other requests. Knows nothing of Kubernetes semantics; the Client adds those.
class DirectTransport;

class HttpTransport {
 public:
  explicit HttpTransport(const RestConfig& config);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  /// Sends a request and reads the whole response. Throws Error(Connection|Timeout) when no
  /// response arrives; any HTTP status is returned, not thrown.
  HttpResponse send(const HttpRequest& request, const RequestCredentials& creds);

  /// Sends a request and hands the body to `sink` while it arrives, until the server ends it, the
  /// sink returns false, or `stop` is requested. The returned response carries status and
  /// headers; its body is filled only for a non-2xx status.
  HttpResponse stream(const HttpRequest& request, const RequestCredentials& creds,
                      const BodySink& sink, std::stop_token stop);

  /// Opens a raw HTTP/1.1 connection (TLS, proxy and client certificate as for any request) for
  /// protocols libcurl does not speak, such as WebSocket. Returns the stream and the Host value.
  /// Reads wait at most `idle_timeout` for data (0 = forever), then throw Error(Timeout).
  std::unique_ptr<ws::ByteStream> connect_raw(const RequestCredentials& creds,
                                              std::string& host_header,
                                              std::chrono::milliseconds idle_timeout);

  const std::string& server() const { return server_; }

  /// A libcurl easy handle together with the buffers and lists it points into (http.cc).
  struct Handle;
  /// The thread and multi handle `send` performs its transfers on (http.cc).
  class Multiplexer;
  /// The path prefix of the server URL ("" or e.g. "/k8s/clusters/c-1"), for raw connections.
  const std::string& path_prefix() const { return path_prefix_; }

 private:
  std::unique_ptr<Handle> checkout();
  void checkin(std::unique_ptr<Handle> handle);
  void configure(Handle& h, const HttpRequest& request, const RequestCredentials& creds,
                 bool http1_only);
  /// The headers a request is sent with: its own, the defaults, credentials, impersonation.
  std::vector<std::pair<std::string, std::string>> headers_for(
      const HttpRequest& request, const RequestCredentials& creds) const;
  /// Configures a pooled handle and performs the request (through the multiplexer unless it has
  /// a sink).
  HttpResponse perform_curl(const HttpRequest& request, const RequestCredentials& creds,
                            const BodySink* sink, std::stop_token stop);
  /// Performs the request directly or through libcurl, and logs it at config_.verbosity.
  HttpResponse perform_logged(const HttpRequest& request, const RequestCredentials& creds,
                              const BodySink* sink, std::stop_token stop);
  /// The multiplexer, started by the first `send`.
  Multiplexer& multiplexer();

  RestConfig config_;
  std::unique_ptr<DirectTransport> direct_;  // requests go through it when set
  std::string server_;                       // without trailing '/'
  std::string path_prefix_;
  std::string connect_to_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Handle>> idle_;
  std::unique_ptr<Multiplexer> multiplexer_;  // under mu_
  std::atomic<bool> http1_server_{false};     // the server answered in HTTP/1.1
};

}  // namespace trainctl::kube
