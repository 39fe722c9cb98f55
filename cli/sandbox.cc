// trainctl sandbox up | down | status | logs: a local emulated Kubernetes API server with simulated
// nodes, for trying trainctl without a cluster and for tests.
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "api/names.h"
#include "commands.h"
#include "docs.h"
#include "error.h"
#include "jemalloc_preload.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"

namespace trainctl::cli {
namespace fs = std::filesystem;
namespace {

/// trainctl's state: $XDG_STATE_HOME/trainctl, else ~/.local/state/trainctl.
fs::path state_dir() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state != '\0')
    return fs::path(state) / "trainctl";
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : "/tmp") / ".local" / "state" / "trainctl";
}

fs::path default_data_dir() {
  return state_dir() / "sandbox";
}

/// Every running sandbox has a file here, named by its pid and holding its data dir, so that
/// `status` and `down` find one started with another --data-dir.
fs::path registry_dir() {
  return state_dir() / "sandboxes";
}

/// Where `up --merge-kubeconfig` records the kubeconfig it merged into, for `down` to clean.
fs::path merged_record(const fs::path& dir) {
  return dir / "merged-kubeconfig";
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

struct RunningSandbox {
  pid_t pid;
  fs::path dir;
};

/// The sandboxes of the registry that still run; entries of sandboxes that are gone (killed, or
/// their pid now names another process) are removed on the way.
std::vector<RunningSandbox> running_sandboxes() {
  std::vector<RunningSandbox> running;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(registry_dir(), ec)) {
    std::ifstream in(entry.path());
    std::string dir;
    std::getline(in, dir);
    pid_t pid = 0;
    try {
      pid = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
    }
    if (pid > 0 && !dir.empty() && running_pid(dir) == pid)
      running.push_back({pid, dir});
    else
      fs::remove(entry.path(), ec);
  }
  return running;
}

/// The sandbox data dir of `up`, and of `down`, `status` and `logs`: --data-dir; else the
/// default one when a sandbox runs there; else the one sandbox the registry knows of.
struct SandboxTarget {
  std::string data_dir;  // --data-dir
  fs::path dir;

  void Complete() {
    if (!data_dir.empty()) {
      dir = fs::absolute(data_dir);
      return;
    }
    dir = default_data_dir();
    if (running_pid(dir))
      return;
    const std::vector<RunningSandbox> running = running_sandboxes();
    if (running.size() == 1)
      dir = running.front().dir;
    if (running.size() > 1) {
      std::vector<std::string> names;
      for (const auto& s : running)
        names.push_back(fmt::format("{} (pid {})", s.dir.string(), s.pid));
      throw Error(ErrorKind::Usage,
                  fmt::format("{} sandboxes are running: {}; choose one with --data-dir",
                              running.size(), fmt::join(names, ", ")));
    }
  }

  /// ` --data-dir DIR` when the user has to say it to reach this sandbox again, else "".
  std::string flag() const {
    return dir == default_data_dir() ? "" : " --data-dir " + dir.string();
  }
};

/// Removes the context `up --merge-kubeconfig` added, if any; says so on stdout.
void remove_merged_context(const fs::path& dir) {
  std::ifstream in(merged_record(dir));
  std::string target;
  if (!std::getline(in, target) || target.empty())
    return;
  if (sandbox::remove_sandbox_kubeconfig(target)) {
    std::cout << fmt::format("Removed context {:?} from {}\n", sandbox::kSandboxContext, target);
  }
  fs::remove(merged_record(dir));
}

struct SandboxUpOptions {
  SandboxTarget where;
  int port = 16443;
  int nodes = 4;
  std::string node_cpu = "32";
  std::string node_memory = "256Gi";
  int node_gpus = 8;
  std::vector<std::string> scheduler_names;  // besides default-scheduler
  bool detach = false;
  bool merge_kubeconfig = false;

  const GlobalFlags* flags = nullptr;  // for --merge-kubeconfig: the kubeconfig flags

  void Complete(const GlobalFlags& global) {
    flags = &global;
    where.dir = where.data_dir.empty() ? default_data_dir() : fs::absolute(where.data_dir);
  }

