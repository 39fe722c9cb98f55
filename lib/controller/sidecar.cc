#include "controller/sidecar.h"

#include <algorithm>
#include <map>

#include "api/well_known.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

/// Container name -> its status, for the regular containers the pod reports on.
std::map<std::string, json> container_states(const json& pod) {
  std::map<std::string, json> states;
  const json& statuses =
      pod.value("status", json::object()).value("containerStatuses", json::array());
  for (const auto& s : statuses)
    states[s.value("name", "")] = s.value("state", json::object());
  return states;
}

bool needs_stop(const json& pod) {
  const json& meta = pod.value("metadata", json::object());
  if (meta.contains("deletionTimestamp") ||
      meta.value("annotations", json::object()).contains(api::annotations::sidecar_stop_requested))
    return false;
  const std::string phase = pod.value("status", json::object()).value("phase", "");
  if (phase == "Succeeded" || phase == "Failed")
    return false;
  const json& containers = pod.value("spec", json::object()).value("containers", json::array());
  const auto states = container_states(pod);
  bool proxy_running = false;
  int others = 0;
  for (const auto& c : containers) {
    const std::string name = c.value("name", "");
    const auto state = states.find(name);
    if (name == istio_proxy_container) {
      proxy_running = state != states.end() && state->second.contains("running");
      continue;
    }
    if (state == states.end() || !state->second.contains("terminated"))
      return false;
    ++others;
  }
  return proxy_running && others > 0;
}

}  // namespace

std::vector<SidecarStop> sidecars_to_stop(const std::vector<json>& pods) {
  std::vector<SidecarStop> result;
  for (const auto& pod : pods) {
    if (!needs_stop(pod))
      continue;
    const json& meta = pod.at("metadata");
    result.push_back({meta.value("namespace", ""),
                      meta.value("name", ""),
                      std::string(istio_proxy_container),
                      {"pilot-agent", "request", "POST", "quitquitquit"}});
  }
  return result;
}

}  // namespace trainctl::controller
