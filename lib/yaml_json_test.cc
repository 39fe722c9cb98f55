#include "yaml_json.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <random>
#include <regex>
#include <string>

namespace trainctl {
namespace {

TEST(YamlJsonTest, CoreSchemaTypesPlainScalars) {
  auto doc = yaml_to_json(YAML::Load(R"(
replicas: 3
ratio: 0.5
suspend: false
missing: ~
quoted: "3"
single: 'true'
name: mnist
)"));
  EXPECT_EQ(doc["replicas"], 3);
  EXPECT_DOUBLE_EQ(doc["ratio"].get<double>(), 0.5);
  EXPECT_EQ(doc["suspend"], false);
  EXPECT_TRUE(doc["missing"].is_null());
  EXPECT_EQ(doc["quoted"], "3");
  EXPECT_EQ(doc["single"], "true");
  EXPECT_EQ(doc["name"], "mnist");
}

// As Go's YAML reads them (strconv.ParseFloat): a float too large for a double stays a string,
// one too small reads as 0 (found by fuzz_set_value: std::stod threw out_of_range and aborted).
TEST(YamlJsonTest, FloatsOutOfRangeAreStringsWhenTooLargeAndZeroWhenTooSmall) {
  EXPECT_EQ(yaml_to_json(YAML::Load("a: 1e999"))["a"], "1e999");
  EXPECT_EQ(yaml_to_json(YAML::Load("a: -2E706973"))["a"], "-2E706973");
  EXPECT_EQ(yaml_to_json(YAML::Load("a: 1e-999"))["a"], 0.0);
  EXPECT_EQ(yaml_to_json(YAML::Load("a: 1.5e3"))["a"], 1500.0);
}

// The core schema's int and float patterns, as the YAML 1.2 spec writes them, against the
// hand-written matchers, on random plain scalars of the characters they are made of.
TEST(YamlJsonTest, PropertyNumbersAreTheCoreSchemasIntAndFloatPatterns) {
  const std::regex int_re("[-+]?[0-9]+");
  const std::regex float_re(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  std::mt19937 random(20261126);
  const std::string alphabet = "0123456789+-.eEx";
  int ints = 0;
  int floats = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string s(1 + random() % 6, ' ');
    for (char& c : s)
      c = alphabet[random() % alphabet.size()];
    const nlohmann::json value = yaml_scalar_to_json(YAML::Node(s));
    const bool as_int = std::regex_match(s, int_re);
    const bool as_float = !as_int && std::regex_match(s, float_re);
    ints += as_int;
    floats += as_float;
    EXPECT_EQ(value.is_number_integer(), as_int) << s;
    // A float too large for a double stays a string, as Go's YAML keeps it.
    EXPECT_EQ(value.is_number_float(), as_float && value != s) << s;
    EXPECT_EQ(value.is_string(), !as_int && (!as_float || value == s)) << s;
  }
  EXPECT_GT(ints, 500);  // the strings did exercise both patterns
  EXPECT_GT(floats, 500);
}

TEST(YamlJsonTest, RoundTripKeepsStringsThatLookLikeOtherTypes) {
  nlohmann::json in = {{"a", "true"}, {"b", "123"},           {"c", "null"},
                       {"d", 7},      {"e", {1, "x", false}}, {"f", {{"nested", "1.5"}}}};
  auto out = yaml_to_json(YAML::Load(json_to_yaml(in)));
  EXPECT_EQ(out, in);
}

TEST(YamlJsonTest, EmitsBlockStyle) {
  EXPECT_EQ(json_to_yaml({{"metadata", {{"name", "x"}}}}), "metadata:\n  name: x\n");
  EXPECT_EQ(json_to_yaml({{"a", nlohmann::json::object()}, {"b", nlohmann::json::array()}}),
            "a: {}\nb: []\n");
}

}  // namespace
}  // namespace trainctl