  void Validate() const {
    if (port < 0 || port > 65535)
      throw Error(ErrorKind::Usage, "--port must be 0..65535");
    if (nodes < 1 || nodes > sandbox::kMaxNodes)
      throw Error(ErrorKind::Usage, fmt::format("--nodes must be 1..{}", sandbox::kMaxNodes));
    if (node_gpus < 0)
      throw Error(ErrorKind::Usage, "--node-gpus must be >= 0");
    for (const auto& name : scheduler_names) {
      if (const auto problems = api::names::dns1123_subdomain(name); !problems.empty())
        throw Error(ErrorKind::Usage,
                    fmt::format("--scheduler-name {:?}: {}", name, fmt::join(problems, "; ")));
    }
    if (auto pid = running_pid(where.dir)) {
      throw Error(ErrorKind::Usage,
                  fmt::format("a sandbox is already running (pid {}) with data dir {}: run "
                              "`trainctl sandbox down{}` first",
                              *pid, where.dir.string(), where.flag()));
    }
  }

  void Run() const {
    run_on_jemalloc(
        [](const std::string& why) { std::cerr << "trainctl: warning: " << why << '\n'; });
    fs::create_directories(where.dir);
    if (!detach) {
      serve(/*foreground=*/true);
      return;
    }
    // The child says why it could not start through this pipe; it closes unused on success.
    int cause[2];
    if (::pipe2(cause, O_CLOEXEC) != 0)
      throw Error(ErrorKind::Config, fmt::format("pipe: {}", std::strerror(errno)));
    const pid_t child = ::fork();
    if (child < 0)
      throw Error(ErrorKind::Config, "fork failed");
    if (child == 0) {
      ::close(cause[0]);
      ::setsid();
      const std::string log = (where.dir / "sandbox.log").string();
      std::freopen("/dev/null", "r", stdin);
      std::freopen(log.c_str(), "a", stdout);
      std::freopen(log.c_str(), "a", stderr);
      try {
        serve(/*foreground=*/false);
        std::_Exit(0);
      } catch (const std::exception& e) {
        std::cerr << "trainctl sandbox: " << e.what() << '\n';
        const std::string what = e.what();
        [[maybe_unused]] const auto n = ::write(cause[1], what.data(), what.size());
        std::_Exit(3);
      }
    }
    ::close(cause[1]);
    wait_until_ready(child, cause[0]);
    announce();
  }

 private:
  sandbox::SandboxOptions options() const {
    sandbox::SandboxOptions o;
    o.data_dir = where.dir;
    o.port = port;
    o.cluster.nodes = nodes;
    o.cluster.node_cpu = node_cpu;
    o.cluster.node_memory = node_memory;
    o.cluster.node_gpus = node_gpus;
    o.cluster.scheduler_names.insert(scheduler_names.begin(), scheduler_names.end());
    o.log = [](std::string_view line) { std::cerr << "sandbox: " << line << '\n'; };
    return o;
  }

  /// Starts the sandbox, naming a port in use in flag terms.
  void start(sandbox::Sandbox& sb) const {
    try {
      sb.start();
    } catch (const Error& e) {
      if (e.message().find(std::strerror(EADDRINUSE)) == std::string::npos)
        throw;
      throw Error(ErrorKind::Connection,
                  fmt::format("127.0.0.1:{} already in use; try --port (0 = any free port)", port));
    }
  }

  /// Runs the sandbox until SIGINT or SIGTERM; registered as running meanwhile.
  void serve(bool foreground) const {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    // Blocked before any thread starts, so every thread inherits the mask and sigwait gets them.
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    sandbox::Sandbox sb(options());
    start(sb);
    if (merge_kubeconfig)
      merge_into_user_kubeconfig();
    const fs::path registered = registry_dir() / std::to_string(::getpid());
    fs::create_directories(registry_dir());
    std::ofstream(registered) << where.dir.string() << '\n';
    std::ofstream(where.dir / "sandbox.pid") << ::getpid() << '\n';
    if (foreground)
      announce();
    std::cout << fmt::format("sandbox: serving on {} (pid {})", sb.server_url(), ::getpid())
              << std::endl;
    int sig = 0;
    sigwait(&signals, &sig);
    std::cout << "sandbox: stopping on signal " << sig << std::endl;
    sb.stop();
    fs::remove(where.dir / "sandbox.pid");
    fs::remove(registered);
    if (foreground)  // a detached sandbox is stopped by `down`, which does this
      remove_merged_context(where.dir);
  }

