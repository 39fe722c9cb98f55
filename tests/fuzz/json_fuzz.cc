// trainctl's JSON parser (lib/json_parse.h) against nlohmann's, which it must equal on every
// input: the same values of the same types, and invalid text invalid for both.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "json_parse.h"

namespace {

using nlohmann::json;

// Equal and of the same type throughout (nlohmann's == takes 1u, 1 and 1.0 as equal, and 0.0
// as -0.0).
bool same(const json& a, const json& b) {
  if (a.type() != b.type())
    return false;
  switch (a.type()) {
    case json::value_t::object: {
      if (a.size() != b.size())
        return false;
      for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
        if (i.key() != j.key() || !same(*i, *j))
          return false;
      }
      return true;
    }
    case json::value_t::array: {
      if (a.size() != b.size())
        return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same(a[i], b[i]))
          return false;
      }
      return true;
    }
    case json::value_t::number_float:
      return std::bit_cast<std::uint64_t>(a.get<double>()) ==
             std::bit_cast<std::uint64_t>(b.get<double>());
    default:
      return a == b;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const json fast = trainctl::parse_json(text, /*allow_exceptions=*/false);
  const json reference = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (fast.is_discarded() != reference.is_discarded() ||
      (!fast.is_discarded() && !same(fast, reference)))
    std::abort();
  return 0;
}
