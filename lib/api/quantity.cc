#include "api/quantity.h"

#include <fmt/format.h>

#include <charconv>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "error.h"
#include "text.h"

namespace trainctl::api {
namespace {

constexpr std::string_view kFormatWrong =
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
constexpr std::string_view kSuffixWrong = "unable to parse quantity's suffix";
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

[[noreturn]] void fail(std::string_view text, std::string_view why) {
  throw Error(ErrorKind::Invalid, fmt::format("quantity \"{}\": {}", text, why));
}

/// The pieces of a quantity string, split exactly as apimachinery's parseQuantityString splits
/// them (including its leniencies: "1.", ".5", "-" and a bare "m" are all accepted).
struct QuantityParts {
  bool negative = false;
  std::string_view whole;     // integer digits, leading zeros stripped; may be empty
  std::string_view fraction;  // digits after the point
  std::string_view suffix;
};

/// nullopt when `s` does not have a quantity's form.
std::optional<QuantityParts> split_quantity(std::string_view s) {
  QuantityParts parts;
  std::size_t pos = 0;
  if (pos < s.size() && (s[pos] == '-' || s[pos] == '+')) {
    parts.negative = s[pos] == '-';
    ++pos;
  }
  while (pos < s.size() && s[pos] == '0')
    ++pos;
  if (pos == s.size())
    return parts;  // all zeros (or just a sign): zero, no suffix
  std::size_t begin = pos;
  while (pos < s.size() && is_ascii_digit(s[pos]))
    ++pos;
  parts.whole = s.substr(begin, pos - begin);
  if (pos < s.size() && s[pos] == '.') {
    begin = ++pos;
    while (pos < s.size() && is_ascii_digit(s[pos]))
      ++pos;
    parts.fraction = s.substr(begin, pos - begin);
  }
  const std::size_t suffix_begin = pos;
  while (pos < s.size() && std::string_view("eEinumkKMGTP").find(s[pos]) != std::string_view::npos)
    ++pos;
  if (pos < s.size() && (s[pos] == '-' || s[pos] == '+'))
    ++pos;
  while (pos < s.size() && is_ascii_digit(s[pos]))
    ++pos;
  if (pos != s.size())
    return std::nullopt;
  parts.suffix = s.substr(suffix_begin);
  return parts;
}

/// A suffix as a power of ten and a power of two.
struct Scale {
  std::int64_t pow10 = 0;
  int pow2 = 0;
};

std::optional<Scale> interpret_suffix(std::string_view suffix) {
  static const std::pair<std::string_view, Scale> kTable[] = {
      {"", {0, 0}},    {"n", {-9, 0}},  {"u", {-6, 0}},  {"m", {-3, 0}},
      {"k", {3, 0}},   {"M", {6, 0}},   {"G", {9, 0}},   {"T", {12, 0}},
      {"P", {15, 0}},  {"E", {18, 0}},  {"Ki", {0, 10}}, {"Mi", {0, 20}},
      {"Gi", {0, 30}}, {"Ti", {0, 40}}, {"Pi", {0, 50}}, {"Ei", {0, 60}},
  };
  for (const auto& [name, scale] : kTable) {
    if (name == suffix)
      return scale;
  }
  if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E'))
    return std::nullopt;
  // strconv.ParseInt: an optional sign, then digits only.
  std::string_view digits = suffix.substr(1);
  bool negative = false;
  if (digits[0] == '+' || digits[0] == '-') {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  std::int64_t exponent = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), exponent);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  // Go keeps the exponent as an int32, wrapping larger ones.
  return Scale{static_cast<std::int32_t>(negative ? -exponent : exponent), 0};
}

/// scale_up for at most 18 digits: their value times 2^60 (the largest binary suffix) fits in
/// 128 bits, so plain integer arithmetic is exact. Every quantity a manifest or node writes takes
/// this way; it allocates nothing.
std::int64_t scale_up_short(std::string_view digits, int pow2, std::int64_t pow10) {
  unsigned __int128 value = 0;
  for (const char c : digits)
    value = value * 10 + static_cast<unsigned>(c - '0');
  value <<= pow2;
  bool has_fraction = false;
  for (; pow10 < 0 && value != 0; ++pow10) {
    has_fraction = has_fraction || value % 10 != 0;
    value /= 10;
  }
  for (; pow10 > 0 && value <= static_cast<unsigned __int128>(kMax); --pow10)
    value *= 10;
  if (has_fraction)
    ++value;
  return value > static_cast<unsigned __int128>(kMax) ? kMax : static_cast<std::int64_t>(value);
}

/// ceil(|digits| * 2^pow2 * 10^pow10) as int64, saturating. `digits` has no leading zeros.
std::int64_t scale_up(std::string_view digits, int pow2, std::int64_t pow10) {
  if (digits.empty())
    return 0;
  if (digits.size() <= 18)
    return scale_up_short(digits, pow2, pow10);
  // Little-endian decimal digits, multiplied by two pow2 times: exact for every suffix.
  std::vector<int> d;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it)
    d.push_back(*it - '0');
  for (int i = 0; i < pow2; ++i) {
    int carry = 0;
    for (int& digit : d) {
      const int v = digit * 2 + carry;
      digit = v % 10;
      carry = v / 10;
    }
    if (carry)
      d.push_back(carry);
  }
  const auto length = static_cast<std::int64_t>(d.size());
  if (length + pow10 > 19)
    return kMax;
  std::size_t first_integer_digit = 0;  // index into d of the lowest digit before the point
  bool has_fraction = false;
  if (pow10 < 0) {
    first_integer_digit = static_cast<std::size_t>(std::min<std::int64_t>(-pow10, length));
    for (std::size_t i = 0; i < first_integer_digit; ++i)
      has_fraction = has_fraction || d[i] != 0;
  }
  unsigned __int128 value = 0;
  for (std::size_t i = d.size(); i-- > first_integer_digit;)
    value = value * 10 + static_cast<unsigned>(d[i]);
  for (std::int64_t i = 0; i < pow10; ++i)
    value *= 10;
  if (has_fraction)
    ++value;
  return value > static_cast<unsigned __int128>(kMax) ? kMax : static_cast<std::int64_t>(value);
}

