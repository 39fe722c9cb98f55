#include "controller/sidecar.h"

#include <gtest/gtest.h>

#include <string>

#include "api/well_known.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

json running() {
  return {{"running", {{"startedAt", "2024-05-01T12:00:00Z"}}}};
}
json terminated(int code, const std::string& at = "2024-05-01T12:00:10Z") {
  return {{"terminated", {{"exitCode", code}, {"finishedAt", at}}}};
}

/// A Running training pod with containers `tensorflow` and `istio-proxy` in the given states.
json meshed_pod(const std::string& name, json app_state, json proxy_state) {
  return {{"metadata", {{"name", name}, {"namespace", "team-a"}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"containers",
             {{{"name", "tensorflow"}, {"image", "tf:2"}},
              {{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}}}}}},
          {"status",
           {{"phase", "Running"},
            {"containerStatuses",
             {{{"name", "tensorflow"}, {"state", std::move(app_state)}},
              {{"name", "istio-proxy"}, {"state", std::move(proxy_state)}}}}}}};
}

json ns_with(json labels) {
  return {{"metadata", {{"name", "team-a"}, {"labels", std::move(labels)}}}};
}

json pod_template(json labels = json::object(), json annotations = json::object()) {
  return {{"metadata", {{"labels", std::move(labels)}, {"annotations", std::move(annotations)}}},
          {"spec", {{"containers", {{{"name", "tensorflow"}}}}}}};
}

TEST(SidecarTest, NamespaceInjectionFollowsIstiosLabels) {
  EXPECT_EQ(istio_namespace(ns_with({{"istio-injection", "enabled"}})), IstioNamespace::Injected);
  EXPECT_EQ(istio_namespace(ns_with({{"istio.io/rev", "canary"}})), IstioNamespace::Injected);
  // istio-injection wins over a revision label, as the injector's webhook selectors say.
  EXPECT_EQ(istio_namespace(ns_with({{"istio-injection", "disabled"}, {"istio.io/rev", "canary"}})),
            IstioNamespace::Disabled);
  EXPECT_EQ(istio_namespace(ns_with(json::object())), IstioNamespace::Unlabelled);
}

TEST(SidecarTest, PodInjectLabelAndAnnotationDecideAsIstiosInjectRequired) {
  EXPECT_TRUE(istio_injects(IstioNamespace::Injected, pod_template()));
  EXPECT_FALSE(istio_injects(IstioNamespace::Unlabelled, pod_template()));
  EXPECT_FALSE(istio_injects(IstioNamespace::Injected,
                             pod_template({}, {{"sidecar.istio.io/inject", "false"}})));
  EXPECT_FALSE(istio_injects(IstioNamespace::Injected,
                             pod_template({{"sidecar.istio.io/inject", "false"}})));
  // The label wins over the annotation.
  EXPECT_TRUE(istio_injects(
      IstioNamespace::Unlabelled,
      pod_template({{"sidecar.istio.io/inject", "true"}}, {{"sidecar.istio.io/inject", "false"}})));
  EXPECT_FALSE(
      istio_injects(IstioNamespace::Disabled, pod_template({{"sidecar.istio.io/inject", "true"}})));
  json host = pod_template();
  host["spec"]["hostNetwork"] = true;
  EXPECT_FALSE(istio_injects(IstioNamespace::Injected, host));
}

TEST(SidecarTest, HoldConfigIsMergedIntoTheUsersProxyConfig) {
  EXPECT_EQ(hold_application_until_proxy_starts("").value,
            R"({"holdApplicationUntilProxyStarts": true})");
  const HoldConfig yaml =
      hold_application_until_proxy_starts("terminationDrainDuration: 30s\nconcurrency: 2\n");
  EXPECT_EQ(yaml.error, "");
  EXPECT_EQ(json::parse(yaml.value), (json{{"terminationDrainDuration", "30s"},
                                           {"concurrency", 2},
                                           {"holdApplicationUntilProxyStarts", true}}));
  const HoldConfig js = hold_application_until_proxy_starts(R"({"tracing": {"sampling": 10}})");
  EXPECT_EQ(json::parse(js.value),
            (json{{"tracing", {{"sampling", 10}}}, {"holdApplicationUntilProxyStarts", true}}));
  // The user's own value wins, byte for byte.
  EXPECT_EQ(hold_application_until_proxy_starts("holdApplicationUntilProxyStarts: false").value,
            "holdApplicationUntilProxyStarts: false");
  for (const char* bad : {"{unclosed: [", "just a string", "- a\n- list"}) {
    const HoldConfig left = hold_application_until_proxy_starts(bad);
    EXPECT_EQ(left.value, bad);
    EXPECT_NE(left.error, "") << bad;
  }
}

