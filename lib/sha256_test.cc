#include "sha256.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>
#include <string>

namespace trainctl {
namespace {

TEST(Sha256Test, KnownAnswersOfFips180) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding takes a second block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, AgreesWithOpenSslOnEveryLengthAroundTheBlockBoundaries) {
  std::mt19937 random(7);
  for (std::size_t length = 0; length <= 300; ++length) {
    std::string data(length, '\0');
    for (char& c : data)
      c = static_cast<char>(random());
    unsigned char expected[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    ASSERT_EQ(EVP_Digest(data.data(), data.size(), expected, &size, EVP_sha256(), nullptr), 1);
    ASSERT_EQ(size, 32u);
    const auto digest = sha256(data);
    EXPECT_TRUE(std::equal(digest.begin(), digest.end(), expected)) << "length " << length;
  }
}

}  // namespace
}  // namespace trainctl
