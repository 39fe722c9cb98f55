// The expected words are what kube-apiserver v1.26 answered for the same schema
// (tests/support/widget_crd.yaml) and objects
// (apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm.go, pkg/apiserver/schema/
// defaulting/algorithm.go, pkg/apiserver/validation/validation.go ValidateCustomResource over
// kube-openapi pkg/validation/validate).

#include "sandbox/structural_schema.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "yaml_json.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;

StructuralSchema widget_schema() {
  const json crd = yaml_to_json(
      YAML::LoadFile(std::string(TRAINCTL_SOURCE_DIR) + "/tests/support/widget_crd.yaml"));
  return StructuralSchema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
}

json widget(json spec) {
  return {{"apiVersion", "probe.trainctl.dev/v1"},
          {"kind", "Widget"},
          {"metadata", {{"name", "w"}}},
          {"spec", std::move(spec)}};
}

/// "field: body" of each error, in order.
std::vector<std::string> messages(const std::vector<FieldError>& errs) {
  std::vector<std::string> out;
  for (const auto& e : errs)
    out.push_back(e.field + ": " + e.body);
  return out;
}

TEST(StructuralSchemaTest, DecodeDropsUndeclaredFieldsAndNamesThemMetadataFirstThenSorted) {
  json obj = widget({{"size", 2},
                     {"foo", 1},
                     {"nested", {{"bar", 2}}},
                     {"free", {{"x", {{"y", 1}}}}},
                     {"items", {{{"id", "a"}, {"zz", 1}}}},
                     {"name", {{"a", 1}}}});
  obj["extra"] = 1;
  obj["metadata"]["bogus"] = 1;
  obj["metadata"]["labels"] = {{"a", "b"}};
  const auto unknown = widget_schema().decode(obj);
  EXPECT_EQ(unknown,
            (std::vector<std::string>{"metadata.bogus", "extra", "spec.foo", "spec.items[0].zz",
                                      "spec.name.a", "spec.nested.bar"}));
  EXPECT_FALSE(obj.contains("extra"));
  EXPECT_EQ(obj["metadata"], (json{{"name", "w"}, {"labels", {{"a", "b"}}}}));
  EXPECT_EQ(obj["spec"]["free"], (json{{"x", {{"y", 1}}}}));  // preserve-unknown-fields
  EXPECT_EQ(obj["spec"]["items"], (json{{{"id", "a"}}}));
  EXPECT_EQ(obj["apiVersion"], "probe.trainctl.dev/v1");
  EXPECT_EQ(obj["kind"], "Widget");
}

TEST(StructuralSchemaTest, DecodeDropsNonNullableNullsThenFillsDefaultsDepthFirst) {
  json obj = widget({{"size", 2},
                     {"notnull", nullptr},
                     {"maybe", nullptr},
                     {"flag", nullptr},
                     {"count", nullptr},
                     {"nested", nullptr}});
  EXPECT_TRUE(widget_schema().decode(obj).empty());
  // As the real server stored it: {"count":3,"flag":true,"maybe":null,"nested":{"inner":"x"},
  // "size":2}.
  EXPECT_EQ(obj["spec"], (json{{"count", 3},
                               {"flag", true},
                               {"maybe", nullptr},
                               {"nested", {{"inner", "x"}}},
                               {"size", 2}}));
}

TEST(StructuralSchemaTest, ValidObjectsHaveNoErrors) {
  json obj = widget({{"size", 2.0},  // an integral float is an integer (2^53 and below)
                     {"big", 9007199254740993},
                     {"ratio", 0.5},
                     {"name", "abc"},
                     {"mode", "Fast"},
                     {"when", "2024-05-01T12:00:00Z"},
                     {"port", "http"},
                     {"quantity", 4},
                     {"tags", {"a"}},
                     {"labels", {{"a", "b"}}},
                     {"items", {{{"id", "a"}, {"weight", 1}}}},
                     {"maybe", nullptr}});
  EXPECT_EQ(messages(widget_schema().validate(obj)), std::vector<std::string>());
}

TEST(StructuralSchemaTest, WrongTypeIsTypeInvalidNamingTheValuesType) {
  const auto errs = widget_schema().validate(widget({{"size", "string"}}));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].type, "FieldValueTypeInvalid");
  EXPECT_EQ(errs[0].field, "spec.size");
  EXPECT_EQ(errs[0].body,
            R"(Invalid value: "string": spec.size in body must be of type integer: "string")");
  EXPECT_EQ(
      messages(widget_schema().validate(widget({{"size", 2.5}, {"big", 1e20}}))),
      (std::vector<std::string>{
          R"(spec.big: Invalid value: "number": spec.big in body must be of type integer: "number")",
          R"(spec.size: Invalid value: "number": spec.size in body must be of type integer: "number")"}));
  EXPECT_EQ(
      messages(widget_schema().validate(widget({{"size", 2}, {"tags", "x"}, {"labels", {1}}}))),
      (std::vector<std::string>{
          R"(spec.labels: Invalid value: "array": spec.labels in body must be of type object: "array")",
          R"(spec.tags: Invalid value: "string": spec.tags in body must be of type array: "string")"}));
  json not_object = widget(nullptr);
  not_object["spec"] = "notobject";
  EXPECT_EQ(
      messages(widget_schema().validate(not_object)),
      (std::vector<std::string>{
          R"(spec: Invalid value: "string": spec in body must be of type object: "string")"}));
}

