// The sandbox's simulated nodes, scheduler and kubelet seen through the API, as trainctl and
// kubectl see a real cluster: node capacity, pod lifecycles scripted by annotations, scheduling
// failures, logs, exec, and the Istio sidecar that only quits when told to.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "error.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "tests/support/expect_error.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl {
namespace {

using kube::Client;
using kube::WatchEvent;
using kube::WatchEventType;
using nlohmann::json;
using ::testing::ElementsAre;
using testing::expect_error;
using ::testing::HasSubstr;
using testing::pod_manifest;
using ::testing::StartsWith;
using testing::wait_until;

namespace resources = kube::resources;

using SandboxClusterTest = testing::SandboxTest;

constexpr const char* kRunSeconds = "sandbox.trainctl.io/run-seconds";
constexpr const char* kExitCode = "sandbox.trainctl.io/exit-code";

json get_pod(Client& client, const std::string& name) {
  return client.get(resources::pods(), "default", name);
}

std::string phase_of(const json& pod) {
  return pod.value("status", json::object()).value("phase", "");
}

/// The condition of `type` in the pod's status, or null.
json pod_condition(const json& pod, const std::string& type) {
  for (const auto& c : pod.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type)
      return c;
  }
  return nullptr;
}

/// The status of container `name`, or null.
json container_status(const json& pod, const std::string& name) {
  for (const auto& s :
       pod.value("status", json::object()).value("containerStatuses", json::array())) {
    if (s.value("name", "") == name)
      return s;
  }
  return nullptr;
}

/// Creates `pod` and watches it until its phase is Succeeded or Failed (5 s at most); returns
/// every distinct phase it went through, in order, and leaves the last state in `last`.
std::vector<std::string> run_to_completion(Client& client, const json& pod, json& last) {
  const json created = client.create(resources::pods(), "default", pod);
  std::vector<std::string> phases = {phase_of(created)};
  last = created;
  kube::WatchOptions options;
  options.resource_version = created["metadata"]["resourceVersion"];
  options.field_selector = "metadata.name=" + created["metadata"]["name"].get<std::string>();
  options.timeout_seconds = 5;
  client.watch(resources::pods(), "default", options, [&](const WatchEvent& e) {
    if (e.type != WatchEventType::Modified)
      return true;
    last = e.object;
    const std::string phase = phase_of(e.object);
    if (phase != phases.back())
      phases.push_back(phase);
    return phase != "Succeeded" && phase != "Failed";
  });
  return phases;
}

bool pod_is(Client& client, const std::string& name, const std::string& phase) {
  return phase_of(get_pod(client, name)) == phase;
}

TEST_F(SandboxClusterTest, FourReadyNodesAreListedWithGpuCapacity) {
  const json nodes = client().list(resources::nodes(), "");
  ASSERT_EQ(nodes["items"].size(), 4u);
  std::vector<std::string> names;
  for (const auto& node : nodes["items"]) {
    names.push_back(node["metadata"]["name"]);
    EXPECT_EQ(node["status"]["capacity"]["nvidia.com/gpu"], "8");
    EXPECT_EQ(node["status"]["capacity"]["cpu"], "32");
    EXPECT_EQ(node["status"]["capacity"]["memory"], "256Gi");
    EXPECT_EQ(node["status"]["allocatable"]["nvidia.com/gpu"], "8");
    EXPECT_EQ(node["metadata"]["labels"]["kubernetes.io/hostname"], node["metadata"]["name"]);
    EXPECT_EQ(pod_condition(node, "Ready").value("status", ""), "True");
  }
  EXPECT_THAT(names,
              ElementsAre("sandbox-node-0", "sandbox-node-1", "sandbox-node-2", "sandbox-node-3"));
}

