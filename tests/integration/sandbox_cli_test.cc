// `trainctl sandbox up|down|status|logs` run as a user runs them: each test starts its own detached
// sandbox on an ephemeral port in a temporary data dir, and the fixture always stops it.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"

namespace trainctl {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using RunResult = testing::CommandResult;

/// Runs the trainctl binary with `args`; `env` (NAME=value ...) is added to an environment with
/// no KUBECONFIG, so a test never reads or writes the kubeconfig of whoever runs it. `out` holds
/// both streams.
RunResult run_sandbox_cli(const std::string& args, const std::string& env) {
  RunResult r = testing::run_command(
      fmt::format("env -u KUBECONFIG -u XDG_STATE_HOME {} {} {}", env, TRAINCTL_BINARY, args));
  r.out += r.err;
  return r;
}

/// Whether `pid` has not exited yet; a zombie, exited but not reaped, has.
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0)
    return false;
  const std::string stat = testing::TempDir::read(fmt::format("/proc/{}/stat", pid));
  const auto comm_end = stat.rfind(')');
  return comm_end == std::string::npos || stat.substr(comm_end + 1, 3) != " Z ";
}

/// True once `pid` has exited, waiting at most `limit`.
bool exits_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (alive(pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !alive(pid);
}

/// Whether group or others may do anything with `p`.
bool shared_with_others(const fs::path& p) {
  const auto others = fs::perms::group_all | fs::perms::others_all;
  return (fs::status(p).permissions() & others) != fs::perms::none;
}

class SandboxCliTest : public ::testing::Test {
 protected:
  void TearDown() override {
    const std::optional<pid_t> pid = pid_in_file();
    run_sandbox_cli("sandbox down --data-dir " + data_dir().string(), home_env());
    // The second sandbox some tests start.
    run_sandbox_cli("sandbox down --data-dir " + (dir_.path() / "other").string(), home_env());
    // A sandbox that ignored `down` must not outlive the test.
    if (pid && alive(*pid) && !exits_within(*pid, std::chrono::seconds(5)))
      ::kill(*pid, SIGKILL);
  }

  fs::path data_dir() const { return dir_.path() / "sandbox"; }
  fs::path kubeconfig() const { return data_dir() / "kubeconfig"; }
  std::string home_env() const { return "HOME=" + (dir_.path() / "home").string(); }

  /// `trainctl sandbox VERB --data-dir <tmp> ARGS` with HOME in the temp dir.
  RunResult sandbox(const std::string& verb, const std::string& args = "",
                    const std::string& env = "") {
    return run_sandbox_cli(
        fmt::format("sandbox {} --data-dir {} {}", verb, data_dir().string(), args),
        home_env() + " " + env);
  }

  RunResult up(const std::string& args = "", const std::string& env = "") {
    return sandbox("up", "--detach --port 0 " + args, env);
  }

  std::optional<pid_t> pid_in_file() const {
    std::ifstream in(data_dir() / "sandbox.pid");
    pid_t pid = 0;
    if (in >> pid && pid > 0)
      return pid;
    return std::nullopt;
  }

  /// The client config the sandbox's kubeconfig resolves to, as trainctl's commands resolve it.
  kube::RestConfig rest_config(const fs::path& path, const std::string& context = "") const {
    kube::ConfigOverrides overrides;
    overrides.kubeconfig = path.string();
    overrides.context = context;
    return kube::resolve_rest_config(overrides, kube::ConfigEnvironment{});
  }

  testing::TempDir dir_;
};

TEST_F(SandboxCliTest, UpDetachPrintsTheExportLineAndReturnsWhileTheSandboxRuns) {
  RunResult r = up();
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("export KUBECONFIG=" + kubeconfig().string() + "\n"));
  EXPECT_THAT(r.out, HasSubstr("trainctl sandbox down --data-dir " + data_dir().string()));
  EXPECT_THAT(r.out, HasSubstr("with 4 nodes"));
  EXPECT_THAT(r.out, Not(HasSubstr("https://127.0.0.1:0 ")))
      << "--port 0 must announce the port actually bound";
  EXPECT_TRUE(fs::exists(kubeconfig()));
  const auto pid = pid_in_file();
  ASSERT_TRUE(pid.has_value()) << "no sandbox.pid in " << data_dir();
  EXPECT_TRUE(alive(*pid));
}

