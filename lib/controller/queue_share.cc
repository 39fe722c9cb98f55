#include "controller/queue_share.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "json_access.h"

namespace trainctl::controller {

using nlohmann::json;

PriorityClasses::PriorityClasses(const std::vector<json>& classes) {
  for (const auto& c : classes) {
    const json& value = member(c, "value");
    if (!value.is_number_integer())
      continue;
    values_.emplace(name_of(c), value.get<std::int64_t>());
    if (member(c, "globalDefault").is_boolean() && c["globalDefault"].get<bool>())
      global_default_ = value.get<std::int64_t>();
  }
}

Priority PriorityClasses::resolve(std::string_view name) const {
  if (name.empty())
    return {.value = global_default_};
  const auto it = values_.find(name);
  if (it == values_.end())
    return {.value = 0, .note = fmt::format("priority class {} not found, using 0", name)};
  return {.value = it->second};
}

std::map<std::string, api::ResourceList> deserved_shares(const std::vector<QueueFigures>& queues,
                                                         const api::ResourceList& total) {
  std::map<std::string, std::map<std::string, double>> deserved;
  std::map<std::string, double> remaining;
  for (const auto& [name, value] : total)
    remaining[name] = static_cast<double>(value);
  std::vector<const QueueFigures*> asking;
  for (const auto& q : queues) {
    deserved[q.name];
    if (q.weight > 0)
      asking.push_back(&q);
  }
  while (!asking.empty()) {
    double weights = 0;
    for (const auto* q : asking)
      weights += static_cast<double>(q->weight);
    std::map<std::string, double> handed_out;
    std::vector<const QueueFigures*> still_asking;
    for (const auto* q : asking) {
      bool met = true;
      for (const auto& [name, left] : remaining) {
        double& d = deserved[q->name][name];
        const double before = d;
        double limit = static_cast<double>(api::amount(q->request, name));
        if (q->capability.contains(name))
          limit = std::min(limit, static_cast<double>(q->capability.at(name)));
        d = std::min(d + left * static_cast<double>(q->weight) / weights, limit);
        handed_out[name] += d - before;
        met = met && d >= limit;
      }
      if (!met)
        still_asking.push_back(q);
    }
    bool changed = false;
    bool left_over = false;
    for (auto& [name, left] : remaining) {
      changed = changed || handed_out[name] > 1e-9;
      left -= handed_out[name];
      left_over = left_over || left > 1e-9;
    }
    if (!changed || !left_over)
      break;
    asking = std::move(still_asking);
  }
  std::map<std::string, api::ResourceList> result;
  for (const auto& q : queues) {
    api::ResourceList& share = result[q.name];
    for (const auto& [name, value] : deserved[q.name])
      share[name] = std::max<std::int64_t>(std::llround(value), api::amount(q.guarantee, name));
    for (const auto& [name, value] : q.guarantee)
      share[name] = std::max(share[name], value);
  }
  return result;
}

double queue_share(const api::ResourceList& allocated, const api::ResourceList& deserved) {
  double share = 0;
  for (const auto& [name, value] : allocated) {
    if (value <= 0)
      continue;
    const std::int64_t d = api::amount(deserved, name);
    share = std::max(share, d <= 0 ? 1.0 : static_cast<double>(value) / static_cast<double>(d));
  }
  return share;
}

}  // namespace trainctl::controller
