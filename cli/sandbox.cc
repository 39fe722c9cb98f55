// trainctl sandbox up | down | status | logs: a local emulated Kubernetes API server with simulated
// nodes, for trying trainctl without a cluster and for tests.
#include "sandbox/sandbox.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "commands.h"
#include "error.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"

namespace trainctl::cli {
namespace fs = std::filesystem;
namespace {

fs::path default_data_dir() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state != '\0') {
    return fs::path(state) / "trainctl" / "sandbox";
  }
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : "/tmp") / ".local" / "state" / "trainctl" / "sandbox";
}

/// Whether `pid` names a process that has not exited. A zombie has: a detached sandbox is
/// reparented to init, which may reap it late (or, as PID 1 of some containers, never).
bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0)
    return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(stat, line);
  const auto comm_end = line.rfind(')');  // "pid (comm) state ...", comm may hold ')'
  return comm_end == std::string::npos || comm_end + 2 >= line.size() || line[comm_end + 2] != 'Z';
}

/// The pid of a running sandbox from its pid file, if that process is alive.
std::optional<pid_t> running_pid(const fs::path& dir) {
  std::ifstream in(dir / "sandbox.pid");
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0)
    return std::nullopt;
  if (!process_alive(pid))
    return std::nullopt;
  return pid;
}

struct SandboxFlags {
  std::string data_dir;
  fs::path dir() const { return data_dir.empty() ? default_data_dir() : fs::path(data_dir); }
};

struct UpOptions {
  SandboxFlags where;
  int port = 16443;
  int nodes = 4;
  std::string node_cpu = "32";
  std::string node_memory = "256Gi";
  int node_gpus = 8;
  bool detach = false;
  bool merge_kubeconfig = false;

  void Validate() const {
    if (port < 0 || port > 65535)
      throw Error(ErrorKind::Usage, "--port must be 0..65535");
    if (nodes < 1 || nodes > sandbox::kMaxNodes)
      throw Error(ErrorKind::Usage, fmt::format("--nodes must be 1..{}", sandbox::kMaxNodes));
    if (node_gpus < 0)
      throw Error(ErrorKind::Usage, "--node-gpus must be >= 0");
  }

  void Run(const GlobalFlags& flags) const {
    Validate();
    const fs::path dir = where.dir();
    if (auto pid = running_pid(dir)) {
      throw Error(ErrorKind::Usage,
                  fmt::format("a sandbox is already running (pid {}) with data dir {}: run "
                              "`trainctl sandbox down` first",
                              *pid, dir.string()));
    }
    fs::create_directories(dir);
    if (!detach) {
      serve(dir, flags, /*announce=*/true);
      return;
    }
    const pid_t child = ::fork();
    if (child < 0)
      throw Error(ErrorKind::Config, "fork failed");
    if (child == 0) {
      ::setsid();
      const std::string log = (dir / "sandbox.log").string();
      std::freopen("/dev/null", "r", stdin);
      std::freopen(log.c_str(), "a", stdout);
      std::freopen(log.c_str(), "a", stderr);
      try {
        serve(dir, flags, /*announce=*/false);
        std::_Exit(0);
      } catch (const std::exception& e) {
        std::cerr << "trainctl sandbox: " << e.what() << '\n';
        std::_Exit(3);
      }
    }
    wait_until_ready(dir, child);
    announce(dir);
  }

 private:
  sandbox::SandboxOptions options(const fs::path& dir) const {
    sandbox::SandboxOptions o;
    o.data_dir = dir;
    o.port = port;
    o.cluster.nodes = nodes;
    o.cluster.node_cpu = node_cpu;
    o.cluster.node_memory = node_memory;
    o.cluster.node_gpus = node_gpus;
    o.log = [](std::string_view line) { std::cerr << "sandbox: " << line << '\n'; };
    return o;
  }

  /// Runs the sandbox until SIGINT or SIGTERM.
  void serve(const fs::path& dir, const GlobalFlags& flags, bool announce_it) const {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    // Blocked before any thread starts, so every thread inherits the mask and sigwait gets them.
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    sandbox::Sandbox sb(options(dir));
    sb.start();
    if (merge_kubeconfig)
      merge_into_user_kubeconfig(dir, flags);
    {
      std::ofstream pid(dir / "sandbox.pid");
      pid << ::getpid() << '\n';
    }
    if (announce_it)
      announce(dir);
    std::cout << fmt::format("sandbox: serving on {} (pid {})", sb.server_url(), ::getpid())
              << std::endl;
    int sig = 0;
    sigwait(&signals, &sig);
    std::cout << "sandbox: stopping on signal " << sig << std::endl;
    sb.stop();
    fs::remove(dir / "sandbox.pid");
  }

  void merge_into_user_kubeconfig(const fs::path& dir, const GlobalFlags& flags) const {
    const auto paths =
        kube::kubeconfig_search_paths(flags.overrides, kube::ConfigEnvironment::from_process());
    if (paths.empty())
      throw Error(ErrorKind::Config, "no kubeconfig path to merge into");
    std::ifstream in(dir / "kubeconfig");
    std::ostringstream yaml;
    yaml << in.rdbuf();
    sandbox::merge_sandbox_kubeconfig(paths.front(), yaml.str());
    std::cout << fmt::format("Added context {:?} to {}\n", sandbox::kSandboxContext,
                             paths.front().string());
  }