TEST_F(SandboxCliTest, UpKeepsKeysAndTheKubeconfigPrivateToTheOwner) {
  RunResult r = up();
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(fs::status(kubeconfig()).permissions(), fs::perms::owner_read | fs::perms::owner_write)
      << "kubeconfig holds the admin client key: mode must be 0600";
  for (const char* secret : {"ca.key", "admin.key", "tokens.csv"}) {
    ASSERT_TRUE(fs::exists(data_dir() / secret)) << secret;
    EXPECT_FALSE(shared_with_others(data_dir() / secret)) << secret << " is readable by others";
  }
}

TEST_F(SandboxCliTest, StatusShowsTheServerVersionAndFourNodes) {
  ASSERT_EQ(up().exit_code, 0);
  RunResult r = sandbox("status");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("Sandbox running (pid {})", pid_in_file().value_or(0))));
  EXPECT_THAT(r.out, HasSubstr("version v1."));
  EXPECT_THAT(r.out, HasSubstr("4 nodes, 0 pods"));
  EXPECT_THAT(r.out, HasSubstr("KUBECONFIG=" + kubeconfig().string()));
}

TEST_F(SandboxCliTest, SecondUpOnTheSameDataDirExits2AndLeavesTheFirstRunning) {
  ASSERT_EQ(up().exit_code, 0);
  const auto first = pid_in_file();
  ASSERT_TRUE(first.has_value());
  RunResult again = up();
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_THAT(again.out, HasSubstr("already running"));
  EXPECT_THAT(again.out, HasSubstr(fmt::format("pid {}", *first)));
  EXPECT_EQ(pid_in_file(), first);
  EXPECT_TRUE(alive(*first));
}

TEST_F(SandboxCliTest, DownStopsTheSandboxAndStatusThenExits3) {
  ASSERT_EQ(up().exit_code, 0);
  const auto pid = pid_in_file();
  ASSERT_TRUE(pid.has_value());
  RunResult down = sandbox("down");
  EXPECT_EQ(down.exit_code, 0) << down.out;
  EXPECT_THAT(down.out, HasSubstr(fmt::format("Sandbox (pid {}) stopped.", *pid)));
  EXPECT_FALSE(alive(*pid));
  EXPECT_FALSE(fs::exists(data_dir() / "sandbox.pid"));

  RunResult status = sandbox("status");
  EXPECT_EQ(status.exit_code, 3) << status.out;
  EXPECT_THAT(status.out, HasSubstr("no sandbox is running"));
}

TEST_F(SandboxCliTest, DownWhenNothingRunsIsIdempotent) {
  ASSERT_EQ(up().exit_code, 0);
  ASSERT_EQ(sandbox("down").exit_code, 0);
  RunResult again = sandbox("down");
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("No sandbox is running"));
}

TEST_F(SandboxCliTest, UpAfterDownStartsAgainWithTheSameCertificates) {
  ASSERT_EQ(up().exit_code, 0);
  const std::string ca = testing::TempDir::read(data_dir() / "ca.crt");
  ASSERT_EQ(sandbox("down").exit_code, 0);
  RunResult r = up();
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(testing::TempDir::read(data_dir() / "ca.crt"), ca)
      << "a restart must keep the CA so existing kubeconfigs stay valid";
  kube::Client client(rest_config(kubeconfig()));
  EXPECT_NO_THROW(client.server_version());
}

