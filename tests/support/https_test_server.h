#pragma once

#include <httplib.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/rest_config.h"
#include "sandbox/pki.h"

namespace trainctl::testing {

/// A CA with a serving certificate for 127.0.0.1/localhost and a client certificate
/// (CN=test-user, O=system:masters), generated once per test process.
struct TestPki {
  sandbox::CertifiedKey ca;
  sandbox::CertifiedKey server;
  sandbox::CertifiedKey client;

  static const TestPki& shared();
};

/// What the server saw of one request.
struct RecordedRequest {
  std::string method;
  std::string target;  // path and raw query
  std::string path;
  std::multimap<std::string, std::string> params;
  httplib::Headers headers;
  std::string body;
  int remote_port = 0;       // the same port on two requests means one reused connection
  bool tls_resumed = false;  // its connection resumed an earlier TLS session
};

/// An HTTPS server on 127.0.0.1 (ephemeral port) for integration tests: register handlers on
/// routes(), then start(). Every request is recorded for assertions.
class HttpsTestServer {
 public:
  enum class ClientCerts { Optional, Required };

  explicit HttpsTestServer(ClientCerts client_certs = ClientCerts::Optional,
                           const TestPki& pki = TestPki::shared());
  ~HttpsTestServer();

  httplib::Server& routes() { return *server_; }
  void start();
  int port() const { return port_; }
  std::string url() const;
  std::vector<RecordedRequest> requests() const;
  /// A config that trusts this server's CA and has no credentials.
  kube::RestConfig rest_config() const;

 private:
  const TestPki& pki_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  mutable std::condition_variable logged_;
  std::size_t started_ = 0;
  std::vector<RecordedRequest> requests_;
};

}  // namespace trainctl::testing
