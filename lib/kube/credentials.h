#pragma once

#include <memory>
#include <string>

#include "clock.h"
#include "rest_config.h"

namespace trainctl::kube {

/// What one request presents to the server.
struct RequestCredentials {
  /// The full Authorization header value ("Bearer ..." or "Basic ..."), empty for none.
  std::string authorization;
  /// A client certificate and key in PEM, empty for none.
  std::string client_cert_pem;
  std::string client_key_pem;
};

/// Supplies credentials for each request. Token files and exec plugins refresh behind it, so the
/// transport never needs to know which auth method a user has.
class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  /// The credentials to use now; may re-read a token file or run an exec plugin.
  virtual RequestCredentials current() = 0;
  /// Told that the server answered 401 with `used`; returns true when fresh credentials might
  /// succeed (an exec plugin re-run, a token file re-read), so the request is worth one retry.
  virtual bool refresh_after_unauthorized(const RequestCredentials& used) = 0;
};

/// Builds the source for a resolved auth config. `server` and `tls` feed an exec plugin's
/// KUBERNETES_EXEC_INFO when it asks for cluster info.
std::unique_ptr<CredentialSource> make_credential_source(const AuthConfig& auth,
                                                         const std::string& server,
                                                         const TlsConfig& tls,
                                                         Clock& clock = real_clock());

}  // namespace trainctl::kube