TEST_F(SandboxClusterTest, PodGoesPendingRunningSucceeded) {
  json pod = pod_manifest("ok", {{kRunSeconds, "0.3"}});
  pod["spec"]["restartPolicy"] = "OnFailure";  // under Always it would start again
  json last;
  const auto phases = run_to_completion(client(), pod, last);
  ASSERT_THAT(phases, ElementsAre("Pending", "Running", "Succeeded"));
  EXPECT_THAT(last["spec"].value("nodeName", ""), StartsWith("sandbox-node-"));
  EXPECT_FALSE(last["status"].value("podIP", "").empty());
  EXPECT_EQ(pod_condition(last, "PodScheduled").value("status", ""), "True");
  json main = container_status(last, "main");
  ASSERT_TRUE(main.is_object()) << last["status"].dump();
  EXPECT_EQ(main["state"]["terminated"]["exitCode"], 0);
  EXPECT_EQ(main["state"]["terminated"]["reason"], "Completed");
  EXPECT_EQ(main["restartCount"], 0);
}

TEST_F(SandboxClusterTest, ScriptedExitCodeWithRestartNeverFailsThePod) {
  json pod = pod_manifest("fails", {{kRunSeconds, "0.2"}, {kExitCode, "3"}});
  pod["spec"]["restartPolicy"] = "Never";
  json last;
  const auto phases = run_to_completion(client(), pod, last);
  ASSERT_THAT(phases, ElementsAre("Pending", "Running", "Failed"));
  json main = container_status(last, "main");
  ASSERT_TRUE(main.is_object()) << last["status"].dump();
  EXPECT_EQ(main["state"]["terminated"]["exitCode"], 3);
  EXPECT_EQ(main["state"]["terminated"]["reason"], "Error");
  EXPECT_EQ(main["restartCount"], 0);
}

TEST_F(SandboxClusterTest, FailingContainerWithOnFailureIsRestarted) {
  json pod = pod_manifest("retries", {{kRunSeconds, "0.1"}, {kExitCode, "1"}});
  pod["spec"]["restartPolicy"] = "OnFailure";
  client().create(resources::pods(), "default", pod);
  json last;
  ASSERT_TRUE(wait_until([&] {
    last = get_pod(client(), "retries");
    json main = container_status(last, "main");
    return main.is_object() && main.value("restartCount", 0) >= 1;
  })) << last["status"].dump();
  EXPECT_NE(phase_of(last), "Failed");
  EXPECT_EQ(container_status(last, "main")["lastState"]["terminated"]["exitCode"], 1);
}

TEST_F(SandboxClusterTest, PodAskingForTooManyGpusIsUnschedulable) {
  json pod = pod_manifest("greedy");
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpu", "16"}}}};
  client().create(resources::pods(), "default", pod);
  json scheduled;
  ASSERT_TRUE(wait_until([&] {
    scheduled = pod_condition(get_pod(client(), "greedy"), "PodScheduled");
    return scheduled.is_object();
  }));
  EXPECT_EQ(scheduled["status"], "False");
  EXPECT_EQ(scheduled["reason"], "Unschedulable");
  EXPECT_THAT(scheduled.value("message", ""), HasSubstr("0/4 nodes are available"));
  EXPECT_THAT(scheduled.value("message", ""), HasSubstr("Insufficient nvidia.com/gpu"));
  const json after = get_pod(client(), "greedy");
  EXPECT_EQ(phase_of(after), "Pending");
  EXPECT_FALSE(after["spec"].contains("nodeName"));
}