  static void wait_until_ready(const fs::path& dir, pid_t child) {
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {
        throw Error(ErrorKind::Connection, fmt::format("the sandbox exited during start-up; see {}",
                                                       (dir / "sandbox.log").string()));
      }
      if (running_pid(dir) == child)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw Error(ErrorKind::Timeout, "the sandbox did not start within 15 s");
  }

  void announce(const fs::path& dir) const {
    std::cout << fmt::format(
        "Sandbox Kubernetes API on https://127.0.0.1:{} with {} nodes ({} CPU, {} memory, {} "
        "GPUs each)\n"
        "Use it:   export KUBECONFIG={}\n"
        "Stop it:  trainctl sandbox down{}\n",
        port_in_kubeconfig(dir), nodes, node_cpu, node_memory, node_gpus,
        (dir / "kubeconfig").string(),
        where.data_dir.empty() ? "" : " --data-dir " + where.data_dir);
    std::cout.flush();
  }

  static std::string port_in_kubeconfig(const fs::path& dir) {
    kube::ConfigOverrides o;
    o.kubeconfig = (dir / "kubeconfig").string();
    const auto config = kube::resolve_rest_config(o, kube::ConfigEnvironment::from_process());
    return config.server.substr(config.server.rfind(':') + 1);
  }
};

void run_down(const SandboxFlags& where) {
  const fs::path dir = where.dir();
  const auto pid = running_pid(dir);
  if (!pid) {
    std::cout << "No sandbox is running.\n";
    return;
  }
  ::kill(*pid, SIGTERM);
  for (int i = 0; i < 200 && process_alive(*pid); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (process_alive(*pid)) {
    throw Error(ErrorKind::Timeout, fmt::format("the sandbox (pid {}) did not stop in 10 s", *pid));
  }
  fs::remove(dir / "sandbox.pid");
  std::cout << fmt::format("Sandbox (pid {}) stopped.\n", *pid);
}

void run_status(const SandboxFlags& where) {
  const fs::path dir = where.dir();
  const auto pid = running_pid(dir);
  if (!pid)
    throw Error(ErrorKind::Connection, "no sandbox is running (trainctl sandbox up)");
  kube::ConfigOverrides o;
  o.kubeconfig = (dir / "kubeconfig").string();
  kube::Client client(kube::resolve_rest_config(o, kube::ConfigEnvironment::from_process()));
  const auto version = client.server_version();
  const auto nodes = client.list(kube::resources::nodes(), "");
  const auto pods = client.list(kube::resources::pods(), "");
  std::cout << fmt::format("Sandbox running (pid {}) at {}\n  version {}, {} nodes, {} pods\n",
                           *pid, client.config().server, version.value("gitVersion", "?"),
                           nodes["items"].size(), pods["items"].size());
  std::cout << fmt::format("  KUBECONFIG={}\n", o.kubeconfig);
}

void run_logs(const SandboxFlags& where) {
  std::ifstream in(where.dir() / "sandbox.log");
  if (!in)
    throw Error(ErrorKind::NotFound, "no sandbox log (only `sandbox up --detach` writes one)");
  std::cout << in.rdbuf();
}

}  // namespace

void add_sandbox_command(CLI::App& app, const GlobalFlags& flags) {
  auto* sandbox = app.add_subcommand("sandbox", "Run a local emulated Kubernetes API with nodes");
  sandbox->require_subcommand(1);

  auto up = std::make_shared<UpOptions>();
  auto* up_cmd = sandbox->add_subcommand("up", "Start the sandbox (foreground unless --detach)");
  up_cmd->add_option("--data-dir", up->where.data_dir,
                     "Certificates, kubeconfig and logs (default ~/.local/state/trainctl/sandbox)");
  up_cmd->add_option("--port", up->port, "HTTPS port on 127.0.0.1 (0 = any free port)");
  up_cmd->add_option("--nodes", up->nodes, "Simulated nodes");
  up_cmd->add_option("--node-cpu", up->node_cpu, "CPU per node");
  up_cmd->add_option("--node-memory", up->node_memory, "Memory per node");
  up_cmd->add_option("--node-gpus", up->node_gpus, "nvidia.com/gpu per node");
  up_cmd->add_flag("--detach", up->detach,
                   "Run in the background; logs go to DATA_DIR/sandbox.log");
  up_cmd->add_flag("--merge-kubeconfig", up->merge_kubeconfig,
                   "Also add the trainctl-sandbox context to your kubeconfig");
  up_cmd->callback([up, &flags] { up->Run(flags); });

  auto where = std::make_shared<SandboxFlags>();
  for (auto [name, help] : {std::pair{"down", "Stop the sandbox"},
                            std::pair{"status", "Show whether the sandbox runs, and where"},
                            std::pair{"logs", "Print the detached sandbox's log"}}) {
    auto* cmd = sandbox->add_subcommand(name, help);
    cmd->add_option("--data-dir", where->data_dir, "The sandbox's data dir");
    const std::string verb = name;
    cmd->callback([where, verb] {
      if (verb == "down")
        run_down(*where);
      if (verb == "status")
        run_status(*where);
      if (verb == "logs")
        run_logs(*where);
    });
  }
}

}  // namespace trainctl::cli
