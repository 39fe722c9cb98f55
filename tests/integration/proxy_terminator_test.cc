// The proxy terminator against the sandbox: Istio proxies of trainctl's pods and of pods in
// namespaces labelled trainctl.io/proxy-terminator=enabled are asked to quit once, over the real
// pods/exec, with the fallbacks, back-off and Events a cluster would show. What was exec'd is
// read from the sandbox's exec history, as an audit log would show it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <sstream>
#include <thread>

#include "controller/controller.h"
#include "json_access.h"
#include "tests/support/sandbox_fixture.h"
#include "yaml_json.h"

namespace trainctl::proxy_terminator_test {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::wait_until;

constexpr std::chrono::seconds kLong{30};

json yaml(const std::string& text) {
  return yaml_to_json(YAML::Load(text));
}

const std::vector<std::string> kPilotAgentQuit = {"pilot-agent", "request", "POST", "quitquitquit"};
const std::vector<std::string> kCurlQuit = {"curl", "-sf", "-XPOST",
                                            "http://127.0.0.1:15020/quitquitquit"};

class ProxyTerminatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::install_training_crds(client());
    controller_client_ = std::make_unique<kube::Client>(local_.sandbox().admin_config());
  }

  void TearDown() override {
    stop();
    if (HasFailure())
      std::cerr << "controller log:\n" << log_text_.str();
  }

  void start() {
    controller::ControllerOptions options{.workers = 2};
    options.plan.gang_scheduler = controller::GangScheduler::None;
    options.proxy_quit_retry = {.base = std::chrono::milliseconds(100),
                                .cap = std::chrono::milliseconds(400),
                                .max_attempts = 4};
    metrics_ = std::make_unique<controller::MetricsRegistry>();
    controller::declare_controller_metrics(*metrics_);
    manager_ = std::make_unique<controller::Manager>(*controller_client_,
                                                     controller::ManagerOptions{}, *metrics_, log_);
    controller::add_reconcilers(*manager_, options);
    thread_ = std::jthread([this](std::stop_token stop) { manager_->run(stop); });
    ASSERT_TRUE(wait_until([&] { return manager_->synced(); }, kLong));
  }

  void stop() {
    thread_ = {};  // requests stop and joins
    manager_.reset();
  }

  kube::Client& client() { return local_.client(); }

  void create_namespace(const std::string& name, const json& labels) {
    client().create(kube::resources::namespaces(), "",
                    {{"metadata", {{"name", name}, {"labels", labels}}}});
  }

  /// A pod with a `main` container that runs 0.3 s and a regular istio-proxy.
  json meshed_pod(const std::string& name, const json& annotations = json::object()) {
    json pod = yaml(R"(
metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.3"}}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox}
  - {name: istio-proxy, image: istio/proxyv2:1.22}
)");
    if (!name.empty())
      pod["metadata"]["name"] = name;
    pod["metadata"]["annotations"].update(annotations);
    return pod;
  }

  json create_meshed_pod(const std::string& ns, const std::string& name,
                         const json& annotations = json::object()) {
    return client().create(kube::resources::pods(), ns, meshed_pod(name, annotations));
  }

  json pod(const std::string& ns, const std::string& name) {
    return client().get(kube::resources::pods(), ns, name);
  }

  std::string container_state(const std::string& ns, const std::string& name,
                              const std::string& container) {
    const json object = pod(ns, name);  // outlives the loop
    for (const auto& s : member(object_member(object, "status"), "containerStatuses")) {
      if (string_member(s, "name") == container && object_member(s, "state").is_object() &&
          !s["state"].empty())
        return s["state"].begin().key();
    }
    return "";
  }

  std::vector<sandbox::ExecRecord> execs(const std::string& ns, const std::string& name) {
    std::vector<sandbox::ExecRecord> out;
    for (auto& record : local_.sandbox().cluster().exec_history()) {
      if (record.namespace_ == ns && record.pod == name)
        out.push_back(std::move(record));
    }
    return out;
  }

  /// The reasons and messages of the events about `name`, in the order they were created.
  std::vector<std::pair<std::string, std::string>> events(const std::string& ns,
                                                          const std::string& name) {
    std::vector<std::pair<std::string, std::string>> out;
    const json list = client().list_all(kube::resources::events(), ns);  // outlives the loop
    for (const auto& e : list["items"]) {
      if (string_member(object_member(e, "involvedObject"), "name") == name)
        out.emplace_back(string_member(e, "reason"), string_member(e, "message"));
    }
    return out;
  }

  // Occurrences, not Event objects: repeats of one reason are one Event whose count grows.
  int count_events(const std::string& ns, const std::string& name, const std::string& reason) {
    int n = 0;
    const json list = client().list_all(kube::resources::events(), ns);
    for (const auto& e : list["items"]) {
      if (string_member(object_member(e, "involvedObject"), "name") == name &&
          string_member(e, "reason") == reason)
        n += e.value("count", 1);
    }
    return n;
  }

  double metric(const std::string& name, const controller::LabelValues& labels) {
    return metrics_->value(name, labels);
  }

  testing::LocalSandbox local_;
  std::unique_ptr<kube::Client> controller_client_;
  std::ostringstream log_text_;
  Logger log_{log_text_, LogFormat::Text, 1};
  std::unique_ptr<controller::MetricsRegistry> metrics_;
  std::unique_ptr<controller::Manager> manager_;
  std::jthread thread_;
};

