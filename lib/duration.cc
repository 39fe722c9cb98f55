#include "duration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "text.h"

namespace trainctl {

namespace {

/// Nanoseconds per unit, 0 for an unknown one.
long double unit_scale(std::string_view unit) {
  if (unit == "ns")
    return 1;
  if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs")  // micro sign, Greek mu
    return 1e3L;
  if (unit == "ms")
    return 1e6L;
  if (unit == "s")
    return 1e9L;
  if (unit == "m")
    return 60e9L;
  if (unit == "h")
    return 3600e9L;
  return 0;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  using std::chrono::milliseconds;
  if (text.empty())
    return std::nullopt;
  if (std::all_of(text.begin(), text.end(), is_ascii_digit)) {
    if (text.size() > 12)
      return std::nullopt;
    return milliseconds(std::stoll(std::string(text)) * 1000);
  }
  long double total_ns = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t number_begin = i;
    while (i < text.size() && (is_ascii_digit(text[i]) || text[i] == '.'))
      ++i;
    const std::string number(text.substr(number_begin, i - number_begin));
    if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1 ||
        number.size() > 20)
      return std::nullopt;
    const std::size_t unit_begin = i;
    while (i < text.size() && !is_ascii_digit(text[i]) && text[i] != '.')
      ++i;
    const long double scale = unit_scale(text.substr(unit_begin, i - unit_begin));
    if (scale == 0)
      return std::nullopt;
    total_ns += std::strtold(number.c_str(), nullptr) * scale;
  }
  if (total_ns > 1e18L)
    return std::nullopt;
  const long double ms = total_ns / 1e6L;
  if (ms > 0 && ms < 1)
    return milliseconds(1);
  return milliseconds(static_cast<std::int64_t>(ms));
}

std::chrono::milliseconds parse_duration_flag(std::string_view flag, std::string_view text,
                                              ErrorKind kind) {
  if (const auto d = parse_duration(text))
    return *d;
  throw Error(kind, fmt::format("invalid {} {:?}: use a duration such as 30s, 5m or 1h30m, or a "
                                "whole number of seconds",
                                flag, text));
}

}  // namespace trainctl
