#include "controller/ssh_keys.h"

#include <gtest/gtest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "openssl_handles.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "text.h"

namespace trainctl::controller {
namespace {

/// The SSH wire-format strings of a key blob, in order; empty when the blob is malformed.
std::vector<std::string> ssh_strings(const std::string& blob) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < blob.size()) {
    if (blob.size() - pos < 4)
      return {};
    std::uint32_t size = 0;
    for (int i = 0; i < 4; ++i)
      size = (size << 8) | static_cast<unsigned char>(blob[pos + i]);
    pos += 4;
    if (blob.size() - pos < size)
      return {};
    out.push_back(blob.substr(pos, size));
    pos += size;
  }
  return out;
}

std::string encoded_public_point(EVP_PKEY* key) {
  unsigned char buf[256];
  std::size_t size = 0;
  EXPECT_EQ(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, buf,
                                            sizeof buf, &size),
            1);
  return std::string(reinterpret_cast<const char*>(buf), size);
}

TEST(SshKeysTest, PrivateKeyIsAnEcP521KeyInSec1Pem) {
  const SshKeyPair keys = generate_ssh_key_pair();
  EXPECT_EQ(keys.private_key_pem.rfind("-----BEGIN EC PRIVATE KEY-----\n", 0), 0u);
  KeyPtr key = read_private_key(keys.private_key_pem);
  ASSERT_NE(key, nullptr);
  char group[64] = {};
  ASSERT_EQ(EVP_PKEY_get_utf8_string_param(key.get(), OSSL_PKEY_PARAM_GROUP_NAME, group,
                                           sizeof group, nullptr),
            1);
  EXPECT_STREQ(group, "secp521r1");
}

TEST(SshKeysTest, PublicKeyIsTheAuthorizedKeysLineOfThePrivateKey) {
  const SshKeyPair keys = generate_ssh_key_pair();
  const std::string prefix = "ecdsa-sha2-nistp521 ";
  ASSERT_EQ(keys.public_key.rfind(prefix, 0), 0u) << keys.public_key;
  ASSERT_EQ(keys.public_key.back(), '\n');
  const auto blob = base64_decode(
      keys.public_key.substr(prefix.size(), keys.public_key.size() - prefix.size() - 1));
  ASSERT_TRUE(blob.has_value());
  const std::vector<std::string> fields = ssh_strings(*blob);
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_EQ(fields[0], "ecdsa-sha2-nistp521");
  EXPECT_EQ(fields[1], "nistp521");
  EXPECT_EQ(fields[2].size(), 133u);  // 0x04 || X || Y, 66 bytes each
  KeyPtr key = read_private_key(keys.private_key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(fields[2], encoded_public_point(key.get()));
}

TEST(SshKeysTest, EveryCallMakesANewKey) {
  EXPECT_NE(generate_ssh_key_pair().public_key, generate_ssh_key_pair().public_key);
}

TEST(SshKeysTest, SshKeygenDerivesTheSamePublicKey) {
  if (::access("/usr/bin/ssh-keygen", X_OK) != 0)
    GTEST_SKIP() << "ssh-keygen (openssh-client) is not installed";
  const SshKeyPair keys = generate_ssh_key_pair();
  testing::TempDir dir;
  const auto path = dir.write("id_ecdsa", keys.private_key_pem);
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto result = testing::run_command("/usr/bin/ssh-keygen -y -f " + path.string());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // ssh-keygen -y prints `<type> <base64>` and, when the key file has one, a comment.
  EXPECT_EQ(result.out, keys.public_key);
}

}  // namespace
}  // namespace trainctl::controller
