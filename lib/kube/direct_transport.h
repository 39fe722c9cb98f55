#pragma once

// HTTP/1.1 to an API server over TLS connections trainctl makes itself with OpenSSL, for
// short-lived commands: a command that sends a request or two spent most of its time loading
// libcurl and its ~30 libraries (GnuTLS, Kerberos, LDAP, SASL, libssh2, ...: ~6 ms, more than
// the request itself against a local kube-apiserver). Requests one after another keep one
// keep-alive connection. Concurrent requests are pipelined (RFC 9112 section 9.3) on a connection
// already opening or waiting for its answers, up to RestConfig::pipeline_depth (commands: 4; the
// controller: 1, none): written one after another and answered in order, so a command's few
// concurrent requests (list's three job kinds, submit's job and its queue) cost one TLS handshake
// and one round trip, not a handshake each. Only requests read whole join (a stream never: what
// follows it would wait for its end), and a connection carries at most one request that is not a
// read (behind reads or ahead of them). A request left unanswered when an earlier one's answer
// closes the connection was not processed (RFC 9112 section 9.6) and is sent again on another
// connection; when the connection fails otherwise, an unanswered read is sent again and a write
// fails saying so; when it cannot be opened, every request on it fails as the first did. Other
// concurrent requests take an idle connection or open one. TLS as libcurl set it up: the
// config's CAs (else the system's; read on the first chain to verify, which a resumed session
// has not), verification of the server's name or address, SNI, a client certificate sent only
// when the server asks for one (a resumed session is not asked: its key is then never parsed),
// sessions kept between commands (tls_sessions.h). Proxies and plain http:// stay with libcurl
// (HttpTransport decides).

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
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

  /// What a handshake callback reads on first need, and why it could not be used: the callback
  /// fails the handshake and open() reports the problem instead of OpenSSL's words.
  struct ReadOnFirstNeed;
  /// A client certificate with its key, parsed once and only when a server asks for it.
  struct Identity;
  /// The CAs a server's certificate must chain to, read once and only when a server's chain is
  /// verified.
  struct TrustedCas;
  /// One connection with the bytes read past its last response, and the requests on it.
  struct Connection;
  /// One request's place on a connection, and how its attempt went.
  struct Place;

 private:
  /// The SSL_CTX for connections with this client certificate ("" = none), made on first use.
  struct Context;
  Context& context_for(const RequestCredentials& creds);
  std::unique_ptr<TlsSocket> open(const RequestCredentials& creds, Deadline deadline);
  Place take_place(const RequestCredentials& creds, bool read, bool whole, bool may_join);
  void wait_turn(Place& place, bool to_write, Deadline deadline);
  void leave(Place& place, bool reusable, bool closed_cleanly);
  HttpResponse attempt(Place& place, const RequestCredentials& creds,
                       const std::string& request_text, const std::string& method,
                       Deadline deadline, const BodySink* sink, const std::stop_token& stop);

  RestConfig config_;
  Endpoint endpoint_;
  std::mutex mu_;  // also guards the requests of every Connection
  std::map<std::string, std::unique_ptr<Context>> contexts_;  // by client certificate PEM
  std::vector<std::shared_ptr<Connection>> idle_;
  std::vector<std::shared_ptr<Connection>> busy_;  // opening, or with requests on it
};

}  // namespace trainctl::kube
