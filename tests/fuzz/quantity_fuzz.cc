// Resource quantities: what parses must format back to text that parses to the same value.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/quantity.h"
#include "error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace api = trainctl::api;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::int64_t milli = api::parse_quantity_milli(text);
    for (const char* resource : {"cpu", "memory"}) {
      if (api::parse_quantity_milli(api::format_quantity(resource, milli)) != milli)
        __builtin_trap();
    }
  } catch (const trainctl::Error&) {
  }
  const auto value = nlohmann::json::parse(text, nullptr, false);
  if (!value.is_discarded()) {
    try {
      (void)api::quantity_milli(value);
    } catch (const trainctl::Error&) {
    }
  }
  return 0;
}
