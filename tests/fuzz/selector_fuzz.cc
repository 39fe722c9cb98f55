// Label and field selectors as the sandbox reads them from query parameters; a parsed label
// selector's canonical text must parse back to the same selector.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "error.h"
#include "sandbox/selector.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sandbox = trainctl::sandbox;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const nlohmann::json pod = {
      {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"labels", {{"app", "x"}, {"n", "3"}}}}},
      {"spec", {{"nodeName", "node-1"}, {"restartPolicy", "Never"}}},
      {"status", {{"phase", "Running"}, {"podIP", "10.0.0.1"}}}};
  try {
    const auto selector = sandbox::LabelSelector::parse(text);
    (void)selector.matches(pod["metadata"]["labels"]);
    (void)selector.matches(nullptr);
    const std::string canonical = selector.to_string();
    if (sandbox::LabelSelector::parse(canonical).to_string() != canonical)
      __builtin_trap();
  } catch (const trainctl::Error&) {
  }
  try {
    const auto selector = sandbox::FieldSelector::parse(text);
    (void)selector.matches(pod);
    (void)selector.single_namespace();
    selector.check_supported("pods");
  } catch (const trainctl::Error&) {
  }
  return 0;
}
