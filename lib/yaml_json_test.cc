#include "yaml_json.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
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

/// What json_to_yaml wrote before it wrote YAML itself: yaml-cpp's Emitter, the reference its
/// output must equal byte for byte (render's golden files, `-o yaml` as users saw it).
void reference_emit(YAML::Emitter& out, const nlohmann::json& doc) {
  switch (doc.type()) {
    case nlohmann::json::value_t::object:
      if (doc.empty())
        out << YAML::Flow;
      out << YAML::BeginMap;
      for (const auto& [k, v] : doc.items()) {
        out << YAML::Key << k << YAML::Value;
        reference_emit(out, v);
      }
      out << YAML::EndMap;
      break;
    case nlohmann::json::value_t::array:
      if (doc.empty())
        out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& v : doc)
        reference_emit(out, v);
      out << YAML::EndSeq;
      break;
    case nlohmann::json::value_t::string: {
      const auto& s = doc.get_ref<const std::string&>();
      if (reads_as_other_type(s))
        out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case nlohmann::json::value_t::boolean:
      out << (doc.get<bool>() ? "true" : "false");
      break;
    case nlohmann::json::value_t::null:
      out << YAML::Null;
      break;
    default:
      out << doc.dump();
      break;
  }
}

std::string reference_yaml(const nlohmann::json& doc) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  out.SetMapFormat(YAML::Block);
  reference_emit(out, doc);
  std::string s = out.c_str();
  if (!s.empty() && s.back() != '\n')
    s.push_back('\n');
  return s;
}

/// Strings made of pieces that decide plain or quoted: indicators first, ": " and " #" inside,
/// line breaks and tabs, controls, C1, no-break space, byte order marks, bad and cut UTF-8,
/// surrogates and noncharacters, words that read as other types, and keys over 1,024 bytes.
std::string awkward_string(std::mt19937& random) {
  static const std::vector<std::string> pieces = {"a",
                                                  "x",
                                                  " ",
                                                  "-",
                                                  "?",
                                                  ":",
                                                  "#",
                                                  "'",
                                                  "\"",
                                                  "\\",
                                                  "\n",
                                                  "\t",
                                                  "\r",
                                                  "\r\n",
                                                  "~",
                                                  "null",
                                                  "true",
                                                  "1",
                                                  "0.5",
                                                  "e3",
                                                  "[",
                                                  "]",
                                                  "{",
                                                  "}",
                                                  ",",
                                                  "&",
                                                  "*",
                                                  "!",
                                                  "|",
                                                  ">",
                                                  "%",
                                                  "@",
                                                  "`",
                                                  "\xC2\x85",
                                                  "\xC2\x80",
                                                  "\xC2\xA0",
                                                  "\xEF\xBB\xBF",
                                                  "\xE2\x82\xAC",
                                                  "\xFF",
                                                  "\xC3",
                                                  "\x7F",
                                                  "\x01",
                                                  "\x0B",
                                                  "\x1F",
                                                  "\x08",
                                                  "\x0C",
                                                  "\x0E",
                                                  "\xED\xA0\x80",
                                                  "\xEF\xB7\x90",
                                                  "\xF0\x9F\x98\x80",
                                                  "\xF4\x90\x80\x80",
                                                  "\xE2\x82",
                                                  "\xC0\xAF",
                                                  "\xEF\xBF\xBE",
                                                  " #",
                                                  ": ",
                                                  "a:",
                                                  "-x",
                                                  "- x",
                                                  "key: value",
                                                  "yes",
                                                  "0x1F",
                                                  ".inf",
                                                  "2024-01-01",
                                                  "---",
                                                  "...",
                                                  "--- ",
                                                  "<<"};
  if (random() % 50 == 0)
    return std::string(1000 + random() % 60, 'k');
  std::string s;
  for (int n = static_cast<int>(random() % (random() % 10 == 0 ? 12 : 5)); n > 0; --n)
    s += pieces[random() % pieces.size()];
  return s;
}