  void merge_into_user_kubeconfig() const {
    const auto paths =
        kube::kubeconfig_search_paths(flags->overrides, kube::ConfigEnvironment::from_process());
    if (paths.empty())
      throw Error(ErrorKind::Config, "no kubeconfig path to merge into");
    std::ifstream in(where.dir / "kubeconfig");
    std::ostringstream yaml;
    yaml << in.rdbuf();
    const fs::path target = fs::absolute(paths.front());
    sandbox::merge_sandbox_kubeconfig(target, yaml.str());
    std::ofstream(merged_record(where.dir)) << target.string() << '\n';
    std::cout << fmt::format("Added context {:?} to {}\n", sandbox::kSandboxContext,
                             target.string());
  }

  /// Waits until the child serves; if it exits first, throws what it wrote to `cause_fd`.
  void wait_until_ready(pid_t child, int cause_fd) const {
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {
        std::string cause;
        char buf[512];
        for (ssize_t n; (n = ::read(cause_fd, buf, sizeof buf)) > 0;)
          cause.append(buf, static_cast<std::size_t>(n));
        ::close(cause_fd);
        throw Error(ErrorKind::Connection,
                    cause.empty() ? fmt::format("the sandbox exited during start-up; see {}",
                                                (where.dir / "sandbox.log").string())
                                  : "the sandbox did not start: " + cause);
      }
      if (running_pid(where.dir) == child) {
        ::close(cause_fd);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::close(cause_fd);
    throw Error(ErrorKind::Timeout, "the sandbox did not start within 15 s");
  }

  void announce() const {
    std::cout << fmt::format(
        "Sandbox Kubernetes API on https://127.0.0.1:{} with {} nodes ({} CPU, {} memory, {} "
        "GPUs each)\n"
        "Use it:   export KUBECONFIG={}\n"
        "Stop it:  trainctl sandbox down{}\n",
        port_in_kubeconfig(), nodes, node_cpu, node_memory, node_gpus,
        (where.dir / "kubeconfig").string(), where.flag());
    std::cout.flush();
  }

  std::string port_in_kubeconfig() const {
    kube::ConfigOverrides o;
    o.kubeconfig = (where.dir / "kubeconfig").string();
    const auto config = kube::resolve_rest_config(o, kube::ConfigEnvironment::from_process());
    return config.server.substr(config.server.rfind(':') + 1);
  }
};

struct SandboxDownOptions {
  SandboxTarget where;

  void Complete() { where.Complete(); }

  void Run() const {
    const auto pid = running_pid(where.dir);
    if (!pid) {
      std::cout << "No sandbox is running.\n";
      remove_merged_context(where.dir);  // left by one that was killed
      return;
    }
    ::kill(*pid, SIGTERM);
    for (int i = 0; i < 200 && process_alive(*pid); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (process_alive(*pid)) {
      throw Error(ErrorKind::Timeout,
                  fmt::format("the sandbox (pid {}) did not stop in 10 s", *pid));
    }
    fs::remove(where.dir / "sandbox.pid");
    fs::remove(registry_dir() / std::to_string(*pid));
    remove_merged_context(where.dir);
    std::cout << fmt::format("Sandbox (pid {}) stopped.\n", *pid);
  }
};

struct SandboxStatusOptions {
  SandboxTarget where;

  void Complete() { where.Complete(); }

  void Run() const {
    const auto pid = running_pid(where.dir);
    if (!pid)
      throw Error(ErrorKind::Connection, "no sandbox is running (trainctl sandbox up)");
    kube::ConfigOverrides o;
    o.kubeconfig = (where.dir / "kubeconfig").string();
    kube::Client client(kube::resolve_rest_config(o, kube::ConfigEnvironment::from_process()));
    const auto version = client.server_version();
    const auto nodes = client.list(kube::resources::nodes(), "");
    const auto pods = client.list(kube::resources::pods(), "");
    std::cout << fmt::format("Sandbox running (pid {}) at {}\n  version {}, {} nodes, {} pods\n",
                             *pid, client.config().server, version.value("gitVersion", "?"),
                             nodes["items"].size(), pods["items"].size());
    std::cout << fmt::format("  data dir {}\n  KUBECONFIG={}\n", where.dir.string(), o.kubeconfig);
  }
};

struct SandboxLogsOptions {
  SandboxTarget where;

