#include "sandbox/pki.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "error.h"
#include "openssl_handles.h"

namespace trainctl::sandbox {
namespace {

[[noreturn]] void fail(const char* what) {
  throw Error(ErrorKind::Config,
              fmt::format("generating certificates: {}: {}", what, openssl_errors()));
}

void ensure(bool ok, const char* what) {
  if (!ok)
    fail(what);
}

KeyPtr generate_key() {
  KeyPtr key = new_ec_key("P-256");
  ensure(key != nullptr, "EC key generation");
  return key;
}

std::string bio_string(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(len));
}

std::string key_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ensure(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) == 1,
         "writing key");
  return bio_string(bio.get());
}

std::string cert_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ensure(PEM_write_bio_X509(bio.get(), cert) == 1, "writing certificate");
  return bio_string(bio.get());
}

KeyPtr read_key(const std::string& pem) {
  KeyPtr key = read_private_key(pem);
  ensure(key != nullptr, "reading CA key");
  return key;
}

CertPtr read_cert(const std::string& pem) {
  std::vector<CertPtr> certs = read_certificates(pem);
  ensure(!certs.empty(), "reading CA certificate");
  return std::move(certs.front());
}

void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  ensure(ext != nullptr, "building extension");
  ensure(X509_add_ext(cert, ext, -1) == 1, "adding extension");
  X509_EXTENSION_free(ext);
}

CertPtr new_certificate(EVP_PKEY* key, const std::string& cn,
                        const std::vector<std::string>& organizations,
                        std::chrono::hours validity) {
  CertPtr cert(X509_new());
  ensure(cert != nullptr, "allocating certificate");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  ensure(RAND_bytes(serial, sizeof serial) == 1, "random serial");
  serial[0] &= 0x7F;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // tolerate small clock skew
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  static_cast<long>(std::chrono::seconds(validity).count()));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const auto& org : organizations) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(org.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

}  // namespace

CertifiedKey make_certificate_authority(const std::string& common_name,
                                        std::chrono::hours validity) {
  KeyPtr key = generate_key();
  CertPtr cert = new_certificate(key.get(), common_name, {}, validity);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  add_extension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_extension(cert.get(), cert.get(), NID_key_usage,
                "critical,keyCertSign,cRLSign,digitalSignature");
  add_extension(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  ensure(X509_sign(cert.get(), key.get(), EVP_sha256()) > 0, "signing CA");
  return {cert_pem(cert.get()), key_pem(key.get())};
}

CertifiedKey issue_certificate(const CertifiedKey& ca, const CertificateSpec& spec) {
  KeyPtr ca_key = read_key(ca.key_pem);
  CertPtr ca_cert = read_cert(ca.cert_pem);
  KeyPtr key = generate_key();
  CertPtr cert = new_certificate(key.get(), spec.common_name, spec.organizations, spec.validity);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  add_extension(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_extension(cert.get(), ca_cert.get(), NID_key_usage,
                "critical,digitalSignature,keyEncipherment");
  std::string usages;
  if (spec.server_auth)
    usages += "serverAuth";
  if (spec.client_auth)
    usages += std::string(usages.empty() ? "" : ",") + "clientAuth";
  if (!usages.empty())
    add_extension(cert.get(), ca_cert.get(), NID_ext_key_usage, usages);
  std::string san;
  for (const auto& dns : spec.dns_names)
    san += (san.empty() ? "DNS:" : ",DNS:") + dns;
  for (const auto& ip : spec.ip_addresses)
    san += (san.empty() ? "IP:" : ",IP:") + ip;
  if (!san.empty())
    add_extension(cert.get(), ca_cert.get(), NID_subject_alt_name, san);
  ensure(X509_sign(cert.get(), ca_key.get(), EVP_sha256()) > 0, "signing certificate");
  return {cert_pem(cert.get()), key_pem(key.get())};
}

}  // namespace trainctl::sandbox
