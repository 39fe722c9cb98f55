#include "api/names.h"

#include <gtest/gtest.h>

namespace trainctl::api::names {
namespace {

using nlohmann::json;

constexpr const char* kLabelValueRule =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

TEST(NamesTest, NameRules) {
  EXPECT_TRUE(dns1123_subdomain("web-0.example").empty());
  EXPECT_EQ(dns1123_subdomain("Bad_Name").size(), 1u);
  EXPECT_EQ(dns1123_subdomain(std::string(254, 'a')).front(),
            "must be no more than 253 characters");
  EXPECT_TRUE(dns1123_label("team-a").empty());
  EXPECT_EQ(dns1123_label("a.b"), std::vector<std::string>{"must not contain dots"});
  EXPECT_TRUE(dns1035_label("svc-1").empty());
  EXPECT_EQ(dns1035_label("1svc").front(),
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character (e.g. "
            "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')");
  EXPECT_TRUE(qualified_name("example.com/my_key").empty());
  EXPECT_TRUE(label_value("").empty());
  EXPECT_EQ(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
  // As strconv.Quote: each byte of a malformed UTF-8 sequence as \xNN, well-formed text kept.
  EXPECT_EQ(go_quote("a\xff\xfe\xc3\xa9\xe2\x82"), "\"a\\xff\\xfe\xc3\xa9\\xe2\\x82\"");
}

// kube-apiserver 1.26's words for each container port name below (checked).
TEST(NamesTest, PortNamesAreIanaServiceNames) {
  EXPECT_TRUE(port_name("http").empty());
  EXPECT_TRUE(port_name("tfjob-port1").empty());
  EXPECT_EQ(port_name("abcdefghijklmnop"),
            std::vector<std::string>{"must be no more than 15 characters"});
  EXPECT_EQ(port_name("123"), std::vector<std::string>{"must contain at least one letter (a-z)"});
  EXPECT_EQ(port_name("-a--b-"), (std::vector<std::string>{"must not contain consecutive hyphens",
                                                           "must not begin or end with a hyphen"}));
  EXPECT_EQ(port_name("ABCDEFGHIJKLMNOPQ"),
            (std::vector<std::string>{
                "must be no more than 15 characters",
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "must contain at least one letter (a-z)"}));
  EXPECT_EQ(port_name("Http_x"),
            std::vector<std::string>{
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"});
  EXPECT_TRUE(port_number(1).empty());
  EXPECT_TRUE(port_number(65535).empty());
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{65536}})
    EXPECT_EQ(port_number(bad), std::vector<std::string>{"must be between 1 and 65535, inclusive"});
}

TEST(NamesTest, LabelErrorsNameTheKeyAndWordTheValueAsTheServerDoes) {
  EXPECT_TRUE(label_errors(json{{"app.kubernetes.io/name", "mnist"}, {"empty", ""}}).empty());
  const auto errs = label_errors(json{{"a", "b=c"}, {"-bad", "ok"}});
  ASSERT_EQ(errs.size(), 2u);
  EXPECT_EQ(errs[0].key, "-bad");
  EXPECT_EQ(errs[0].reason, "FieldValueInvalid");
  EXPECT_EQ(errs[0].body,
            "Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  "
            "or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
  EXPECT_EQ(errs[1].key, "a");
  EXPECT_EQ(errs[1].body, std::string("Invalid value: \"b=c\": ") + kLabelValueRule);
  EXPECT_EQ(label_errors(json{{"long", std::string(64, 'v')}}).at(0).body,
            "Invalid value: \"" + std::string(64, 'v') + "\": must be no more than 63 characters");
}

TEST(NamesTest, AnnotationKeysAreCheckedWithoutCaseAndTheirSizeIsLimited) {
  EXPECT_TRUE(annotation_errors(json{{"Example.COM/Note", "any value = fine"}}).empty());
  const auto bad_key = annotation_errors(json{{"a b", "x"}});
  ASSERT_EQ(bad_key.size(), 1u);
  EXPECT_EQ(bad_key[0].key, "a b");
  EXPECT_TRUE(bad_key[0].body.starts_with("Invalid value: \"a b\": name part must consist of"))
      << bad_key[0].body;

  const std::string half(128 * 1024, 'x');
  EXPECT_TRUE(annotation_errors(json{{"a", half.substr(1)}, {"b", half.substr(1)}}).empty());
  const auto too_big = annotation_errors(json{{"a", half}, {"b", half}});
  ASSERT_EQ(too_big.size(), 1u);
  EXPECT_EQ(too_big[0].key, "");
  EXPECT_EQ(too_big[0].reason, "FieldValueTooLong");
  EXPECT_EQ(too_big[0].body, "Too long: may not be more than 262144 bytes");
}

}  // namespace
}  // namespace trainctl::api::names
