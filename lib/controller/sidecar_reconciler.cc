// The proxy terminator: asks the `istio-proxy` of a pod whose training containers are done to
// quit, over pods/exec, once. Pods come from two places: the job reconciler's informer of the
// pods trainctl manages, and one pod watch per namespace labelled
// trainctl.io/proxy-terminator=enabled (found by a label-selected namespace informer), so plain
// batch Jobs and pipeline steps there get the same treatment without a cluster-wide pod watch.

#include <fmt/format.h>

#include <compare>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "api/well_known.h"
#include "controller/controller.h"
#include "controller/event_recorder.h"
#include "controller/objects.h"
#include "controller/reconcile_loop.h"
#include "controller/sidecar.h"
#include "json_access.h"
#include "kube/cache/informer.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

/// A pod whose proxy may have to quit; with an empty name, a namespace whose pod watch is to be
/// started or stopped.
struct PodKey {
  std::string namespace_;
  std::string name;
  auto operator<=>(const PodKey&) const = default;
};

}  // namespace
}  // namespace trainctl::controller

template <>
struct fmt::formatter<trainctl::controller::PodKey> : fmt::formatter<std::string_view> {
  auto format(const trainctl::controller::PodKey& key, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "sidecar:{}/{}", key.namespace_, key.name);
  }
};

namespace trainctl::controller {
namespace {

const std::string kOptInSelector = std::string(api::labels::proxy_terminator) + "=enabled";

/// How one quit went.
struct QuitOutcome {
  enum class Result { Quit, Failed, PodGone } result = Result::Failed;
  std::string command;  // the command that quit the proxy ("pilot-agent" or "curl")
  std::string reason;   // Failed: a Kubernetes reason ("Forbidden") or "ExitCode"
  std::string message;  // Failed: what went wrong
};

/// A pod watch of one opted-in namespace, on its own thread.
struct NamespaceWatch {
  std::unique_ptr<kube::cache::Informer> pods;
  std::jthread thread;  // last: joined before the informer goes
};

class ProxyTerminator : public Runnable {
 public:
  ProxyTerminator(Manager& manager, const ControllerOptions& options)
      : client_(manager.client()),
        metrics_(manager.metrics()),
        log_(manager.log()),
        retry_(options.proxy_quit_retry),
        watch_namespace_(manager.watch_namespace()),
        events_(manager.client().config(), manager.metrics(), manager.log(),
                options.plan.controller_name),
        loop_({.name = "sidecars",
               .workers = options.proxy_workers,
               .metric_kind = [](const PodKey&) { return std::string("controller"); },
               .reconcile = [this](const PodKey& key) { reconcile(key); }},
              manager.metrics(), manager.log()),
        managed_pods_(manager.informer(kube::resources::pods(), managed_selector())),
        namespaces_(manager.informer(kube::resources::namespaces(), kOptInSelector)) {
    managed_pods_.add_handlers(pod_handlers());
    const auto namespace_changed = [this](const json& ns) { loop_.add({name_of(ns), ""}); };
    namespaces_.add_handlers({.on_add = namespace_changed,
                              .on_modify = [=](const json& now) { namespace_changed(now); },
                              .on_delete = namespace_changed});
  }

  void run(std::stop_token stop) override {
    loop_.run(stop);
    std::map<std::string, NamespaceWatch> watches;
    {
      std::lock_guard lock(mu_);
      watches.swap(watches_);
    }
    watches.clear();  // stops and joins every namespace's pod watch, outside mu_ (its handlers lock
                      // it)
  }

 private:
  kube::cache::EventHandlers pod_handlers() {
    // Not on_update: the informer would decode every managed pod's old version for it (a fifth
    // of the controller's CPU while it creates pods), and only pods with a proxy need the state
    // they were in, which states_ keeps.
    return {.on_add = [this](const json& pod) { changed(pod); },
            .on_modify = [this](const json& pod) { changed(pod); },
            .on_delete =
                [this](const json& pod) {
                  const PodKey key{namespace_of(pod), name_of(pod)};
                  std::lock_guard lock(mu_);
                  failures_.erase(key);
                  asked_.erase(key);
                  states_.erase(key);
                }};
  }

  /// A pod changed (informer thread): queue it when its proxy should quit; observe the latency
  /// of a proxy this controller asked once it has exited; log why a pod is skipped when that
  /// changes.
  void changed(const json& pod) {
    if (!has_istio_proxy(pod))
      return;
    const PodKey key{namespace_of(pod), name_of(pod)};
    const ProxyState state = proxy_state(pod);
    std::lock_guard lock(mu_);
    const auto [last, first] = states_.try_emplace(key, state);
    const bool changed_state = first || std::exchange(last->second, state) != state;
    if (state == ProxyState::Quit) {
      loop_.add(key);
      return;
    }
    if ((state == ProxyState::ProxyTerminated || state == ProxyState::PodFinished) &&
        asked_.erase(key) > 0) {
      if (const auto latency = proxy_exit_latency_seconds(pod))
        metrics_.observe("trainctl_proxy_exit_latency_seconds", {}, *latency);
    }
    if (changed_state)
      log_.debug(
          1, "proxy not asked to quit",
          {{"pod", key.namespace_ + "/" + key.name}, {"reason", std::string(skip_reason(state))}});
  }

