#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace trainctl::sandbox {

/// A certificate and its private key, both PEM.
struct CertifiedKey {
  std::string cert_pem;
  std::string key_pem;
};

/// What a certificate is for: subject, names and usages.
struct CertificateSpec {
  std::string common_name;
  std::vector<std::string> organizations;  // Kubernetes reads these as the user's groups
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  bool server_auth = false;
  bool client_auth = false;
  std::chrono::hours validity{24 * 365};
};

/// A self-signed CA (EC P-256) for the sandbox and for tests.
CertifiedKey make_certificate_authority(const std::string& common_name,
                                        std::chrono::hours validity = std::chrono::hours(24 *
                                                                                         3650));

/// A leaf certificate (EC P-256) signed by `ca`.
CertifiedKey issue_certificate(const CertifiedKey& ca, const CertificateSpec& spec);

}  // namespace trainctl::sandbox
