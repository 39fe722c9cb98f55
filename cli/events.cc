#include "events.h"

#include <fmt/format.h>

#include <algorithm>

#include "api/status.h"

namespace trainctl::cli {

using nlohmann::json;

json event_time(const json& event) {
  for (const char* field : {"lastTimestamp", "eventTime", "firstTimestamp"}) {
    if (event.contains(field) && event[field].is_string())
      return event[field];
  }
  return event.value("metadata", json::object()).value("creationTimestamp", json());
}

std::vector<json> recent_events(kube::Client& client, std::string_view ns,
                                const std::vector<std::string>& names, std::size_t limit) {
  std::vector<json> events;
  for (const auto& name : names) {
    const json list =
        client.list_all(kube::resources::events(), ns,
                        {.field_selector = fmt::format("involvedObject.name={}", name)});
    for (const auto& e : list.value("items", json::array()))
      events.push_back(e);
  }
  auto when = [](const json& event) {
    const json t = event_time(event);
    return t.is_string() ? api::parse_timestamp(t.get<std::string>()) : std::nullopt;
  };
  std::stable_sort(events.begin(), events.end(),
                   [&when](const json& a, const json& b) { return when(a) < when(b); });
  if (events.size() > limit)
    events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(limit));
  return events;
}

}  // namespace trainctl::cli