  void reconcile(const PodKey& key) {
    if (key.name.empty()) {
      sync_namespace(key.namespace_);
      return;
    }
    const std::optional<json> pod = find(key);
    if (!pod)
      return;
    const ProxyState state = proxy_state(*pod);
    if (state != ProxyState::Quit) {
      log_.debug(
          1, "proxy not asked to quit",
          {{"pod", key.namespace_ + "/" + key.name}, {"reason", std::string(skip_reason(state))}});
      return;
    }
    int failures = 0;
    {
      std::lock_guard lock(mu_);
      const auto it = failures_.find(key);
      if (it != failures_.end()) {
        failures = it->second.count;
        const auto wait = it->second.next_attempt - std::chrono::steady_clock::now();
        if (!quit_retry_delay(failures, retry_))
          return;  // gave up
        if (wait > std::chrono::nanoseconds(0)) {
          loop_.add_after(key, wait);  // a pod update came before the back-off ended
          return;
        }
      }
    }
    const QuitOutcome outcome = quit(key);
    if (outcome.result == QuitOutcome::Result::PodGone)
      return;
    if (outcome.result == QuitOutcome::Result::Quit) {
      succeeded(key, *pod, outcome);
      return;
    }
    failed(key, *pod, outcome, failures + 1);
  }

  /// Starts the pod watch of an opted-in namespace, or stops that of one no longer opted in.
  void sync_namespace(const std::string& ns) {
    const bool opted_in =
        namespaces_.get(ns).has_value() && (watch_namespace_.empty() || watch_namespace_ == ns);
    std::unique_lock lock(mu_);
    const auto it = watches_.find(ns);
    if (!opted_in) {
      if (it == watches_.end())
        return;
      NamespaceWatch watch = std::move(it->second);
      watches_.erase(it);
      lock.unlock();  // joining waits for the watch to end
      log_.info("namespace not opted in; its pods' proxies are left alone", {{"namespace", ns}});
      return;
    }
    if (it != watches_.end())
      return;
    NamespaceWatch& watch = watches_[ns];
    watch.pods = std::make_unique<kube::cache::Informer>(
        client_, kube::cache::InformerOptions{
                     .resource = kube::resources::pods(),
                     .namespace_ = ns,
                     .transform = kube::cache::strip_managed_fields,
                     .on_error = [this, ns](const Error& e) {
                       log_.debug(2, "pod watch failed", {{"namespace", ns}, {"error", e.what()}});
                     }});
    watch.pods->add_handlers(pod_handlers());
    watch.thread =
        std::jthread([informer = watch.pods.get()](std::stop_token stop) { informer->run(stop); });
    log_.info("stopping Istio proxies of the namespace's pods", {{"namespace", ns}});
  }

  /// The pod from its namespace's watch, else from the managed pods' informer.
  std::optional<json> find(const PodKey& key) {
    const std::string cache_key = key.namespace_ + "/" + key.name;
    {
      std::lock_guard lock(mu_);
      const auto it = watches_.find(key.namespace_);
      if (it != watches_.end()) {
        if (auto pod = it->second.pods->get(cache_key))
          return pod;
      }
    }
    return managed_pods_.get(cache_key);
  }

  /// Execs pilot-agent's quit; when the image has no pilot-agent, curl's.
  QuitOutcome quit(const PodKey& key) {
    QuitOutcome outcome = exec(key, pilot_agent_quit_command());
    if (outcome.result != QuitOutcome::Result::Failed || outcome.reason != "CommandNotFound")
      return outcome;
    log_.info("pilot-agent is not in the proxy image; trying curl",
              {{"pod", key.namespace_ + "/" + key.name}, {"error", outcome.message}});
    return exec(key, curl_quit_command());
  }

  QuitOutcome exec(const PodKey& key, const std::vector<std::string>& command) {
    metrics_.increment("trainctl_proxy_quit_attempts_total", {command[0]});
    try {
      const kube::ExecOutcome out =
          client_.exec(key.namespace_, key.name,
                       {.container = std::string(istio_proxy_container), .command = command});
      if (out.exit_code == 0)
        return {.result = QuitOutcome::Result::Quit, .command = command[0]};
      return {.reason =
                  command_missing(out.exit_code, out.stderr_data) ? "CommandNotFound" : "ExitCode",
              .message = fmt::format("{} exited with code {}: {}", command[0], out.exit_code,
                                     out.stderr_data)};
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound)
        return {.result = QuitOutcome::Result::PodGone};
      const std::string reason = command_missing(0, e.message()) ? "CommandNotFound"
                                 : e.reason().empty()            ? "Error"
                                                                 : e.reason();
      return {.reason = reason, .message = e.message()};
    }
  }

