#include "text.h"

#include <gtest/gtest.h>

namespace trainctl {
namespace {

TEST(TextTest, Base64RoundTripsEveryPaddingLength) {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    EXPECT_EQ(base64_decode(base64_encode(s)), s);
  }
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
}

TEST(TextTest, Base64DecodeIsAsLenientAsGoAndNoMore) {
  EXPECT_EQ(base64_decode("Zm9v\nYmFy\n"), "foobar");  // line-wrapped PEM-style data
  EXPECT_EQ(base64_decode("Zm8"), "fo");               // padding optional
  EXPECT_FALSE(base64_decode("Zm9v!").has_value());
  EXPECT_FALSE(base64_decode("Z").has_value());
  EXPECT_FALSE(base64_decode("Zm==9v").has_value());
}

TEST(TextTest, TrimAndLower) {
  EXPECT_EQ(trim(" \t token\r\n"), "token");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(to_lower("Content-Type"), "content-type");
}

}  // namespace
}  // namespace trainctl
