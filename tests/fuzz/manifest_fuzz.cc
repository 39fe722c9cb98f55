// Job manifests as `submit -f` reads them: parse YAML/JSON, validate, default, print.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/job.h"
#include "api/manifest.h"
#include "api/validation.h"
#include "error.h"
#include "json_access.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace api = trainctl::api;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<api::Manifest> manifests;
  try {
    manifests = api::parse_manifests(text, "fuzz.yaml");
  } catch (const trainctl::Error&) {
    return 0;
  }
  for (auto& m : manifests) {
    (void)trainctl::string_member(m.object, "kind");  // as `submit -f` reads it
    try {
      api::validate_job(m);
    } catch (const trainctl::Error&) {
    }
    // Documented never to throw and to be idempotent, valid or not.
    api::apply_defaults(m.object);
    const std::string once = m.object.dump();
    api::apply_defaults(m.object);
    if (m.object.dump() != once)
      __builtin_trap();
  }
  return 0;
}
