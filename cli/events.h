#pragma once

// The events about a job and its pods, as get, why and submit --wait show them.

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kube/client.h"

namespace trainctl::cli {

/// The events about the named objects (one field-selected LIST each, so bounded by the
/// replicas), oldest first, at most the last `limit`.
std::vector<nlohmann::json> recent_events(kube::Client& client, std::string_view ns,
                                          const std::vector<std::string>& names, std::size_t limit);
/// When an event last happened: lastTimestamp, eventTime, firstTimestamp, then creation.
nlohmann::json event_time(const nlohmann::json& event);

}  // namespace trainctl::cli