TEST(SidecarTest, DecorationSetsNativeSidecarPerFlagAndKeepsTheUsersChoice) {
  json on = pod_template();
  decorate_istio(on, IstioNamespace::Injected, NativeSidecars::On);
  EXPECT_EQ(on["metadata"]["annotations"]["sidecar.istio.io/nativeSidecar"], "true");
  EXPECT_EQ(on["metadata"]["annotations"]["proxy.istio.io/config"],
            R"({"holdApplicationUntilProxyStarts": true})");
  json off = pod_template();
  decorate_istio(off, IstioNamespace::Injected, NativeSidecars::Off);
  EXPECT_EQ(off["metadata"]["annotations"]["sidecar.istio.io/nativeSidecar"], "false");
  json automatic = pod_template();
  decorate_istio(automatic, IstioNamespace::Injected, NativeSidecars::Auto);
  EXPECT_FALSE(automatic["metadata"]["annotations"].contains("sidecar.istio.io/nativeSidecar"));
  json users = pod_template({}, {{"sidecar.istio.io/nativeSidecar", "false"}});
  decorate_istio(users, IstioNamespace::Injected, NativeSidecars::On);
  EXPECT_EQ(users["metadata"]["annotations"]["sidecar.istio.io/nativeSidecar"], "false");
  json opted_out = pod_template({}, {{"sidecar.istio.io/inject", "false"}});
  decorate_istio(opted_out, IstioNamespace::Injected, NativeSidecars::On);
  EXPECT_EQ(opted_out["metadata"]["annotations"], (json{{"sidecar.istio.io/inject", "false"}}));
  json bad = pod_template({}, {{"proxy.istio.io/config", "{unclosed"}});
  decorate_istio(bad, IstioNamespace::Injected, NativeSidecars::Auto);
  EXPECT_EQ(bad["metadata"]["annotations"]["proxy.istio.io/config"], "{unclosed");
  EXPECT_NE(proxy_config_error(bad, IstioNamespace::Injected), "");
  EXPECT_EQ(proxy_config_error(bad, IstioNamespace::Unlabelled), "");
}

TEST(SidecarTest, ProxyQuitsOnceTheTrainingContainersHaveTerminated) {
  EXPECT_EQ(proxy_state(meshed_pod("w-0", terminated(0), running())), ProxyState::Quit);
  EXPECT_EQ(proxy_state(meshed_pod("w-1", terminated(1), running())), ProxyState::Quit);
  EXPECT_EQ(proxy_state(meshed_pod("w-2", running(), running())), ProxyState::OthersRunning);
  json not_reported = meshed_pod("w-3", terminated(0), running());
  not_reported["spec"]["containers"].push_back({{"name", "logger"}});
  EXPECT_EQ(proxy_state(not_reported), ProxyState::OthersRunning);
}

