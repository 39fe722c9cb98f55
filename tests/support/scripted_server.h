#pragma once

#include <openssl/ssl.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/rest_config.h"
#include "openssl_handles.h"

namespace trainctl::testing {

/// A TLS server on 127.0.0.1 (the TestPki's serving certificate) that answers from a script, for
/// what a well-behaved test server never does. Connections are served one after another:
/// connection i reads requests and answers each, in order, with the next text of replies[i]
/// (sent as it is); an empty text, or the end of its replies, closes the connection instead of
/// answering. These texts are not sent: "<read>" reads one more request before the next answer
/// (to see requests pipelined), "ECHO" answers 200 with the request's target as the body ("ECHO
/// close": and closes the connection), "RESPOND" sends what `respond` gives for the request.
class ScriptedServer {
 public:
  /// What to send for a request ("RESPOND"): a whole HTTP/1.1 response.
  using Responder = std::function<std::string(const std::string& method, const std::string& target,
                                              const std::string& body)>;

  explicit ScriptedServer(std::vector<std::vector<std::string>> replies, Responder respond = {});
  ~ScriptedServer();
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  std::string url() const;
  /// A config that trusts the server's CA, for the direct transport.
  kube::RestConfig rest_config() const;
  /// Each request's line, after the index of the connection it came on ("0 GET /a HTTP/1.1").
  std::vector<std::string> requests() const;
  /// An HTTP/1.1 response with `status` and a JSON body.
  static std::string json_response(int status, const std::string& body);

 private:
  void serve();

  std::vector<std::vector<std::string>> replies_;
  Responder respond_;
  std::unique_ptr<SSL_CTX, OpenSslFree<SSL_CTX_free>> ctx_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

}  // namespace trainctl::testing