TEST(StructuralSchemaTest, RequiredEnumBoundsLengthsAndPattern) {
  EXPECT_EQ(messages(widget_schema().validate(widget(json::object()))),
            (std::vector<std::string>{"spec.size: Required value"}));
  EXPECT_EQ(messages(widget_schema().validate(
                widget({{"size", 11}, {"name", "ABCDEFG"}, {"mode", "Medium"}, {"ratio", 0}}))),
            (std::vector<std::string>{
                R"(spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow")",
                "spec.name: Too long: may not be longer than 5",  // and nothing more on it
                "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
                "spec.size: Invalid value: 11: spec.size in body should be less than or equal to "
                "10"}));
  EXPECT_EQ(
      messages(widget_schema().validate(widget({{"size", 0}, {"name", "a"}}))),
      (std::vector<std::string>{
          R"(spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long)",
          "spec.size: Invalid value: 0: spec.size in body should be greater than or equal "
          "to 1"}));
  // A wrong type is also checked against the enum.
  EXPECT_EQ(
      messages(widget_schema().validate(widget({{"size", 1}, {"mode", 5}}))),
      (std::vector<std::string>{
          R"(spec.mode: Invalid value: "integer": spec.mode in body must be of type string: "integer")",
          R"(spec.mode: Unsupported value: 5: supported values: "Fast", "Slow")"}));
}

TEST(StructuralSchemaTest, Int32FormatIsNotARangeCheckButDateTimeIs) {
  EXPECT_EQ(messages(widget_schema().validate(widget({{"size", 1}, {"big", 3000000000}}))),
            std::vector<std::string>());
  EXPECT_EQ(messages(widget_schema().validate(widget({{"size", 1}, {"when", "notadate"}}))),
            (std::vector<std::string>{R"(spec.when: Invalid value: "notadate": spec.when in body )"
                                      R"(must be of type date-time: "notadate")"}));
}

TEST(StructuralSchemaTest, IntOrStringFailsTypeAnyOfAndItsFirstBranch) {
  EXPECT_EQ(
      messages(widget_schema().validate(widget({{"size", 1}, {"port", true}}))),
      (std::vector<std::string>{
          R"(spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean")",
          R"(<nil>: Invalid value: "": "spec.port" must validate at least one schema (anyOf))",
          R"(spec.port: Invalid value: "boolean": spec.port in body must be of type integer: "boolean")"}));
  EXPECT_EQ(
      messages(widget_schema().validate(widget({{"size", 1}, {"quantity", "12X"}}))),
      (std::vector<std::string>{
          R"(spec.quantity: Invalid value: "12X": spec.quantity in body should match '^[0-9]+[a-z]*$')"}));
}

TEST(StructuralSchemaTest, ArraysMapsAndNestedPathsAreNamedAsTheServerNamesThem) {
  EXPECT_EQ(
      messages(widget_schema().validate(
          widget({{"size", 2}, {"tags", {"a", "b", "c"}}, {"labels", {{"a", 1}}}}))),
      (std::vector<std::string>{
          R"(spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer")",
          "spec.tags: Too many: 3: must have at most 2 items"}));
  EXPECT_EQ(messages(widget_schema().validate(widget({{"size", 2}, {"tags", json::array()}}))),
            (std::vector<std::string>{
                "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"}));
  const auto errs = widget_schema().validate(widget({{"size", 2},
                                                     {"items", {{{"weight", "x"}}}},
                                                     {"nested", {{"deep", {{"leaf", "q"}}}}},
                                                     {"notnull", nullptr}}));
  EXPECT_EQ(
      messages(errs),
      (std::vector<std::string>{
          "spec.items[0].id: Required value",
          R"(spec.items[0].weight: Invalid value: "string": spec.items[0].weight in body must be of type integer: "string")",
          R"(spec.nested.deep.leaf: Invalid value: "string": spec.nested.deep.leaf in body must be of type integer: "string")",
          R"(spec.notnull: Invalid value: "null": spec.notnull in body must be of type string: "null")"}));
  EXPECT_EQ(errs[0].type, "FieldValueRequired");
}

TEST(StructuralSchemaTest, StrictDecodingErrorListsEveryField) {
  EXPECT_EQ(strict_decoding_error({"spec.foo", "spec.bar"}),
            R"(strict decoding error: unknown field "spec.foo", unknown field "spec.bar")");
}

}  // namespace
}  // namespace trainctl::sandbox
