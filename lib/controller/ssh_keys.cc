#include "controller/ssh_keys.h"

#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "error.h"
#include "openssl_handles.h"
#include "text.h"

namespace trainctl::controller {
namespace {

constexpr std::string_view kKeyType = "ecdsa-sha2-nistp521";
constexpr std::string_view kCurveName = "nistp521";

void ensure(bool ok, const char* what) {
  if (!ok) {
    throw Error(ErrorKind::Config,
                fmt::format("generating the MPI SSH key: {}: {}", what, openssl_errors()));
  }
}

/// Appends an SSH wire-format string (RFC 4251 section 5): a 32-bit big-endian length, then the
/// bytes.
void append_ssh_string(std::string& out, std::string_view bytes) {
  const auto size = static_cast<std::uint32_t>(bytes.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((size >> shift) & 0xff));
  out.append(bytes);
}

/// The public point as 0x04 || X || Y, the encoding RFC 5656 puts in the key blob.
std::string uncompressed_point(EVP_PKEY* key) {
  std::size_t size = 0;
  ensure(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, nullptr, 0,
                                         &size) == 1,
         "reading the public key size");
  std::string point(size, '\0');
  ensure(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY,
                                         reinterpret_cast<unsigned char*>(point.data()),
                                         point.size(), &size) == 1,
         "reading the public key");
  point.resize(size);
  return point;
}

/// `ecdsa-sha2-nistp521 <base64 of the RFC 5656 blob>\n`, as ssh.MarshalAuthorizedKey writes it.
std::string authorized_key_line(EVP_PKEY* key) {
  std::string blob;
  append_ssh_string(blob, kKeyType);
  append_ssh_string(blob, kCurveName);
  append_ssh_string(blob, uncompressed_point(key));
  return fmt::format("{} {}\n", kKeyType, base64_encode(blob));
}

std::string private_key_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ensure(bio != nullptr, "allocating a buffer");
  ensure(PEM_write_bio_PrivateKey_traditional(bio.get(), key, nullptr, nullptr, 0, nullptr,
                                              nullptr) == 1,
         "writing the private key");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

}  // namespace

SshKeyPair generate_ssh_key_pair() {
  KeyPtr key = new_ec_key("P-521");
  ensure(key != nullptr, "EC P-521 key generation");
  return {.private_key_pem = private_key_pem(key.get()),
          .public_key = authorized_key_line(key.get())};
}

}  // namespace trainctl::controller
