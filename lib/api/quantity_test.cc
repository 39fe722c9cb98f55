#include "api/quantity.h"

#include <gtest/gtest.h>

#include <cctype>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "error.h"

namespace trainctl::api {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

struct QuantityCase {
  const char* text;
  std::int64_t milli;
};

void PrintTo(const QuantityCase& c, std::ostream* out) {
  *out << '"' << c.text << "\" -> " << c.milli << " milli";
}

/// "3_1_5Gi" for case 3, "1.5Gi": the index keeps names unique, the text makes them readable.
std::string case_name(const ::testing::TestParamInfo<QuantityCase>& info) {
  std::string name = std::to_string(info.index) + "_";
  for (const char c : std::string_view(info.param.text))
    name += std::isalnum(static_cast<unsigned char>(c)) ? std::string(1, c)
            : c == '-'                                  ? std::string("minus")
            : c == '+'                                  ? std::string("plus")
                                                        : std::string("_");
  return name;
}

class QuantityTable : public ::testing::TestWithParam<QuantityCase> {};

TEST_P(QuantityTable, ParsesToMilliUnitsAsResourceQuantityDoes) {
  EXPECT_EQ(parse_quantity_milli(GetParam().text), GetParam().milli) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Kubernetes, QuantityTable,
    ::testing::Values(
        // The forms manifests use.
        QuantityCase{"100m", 100}, QuantityCase{"2", 2000}, QuantityCase{"1.5", 1500},
        QuantityCase{"512Mi", 512LL * 1024 * 1024 * 1000},
        QuantityCase{"1Gi", 1024LL * 1024 * 1024 * 1000}, QuantityCase{"1e3", 1'000'000},
        QuantityCase{"8", 8000}, QuantityCase{"0.1", 100}, QuantityCase{"250m", 250},
        // Every decimal suffix.
        QuantityCase{"1n", 1}, QuantityCase{"1u", 1}, QuantityCase{"1500u", 2},
        QuantityCase{"1k", 1'000'000}, QuantityCase{"1M", 1'000'000'000},
        QuantityCase{"1G", 1'000'000'000'000}, QuantityCase{"1T", 1'000'000'000'000'000},
        QuantityCase{"1P", 1'000'000'000'000'000'000}, QuantityCase{"1E", kMax},
        // Every binary suffix; fractions of binary units are exact.
        QuantityCase{"1Ki", 1'024'000}, QuantityCase{"1Mi", 1'048'576'000},
        QuantityCase{"1Ti", 1'099'511'627'776'000}, QuantityCase{"1Pi", 1'125'899'906'842'624'000},
        QuantityCase{"1Ei", kMax}, QuantityCase{"1.5Gi", 1'610'612'736'000},
        QuantityCase{"0.5Ki", 512'000},
        // Decimal exponents, either case, signed.
        QuantityCase{"1E3", 1'000'000}, QuantityCase{"1e-3", 1}, QuantityCase{"2e+2", 200'000},
        QuantityCase{"5e-4", 1},
        // Rounding up to the next milli, signs, and apimachinery's leniencies.
        QuantityCase{"1.0001", 1001}, QuantityCase{"0.000000000000000000001", 1},
        QuantityCase{"+1", 1000}, QuantityCase{"-1", -1000}, QuantityCase{".5", 500},
        QuantityCase{"1.", 1000}, QuantityCase{"0", 0}, QuantityCase{"000", 0},
        QuantityCase{"007", 7000},
        // Too large for int64 thousandths: saturates.
        QuantityCase{"12345678901234567890123", kMax}, QuantityCase{"9223372036854775807", kMax}),
    case_name);

TEST(Quantity, RejectsWhatTheApiServerRejects) {
  for (const char* bad : {"", "abc", "1K", "1 ", " 1", "1.5.5", "1ee3", "1e", "1e+", "1Mi3", "1m3",
                          "--1", "1GiB", "0x10"}) {
    try {
      parse_quantity_milli(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Invalid) << bad;
      EXPECT_NE(e.message().find("quantit"), std::string::npos) << e.message();
    }
  }
}

TEST(Quantity, MessagesNameTheValueAndTheRule) {
  try {
    parse_quantity_milli("12 cores");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "quantity \"12 cores\": quantities must match the regular expression "
              "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
  }
  try {
    parse_quantity_milli("4K");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "quantity \"4K\": unable to parse quantity's suffix");
  }
}

// Up to 18 significant digits parse with integer arithmetic, longer ones digit by digit: the same
// quantity with 20 more zeros after the point takes the long way and must come out the same.
TEST(Quantity, PropertyShortAndLongDigitStringsOfOneValueParseAlike) {
  std::mt19937 random(11);
  const std::vector<std::string> suffixes = {"",   "m",    "n",    "u",   "k",   "M",   "E",
                                             "Ki", "Mi",   "Gi",   "Ti",  "Ei",  "e3",  "E-5",
                                             "e9", "e-40", "e+17", "e-1", "e18", "e-20"};
  const auto digits = [&](std::size_t n) {
    std::string text;
    for (std::size_t i = 0; i < n; ++i)
      text += static_cast<char>('0' + random() % 10);
    return text;
  };
  for (int i = 0; i < 20'000; ++i) {
    const std::size_t whole = random() % 13;
    const std::string sign = random() % 4 == 0 ? "-" : "";
    const std::string text_whole = digits(whole), fraction = digits(random() % (19 - whole));
    const std::string& suffix = suffixes[random() % suffixes.size()];
    const std::string text = sign + text_whole + "." + fraction + suffix;
    const std::string padded = sign + text_whole + "." + fraction + std::string(20, '0') + suffix;
    EXPECT_EQ(parse_quantity_milli(text), parse_quantity_milli(padded)) << text;
  }
}

TEST(Quantity, JsonValuesMayBeNumbersOrPaddedStrings) {
  EXPECT_EQ(quantity_milli(nlohmann::json(2)), 2000);
  EXPECT_EQ(quantity_milli(nlohmann::json(0.5)), 500);
  EXPECT_EQ(quantity_milli(nlohmann::json(" 1Gi ")), 1024LL * 1024 * 1024 * 1000);
  EXPECT_EQ(quantity_milli(nlohmann::json()), 0);
  EXPECT_THROW(quantity_milli(nlohmann::json(true)), Error);
  EXPECT_THROW(quantity_milli(nlohmann::json("lots")), Error);
}

}  // namespace
}  // namespace trainctl::api