TEST_F(SandboxCliTest, DownAndStatusSeeAnExitedButUnreapedSandboxAsStopped) {
  // As in a container whose PID 1 does not reap orphans: the detached sandbox is reparented to
  // this test process, which leaves it a zombie until the end of the test.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  RunResult r = up();
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto pid = pid_in_file();
  ASSERT_TRUE(pid.has_value());

  const auto started = std::chrono::steady_clock::now();
  RunResult down = sandbox("down");
  EXPECT_EQ(down.exit_code, 0) << down.out;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5))
      << "down waited for the exited sandbox to be reaped";
  RunResult status = sandbox("status");
  EXPECT_EQ(status.exit_code, 3) << status.out;
  EXPECT_THAT(status.out, HasSubstr("no sandbox is running"));
  EXPECT_EQ(up().exit_code, 0) << "up refused to start: the zombie still counted as running";
  ::waitpid(*pid, nullptr, 0);
}

TEST_F(SandboxCliTest, AStalePidFileDoesNotBlockUp) {
  // Left behind by a sandbox that was killed: the pid no longer names a process.
  dir_.write("sandbox/sandbox.pid", "999999999\n");
  RunResult status = sandbox("status");
  EXPECT_EQ(status.exit_code, 3) << status.out;
  RunResult r = up();
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(pid_in_file(), std::optional<pid_t>(999999999));
}

TEST_F(SandboxCliTest, NodesAndNodeGpusFlagsShapeTheSimulatedNodes) {
  RunResult r = up("--nodes 2 --node-gpus 4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("with 2 nodes"));
  EXPECT_THAT(sandbox("status").out, HasSubstr("2 nodes"));

  kube::Client client(rest_config(kubeconfig()));
  const nlohmann::json nodes = client.list(kube::resources::nodes(), "");
  ASSERT_EQ(nodes["items"].size(), 2u) << nodes.dump(2);
  for (const auto& node : nodes["items"]) {
    const std::string name = node["metadata"]["name"];
    EXPECT_EQ(node["status"]["capacity"].value("nvidia.com/gpu", ""), "4") << name;
    EXPECT_EQ(node["status"]["allocatable"].value("nvidia.com/gpu", ""), "4") << name;
    EXPECT_EQ(node["status"]["capacity"].value("cpu", ""), "32") << name;
  }
}

// Issue 9: `controller --gang-scheduler volcano` needs a scheduler that binds pods of
// schedulerName volcano; the sandbox plays it when asked.
TEST_F(SandboxCliTest, SchedulerNameAlsoBindsPodsOfThatScheduler) {
  RunResult r = up("--scheduler-name volcano --scheduler-name my-scheduler");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  kube::Client client(rest_config(kubeconfig()));
  const auto pod = [](const std::string& name, const std::string& scheduler) {
    nlohmann::json p = {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata", {{"name", name}}},
                        {"spec", {{"containers", {{{"name", "main"}, {"image", "trainer:1"}}}}}}};
    if (!scheduler.empty())
      p["spec"]["schedulerName"] = scheduler;
    return p;
  };
  client.create(kube::resources::pods(), "default", pod("default", ""));
  client.create(kube::resources::pods(), "default", pod("mine", "my-scheduler"));
  client.create(kube::resources::pods(), "default", pod("unknown", "someone-else"));
  const auto bound = [&](const std::string& name) {
    return !client.get(kube::resources::pods(), "default", name)["spec"]
                .value("nodeName", "")
                .empty();
  };
  ASSERT_TRUE(testing::wait_until([&] { return bound("default") && bound("mine"); }));

  // Volcano's pods are bound as a gang once their PodGroup is admitted (Inqueue), not before.
  testing::install_training_crds(client);
  client.create(kube::resources::podgroups(), "default",  // status is no subresource of it
                {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                 {"kind", "PodGroup"},
                 {"metadata", {{"name", "admitted"}}},
                 {"spec", {{"minMember", 1}}},
                 {"status", {{"phase", "Inqueue"}}}});
  for (const char* name : {"admitted", "absent"}) {
    nlohmann::json member = pod(fmt::format("in-{}", name), "volcano");
    member["metadata"]["annotations"] = {{"scheduling.k8s.io/group-name", name}};
    client.create(kube::resources::pods(), "default", member);
  }
  ASSERT_TRUE(testing::wait_until([&] { return bound("in-admitted"); }));
  EXPECT_FALSE(bound("in-absent")) << "its PodGroup does not exist";
  EXPECT_FALSE(bound("unknown")) << "no scheduler of that name runs";

  RunResult bad = up("--scheduler-name Not_A_Name");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("--scheduler-name \"Not_A_Name\""));
}

