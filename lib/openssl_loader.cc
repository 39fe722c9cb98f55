// libssl and libcrypto, loaded on first use (lazy_library.h): the OpenSSL functions trainctl
// calls, each forwarding to the library's own. The binary does not list OpenSSL as needed, so a
// command that neither connects nor serves TLS (render, completion, version --client, TAB
// completion) never loads it: relocating libcrypto (linked BIND_NOW, ~4,000 symbol lookups at
// every load) and libssl took ~1.2 ms of each such command. libcurl, loaded later, finds the same
// libraries loaded. A function missing here fails the link of the binary.
#include "openssl_loader.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "lazy_library.h"

namespace {

constinit trainctl::LazyLibrary libssl("libssl.so.3", "TLS needs");
constinit trainctl::LazyLibrary libcrypto("libcrypto.so.3", "TLS and keys need");

}  // namespace

void trainctl::load_openssl() {
  libssl.load();
  libcrypto.load();
}

extern "C" {

TRAINCTL_FORWARD2(libcrypto, ASN1_STRING_to_UTF8)
TRAINCTL_FORWARD2(libcrypto, BIO_clear_flags)
TRAINCTL_FORWARD4(libcrypto, BIO_ctrl)
TRAINCTL_FORWARD1(libcrypto, BIO_free)
TRAINCTL_FORWARD1(libcrypto, BIO_free_all)
TRAINCTL_FORWARD1(libcrypto, BIO_get_data)
TRAINCTL_FORWARD0(libcrypto, BIO_get_new_index)
TRAINCTL_FORWARD2(libcrypto, BIO_meth_new)
TRAINCTL_FORWARD2(libcrypto, BIO_meth_set_create)
TRAINCTL_FORWARD2(libcrypto, BIO_meth_set_ctrl)
TRAINCTL_FORWARD2(libcrypto, BIO_meth_set_read)
TRAINCTL_FORWARD2(libcrypto, BIO_meth_set_write)
TRAINCTL_FORWARD1(libcrypto, BIO_new)
TRAINCTL_FORWARD2(libcrypto, BIO_new_mem_buf)
TRAINCTL_FORWARD0(libcrypto, BIO_s_mem)
TRAINCTL_FORWARD2(libcrypto, BIO_set_data)
TRAINCTL_FORWARD2(libcrypto, BIO_set_flags)
TRAINCTL_FORWARD2(libcrypto, BIO_set_init)
TRAINCTL_FORWARD3(libcrypto, BN_bin2bn)
TRAINCTL_FORWARD1(libcrypto, BN_free)
TRAINCTL_FORWARD2(libcrypto, BN_to_ASN1_INTEGER)
TRAINCTL_FORWARD3(libcrypto, CRYPTO_free)
TRAINCTL_FORWARD6(libcrypto, CRYPTO_get_ex_new_index)
TRAINCTL_FORWARD0(libcrypto, ERR_clear_error)
TRAINCTL_FORWARD3(libcrypto, ERR_error_string_n)
TRAINCTL_FORWARD0(libcrypto, ERR_get_error)
TRAINCTL_FORWARD1(libcrypto, EVP_PKEY_CTX_free)
TRAINCTL_FORWARD3(libcrypto, EVP_PKEY_CTX_new_from_name)
TRAINCTL_FORWARD2(libcrypto, EVP_PKEY_CTX_set_group_name)
TRAINCTL_FORWARD1(libcrypto, EVP_PKEY_free)
TRAINCTL_FORWARD2(libcrypto, EVP_PKEY_generate)
TRAINCTL_FORWARD5(libcrypto, EVP_PKEY_get_octet_string_param)
TRAINCTL_FORWARD1(libcrypto, EVP_PKEY_keygen_init)
TRAINCTL_FORWARD0(libcrypto, EVP_sha256)
TRAINCTL_FORWARD2(libcrypto, OPENSSL_init_crypto)
TRAINCTL_FORWARD4(libcrypto, PEM_read_bio_PrivateKey)
TRAINCTL_FORWARD4(libcrypto, PEM_read_bio_X509)
TRAINCTL_FORWARD7(libcrypto, PEM_write_bio_PrivateKey)
TRAINCTL_FORWARD7(libcrypto, PEM_write_bio_PrivateKey_traditional)
TRAINCTL_FORWARD2(libcrypto, PEM_write_bio_X509)
TRAINCTL_FORWARD2(libcrypto, RAND_bytes)
TRAINCTL_FORWARD0(libcrypto, RAND_status)
TRAINCTL_FORWARD3(libcrypto, SHA1)
TRAINCTL_FORWARD4(libcrypto, X509V3_EXT_conf_nid)
TRAINCTL_FORWARD6(libcrypto, X509V3_set_ctx)
TRAINCTL_FORWARD1(libcrypto, X509_EXTENSION_free)
TRAINCTL_FORWARD1(libcrypto, X509_NAME_ENTRY_get_data)
TRAINCTL_FORWARD7(libcrypto, X509_NAME_add_entry_by_txt)
TRAINCTL_FORWARD2(libcrypto, X509_NAME_get_entry)
TRAINCTL_FORWARD3(libcrypto, X509_NAME_get_index_by_NID)
TRAINCTL_FORWARD2(libcrypto, X509_STORE_add_cert)
TRAINCTL_FORWARD2(libcrypto, X509_VERIFY_PARAM_set1_ip_asc)
TRAINCTL_FORWARD3(libcrypto, X509_add_ext)
TRAINCTL_FORWARD1(libcrypto, X509_free)
TRAINCTL_FORWARD1(libcrypto, X509_get_serialNumber)
TRAINCTL_FORWARD1(libcrypto, X509_get_subject_name)
TRAINCTL_FORWARD1(libcrypto, X509_getm_notAfter)
TRAINCTL_FORWARD1(libcrypto, X509_getm_notBefore)
TRAINCTL_FORWARD2(libcrypto, X509_gmtime_adj)
TRAINCTL_FORWARD0(libcrypto, X509_new)
TRAINCTL_FORWARD2(libcrypto, X509_set_issuer_name)
TRAINCTL_FORWARD2(libcrypto, X509_set_pubkey)
TRAINCTL_FORWARD2(libcrypto, X509_set_version)
TRAINCTL_FORWARD3(libcrypto, X509_sign)
TRAINCTL_FORWARD1(libcrypto, X509_verify_cert_error_string)

TRAINCTL_FORWARD2(libssl, OPENSSL_init_ssl)
TRAINCTL_FORWARD2(libssl, SSL_CTX_add_client_CA)
TRAINCTL_FORWARD1(libssl, SSL_CTX_check_private_key)
TRAINCTL_FORWARD4(libssl, SSL_CTX_ctrl)
TRAINCTL_FORWARD1(libssl, SSL_CTX_free)
TRAINCTL_FORWARD1(libssl, SSL_CTX_get_cert_store)
TRAINCTL_FORWARD2(libssl, SSL_CTX_get_ex_data)
TRAINCTL_FORWARD1(libssl, SSL_CTX_new)
TRAINCTL_FORWARD1(libssl, SSL_CTX_sess_get_new_cb)
TRAINCTL_FORWARD2(libssl, SSL_CTX_sess_set_new_cb)
TRAINCTL_FORWARD3(libssl, SSL_CTX_set_alpn_protos)
TRAINCTL_FORWARD3(libssl, SSL_CTX_set_alpn_select_cb)
TRAINCTL_FORWARD3(libssl, SSL_CTX_set_cert_cb)
TRAINCTL_FORWARD1(libssl, SSL_CTX_set_default_verify_paths)
TRAINCTL_FORWARD3(libssl, SSL_CTX_set_ex_data)
TRAINCTL_FORWARD2(libssl, SSL_CTX_set_info_callback)
TRAINCTL_FORWARD2(libssl, SSL_CTX_set_options)
TRAINCTL_FORWARD3(libssl, SSL_CTX_set_session_id_context)
TRAINCTL_FORWARD3(libssl, SSL_CTX_set_verify)
TRAINCTL_FORWARD2(libssl, SSL_CTX_use_PrivateKey)
TRAINCTL_FORWARD2(libssl, SSL_CTX_use_certificate)
TRAINCTL_FORWARD1(libssl, SSL_SESSION_free)
TRAINCTL_FORWARD1(libssl, SSL_SESSION_get_time)
TRAINCTL_FORWARD1(libssl, SSL_SESSION_get_timeout)
TRAINCTL_FORWARD1(libssl, SSL_SESSION_is_resumable)
TRAINCTL_FORWARD1(libssl, SSL_SESSION_dup)
TRAINCTL_FORWARD1(libssl, SSL_accept)
TRAINCTL_FORWARD1(libssl, SSL_connect)
TRAINCTL_FORWARD4(libssl, SSL_ctrl)
TRAINCTL_FORWARD1(libssl, SSL_free)
TRAINCTL_FORWARD1(libssl, SSL_get0_param)
TRAINCTL_FORWARD1(libssl, SSL_get0_peer_certificate)
TRAINCTL_FORWARD1(libssl, SSL_get_SSL_CTX)
TRAINCTL_FORWARD2(libssl, SSL_get_error)
TRAINCTL_FORWARD1(libssl, SSL_get_session)
TRAINCTL_FORWARD1(libssl, SSL_get_verify_result)
TRAINCTL_FORWARD1(libssl, SSL_is_init_finished)
TRAINCTL_FORWARD1(libssl, SSL_new)
TRAINCTL_FORWARD4(libssl, SSL_read_ex)
TRAINCTL_FORWARD6(libssl, SSL_select_next_proto)
TRAINCTL_FORWARD2(libssl, SSL_set1_host)
TRAINCTL_FORWARD3(libssl, SSL_set_bio)
TRAINCTL_FORWARD2(libssl, SSL_set_session)
TRAINCTL_FORWARD1(libssl, SSL_shutdown)
TRAINCTL_FORWARD2(libssl, SSL_use_PrivateKey)
TRAINCTL_FORWARD2(libssl, SSL_use_certificate)
TRAINCTL_FORWARD4(libssl, SSL_write_ex)
TRAINCTL_FORWARD0(libssl, TLS_client_method)
TRAINCTL_FORWARD0(libssl, TLS_server_method)
TRAINCTL_FORWARD3(libssl, d2i_SSL_SESSION)
TRAINCTL_FORWARD2(libssl, i2d_SSL_SESSION)

}  // extern "C"
