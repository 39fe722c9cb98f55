#pragma once

// Istio sidecars of training pods, pure. At start-up: whether Istio's injector will add a proxy to
// a pod (as Istio's webhook selectors and injectRequired decide), and the pod annotations that
// hold the application until the proxy is up and choose native or regular sidecars. At shutdown:
// an `istio-proxy` run as a regular container never exits on its own, so a pod whose training
// containers are done would stay Running; proxy_state() says whether a pod's proxy should be
// asked to quit now, or why not. Native sidecars (init containers with restartPolicy Always) are
// stopped by the kubelet and need no help.

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::controller {

/// The container Istio's injector adds.
inline constexpr std::string_view istio_proxy_container = "istio-proxy";

// ---- start-up ----

/// What a namespace's labels tell Istio's injector.
enum class IstioNamespace {
  Unlabelled,  // only pods labelled sidecar.istio.io/inject=true are injected
  Injected,    // istio-injection=enabled, or istio.io/rev=<rev> without istio-injection
  Disabled,    // istio-injection set to anything else ("disabled"): nothing is injected
};

/// The namespace's injection mode from its labels (a missing namespace is Unlabelled).
IstioNamespace istio_namespace(const nlohmann::json& ns);

/// Whether Istio's injector adds a proxy to a pod made from `pod_template` (metadata + spec) in a
/// namespace of mode `ns`: hostNetwork pods never; a `sidecar.istio.io/inject` pod label (or,
/// without the label, annotation) of "false" opts out; a label of "true" opts in unless the
/// namespace is Disabled; otherwise the namespace decides (istio pkg/kube/inject/inject.go
/// injectRequired and the istiod chart's mutatingwebhook.yaml selectors).
bool istio_injects(IstioNamespace ns, const nlohmann::json& pod_template);

/// `--istio-native-sidecars`: Auto leaves the proxy's kind to the mesh; On and Off set
/// `sidecar.istio.io/nativeSidecar` to "true" / "false" on pods the controller creates (unless
/// the template sets it).
enum class NativeSidecars { Auto, On, Off };

/// `proxy.istio.io/config` with `holdApplicationUntilProxyStarts: true` merged in.
struct HoldConfig {
  /// The annotation's new value: unchanged when it already says holdApplicationUntilProxyStarts
  /// (the user's keys win) or when it does not parse.
  std::string value;
  /// Why the existing value was left alone: it is no YAML/JSON map. Empty when merged.
  std::string error;
};

/// Merges holdApplicationUntilProxyStarts into an existing `proxy.istio.io/config` value (YAML
/// or JSON, as Istio reads it; empty = no keys). The merged value is JSON, the user's keys kept
/// with their values.
HoldConfig hold_application_until_proxy_starts(std::string_view config);

/// Decorates a pod template the controller creates a pod from, when Istio will inject it: the
/// hold config merged into `proxy.istio.io/config` (left alone when it does not parse), and
/// `sidecar.istio.io/nativeSidecar` per `native`.
void decorate_istio(nlohmann::json& pod_template, IstioNamespace ns, NativeSidecars native);

/// Why the `proxy.istio.io/config` of a pod Istio will inject could not take the hold config (it
/// is no YAML/JSON map), for a Warning Event; empty when it could, or the pod is not injected.
std::string proxy_config_error(const nlohmann::json& pod, IstioNamespace ns);

// ---- shutdown ----

/// Where a pod's proxy stands, and so whether to ask it to quit.
enum class ProxyState {
  Quit,               // every other regular container terminated, the proxy runs: ask it
  AlreadyAsked,       // the pod carries sidecar_stop_requested: it quit once
  ProxyTerminated,    // the proxy container is not running (any more)
  NativeSidecar,      // istio-proxy is an init container with restartPolicy Always
  NoProxy,            // no istio-proxy container
  OthersRunning,      // a training container has not terminated yet
  PodDeleting,        // metadata.deletionTimestamp is set: the kubelet stops the proxy
  PodFinished,        // phase Succeeded or Failed
  NoOtherContainers,  // istio-proxy is the pod's only regular container
};

ProxyState proxy_state(const nlohmann::json& pod);
/// Why a pod is skipped, for logs ("proxy already terminated", "native sidecar", ...).
std::string_view skip_reason(ProxyState state);
/// Whether the pod has an `istio-proxy` container, regular or native.
bool has_istio_proxy(const nlohmann::json& pod);

/// Istio's quit commands, exec'd in istio-proxy. pilot-agent's own request command comes first:
/// the proxy image's binary (distroless images have no curl) posts to Envoy's admin
/// /quitquitquit, and pilot-agent exits with Envoy. curl to pilot-agent's status port is the
/// fallback for images without pilot-agent.
std::vector<std::string> pilot_agent_quit_command();
std::vector<std::string> curl_quit_command();

/// Whether an exec failed because the command is not in the image: exit code 126 or 127 (a
/// shell's "not found"), or the runtime's "executable file not found" (containerd, CRI-O).
bool command_missing(int exit_code, std::string_view error_text);

/// Retries of a failed quit: exponential back-off, at most `max_attempts` attempts in all.
struct ProxyQuitRetry {
  std::chrono::milliseconds base{1000};
  std::chrono::milliseconds cap{30'000};
  int max_attempts = 6;
};

/// The delay before the next attempt after `failures` failed ones (base * 2^(failures-1),
/// capped); nullopt once max_attempts have failed.
std::optional<std::chrono::milliseconds> quit_retry_delay(int failures,
                                                          const ProxyQuitRetry& retry);

/// Seconds from the last other regular container's exit to the proxy's exit, from the pod's
/// container statuses (whole seconds, as the API writes them); nullopt unless both terminated.
std::optional<double> proxy_exit_latency_seconds(const nlohmann::json& pod);

/// The pod phase the job's outcome reads: a Running pod whose regular containers but istio-proxy
/// have all terminated is Succeeded when they all exited 0, Failed when one did not under
/// restartPolicy Never; otherwise (and for every other pod) status.phase. A proxy that never
/// quits thus does not hold the job.
std::string training_phase(const nlohmann::json& pod);

}  // namespace trainctl::controller
