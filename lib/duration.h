#pragma once

// Durations as kubectl's flags take them (Go's time.ParseDuration, plus a bare number as
// seconds): the one parser of every duration flag (--timeout, --since, --request-timeout, ...).

#include <chrono>
#include <optional>
#include <string_view>

#include "error.h"

namespace trainctl {

/// "30s", "1h30m", "500ms", "1.5s" (units ns, us, µs, ms, s, m, h), or a bare non-negative
/// integer as seconds ("0", "90"). A positive duration shorter than a millisecond is 1 ms, never
/// "none". nullopt for anything else: empty, negative, an unknown unit, above about 31 years.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// parse_duration, throwing Error(`kind`) that names `flag` and shows the accepted forms.
std::chrono::milliseconds parse_duration_flag(std::string_view flag, std::string_view text,
                                              ErrorKind kind = ErrorKind::Usage);

}  // namespace trainctl