TEST_F(SandboxClusterTest, NodeSelectorIsHonoured) {
  json pinned = pod_manifest("pinned", {{kRunSeconds, "forever"}});
  pinned["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", "sandbox-node-3"}};
  client().create(resources::pods(), "default", pinned);
  json nowhere = pod_manifest("nowhere");
  nowhere["spec"]["nodeSelector"] = {{"accelerator", "tpu"}};
  client().create(resources::pods(), "default", nowhere);

  ASSERT_TRUE(wait_until([&] { return pod_is(client(), "pinned", "Running"); }));
  EXPECT_EQ(get_pod(client(), "pinned")["spec"]["nodeName"], "sandbox-node-3");
  json scheduled;
  ASSERT_TRUE(wait_until([&] {
    scheduled = pod_condition(get_pod(client(), "nowhere"), "PodScheduled");
    return scheduled.is_object();
  }));
  EXPECT_EQ(scheduled["reason"], "Unschedulable");
  EXPECT_THAT(scheduled.value("message", ""),
              HasSubstr("didn't match Pod's node affinity/selector"));
}

TEST_F(SandboxClusterTest, LogsFollowUntilTheContainerExitsThenReadBack) {
  client().create(resources::pods(), "default", pod_manifest("logger", {{kRunSeconds, "1.2"}}));
  ASSERT_TRUE(wait_until([&] { return pod_is(client(), "logger", "Running"); }));

  std::string followed;
  const auto started = std::chrono::steady_clock::now();
  client().stream_logs("default", "logger", {.follow = true}, [&](std::string_view chunk) {
    followed.append(chunk);
    return true;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4))
      << "the follow did not end with the container";
  EXPECT_EQ(followed, "+ python train.py\nstep 1/1.2\nexited with code 0\n");

  std::string all;
  client().stream_logs("default", "logger", {}, [&](std::string_view chunk) {
    all.append(chunk);
    return true;
  });
  EXPECT_EQ(all, followed);
  std::string tail;
  client().stream_logs("default", "logger", {.tail_lines = 1}, [&](std::string_view chunk) {
    tail.append(chunk);
    return true;
  });
  EXPECT_EQ(tail, "exited with code 0\n");

  const Error bad = expect_error([&] {
    client().stream_logs("default", "logger", {.container = "nope"},
                         [](std::string_view) { return true; });
  });
  EXPECT_EQ(bad.kind(), ErrorKind::BadRequest);
  EXPECT_THAT(bad.message(), HasSubstr("container nope is not valid for pod logger"));
}

TEST_F(SandboxClusterTest, ExecRunsKnownCommandsAndExits127ForOthers) {
  client().create(resources::pods(), "default", pod_manifest("shell", {{kRunSeconds, "forever"}}));
  ASSERT_TRUE(wait_until([&] { return pod_is(client(), "shell", "Running"); }));

  const kube::ExecOutcome hi = client().exec("default", "shell", {.command = {"echo", "hi"}});
  EXPECT_EQ(hi.exit_code, 0);
  EXPECT_EQ(hi.stdout_data, "hi\n");
  EXPECT_EQ(hi.stderr_data, "");

  const kube::ExecOutcome unknown =
      client().exec("default", "shell", {.command = {"nvidia-smi", "-L"}});
  EXPECT_EQ(unknown.exit_code, 127);
  EXPECT_THAT(unknown.stderr_data, HasSubstr("nvidia-smi: not found"));

  const kube::ExecOutcome scripted =
      client().exec("default", "shell", {.container = "main", .command = {"sh", "-c", "exit 3"}});
  EXPECT_EQ(scripted.exit_code, 3);

  const Error missing =
      expect_error([&] { client().exec("default", "absent", {.command = {"true"}}); });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);
}

