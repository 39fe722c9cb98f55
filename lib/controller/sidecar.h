#pragma once

// Istio sidecars of training pods: an `istio-proxy` run as a regular container never exits on
// its own, so a pod whose training containers are done would stay Running (and its job never
// finish). The proxy terminator finds those pods; the executor execs Istio's quit command in the
// proxy and marks the pod so it is asked once. Native sidecars (init containers with
// restartPolicy Always) are stopped by the kubelet and need no help.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::controller {

/// The container Istio's injector adds.
inline constexpr std::string_view istio_proxy_container = "istio-proxy";

/// One proxy to stop: exec `command` in `container` of pod `namespace_/pod`.
struct SidecarStop {
  std::string namespace_;
  std::string pod;
  std::string container;
  /// `pilot-agent request POST quitquitquit`: the proxy image's own binary (distroless images
  /// have no curl) posts to Envoy's admin /quitquitquit; pilot-agent exits with Envoy.
  std::vector<std::string> command;

  bool operator==(const SidecarStop&) const = default;
};

/// The pods whose `istio-proxy` (a regular container) still runs while every other regular
/// container has terminated. Skips pods that are finished or being deleted, that carry
/// sidecar_stop_annotation, and pods without other containers.
std::vector<SidecarStop> sidecars_to_stop(const std::vector<nlohmann::json>& pods);

}  // namespace trainctl::controller
