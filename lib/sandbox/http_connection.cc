// What the server reads of a peer's address and certificate.

#include "sandbox/http_connection.h"

namespace trainctl::sandbox {

[[noreturn]] void config_failure(std::string_view what) {
  throw Error(ErrorKind::Config,
              fmt::format("sandbox HTTPS server: {}: {}", what, openssl_errors()));
}

std::string format_address(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
    return fmt::format("{}:{}", host, port);
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
  inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
  port = ntohs(in6.sin6_port);
  return fmt::format("[{}]:{}", host, port);
}

std::string name_entry_utf8(X509_NAME_ENTRY* entry) {
  unsigned char* utf8 = nullptr;
  const int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry));
  if (len < 0)
    return {};
  std::string out(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(len));
  OPENSSL_free(utf8);
  return out;
}

PeerCertificate peer_certificate(SSL* ssl) {
  PeerCertificate peer;
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK)
    return peer;
  peer.present = true;
  X509_NAME* subject = X509_get_subject_name(cert);
  // Go's crypto/x509, and so Kubernetes, takes the last CN when there are several.
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;)
    peer.common_name = name_entry_utf8(X509_NAME_get_entry(subject, i));
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_organizationName, i)) >= 0;)
    peer.organizations.push_back(name_entry_utf8(X509_NAME_get_entry(subject, i)));
  return peer;
}

}  // namespace trainctl::sandbox