/// `value` in decimal followed by `suffix` (what fmt::format("{}{}") writes, without its
/// formatting machinery: admission writes thousands of quantities a pass).
std::string with_suffix(std::int64_t value, std::string_view suffix) {
  char digits[24];
  char* end = std::to_chars(std::begin(digits), std::end(digits), value).ptr;
  std::string result(std::begin(digits), end);
  result += suffix;
  return result;
}

/// Quantity.String() of a DecimalSI quantity: thousandths as "m", else the largest power of
/// 1000 that divides the value.
std::string decimal_quantity(std::int64_t milli) {
  if (milli % 1000 != 0)
    return with_suffix(milli, "m");
  std::int64_t value = milli / 1000;
  static constexpr std::string_view kSuffixes[] = {"", "k", "M", "G", "T", "P", "E"};
  std::size_t i = 0;
  while (value != 0 && value % 1000 == 0 && i + 1 < std::size(kSuffixes)) {
    value /= 1000;
    ++i;
  }
  return with_suffix(value, kSuffixes[i]);
}

/// The same for BinarySI, which Go writes as DecimalSI below 1Ki or with a fraction.
std::string binary_quantity(std::int64_t milli) {
  std::int64_t value = milli / 1000;
  if (milli % 1000 != 0 || value < 1024)
    return decimal_quantity(milli);
  static constexpr std::string_view kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  std::size_t i = 0;
  while (value % 1024 == 0 && i + 1 < std::size(kSuffixes)) {
    value /= 1024;
    ++i;
  }
  return with_suffix(value, kSuffixes[i]);
}

bool counted_in_bytes(std::string_view resource) {
  return resource == "memory" || resource == "ephemeral-storage" || resource == "storage" ||
         resource.starts_with("hugepages-");
}

}  // namespace

std::string format_quantity(std::string_view resource, std::int64_t milli) {
  std::string decimal = decimal_quantity(milli);
  if (!counted_in_bytes(resource))
    return decimal;
  std::string binary = binary_quantity(milli);
  return binary.size() <= decimal.size() ? binary : decimal;
}

namespace {

/// A quantity as ParseQuantity reads it, or why it refuses it (`refused` not empty).
struct Reading {
  QuantityParts parts;
  Scale scale;
  std::string_view refused;
};

Reading read_quantity(std::string_view text) {
  const std::optional<QuantityParts> parts = text.empty() ? std::nullopt : split_quantity(text);
  if (!parts)
    return {.refused = kFormatWrong};
  const std::optional<Scale> scale = interpret_suffix(parts->suffix);
  if (!scale)
    return {.refused = kSuffixWrong};
  return {.parts = *parts, .scale = *scale};
}

}  // namespace

std::int64_t parse_quantity_milli(std::string_view text) {
  const Reading reading = read_quantity(text);
  if (!reading.refused.empty())
    fail(text, reading.refused);
  const QuantityParts& parts = reading.parts;
  std::string digits(parts.whole);
  digits += parts.fraction;
  const std::size_t significant = digits.find_first_not_of('0');
  if (significant == std::string::npos)
    return 0;
  // Thousandths, rounded away from zero as MilliValue() rounds.
  const std::int64_t pow10 =
      reading.scale.pow10 + 3 - static_cast<std::int64_t>(parts.fraction.size());
  const std::int64_t milli =
      scale_up(std::string_view(digits).substr(significant), reading.scale.pow2, pow10);
  return parts.negative ? -milli : milli;
}

std::optional<std::string> quantity_decode_error(const nlohmann::json& value) {
  if (value.is_null())
    return std::nullopt;
  // Quantity.UnmarshalJSON: a string's contents, anything else as its JSON text, trimmed.
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  const std::string_view refused = read_quantity(trim(text)).refused;
  return refused.empty() ? std::nullopt : std::optional<std::string>(refused);
}

std::int64_t quantity_milli(const nlohmann::json& value) {
  if (value.is_null())
    return 0;
  if (value.is_string())
    return parse_quantity_milli(trim(value.get_ref<const std::string&>()));
  if (value.is_number())
    return parse_quantity_milli(value.dump());
  throw Error(ErrorKind::Invalid,
              fmt::format("quantity {}: must be a string or a number", value.dump()));
}

}  // namespace trainctl::api
