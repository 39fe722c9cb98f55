#include "controller/sidecar.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>

#include "api/status.h"
#include "api/well_known.h"
#include "json_access.h"
#include "yaml_json.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

constexpr std::string_view kHold = "holdApplicationUntilProxyStarts";

/// Container name -> its state, for the regular containers the pod reports on.
std::map<std::string, json> container_states(const json& pod) {
  std::map<std::string, json> states;
  for (const auto& s : member(object_member(pod, "status"), "containerStatuses")) {
    if (s.is_object())
      states[string_member(s, "name")] = object_member(s, "state");
  }
  return states;
}

/// Whether the pod has a regular container named `name`, or (`name` empty) one not named
/// istio-proxy.
bool has_regular_container(const json& pod, std::string_view name) {
  for (const auto& c : member(object_member(pod, "spec"), "containers")) {
    const std::string n = string_member(c, "name");
    if (name.empty() ? n != istio_proxy_container : n == name)
      return true;
  }
  return false;
}

/// Once every regular container but istio-proxy has terminated (and there is one): whether they
/// all exited 0. nullopt before.
std::optional<bool> others_exited_zero(const json& pod, const std::map<std::string, json>& states) {
  bool all_zero = true;
  bool any = false;
  for (const auto& c : member(object_member(pod, "spec"), "containers")) {
    const std::string name = string_member(c, "name");
    if (name == istio_proxy_container)
      continue;
    const auto state = states.find(name);
    if (state == states.end() || !state->second.contains("terminated"))
      return std::nullopt;
    any = true;
    all_zero = all_zero && member(state->second["terminated"], "exitCode") == 0;
  }
  return any ? std::optional<bool>(all_zero) : std::nullopt;
}

bool native_proxy(const json& pod) {
  for (const auto& c : member(object_member(pod, "spec"), "initContainers")) {
    if (c.is_object() && string_member(c, "name") == istio_proxy_container &&
        string_member(c, "restartPolicy") == "Always")
      return true;
  }
  return false;
}

/// The pod's (or template's) `sidecar.istio.io/inject` value: the label, else the annotation.
std::string inject_value(const json& metadata) {
  const std::string label = label_of({{"metadata", metadata}}, api::annotations::istio_inject);
  return label.empty() ? annotation_of({{"metadata", metadata}}, api::annotations::istio_inject)
                       : label;
}

}  // namespace

IstioNamespace istio_namespace(const json& ns) {
  const json& labels = object_member(object_member(ns, "metadata"), "labels");
  if (labels.contains(api::labels::istio_injection)) {
    return string_member(labels, api::labels::istio_injection) == "enabled"
               ? IstioNamespace::Injected
               : IstioNamespace::Disabled;
  }
  return labels.contains(api::labels::istio_revision) ? IstioNamespace::Injected
                                                      : IstioNamespace::Unlabelled;
}

bool istio_injects(IstioNamespace ns, const json& pod_template) {
  if (member(object_member(pod_template, "spec"), "hostNetwork") == true)
    return false;
  const json& meta = object_member(pod_template, "metadata");
  const std::string label = label_of({{"metadata", meta}}, api::annotations::istio_inject);
  if (inject_value(meta) == "false")
    return false;
  if (label == "true")
    return ns != IstioNamespace::Disabled;
  return ns == IstioNamespace::Injected;
}

HoldConfig hold_application_until_proxy_starts(std::string_view config) {
  json parsed;
  try {
    const YAML::Node node = YAML::Load(std::string(config));
    parsed = node.IsNull() ? json::object() : yaml_to_json(node);
  } catch (const YAML::Exception& e) {
    return {std::string(config), e.msg};
  }
  if (!parsed.is_object())
    return {std::string(config), "not a map of proxy settings"};
  if (parsed.empty())
    return {R"({"holdApplicationUntilProxyStarts": true})", {}};
  if (parsed.contains(kHold))
    return {std::string(config), {}};
  parsed[std::string(kHold)] = true;
  return {parsed.dump(), {}};
}

void decorate_istio(json& pod_template, IstioNamespace ns, NativeSidecars native) {
  if (!istio_injects(ns, pod_template))
    return;
  json& annotations = ensure_object(ensure_object(pod_template, "metadata"), "annotations");
  if (native != NativeSidecars::Auto &&
      !annotations.contains(api::annotations::istio_native_sidecar))
    annotations[std::string(api::annotations::istio_native_sidecar)] =
        native == NativeSidecars::On ? "true" : "false";
  const std::string key(api::annotations::istio_proxy_config);
  const json& existing = member(annotations, key);
  HoldConfig merged =
      hold_application_until_proxy_starts(existing.is_string() ? existing.get<std::string>() : "");
  if (merged.error.empty())
    annotations[key] = std::move(merged.value);
}