// An image without a command: exec'd directly, the runtime fails it as containerd does (an
// InternalError Status, no exit code); inside a shell it is "not found" (127). The exec history
// records both, as an audit log would.
TEST_F(SandboxClusterTest, CommandsTheImageLacksFailAsTheRuntimeFailsThem) {
  client().create(
      resources::pods(), "default",
      pod_manifest("distroless", {{kRunSeconds, "forever"},
                                  {"sandbox.trainctl.io/absent-commands.main", "curl"}}));
  ASSERT_TRUE(wait_until([&] { return pod_is(client(), "distroless", "Running"); }));
  const Error direct = expect_error([&] {
    client().exec("default", "distroless", {.command = {"curl", "-sf", "localhost"}});
  });
  EXPECT_EQ(direct.reason(), "InternalError");
  EXPECT_THAT(direct.message(),
              HasSubstr("Internal error occurred: error executing command in container: failed to "
                        "exec in container"));
  EXPECT_THAT(direct.message(), HasSubstr("exec: \"curl\": executable file not found in $PATH"));
  const kube::ExecOutcome shell =
      client().exec("default", "distroless", {.command = {"sh", "-c", "curl localhost"}});
  EXPECT_EQ(shell.exit_code, 127);
  EXPECT_EQ(shell.stderr_data, "sh: curl: not found\n");
  const auto history = sandbox().cluster().exec_history();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].pod, "distroless");
  EXPECT_EQ(history[0].container, "main");
  EXPECT_EQ(history[0].argv, (std::vector<std::string>{"curl", "-sf", "localhost"}));
  EXPECT_THAT(history[0].failure, HasSubstr("executable file not found"));
  EXPECT_EQ(history[1].exit_code, 127);
}

// The forbidExec fault answers pods/exec as RBAC does for a caller without pods/exec create.
TEST_F(SandboxClusterTest, ForbidExecFaultAnswersAsRbac) {
  client().create(resources::pods(), "default", pod_manifest("locked", {{kRunSeconds, "forever"}}));
  ASSERT_TRUE(wait_until([&] { return pod_is(client(), "locked", "Running"); }));
  sandbox().api().set_faults({.forbid_exec = true});
  const Error denied =
      expect_error([&] { client().exec("default", "locked", {.command = {"true"}}); });
  EXPECT_EQ(denied.kind(), ErrorKind::Forbidden);
  EXPECT_THAT(denied.message(),
              HasSubstr("pods \"locked\" is forbidden: User \"trainctl-admin\" cannot "
                        "create resource \"pods/exec\" in API group \"\" in the namespace "
                        "\"default\""));
  EXPECT_TRUE(sandbox().cluster().exec_history().empty());
  sandbox().api().set_faults({});
  EXPECT_EQ(client().exec("default", "locked", {.command = {"true"}}).exit_code, 0);
}

TEST_F(SandboxClusterTest, IstioProxyKeepsThePodRunningUntilToldToQuit) {
  json pod = pod_manifest("meshed", {{std::string(kRunSeconds) + ".main", "0.2"}});
  pod["spec"]["restartPolicy"] = "Never";
  pod["spec"]["containers"].push_back(
      {{"name", "istio-proxy"}, {"image", "docker.io/istio/proxyv2:1.22.0"}});
  client().create(resources::pods(), "default", pod);

  json state;
  ASSERT_TRUE(wait_until([&] {
    state = get_pod(client(), "meshed");
    json main = container_status(state, "main");
    return main.is_object() && main["state"].contains("terminated");
  })) << state.dump();
  EXPECT_EQ(container_status(state, "main")["state"]["terminated"]["exitCode"], 0);
  // The proxy outlives the app: the pod stays Running however long we look.
  EXPECT_FALSE(wait_until([&] { return !pod_is(client(), "meshed", "Running"); },
                          std::chrono::milliseconds(400)));
  EXPECT_TRUE(
      container_status(get_pod(client(), "meshed"), "istio-proxy")["state"].contains("running"));

  const kube::ExecOutcome quit = client().exec(
      "default", "meshed",
      {.container = "istio-proxy", .command = {"pilot-agent", "request", "POST", "quitquitquit"}});
  EXPECT_EQ(quit.exit_code, 0);
  ASSERT_TRUE(wait_until([&] { return pod_is(client(), "meshed", "Succeeded"); }));
  const json proxy = container_status(get_pod(client(), "meshed"), "istio-proxy");
  EXPECT_EQ(proxy["state"]["terminated"]["exitCode"], 0);
}

}  // namespace
}  // namespace trainctl
