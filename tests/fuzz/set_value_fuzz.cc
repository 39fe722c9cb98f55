// `--set` and `--set-string` assignments, one per line, applied in turn to one values object.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "error.h"
#include "render/values.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json values = nlohmann::json::object();
  bool force_string = false;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view assignment = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    try {
      trainctl::render::set_value(values, assignment, force_string);
    } catch (const trainctl::Error&) {
    }
    force_string = !force_string;
  }
  (void)values.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
