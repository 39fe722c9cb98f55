#include "kube/cache/cbor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace trainctl::kube::cache {
namespace {

using nlohmann::json;

std::vector<std::uint8_t> encoded(const json& value) {
  std::vector<std::uint8_t> out;
  encode_cbor(value, out);
  return out;
}

TEST(CborTest, DecodesWhatNlohmannsCodecGivesBackToTheType) {
  const json pod = json::parse(R"({"apiVersion":"v1","kind":"Pod",
      "metadata":{"name":"p","resourceVersion":"7","labels":{"a":"b"}},
      "spec":{"containers":[{"name":"c","ports":[{"containerPort":2222}]}]},
      "status":{"phase":"Running","ratio":0.25,"delta":-3,"big":18446744073709551615,
                "min":-9223372036854775808,"ok":true,"none":null,"list":[]}})");
  const std::vector<std::uint8_t> bytes = encoded(pod);
  const json decoded = decode_cbor(bytes);
  EXPECT_EQ(decoded, json::from_cbor(json::to_cbor(pod)));
  EXPECT_TRUE(decoded["status"]["delta"].is_number_integer());
  EXPECT_EQ(decoded["status"]["delta"], -3);
  EXPECT_TRUE(decoded["status"]["big"].is_number_unsigned());
  EXPECT_EQ(decoded["status"]["min"].get<std::int64_t>(), INT64_MIN);
  EXPECT_EQ(decoded["status"]["ratio"].get<double>(), 0.25);
  EXPECT_LT(bytes.size(), pod.dump().size()) << "smaller than its JSON text";
}

TEST(CborTest, KeepsOnlyTheTopLevelMembersAsked) {
  const json pod = {{"metadata", {{"name", "p"}}},
                    {"spec", {{"containers", json::array({{{"name", "c"}}})}}},
                    {"status", {{"phase", "Pending"}}}};
  static constexpr std::string_view kept[] = {"metadata", "status"};
  EXPECT_EQ(decode_cbor(encoded(pod), kept),
            json({{"metadata", {{"name", "p"}}}, {"status", {{"phase", "Pending"}}}}));
  EXPECT_EQ(decode_cbor(encoded(json::array({1, 2})), kept), json::array({1, 2}))
      << "not an object: all of it";
}

TEST(CborTest, RefusesBytesItDoesNotWrite) {
  const std::vector<std::uint8_t> whole = encoded({{"name", "trainer"}});
  for (std::size_t cut = 0; cut < whole.size(); ++cut) {
    EXPECT_THROW(decode_cbor(std::span(whole).first(cut)), std::runtime_error) << cut;
  }
  for (const std::vector<std::uint8_t>& bad : std::vector<std::vector<std::uint8_t>>{
           {0x9F, 0x01, 0xFF},                                      // indefinite array
           {0xBB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF},  // a map longer than the bytes
           {0xA1, 0x01, 0x02},                                      // a key that is not text
           {0xC1, 0x00},                                            // a tag
           {0xF9, 0x3C, 0x00},                                      // a half float
           {0x01, 0x02}}) {                                         // bytes after the value
    EXPECT_THROW(decode_cbor(bad), std::runtime_error);
  }
}

}  // namespace
}  // namespace trainctl::kube::cache