nlohmann::json random_document(std::mt19937& random, int depth) {
  switch (random() % (depth > 3 ? 5 : 8)) {
    case 0:
      return awkward_string(random);
    case 1:
      return static_cast<int>(random() % 100) - 50;
    case 2:
      return random() % 2 == 0;
    case 3:
      return nullptr;
    case 4:
      return random() % 2 == 0 ? 1.5 * (random() % 7) : 1e300;
    case 5:
    case 6: {
      nlohmann::json object = nlohmann::json::object();
      for (int n = static_cast<int>(random() % 6); n > 0; --n)
        object[awkward_string(random)] = random_document(random, depth + 1);
      return object;
    }
    default: {
      nlohmann::json array = nlohmann::json::array();
      for (int n = static_cast<int>(random() % 4); n > 0; --n)
        array.push_back(random_document(random, depth + 1));
      return array;
    }
  }
}

/// What `yaml` reads back as, or a note saying it does not parse.
nlohmann::json read_back(const std::string& yaml) {
  try {
    return yaml_to_json(YAML::Load(yaml));
  } catch (const YAML::Exception& e) {
    return std::string("does not parse: ") + e.what();
  }
}

/// Whether `s` holds what YAML reads as a line break or does not allow in a plain scalar but
/// yaml-cpp's parser takes in one: a carriage return, U+FFFE, U+FFFF.
bool yaml_cpp_lenient(std::string_view s) {
  return s.find('\r') != std::string_view::npos ||
         s.find("\xEF\xBF\xBE") != std::string_view::npos ||
         s.find("\xEF\xBF\xBF") != std::string_view::npos;
}

/// Whether a key or string of `doc` is yaml_cpp_lenient.
bool holds_lenient(const nlohmann::json& doc) {
  if (doc.is_string())
    return yaml_cpp_lenient(doc.get_ref<const std::string&>());
  if (doc.is_array())
    return std::any_of(doc.begin(), doc.end(), holds_lenient);
  if (!doc.is_object())
    return false;
  return std::any_of(doc.items().begin(), doc.items().end(), [](const auto& member) {
    return yaml_cpp_lenient(member.key()) || holds_lenient(member.value());
  });
}

bool valid_utf8(const nlohmann::json& doc) {
  try {
    (void)doc.dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// On 5,000 random documents of awkward strings, json_to_yaml's YAML reads back as the document
// (when its strings are UTF-8), and is byte for byte what yaml-cpp's Emitter wrote wherever the
// two read back alike and neither a carriage return nor U+FFFE/U+FFFF is in it (600,000
// documents agreed while it was written).
TEST(YamlJsonTest, PropertyReadsBackAndIsYamlCppsEmitterWhereThatReadBack) {
  std::mt19937 random(17);
  int yaml_cpp_wrong = 0;
  for (int i = 0; i < 5'000; ++i) {
    nlohmann::json doc = random_document(random, 0);
    if (i % 3 == 0)
      doc = {{"k", std::move(doc)}};
    const std::string ours = json_to_yaml(doc);
    const std::string theirs = reference_yaml(doc);
    const auto shown = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const bool utf8 = valid_utf8(doc);
    if (utf8) {
      ASSERT_EQ(read_back(ours), doc) << shown << "\n" << ours;
    }
    // yaml-cpp wrote a carriage return, U+FFFE and U+FFFF plain: its own parser takes them, but
    // YAML does not (a line break; not printable) and go-yaml (`kubectl apply -f`) folds or
    // refuses them. Or it wrote what does not read back at all (a document marker at a line's
    // start, a noncharacter replaced).
    if (holds_lenient(doc) || read_back(theirs) != read_back(ours)) {
      ++yaml_cpp_wrong;  // ours reads back as the document (checked above for UTF-8)
      continue;
    }
    ASSERT_EQ(ours, theirs) << shown;
  }
  EXPECT_GT(yaml_cpp_wrong, 20);  // the documents did hold what yaml-cpp got wrong
}

TEST(YamlJsonTest, EmitsBlockStyle) {
  EXPECT_EQ(json_to_yaml({{"metadata", {{"name", "x"}}}}), "metadata:\n  name: x\n");
  EXPECT_EQ(json_to_yaml({{"a", nlohmann::json::object()}, {"b", nlohmann::json::array()}}),
            "a: {}\nb: []\n");
}

}  // namespace
}  // namespace trainctl