// A training job's proxy is asked exactly once, in istio-proxy, with pilot-agent's quit command;
// the job succeeds and the pod records the request.
TEST_F(ProxyTerminatorTest, JobPodsProxyQuitsExactlyOnceWithPilotAgent) {
  client().patch(kube::resources::namespaces(), "", "default", kube::PatchType::Merge,
                 {{"metadata", {{"labels", {{"istio-injection", "enabled"}}}}}});
  start();
  client().create(kube::resources::job(api::JobKind::TFJob), "default", yaml(R"(
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: meshed}
spec:
  runPolicy: {cleanPodPolicy: None}
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        metadata: {annotations: {sandbox.trainctl.io/run-seconds: "0.3"}}
        spec:
          containers:
          - {name: tensorflow, image: tf:2}
          - {name: istio-proxy, image: istio/proxyv2:1.22}
)"));
  ASSERT_TRUE(wait_until(
      [&] { return count_events("default", "meshed-worker-0", "ProxyQuit") == 1; }, kLong));
  ASSERT_TRUE(wait_until(
      [&] {
        return api::job_status(client().get(kube::resources::job(api::JobKind::TFJob), "default",
                                            "meshed")) == "Succeeded";
      },
      kLong));
  ASSERT_TRUE(wait_until(
      [&] {
        return annotation_of(pod("default", "meshed-worker-0"),
                             "trainctl.io/sidecar-stop-requested") == "true";
      },
      kLong));
  EXPECT_EQ(annotation_of(pod("default", "meshed-worker-0"), "proxy.istio.io/config"),
            R"({"holdApplicationUntilProxyStarts": true})");
  const auto calls = execs("default", "meshed-worker-0");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].container, "istio-proxy");
  EXPECT_EQ(calls[0].argv, kPilotAgentQuit);
  EXPECT_EQ(container_state("default", "meshed-worker-0", "istio-proxy"), "terminated");
  EXPECT_EQ(metric("trainctl_proxy_quit_attempts_total", {"pilot-agent"}), 1);
  EXPECT_EQ(metric("trainctl_proxy_quits_succeeded_total", {"pilot-agent"}), 1);
}

// Start-up: the user's proxy config keeps its keys and gains the hold; an unparsable one is left
// alone with a Warning Event; `sidecar.istio.io/inject: "false"` gets nothing.
TEST_F(ProxyTerminatorTest, ProxyConfigIsMergedAndInjectFalseIsRespected) {
  create_namespace("mesh", {{"istio.io/rev", "canary"}});
  start();
  client().create(kube::resources::job(api::JobKind::PyTorchJob), "mesh", yaml(R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: cfg}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata:
          annotations: {proxy.istio.io/config: "terminationDrainDuration: 30s\nconcurrency: 2"}
        spec: {containers: [{name: pytorch, image: torch:2}]}
    Worker:
      replicas: 2
      template:
        metadata: {labels: {sidecar.istio.io/inject: "false"}}
        spec: {containers: [{name: pytorch, image: torch:2}]}
)"));
  client().create(kube::resources::job(api::JobKind::PyTorchJob), "mesh", yaml(R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bad}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata: {annotations: {proxy.istio.io/config: "{not: [yaml"}}
        spec: {containers: [{name: pytorch, image: torch:2}]}
)"));
  ASSERT_TRUE(wait_until(
      [&] {
        try {
          // Every pod: a job's pods are created concurrently, in no set order.
          for (const char* name : {"cfg-master-0", "cfg-worker-0", "cfg-worker-1", "bad-master-0"})
            pod("mesh", name);
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      kLong));
  const json master = pod("mesh", "cfg-master-0");
  EXPECT_EQ(json::parse(annotation_of(master, "proxy.istio.io/config")),
            (json{{"terminationDrainDuration", "30s"},
                  {"concurrency", 2},
                  {"holdApplicationUntilProxyStarts", true}}));
  EXPECT_FALSE(object_member(object_member(pod("mesh", "cfg-worker-0"), "metadata"), "annotations")
                   .contains("proxy.istio.io/config"));
  EXPECT_EQ(annotation_of(pod("mesh", "bad-master-0"), "proxy.istio.io/config"), "{not: [yaml");
  ASSERT_TRUE(
      wait_until([&] { return count_events("mesh", "bad", "InvalidProxyConfig") >= 1; }, kLong));
  for (const auto& [reason, message] : events("mesh", "bad")) {
    if (reason == "InvalidProxyConfig") {
      EXPECT_THAT(message, HasSubstr("pod bad-master-0: proxy.istio.io/config left as it is"));
    }
  }
}

// A plain batch Job in an opted-in namespace has its proxy stopped and completes.
TEST_F(ProxyTerminatorTest, OptedInNamespacesBatchJobPodIsHandled) {
  create_namespace("pipelines", {{"trainctl.io/proxy-terminator", "enabled"}});
  start();
  client().create(kube::resources::jobs(), "pipelines",
                  {{"apiVersion", "batch/v1"},
                   {"kind", "Job"},
                   {"metadata", {{"name", "step"}}},
                   {"spec", {{"template", meshed_pod("")}}}});
  ASSERT_TRUE(wait_until(
      [&] {
        return object_member(client().get(kube::resources::jobs(), "pipelines", "step"), "status")
                   .value("succeeded", 0) == 1;
      },
      kLong));
  const json pods = client().list_all(kube::resources::pods(), "pipelines")["items"];
  ASSERT_EQ(pods.size(), 1u);
  const auto calls = execs("pipelines", name_of(pods[0]));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].argv, kPilotAgentQuit);
}