TEST_F(SandboxCliTest, MergeKubeconfigAddsTheSandboxContextAndKeepsTheUsersOwn) {
  const fs::path user_config = dir_.write("user/config", R"(apiVersion: v1
kind: Config
current-context: work
clusters:
- name: work
  cluster: {server: "https://work.example.com:6443"}
users:
- name: me
  user: {token: work-token}
contexts:
- name: work
  context: {cluster: work, user: me, namespace: ml}
)");
  RunResult r = up("--merge-kubeconfig", "KUBECONFIG=" + user_config.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;

  const kube::RestConfig sandbox_config = rest_config(user_config, "trainctl-sandbox");
  EXPECT_EQ(sandbox_config.server, rest_config(kubeconfig()).server);
  kube::Client client(sandbox_config);
  EXPECT_NO_THROW(client.server_version()) << "the merged context must reach the sandbox";

  const kube::RestConfig work = rest_config(user_config, "work");
  EXPECT_EQ(work.server, "https://work.example.com:6443");
  EXPECT_EQ(work.auth.token, "work-token");
  EXPECT_EQ(work.default_namespace, "ml");
  EXPECT_FALSE(fs::exists(dir_.path() / "home" / ".kube" / "config"))
      << "merged into $HOME/.kube/config although KUBECONFIG names another file";

  // down takes the context out again, and only it.
  RunResult down = sandbox("down");
  EXPECT_EQ(down.exit_code, 0) << down.out;
  EXPECT_THAT(down.out, HasSubstr("Removed context \"trainctl-sandbox\" from " +
                                  user_config.string() + "\n"));
  const std::string after = testing::TempDir::read(user_config);
  EXPECT_THAT(after, Not(HasSubstr("trainctl-sandbox")));
  EXPECT_THAT(after, HasSubstr("current-context: work"));
  EXPECT_EQ(rest_config(user_config, "work").auth.token, "work-token");
}

TEST_F(SandboxCliTest, WithoutMergeKubeconfigTheUsersKubeconfigIsUntouched) {
  const std::string original = "apiVersion: v1\nkind: Config\ncurrent-context: \"\"\n";
  const fs::path user_config = dir_.write("user/config", original);
  ASSERT_EQ(up("", "KUBECONFIG=" + user_config.string()).exit_code, 0);
  EXPECT_EQ(testing::TempDir::read(user_config), original);
  EXPECT_FALSE(fs::exists(dir_.path() / "home" / ".kube" / "config"));
}

TEST_F(SandboxCliTest, StatusAndDownFindASandboxStartedWithAnotherDataDir) {
  ASSERT_EQ(up().exit_code, 0);
  const auto pid = pid_in_file();
  ASSERT_TRUE(pid.has_value());
  // No --data-dir: the default one is not where it runs.
  RunResult status = run_sandbox_cli("sandbox status", home_env());
  EXPECT_EQ(status.exit_code, 0) << status.out;
  EXPECT_THAT(status.out, HasSubstr(fmt::format("Sandbox running (pid {})", *pid)));
  EXPECT_THAT(status.out, HasSubstr("data dir " + data_dir().string()));

  // With two, it takes a choice.
  const fs::path other = dir_.path() / "other";
  ASSERT_EQ(
      run_sandbox_cli(fmt::format("sandbox up --detach --port 0 --data-dir {}", other.string()),
                      home_env())
          .exit_code,
      0);
  RunResult two = run_sandbox_cli("sandbox down", home_env());
  EXPECT_EQ(two.exit_code, 2) << two.out;
  EXPECT_THAT(two.out, HasSubstr("2 sandboxes are running: "));
  EXPECT_THAT(two.out, HasSubstr(data_dir().string()));
  EXPECT_THAT(two.out, HasSubstr("choose one with --data-dir"));
  ASSERT_EQ(run_sandbox_cli("sandbox down --data-dir " + other.string(), home_env()).exit_code, 0);

  RunResult down = run_sandbox_cli("sandbox down", home_env());
  EXPECT_EQ(down.exit_code, 0) << down.out;
  EXPECT_THAT(down.out, HasSubstr(fmt::format("Sandbox (pid {}) stopped.", *pid)));
  EXPECT_TRUE(exits_within(*pid, std::chrono::seconds(5)));
  EXPECT_EQ(run_sandbox_cli("sandbox status", home_env()).exit_code, 3);
}

TEST_F(SandboxCliTest, AFailedStartSaysWhy) {
  ASSERT_EQ(up().exit_code, 0);
  const std::string server = rest_config(kubeconfig()).server;
  const std::string port = server.substr(server.rfind(':') + 1);
  const fs::path other = dir_.path() / "other";
  RunResult busy = run_sandbox_cli(
      fmt::format("sandbox up --detach --port {} --data-dir {}", port, other.string()), home_env());
  EXPECT_EQ(busy.exit_code, 3) << busy.out;
  EXPECT_THAT(busy.out, HasSubstr(fmt::format("trainctl: the sandbox did not start: 127.0.0.1:{} "
                                              "already in use; try --port (0 = any free port)\n",
                                              port)));
  EXPECT_THAT(busy.out, Not(HasSubstr("see ")));
  // In the foreground, too.
  RunResult foreground = run_sandbox_cli(
      fmt::format("sandbox up --port {} --data-dir {}", port, other.string()), home_env());
  EXPECT_EQ(foreground.exit_code, 3) << foreground.out;
  EXPECT_THAT(foreground.out, HasSubstr(fmt::format("trainctl: 127.0.0.1:{} already in use; try "
                                                    "--port",
                                                    port)));
}

TEST_F(SandboxCliTest, BadFlagsAreUsageErrorsAndStartNothing) {
  RunResult nodes = up("--nodes 0");
  EXPECT_EQ(nodes.exit_code, 2) << nodes.out;
  EXPECT_THAT(nodes.out, HasSubstr("--nodes"));
  RunResult port = sandbox("up", "--detach --port 70000");
  EXPECT_EQ(port.exit_code, 2) << port.out;
  EXPECT_THAT(port.out, HasSubstr("--port"));
  RunResult gpus = up("--node-gpus -1");
  EXPECT_EQ(gpus.exit_code, 2) << gpus.out;
  EXPECT_FALSE(fs::exists(data_dir() / "sandbox.pid"));
}

TEST_F(SandboxCliTest, TheWrittenKubeconfigWorksWithKubeClient) {
  RunResult r = up();
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const kube::RestConfig config = rest_config(kubeconfig());
  EXPECT_EQ(config.context_name, "trainctl-sandbox");
  EXPECT_THAT(config.server, ::testing::StartsWith("https://127.0.0.1:"));
  EXPECT_THAT(r.out, HasSubstr("Sandbox Kubernetes API on " + config.server + " "));
  EXPECT_FALSE(config.auth.client_cert_pem.empty()) << "the admin user authenticates by cert";

  kube::Client client(config);
  const nlohmann::json version = client.server_version();
  EXPECT_THAT(version.value("gitVersion", ""), ::testing::StartsWith("v1."));
  EXPECT_EQ(client.list(kube::resources::nodes(), "")["items"].size(), 4u);
}

TEST_F(SandboxCliTest, LogsShowWhereTheDetachedSandboxServes) {
  ASSERT_EQ(up().exit_code, 0);
  const kube::RestConfig config = rest_config(kubeconfig());
  RunResult logs = sandbox("logs");
  EXPECT_EQ(logs.exit_code, 0) << logs.out;
  EXPECT_THAT(logs.out, HasSubstr("serving on " + config.server));
  ASSERT_EQ(sandbox("down").exit_code, 0);
  EXPECT_THAT(sandbox("logs").out, HasSubstr("stopping on signal"));
}

}  // namespace
}  // namespace trainctl
