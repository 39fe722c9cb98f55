#pragma once

// Owning handles for OpenSSL objects and the reading of PEM text into them, shared by the
// sandbox's certificate authority and HTTPS server, the controller's SSH keys and the test
// servers. Header-only.

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl {

/// Calls an OpenSSL free function from std::unique_ptr.
template <auto Free>
struct OpenSslFree {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};

using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, OpenSslFree<X509_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslFree<BIO_free_all>>;

/// A read-only memory BIO over `text`, which must outlive it.
inline BioPtr memory_bio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

/// Drains OpenSSL's error queue into one line, for messages.
inline std::string openssl_errors() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

/// Every certificate of a PEM bundle, in order (empty when there is none).
inline std::vector<CertPtr> read_certificates(std::string_view pem) {
  BioPtr bio = memory_bio(pem);
  std::vector<CertPtr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the loop ends on a "no start line" error
  return certs;
}

/// A new key on the elliptic curve `curve` (e.g. "P-256"); null on failure.
inline KeyPtr new_ec_key(const char* curve) {
  return KeyPtr(EVP_EC_gen(curve));
}

/// The private key of a PEM text; null when there is none.
inline KeyPtr read_private_key(std::string_view pem) {
  BioPtr bio = memory_bio(pem);
  return KeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

}  // namespace trainctl
