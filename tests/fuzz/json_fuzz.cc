// trainctl's JSON parser (lib/json_parse.h) against nlohmann's, which it must equal on every
// input: the same values of the same types, and invalid text invalid for both.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "identical_json.h"
#include "json_parse.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const json fast = trainctl::parse_json(text, /*allow_exceptions=*/false);
  const json reference = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (fast.is_discarded() != reference.is_discarded() ||
      (!fast.is_discarded() && !identical_json(fast, reference)))
    std::abort();
  return 0;
}
