#include "text.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace trainctl {
namespace {

TEST(TextTest, Base64RoundTripsEveryPaddingLength) {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    EXPECT_EQ(base64_decode(base64_encode(s)), s);
  }
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
}

TEST(TextTest, HexEncodeWritesTwoLowerCaseDigitsPerByte) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa0, 0xff, 0x5c};
  EXPECT_EQ(hex_encode(bytes), "000fa0ff5c");
  EXPECT_EQ(hex_encode({}), "");
}

TEST(TextTest, Base64DecodeSkipsLineBreaksAndMissingPadding) {
  EXPECT_EQ(base64_decode("Zm9v\nYmFy\n"), "foobar");  // line-wrapped PEM-style data
  EXPECT_EQ(base64_decode("Zm8"), "fo");               // padding optional
  EXPECT_FALSE(base64_decode("Zm9v!").has_value());
  EXPECT_FALSE(base64_decode("Z").has_value());
  EXPECT_FALSE(base64_decode("Zm==9v").has_value());
}

// Each offset as kube-apiserver 1.26 reported it for a Secret's data value (checked with curl).
TEST(TextTest, Base64CorruptAtNamesTheByteGoNames) {
  EXPECT_EQ(base64_corrupt_at(""), std::nullopt);
  EXPECT_EQ(base64_corrupt_at("YWJj"), std::nullopt);
  EXPECT_EQ(base64_corrupt_at("YWJj\n"), std::nullopt);  // line breaks are skipped
  EXPECT_EQ(base64_corrupt_at("YQ=="), std::nullopt);
  EXPECT_EQ(base64_corrupt_at("YWI="), std::nullopt);
  EXPECT_EQ(base64_corrupt_at("YWJ"), 0u);  // a quantum cut short: padding is required
  EXPECT_EQ(base64_corrupt_at("YQ"), 0u);
  EXPECT_EQ(base64_corrupt_at("YW Jj"), 2u);  // a space is a bad byte
  EXPECT_EQ(base64_corrupt_at("Y==="), 1u);   // padding after one symbol
  EXPECT_EQ(base64_corrupt_at("!!!!"), 0u);
  EXPECT_EQ(base64_corrupt_at("YWJjZA="), 7u);    // "==" missing its second '='
  EXPECT_EQ(base64_corrupt_at("YWJjZA==x"), 8u);  // anything after the padding
  EXPECT_EQ(base64_corrupt_at("YWJjZA=x"), 6u);   // the second '=' is not one
}

// On random text over base64's alphabet, padding, line breaks and a bad byte: what Go reads
// the lenient decoder reads too, and what either encodes reads back; nothing is out of range.
TEST(TextTest, PropertyBase64CorruptAtAgreesWithDecodeAndEncode) {
  std::mt19937 random(20261127);
  const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/==\n\r!";
  for (int i = 0; i < 20'000; ++i) {
    std::string text(random() % 14, ' ');
    for (char& c : text)
      c = alphabet[random() % alphabet.size()];
    if (const auto at = base64_corrupt_at(text)) {
      EXPECT_LE(*at, text.size()) << text;
      continue;
    }
    const auto decoded = base64_decode(text);
    ASSERT_TRUE(decoded.has_value()) << text;
    EXPECT_EQ(base64_corrupt_at(base64_encode(*decoded)), std::nullopt) << text;
  }
}

TEST(TextTest, EditDistanceCountsSingleByteEditsIgnoringCase) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("image", "image"), 0u);
  EXPECT_EQ(edit_distance("imagee", "image"), 1u);  // one insertion
  EXPECT_EQ(edit_distance("imge", "image"), 1u);    // one deletion
  EXPECT_EQ(edit_distance("workes", "workers"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("NodeSelector", "nodeselector"), 0u);
  EXPECT_EQ(edit_distance("", "gpus"), 4u);
}

TEST(TextTest, ClosestMatchSuggestsANearOrPrefixedCandidateOnly) {
  const std::vector<std::string> keys = {"image", "imagePullPolicy", "workers", "gpus", "cpu"};
  EXPECT_EQ(closest_match("imagee", keys), "image");
  EXPECT_EQ(closest_match("worker", keys), "workers");
  EXPECT_EQ(closest_match("gpu", keys), "gpus");  // distance 1 to both gpus and cpu: the first
  EXPECT_EQ(closest_match("imagePull", keys), "imagePullPolicy");  // a prefix
  EXPECT_EQ(closest_match("dataset", keys), std::nullopt);
  EXPECT_EQ(closest_match("", keys), std::nullopt);
}

TEST(TextTest, TrimAndLower) {
  EXPECT_EQ(trim(" \t token\r\n"), "token");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(to_lower("Content-Type"), "content-type");
}

TEST(TextTest, InvalidUtf8OffsetFindsTheFirstMalformedSequence) {
  EXPECT_EQ(invalid_utf8_offset(""), std::nullopt);
  EXPECT_EQ(invalid_utf8_offset("plain ascii\n"), std::nullopt);
  // 2, 3 and 4 bytes, at the edges of each range: U+0080, U+07FF, U+0800, U+FFFF, U+10000,
  // U+10FFFF, and the last code points before the surrogates.
  EXPECT_EQ(invalid_utf8_offset("\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xef\xbf\xbf \xf0\x90\x80\x80 "
                                "\xf4\x8f\xbf\xbf \xed\x9f\xbf"),
            std::nullopt);
  EXPECT_EQ(invalid_utf8_offset("ab\xff"), 2u);
  EXPECT_EQ(invalid_utf8_offset("a\x80"), 1u);         // a continuation byte alone
  EXPECT_EQ(invalid_utf8_offset("\xc0\xaf"), 0u);      // overlong "/"
  EXPECT_EQ(invalid_utf8_offset("\xe0\x80\xaf"), 0u);  // overlong "/"
  EXPECT_EQ(invalid_utf8_offset("\xf0\x80\x80\xaf"), 0u);
  EXPECT_EQ(invalid_utf8_offset("x\xed\xa0\x80"), 1u);     // the surrogate U+D800
  EXPECT_EQ(invalid_utf8_offset("\xf4\x90\x80\x80"), 0u);  // U+110000
  EXPECT_EQ(invalid_utf8_offset("\xf5\x80\x80\x80"), 0u);
  EXPECT_EQ(invalid_utf8_offset("ok \xe2\x9c"), 3u);   // cut off at the end
  EXPECT_EQ(invalid_utf8_offset("\xe2\x28\xa1"), 0u);  // a second byte that is ASCII
  EXPECT_EQ(invalid_utf8_offset("\xe2\x9c\x93\xf0\x9f\x98\x80 \xc3"), 8u);
}

}  // namespace
}  // namespace trainctl
