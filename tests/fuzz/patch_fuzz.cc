// PATCH bodies as the sandbox applies them: the input is a JSON array [target, patch], and the
// patch is applied as a merge patch, a JSON patch, a strategic merge patch and an apply
// configuration (built-in and custom).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "error.h"
#include "sandbox/patch.h"

namespace {

template <typename F>
void attempt(F&& apply) {
  try {
    (void)apply().dump();
  } catch (const trainctl::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sandbox = trainctl::sandbox;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto input = nlohmann::json::parse(text, nullptr, false);
  if (input.is_discarded() || !input.is_array() || input.size() != 2)
    return 0;
  const nlohmann::json& target = input[0];
  const nlohmann::json& patch = input[1];
  attempt([&] { return sandbox::apply_merge_patch(target, patch); });
  attempt([&] { return sandbox::apply_json_patch(target, patch); });
  attempt([&] { return sandbox::apply_strategic_merge_patch(target, patch); });
  attempt([&] { return sandbox::merge_applied_configuration(target, patch, true); });
  attempt([&] { return sandbox::merge_applied_configuration(target, patch, false); });
  return 0;
}