  void succeeded(const PodKey& key, const json& pod, const QuitOutcome& outcome) {
    metrics_.increment("trainctl_proxy_quits_succeeded_total", {outcome.command});
    events_.record({.type = "Normal",
                    .reason = "ProxyQuit",
                    .message = fmt::format("Asked {} to quit ({}) once the other containers "
                                           "terminated",
                                           istio_proxy_container, outcome.command),
                    .involved_object = involved(pod)});
    log_.info("asked the Istio proxy to quit",
              {{"pod", key.namespace_ + "/" + key.name}, {"command", outcome.command}});
    {
      std::lock_guard lock(mu_);
      failures_.erase(key);
      asked_.insert(key);
    }
    // Recorded after the quit succeeded: a controller stopped in between asks once more, which
    // the quit endpoint takes as it took the first.
    metrics_.increment("trainctl_api_writes_total", {"patch", "pods"});
    client_.patch(
        kube::resources::pods(), key.namespace_, key.name, kube::PatchType::Merge,
        {{"metadata",
          {{"annotations", {{std::string(api::annotations::sidecar_stop_requested), "true"}}}}}});
  }

  void failed(const PodKey& key, const json& pod, const QuitOutcome& outcome, int failures) {
    metrics_.increment("trainctl_proxy_quits_failed_total", {outcome.reason});
    const auto delay = quit_retry_delay(failures, retry_);
    {
      std::lock_guard lock(mu_);
      failures_[key] = {failures, std::chrono::steady_clock::now() + delay.value_or(retry_.cap)};
    }
    const std::string next = delay ? fmt::format("retrying in {}ms (attempt {} of {})",
                                                 delay->count(), failures, retry_.max_attempts)
                                   : fmt::format("giving up after {} attempts", failures);
    events_.record(
        {.type = "Warning",
         .reason = "ProxyQuitFailed",
         .message = fmt::format("Could not ask {} to quit: {}: {}; {}", istio_proxy_container,
                                outcome.reason, outcome.message, next),
         .involved_object = involved(pod)});
    log_.warning("could not ask the Istio proxy to quit", {{"pod", key.namespace_ + "/" + key.name},
                                                           {"reason", outcome.reason},
                                                           {"error", outcome.message},
                                                           {"next", next}});
    if (delay)
      loop_.add_after(key, *delay);
  }

  /// Listed pods carry no apiVersion or kind.
  static ObjectReference involved(const json& pod) {
    return {.api_version = "v1",
            .kind = "Pod",
            .namespace_ = namespace_of(pod),
            .name = name_of(pod),
            .uid = uid_of(pod)};
  }

  /// Failed quits of a pod and when the next may be tried.
  struct Failures {
    int count = 0;
    std::chrono::steady_clock::time_point next_attempt;
  };

  kube::Client& client_;
  MetricsRegistry& metrics_;
  Logger& log_;
  ProxyQuitRetry retry_;
  std::string watch_namespace_;
  EventRecorder events_;
  ReconcileLoop<PodKey> loop_;
  kube::cache::Informer& managed_pods_;
  kube::cache::Informer& namespaces_;
  std::mutex mu_;  // guards the members below
  std::map<PodKey, Failures> failures_;
  std::set<PodKey> asked_;               // quit by this controller, their exit not yet seen
  std::map<PodKey, ProxyState> states_;  // of the pods with a proxy, as last seen
  std::map<std::string, NamespaceWatch> watches_;
};

}  // namespace

void declare_proxy_terminator_metrics(MetricsRegistry& metrics) {
  metrics.declare_counter("trainctl_proxy_quit_attempts_total",
                          "Quit commands exec'd in istio-proxy containers, by command.",
                          {"command"});
  metrics.declare_counter("trainctl_proxy_quits_succeeded_total",
                          "Istio proxies asked to quit successfully, by the command that did.",
                          {"command"});
  metrics.declare_counter("trainctl_proxy_quits_failed_total",
                          "Failed attempts to ask an Istio proxy to quit, by reason.", {"reason"});
  metrics.declare_histogram(
      "trainctl_proxy_exit_latency_seconds",
      "From the last training container's exit to the exit of the Istio proxy the controller "
      "asked to quit (whole seconds, as pod status records them).",
      {0.5, 1, 2, 5, 10, 30, 60, 120, 300});
}

void add_sidecar_reconciler(Manager& manager, const ControllerOptions& options) {
  manager.add(std::make_unique<ProxyTerminator>(manager, options));
}

}  // namespace trainctl::controller