// Pods of a namespace without the label are not touched; `sidecar.istio.io/inject` plays no role
// there. The opted-in pod, created at the same time, is the barrier.
TEST_F(ProxyTerminatorTest, NamespaceNotOptedInIsUntouched) {
  create_namespace("opted", {{"trainctl.io/proxy-terminator", "enabled"}});
  create_namespace("other", {{"istio-injection", "enabled"}});
  start();
  create_meshed_pod("other", "left");
  create_meshed_pod("opted", "handled");
  ASSERT_TRUE(
      wait_until([&] { return pod("opted", "handled")["status"]["phase"] == "Succeeded"; }, kLong));
  ASSERT_TRUE(
      wait_until([&] { return container_state("other", "left", "main") == "terminated"; }, kLong));
  ASSERT_TRUE(
      wait_until([&] { return count_events("opted", "handled", "ProxyQuit") == 1; }, kLong));
  EXPECT_TRUE(execs("other", "left").empty());
  EXPECT_EQ(container_state("other", "left", "istio-proxy"), "running");
  EXPECT_EQ(pod("other", "left")["status"]["phase"], "Running");
}

// A native sidecar (an init container with restartPolicy Always) is stopped by the kubelet: no
// exec.
TEST_F(ProxyTerminatorTest, NativeSidecarGetsNoExec) {
  create_namespace("opted", {{"trainctl.io/proxy-terminator", "enabled"}});
  start();
  client().create(kube::resources::pods(), "opted", yaml(R"(
metadata: {name: native, annotations: {sandbox.trainctl.io/run-seconds: "0.3"}}
spec:
  restartPolicy: Never
  initContainers:
  - {name: istio-proxy, image: istio/proxyv2:1.22, restartPolicy: Always}
  containers:
  - {name: main, image: busybox}
)"));
  create_meshed_pod("opted", "barrier");
  ASSERT_TRUE(
      wait_until([&] { return pod("opted", "native")["status"]["phase"] == "Succeeded"; }, kLong));
  ASSERT_TRUE(
      wait_until([&] { return pod("opted", "barrier")["status"]["phase"] == "Succeeded"; }, kLong));
  EXPECT_TRUE(execs("opted", "native").empty());
  EXPECT_EQ(count_events("opted", "native", "ProxyQuit"), 0);
}

// An image without pilot-agent: its exec fails as containerd's does, and curl to pilot-agent's
// status port quits the proxy. A distroless image (no sh, no curl) quits with pilot-agent alone.
TEST_F(ProxyTerminatorTest, WithoutPilotAgentCurlQuitsAndDistrolessUsesPilotAgent) {
  create_namespace("opted", {{"trainctl.io/proxy-terminator", "enabled"}});
  start();
  create_meshed_pod("opted", "no-agent",
                    {{"sandbox.trainctl.io/absent-commands.istio-proxy", "pilot-agent"}});
  create_meshed_pod("opted", "distroless",
                    {{"sandbox.trainctl.io/absent-commands.istio-proxy", "sh curl"}});
  for (const char* name : {"no-agent", "distroless"}) {
    ASSERT_TRUE(
        wait_until([&] { return pod("opted", name)["status"]["phase"] == "Succeeded"; }, kLong))
        << name;
  }
  const auto fallback = execs("opted", "no-agent");
  ASSERT_EQ(fallback.size(), 2u);
  EXPECT_EQ(fallback[0].argv, kPilotAgentQuit);
  EXPECT_THAT(fallback[0].failure,
              HasSubstr("\"pilot-agent\": executable file not found in $PATH"));
  EXPECT_EQ(fallback[1].argv, kCurlQuit);
  EXPECT_EQ(fallback[1].exit_code, 0);
  const auto distroless = execs("opted", "distroless");
  ASSERT_EQ(distroless.size(), 1u);
  EXPECT_EQ(distroless[0].argv, kPilotAgentQuit);
  ASSERT_TRUE(
      wait_until([&] { return count_events("opted", "no-agent", "ProxyQuit") == 1; }, kLong));
  EXPECT_THAT(events("opted", "no-agent"),
              ::testing::Contains(::testing::Pair("ProxyQuit", HasSubstr("(curl)"))));
  EXPECT_EQ(metric("trainctl_proxy_quits_succeeded_total", {"curl"}), 1);
}

// Exec denied (403): each failure is a ProxyQuitFailed Event and a retry after a growing delay;
// once exec is allowed again the proxy quits. Denied for good, it gives up after the bound.
TEST_F(ProxyTerminatorTest, ExecDeniedBacksOffWithEventsUntilAllowedOrTheBound) {
  create_namespace("opted", {{"trainctl.io/proxy-terminator", "enabled"}});
  local_.sandbox().api().set_faults({.forbid_exec = true});
  start();
  create_meshed_pod("opted", "denied");
  ASSERT_TRUE(
      wait_until([&] { return count_events("opted", "denied", "ProxyQuitFailed") == 4; }, kLong));
  // The four failures are one Event (client-go's EventCorrelator): its count is 4 and its message
  // the last one, marked combined; each attempt's own words are in the log.
  using ::testing::ElementsAre;
  using ::testing::Pair;
  auto failures = events("opted", "denied");  // the scheduler's Scheduled aside
  std::erase_if(failures, [](const auto& e) { return e.first != "ProxyQuitFailed"; });
  EXPECT_THAT(failures, ElementsAre(Pair(
                            "ProxyQuitFailed",
                            ::testing::AllOf(HasSubstr("(combined from similar events): "),
                                             HasSubstr("Forbidden: pods \"denied\" is forbidden"),
                                             HasSubstr("giving up after 4 attempts")))));
  EXPECT_THAT(log_text_.str(), HasSubstr("retrying in 100ms (attempt 1 of 4)"));
  EXPECT_THAT(log_text_.str(), HasSubstr("retrying in 200ms (attempt 2 of 4)"));
  EXPECT_EQ(metric("trainctl_proxy_quits_failed_total", {"Forbidden"}), 4);
  EXPECT_EQ(annotation_of(pod("opted", "denied"), "trainctl.io/sidecar-stop-requested"), "");

  create_meshed_pod("opted", "later");
  ASSERT_TRUE(
      wait_until([&] { return count_events("opted", "later", "ProxyQuitFailed") >= 1; }, kLong));
  local_.sandbox().api().set_faults({});
  ASSERT_TRUE(
      wait_until([&] { return pod("opted", "later")["status"]["phase"] == "Succeeded"; }, kLong));
  EXPECT_EQ(execs("opted", "later").size(), 1u);
  EXPECT_EQ(count_events("opted", "denied", "ProxyQuitFailed"), 4);  // it gave up for good
  EXPECT_TRUE(execs("opted", "denied").empty());
}

// A controller stopped after the quit but before the annotation: the restarted one asks at most
// once more (here the proxy had already exited, so not at all).
TEST_F(ProxyTerminatorTest, ControllerKilledBetweenExecAndAnnotationQuitsAtMostOnceMore) {
  create_namespace("opted", {{"trainctl.io/proxy-terminator", "enabled"}});
  local_.sandbox().api().set_faults({.conflict_on_update = true});  // the annotation fails
  start();
  create_meshed_pod("opted", "crash");
  ASSERT_TRUE(wait_until([&] { return execs("opted", "crash").size() == 1; }, kLong));
  ASSERT_TRUE(wait_until(
      [&] {
        return metric("trainctl_reconcile_total", {"controller", "error"}) >= 1;
      },
      kLong));
  stop();
  local_.sandbox().api().set_faults({});
  EXPECT_EQ(annotation_of(pod("opted", "crash"), "trainctl.io/sidecar-stop-requested"), "");
  start();
  create_meshed_pod("opted", "barrier");
  ASSERT_TRUE(wait_until([&] { return execs("opted", "barrier").size() == 1; }, kLong));
  EXPECT_LE(execs("opted", "crash").size(), 2u);
  EXPECT_EQ(pod("opted", "crash")["status"]["phase"], "Succeeded");
}

}  // namespace
}  // namespace trainctl::proxy_terminator_test
