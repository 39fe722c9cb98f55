#pragma once

// HTTP/1.1 to an API server over TLS connections trainctl makes itself with OpenSSL, for
// short-lived commands: a command that sends a request or two spent most of its time loading
// libcurl and its ~30 libraries (GnuTLS, Kerberos, LDAP, SASL, libssh2, ...: ~6 ms, more than
// the request itself against a local kube-apiserver). Requests one after another keep one
// keep-alive connection; concurrent requests each take an idle connection or open one. TLS as
// libcurl set it up: the config's CAs (else the system's), verification of the server's name or
// address, SNI, a client certificate sent only when the server asks for one (a resumed session
// is not asked: its key is then never parsed), sessions kept between commands
// (tls_sessions.h). Proxies and plain http:// stay with libcurl (HttpTransport decides).

#include <sys/socket.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http1.h"
#include "kube/credentials.h"
#include "kube/http.h"
#include "kube/rest_config.h"
#include "tls_socket.h"

namespace trainctl::kube {

/// The head of a response, and how its body comes.
struct ResponseHead {
  HttpResponse response;  // status and headers; no body yet
  BodyFraming framing;
  /// Whether the connection may carry another request once the body is read.
  bool reusable = false;
};

/// Reads the head of the response to a `method` request, informational answers (100 Continue)
/// skipped. Throws HttpFailure for a malformed one, Error(Timeout) when the server stays silent,
/// Error(Connection) when it closes the connection first.
ResponseHead read_response_head(MessageReader& reader, const std::string& method);

/// An address getaddrinfo gave.
struct TcpAddress {
  sockaddr_storage address{};
  socklen_t length = 0;
};

/// A connected TCP socket to the first of `addresses` that answers, by `deadline` and within 30
/// s. As libcurl and RFC 8305 ("happy eyeballs") do, the next address is tried too when the last
/// one tried has not answered in 200 ms, and at once after one that fails: an address whose
/// packets are dropped (a dead IPv6 route, a firewall) costs 200 ms, not the connect timeout.
/// Throws Error(Timeout) once `deadline` passes, Error(Connection) naming `what` (host and port)
/// and the last failure otherwise.
int connect_first(const std::vector<TcpAddress>& addresses, Deadline deadline,
                  std::string_view what);

class DirectTransport {
 public:
  /// Where to connect and what to verify: `server` is the URL requests are logged against
  /// (scheme://name:port), `connect_host` the address to connect to, `verify_name` the name (or
  /// IP address) the server's certificate must carry.
  struct Endpoint {
    std::string server;
    std::string connect_host;
    std::string port;
    std::string verify_name;
  };

  DirectTransport(const RestConfig& config, Endpoint endpoint);
  ~DirectTransport();
  DirectTransport(const DirectTransport&) = delete;
  DirectTransport& operator=(const DirectTransport&) = delete;

  /// Sends `method target` with `headers` (an empty value is not sent) and `body`, and reads the
  /// response: a 2xx body goes to `sink` when there is one (until it returns false or `stop` is
  /// requested), any other into the response. The whole exchange ends by `timeout` (0 = none).
  /// Throws Error(Connection|Timeout) as HttpTransport::send does.
  HttpResponse exchange(const std::string& method, const std::string& target,
                        const std::vector<std::pair<std::string, std::string>>& headers,
                        const std::string& body, std::chrono::milliseconds timeout,
                        const RequestCredentials& creds, const BodySink* sink,
                        std::stop_token stop);

  /// A client certificate with its key, parsed once and only when a server asks for it.
  struct Identity;
  /// One connection with the bytes read past its last response.
  struct Connection;

 private:
  /// The SSL_CTX for connections with this client certificate ("" = none), made on first use.
  struct Context;
  Context& context_for(const RequestCredentials& creds);
  std::unique_ptr<Connection> open(const RequestCredentials& creds, Deadline deadline);
  std::unique_ptr<Connection> idle_connection(const std::string& client_cert_pem);
  HttpResponse attempt(Connection& c, const std::string& request_text, const std::string& method,
                       Deadline deadline, const BodySink* sink, const std::stop_token& stop,
                       bool& reusable, bool& sent, bool& answered);

  RestConfig config_;
  Endpoint endpoint_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Context>> contexts_;  // by client certificate PEM
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace trainctl::kube