std::string proxy_config_error(const json& pod, IstioNamespace ns) {
  if (!istio_injects(ns, pod))
    return {};
  return hold_application_until_proxy_starts(
             annotation_of(pod, api::annotations::istio_proxy_config))
      .error;
}

ProxyState proxy_state(const json& pod) {
  const json& meta = object_member(pod, "metadata");
  if (native_proxy(pod))
    return ProxyState::NativeSidecar;
  if (!has_regular_container(pod, istio_proxy_container))
    return ProxyState::NoProxy;
  if (meta.contains("deletionTimestamp"))
    return ProxyState::PodDeleting;
  const std::string phase = string_member(object_member(pod, "status"), "phase");
  if (phase == "Succeeded" || phase == "Failed")
    return ProxyState::PodFinished;
  if (object_member(meta, "annotations").contains(api::annotations::sidecar_stop_requested))
    return ProxyState::AlreadyAsked;
  const auto states = container_states(pod);
  const auto proxy = states.find(std::string(istio_proxy_container));
  const bool proxy_running = proxy != states.end() && proxy->second.contains("running");
  if (!others_exited_zero(pod, states))
    return has_regular_container(pod, {}) ? ProxyState::OthersRunning
                                          : ProxyState::NoOtherContainers;
  return proxy_running ? ProxyState::Quit : ProxyState::ProxyTerminated;
}

std::string_view skip_reason(ProxyState state) {
  switch (state) {
    case ProxyState::Quit:
      return "";
    case ProxyState::AlreadyAsked:
      return "proxy already asked to quit";
    case ProxyState::ProxyTerminated:
      return "proxy already terminated";
    case ProxyState::NativeSidecar:
      return "native sidecar";
    case ProxyState::NoProxy:
      return "no istio-proxy container";
    case ProxyState::OthersRunning:
      return "other containers still running";
    case ProxyState::PodDeleting:
      return "pod being deleted";
    case ProxyState::PodFinished:
      return "pod finished";
    case ProxyState::NoOtherContainers:
      return "istio-proxy is the only container";
  }
  return "";
}

bool has_istio_proxy(const json& pod) {
  const json& spec = object_member(pod, "spec");
  for (const char* list : {"containers", "initContainers"}) {
    for (const auto& c : member(spec, list)) {
      if (c.is_object() && string_member(c, "name") == istio_proxy_container)
        return true;
    }
  }
  return false;
}

std::vector<std::string> pilot_agent_quit_command() {
  return {"pilot-agent", "request", "POST", "quitquitquit"};
}

std::vector<std::string> curl_quit_command() {
  return {"curl", "-sf", "-XPOST", "http://127.0.0.1:15020/quitquitquit"};
}

bool command_missing(int exit_code, std::string_view error_text) {
  return exit_code == 126 || exit_code == 127 ||
         error_text.find("executable file not found") != std::string_view::npos;
}

std::optional<std::chrono::milliseconds> quit_retry_delay(int failures,
                                                          const ProxyQuitRetry& retry) {
  if (failures >= retry.max_attempts)
    return std::nullopt;
  std::chrono::milliseconds delay = retry.base;
  for (int i = 1; i < failures && delay < retry.cap; ++i)
    delay *= 2;
  return std::min(delay, retry.cap);
}

std::optional<double> proxy_exit_latency_seconds(const json& pod) {
  std::optional<std::chrono::system_clock::time_point> last_other;
  std::optional<std::chrono::system_clock::time_point> proxy;
  for (const auto& [name, state] : container_states(pod)) {
    const auto finished =
        api::parse_timestamp(string_member(object_member(state, "terminated"), "finishedAt"));
    if (!finished)
      return std::nullopt;
    if (name == istio_proxy_container)
      proxy = finished;
    else
      last_other = std::max(last_other.value_or(*finished), *finished);
  }
  if (!proxy || !last_other)
    return std::nullopt;
  return std::max(0.0, std::chrono::duration<double>(*proxy - *last_other).count());
}

std::string training_phase(const json& pod) {
  const std::string phase = string_member(object_member(pod, "status"), "phase");
  if (phase != "Running" || native_proxy(pod) || !has_regular_container(pod, istio_proxy_container))
    return phase;
  const std::optional<bool> all_zero = others_exited_zero(pod, container_states(pod));
  if (!all_zero)
    return phase;
  const std::string restart = string_member(object_member(pod, "spec"), "restartPolicy");
  if (*all_zero)
    return restart == "Always" ? phase : "Succeeded";
  return restart == "Never" ? "Failed" : phase;
}

}  // namespace trainctl::controller