  void Complete() { where.Complete(); }

  void Run() const {
    std::ifstream in(where.dir / "sandbox.log");
    if (!in)
      throw Error(ErrorKind::NotFound, "no sandbox log (only `sandbox up --detach` writes one)");
    std::cout << in.rdbuf();
  }
};

void add_data_dir_flag(CLI::App& cmd, SandboxTarget& where) {
  cmd.add_option("--data-dir", where.data_dir,
                 "The sandbox's data dir (default: the one in ~/.local/state/trainctl/sandbox if "
                 "it runs, else the one sandbox running)");
}

}  // namespace

void add_sandbox_command(CLI::App& app, const GlobalFlags& flags) {
  auto* sandbox = app.add_subcommand("sandbox", "Run a local emulated Kubernetes API with nodes");
  sandbox->require_subcommand(1);

  auto up = std::make_shared<SandboxUpOptions>();
  auto* up_cmd = sandbox->add_subcommand("up", "Start the sandbox (foreground unless --detach)");
  up_cmd->add_option("--data-dir", up->where.data_dir,
                     "Certificates, kubeconfig and logs (default ~/.local/state/trainctl/sandbox)");
  up_cmd->add_option("--port", up->port, "HTTPS port on 127.0.0.1 (0 = any free port)");
  up_cmd->add_option("--nodes", up->nodes, "Simulated nodes");
  up_cmd->add_option("--node-cpu", up->node_cpu, "CPU per node");
  up_cmd->add_option("--node-memory", up->node_memory, "Memory per node");
  up_cmd->add_option("--node-gpus", up->node_gpus, "nvidia.com/gpu per node");
  up_cmd->add_option("--scheduler-name", up->scheduler_names,
                     "Also bind pods of this spec.schedulerName (repeatable; default-scheduler "
                     "always); volcano plays Volcano's gang scheduler, for `controller "
                     "--gang-scheduler volcano`");
  up_cmd->add_flag("--detach", up->detach,
                   "Run in the background; logs go to DATA_DIR/sandbox.log");
  up_cmd->add_flag("--merge-kubeconfig", up->merge_kubeconfig,
                   "Also add the trainctl-sandbox context to your kubeconfig (`down` removes it)");
  add_examples(*up_cmd, R"(# Start it in the background, then point kubectl and trainctl at it
trainctl sandbox up --detach
export KUBECONFIG=~/.local/state/trainctl/sandbox/kubeconfig
# Eight GPU nodes on a port of its own, added to your kubeconfig as context trainctl-sandbox
trainctl sandbox up --detach --nodes 8 --node-gpus 8 --port 0 --merge-kubeconfig
# Play Volcano's scheduler too (gangs bound whole, once their PodGroup is Inqueue)
trainctl sandbox up --detach --scheduler-name volcano)");
  run_verb(*up_cmd, up, flags);

  auto down = std::make_shared<SandboxDownOptions>();
  auto* down_cmd = sandbox->add_subcommand(
      "down", "Stop the sandbox and remove the context --merge-kubeconfig added");
  add_data_dir_flag(*down_cmd, down->where);
  add_examples(*down_cmd, R"(# Stop the sandbox, wherever it was started from
trainctl sandbox down
# Stop the one using this data directory, when several run
trainctl sandbox down --data-dir /tmp/sb)");
  run_verb(*down_cmd, down, flags);

  auto status = std::make_shared<SandboxStatusOptions>();
  auto* status_cmd = sandbox->add_subcommand("status", "Show whether the sandbox runs, and where");
  add_data_dir_flag(*status_cmd, status->where);
  add_examples(*status_cmd, R"(# Is a sandbox running, on which port, with which kubeconfig?
trainctl sandbox status)");
  run_verb(*status_cmd, status, flags);

  auto logs = std::make_shared<SandboxLogsOptions>();
  auto* logs_cmd = sandbox->add_subcommand("logs", "Print the detached sandbox's log");
  add_data_dir_flag(*logs_cmd, logs->where);
  add_examples(*logs_cmd, R"(# What the detached sandbox logged
trainctl sandbox logs)");
  run_verb(*logs_cmd, logs, flags);
}

}  // namespace trainctl::cli