TEST(SidecarTest, SkipsSayWhy) {
  json asked = meshed_pod("asked", terminated(0), running());
  asked["metadata"]["annotations"][std::string(api::annotations::sidecar_stop_requested)] = "true";
  EXPECT_EQ(proxy_state(asked), ProxyState::AlreadyAsked);
  json deleting = meshed_pod("deleting", terminated(0), running());
  deleting["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z";
  EXPECT_EQ(proxy_state(deleting), ProxyState::PodDeleting);
  EXPECT_EQ(skip_reason(ProxyState::PodDeleting), "pod being deleted");
  json finished = meshed_pod("finished", terminated(0), running());
  finished["status"]["phase"] = "Succeeded";
  EXPECT_EQ(proxy_state(finished), ProxyState::PodFinished);
  EXPECT_EQ(proxy_state(meshed_pod("stopped", terminated(0), terminated(0))),
            ProxyState::ProxyTerminated);
  EXPECT_EQ(skip_reason(ProxyState::ProxyTerminated), "proxy already terminated");
  json proxy_only = meshed_pod("proxy-only", terminated(0), running());
  proxy_only["spec"]["containers"].erase(0);
  EXPECT_EQ(proxy_state(proxy_only), ProxyState::NoOtherContainers);
  json plain = meshed_pod("plain", terminated(0), running());
  plain["spec"]["containers"].erase(1);
  EXPECT_EQ(proxy_state(plain), ProxyState::NoProxy);
  EXPECT_FALSE(has_istio_proxy(plain));
  EXPECT_EQ(skip_reason(ProxyState::NoProxy), "no istio-proxy container");
}

TEST(SidecarTest, NativeSidecarsAreLeftAlone) {
  // Istio's native sidecar mode: istio-proxy is an init container with restartPolicy Always.
  json native = {{"metadata", {{"name", "native"}, {"namespace", "team-a"}}},
                 {"spec",
                  {{"initContainers", {{{"name", "istio-proxy"}, {"restartPolicy", "Always"}}}},
                   {"containers", {{{"name", "tensorflow"}}}}}},
                 {"status",
                  {{"phase", "Running"},
                   {"initContainerStatuses", {{{"name", "istio-proxy"}, {"state", running()}}}},
                   {"containerStatuses", {{{"name", "tensorflow"}, {"state", terminated(0)}}}}}}};
  EXPECT_EQ(proxy_state(native), ProxyState::NativeSidecar);
  EXPECT_TRUE(has_istio_proxy(native));
  EXPECT_EQ(training_phase(native), "Running");
}

TEST(SidecarTest, QuitCommandsAndMissingCommandDetection) {
  EXPECT_EQ(pilot_agent_quit_command(),
            (std::vector<std::string>{"pilot-agent", "request", "POST", "quitquitquit"}));
  EXPECT_EQ(curl_quit_command(), (std::vector<std::string>{"curl", "-sf", "-XPOST",
                                                           "http://127.0.0.1:15020/quitquitquit"}));
  EXPECT_TRUE(command_missing(127, ""));
  EXPECT_TRUE(command_missing(126, ""));
  EXPECT_TRUE(
      command_missing(0, R"(exec: "pilot-agent": executable file not found in $PATH: unknown)"));
  EXPECT_FALSE(command_missing(1, "Error: connection refused"));
}

TEST(SidecarTest, RetriesBackOffExponentiallyUpToTheBound) {
  const ProxyQuitRetry retry{.base = std::chrono::milliseconds(100),
                             .cap = std::chrono::milliseconds(500),
                             .max_attempts = 5};
  EXPECT_EQ(quit_retry_delay(1, retry), std::chrono::milliseconds(100));
  EXPECT_EQ(quit_retry_delay(2, retry), std::chrono::milliseconds(200));
  EXPECT_EQ(quit_retry_delay(3, retry), std::chrono::milliseconds(400));
  EXPECT_EQ(quit_retry_delay(4, retry), std::chrono::milliseconds(500));
  EXPECT_EQ(quit_retry_delay(5, retry), std::nullopt);
}

TEST(SidecarTest, LatencyRunsFromTheLastTrainingExitToTheProxyExit) {
  json pod = meshed_pod("w-0", terminated(0, "2024-05-01T12:00:10Z"),
                        terminated(0, "2024-05-01T12:00:12Z"));
  pod["spec"]["containers"].push_back({{"name", "logger"}});
  pod["status"]["containerStatuses"].push_back(
      {{"name", "logger"}, {"state", terminated(0, "2024-05-01T12:00:11Z")}});
  EXPECT_EQ(proxy_exit_latency_seconds(pod), 1.0);
  EXPECT_EQ(proxy_exit_latency_seconds(meshed_pod("w-1", terminated(0), running())), std::nullopt);
}

TEST(SidecarTest, TrainingContainersDecideThePhaseWhileTheProxyRuns) {
  EXPECT_EQ(training_phase(meshed_pod("ok", terminated(0), running())), "Succeeded");
  EXPECT_EQ(training_phase(meshed_pod("bad", terminated(3), running())), "Failed");
  json on_failure = meshed_pod("retried", terminated(3), running());
  on_failure["spec"]["restartPolicy"] = "OnFailure";  // the kubelet restarts it
  EXPECT_EQ(training_phase(on_failure), "Running");
  EXPECT_EQ(training_phase(meshed_pod("busy", running(), running())), "Running");
  json plain = meshed_pod("plain", terminated(0), running());
  plain["spec"]["containers"].erase(1);
  EXPECT_EQ(training_phase(plain), "Running");
}

}  // namespace
}  // namespace trainctl::controller
