#include "sandbox/pki.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace trainctl::sandbox {
namespace {

std::unique_ptr<X509, decltype(&X509_free)> parse(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), (int)pem.size()),
                                                BIO_free);
  return {PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free};
}

TEST(PkiTest, LeafVerifiesAgainstItsCaAndCarriesNames) {
  CertifiedKey ca = make_certificate_authority("trainctl-sandbox-ca");
  CertifiedKey leaf = issue_certificate(ca, {.common_name = "alice",
                                             .organizations = {"system:masters"},
                                             .dns_names = {"localhost"},
                                             .ip_addresses = {"127.0.0.1"},
                                             .server_auth = true,
                                             .client_auth = true});
  auto ca_cert = parse(ca.cert_pem);
  auto leaf_cert = parse(leaf.cert_pem);
  ASSERT_TRUE(ca_cert && leaf_cert);

  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), ca_cert.get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf_cert.get(), nullptr);
  EXPECT_EQ(X509_verify_cert(ctx.get()), 1);

  EXPECT_EQ(X509_check_host(leaf_cert.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(leaf_cert.get(), "127.0.0.1", 0), 1);
  EXPECT_NE(X509_check_ip_asc(leaf_cert.get(), "127.0.0.2", 0), 1);
  char buf[256];
  X509_NAME_get_text_by_NID(X509_get_subject_name(leaf_cert.get()), NID_organizationName, buf,
                            sizeof buf);
  EXPECT_STREQ(buf, "system:masters");
}

TEST(PkiTest, CertificateFromAnotherCaDoesNotVerify) {
  CertifiedKey ca = make_certificate_authority("one");
  CertifiedKey other = make_certificate_authority("two");
  CertifiedKey leaf = issue_certificate(other, {.common_name = "x", .client_auth = true});
  auto ca_cert = parse(ca.cert_pem);
  auto leaf_cert = parse(leaf.cert_pem);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), ca_cert.get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf_cert.get(), nullptr);
  EXPECT_NE(X509_verify_cert(ctx.get()), 1);
}

}  // namespace
}  // namespace trainctl::sandbox
