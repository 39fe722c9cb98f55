#include "log.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>

#include "error.h"

namespace trainctl {

Logger::Logger(std::ostream& out, LogFormat format, int verbosity)
    : out_(out), format_(format), verbosity_(verbosity) {}

void Logger::write(std::string_view level, std::string_view message, const LogFields& fields) {
  const auto now = std::chrono::system_clock::now();
  const auto seconds = std::chrono::time_point_cast<std::chrono::seconds>(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now - seconds).count();
  const std::string ts = fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", seconds, millis);
  std::string line;
  if (format_ == LogFormat::Json) {
    nlohmann::ordered_json entry{{"ts", ts}, {"level", level}, {"msg", message}};
    for (const auto& [key, value] : fields)
      entry[key] = value;
    line = entry.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = fmt::format("{} {} {}", ts, level, message);
    for (const auto& [key, value] : fields) {
      const bool quote = value.empty() || value.find_first_of(" \"=") != std::string::npos;
      line += fmt::format(" {}={}", key, quote ? nlohmann::json(value).dump() : value);
    }
  }
  std::lock_guard lock(mutex_);
  out_ << line << '\n' << std::flush;
}

LogFormat parse_log_format(std::string_view name) {
  if (name == "text")
    return LogFormat::Text;
  if (name == "json")
    return LogFormat::Json;
  throw Error(ErrorKind::Usage, fmt::format("--log-format: \"{}\" is not one of text, json", name));
}

}  // namespace trainctl
