#include "json_parse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trainctl {
namespace {

using nlohmann::json;

TEST(JsonParseTest, GivesNlohmannsValuesAndTypes) {
  const json doc = parse_json(
      R"({"u":18446744073709551615,"i":-9223372036854775808,"z":0,"nz":-0,"f":1.5,"e":1e2,)"
      R"("s":"a\"\\\/\b\f\n\r\t","x":"\u0041\u00e9\u20ac\ud83d\ude00","a":[true,false,null,{}],)"
      R"("dup":1,"dup":[2]})");
  EXPECT_TRUE(doc["u"].is_number_unsigned());
  EXPECT_EQ(doc["u"].get<std::uint64_t>(), 18446744073709551615u);
  EXPECT_TRUE(doc["i"].is_number_integer() && !doc["i"].is_number_unsigned());
  EXPECT_EQ(doc["i"].get<std::int64_t>(), INT64_MIN);
  EXPECT_TRUE(doc["z"].is_number_unsigned());
  EXPECT_TRUE(doc["nz"].is_number_integer() && !doc["nz"].is_number_unsigned());
  EXPECT_TRUE(doc["f"].is_number_float());
  EXPECT_TRUE(doc["e"].is_number_float());
  EXPECT_EQ(doc["e"].get<double>(), 100.0);
  EXPECT_EQ(doc["s"], "a\"\\/\b\f\n\r\t");
  EXPECT_EQ(doc["x"], "A\u00e9\u20ac\U0001F600");
  EXPECT_EQ(doc["a"], json::parse("[true,false,null,{}]"));
  EXPECT_EQ(doc["dup"], json::array({2})) << "the last of duplicate keys, as nlohmann";
}

// What the fast path does not take goes to nlohmann's parser: the same result, or its error.
TEST(JsonParseTest, WhatTheFastPathLeavesNlohmannParses) {
  for (const std::string& text : std::vector<std::string>{
           R"(18446744073709551616)", R"(-9223372036854775809)", R"({"name":"café"})",
           std::string(300, '[') + std::string(300, ']'), "\xEF\xBB\xBF{\"a\":1}", "1e-400"}) {
    EXPECT_EQ(parse_json(text), json::parse(text)) << text;
  }
  EXPECT_TRUE(parse_json("18446744073709551616").is_number_float());
  for (const char* bad : {"", " ", "{", R"({"a":1}x)", "[01]", "[1,]", R"(["\udc00"])",
                          "[\"a\tb\"]", "1e400", "tru", R"({"a" 1})", "-", "1.", "1e"}) {
    EXPECT_TRUE(parse_json(bad, false).is_discarded()) << bad;
    EXPECT_THROW(parse_json(bad), json::exception) << bad;  // parse_error, out_of_range
  }
}

}  // namespace
}  // namespace trainctl
