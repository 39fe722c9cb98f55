#pragma once

// The simulated kubelet's view of one pod: containers that start, print, exit and restart as
// the pod's annotations script them, on a timeline driven only by the times it is given. No
// store, no threads, no clock: SimulatedCluster owns those.

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::sandbox {

using TimePoint = std::chrono::system_clock::time_point;

/// How long the simulated kubelet takes for things.
struct KubeletTiming {
  /// From first seeing a bound pod to its containers running (image pull, sandbox setup).
  std::chrono::milliseconds start_delay{500};
  /// How long an app container runs when nothing scripts it.
  std::chrono::milliseconds default_run_time{5000};
  /// First restart back-off; it doubles per restart up to `max_restart_backoff`, as the real
  /// kubelet's does (whose first is 10 s). Never below 100 ms, so crash loops stay finite.
  std::chrono::milliseconds restart_backoff{1000};
  std::chrono::milliseconds max_restart_backoff{300'000};
  /// From seeing a pod's deletion to removing it once its containers have stopped: the real
  /// kubelet notices a stopped container at its next PLEG relist (every second) before its
  /// status manager's final delete. A client that deletes a pod and then watches for its removal
  /// (`kubectl delete pod` does) sees it; at once, the removal and a controller's re-creation
  /// of the name could both fall between its GET and its watch, and it waited for ever.
  std::chrono::milliseconds removal_delay{1000};
};

/// What kind of container: kubelet treats each differently.
enum class ContainerRole {
  Init,     // spec.initContainers, runs to completion before the next
  Sidecar,  // spec.initContainers with restartPolicy Always: runs beside the app containers
  App,      // spec.containers
};

/// How one simulated container behaves. Precedence for each value: the per-container
/// annotation, then the container's env (`SANDBOX_RUN_SECONDS`, `SANDBOX_EXIT_CODE`, literal
/// values only), then the pod annotation (app containers only), then the default: app
/// containers run `default_run_time`, init containers 0 s, sidecars and `istio-proxy` until
/// stopped. Run seconds may be fractional, or "forever" (also "inf", "-1"). Values that do not
/// parse fall through to the next source.
struct ContainerScript {
  std::optional<std::chrono::milliseconds> run_for;  // nullopt: until stopped
  int exit_code = 0;
  /// How long an app container runs on after SIGTERM before it exits 143 (`sigterm-seconds`,
  /// env `SANDBOX_SIGTERM_SECONDS`); nullopt: it ignores SIGTERM and is killed (137) when the
  /// grace period ends. Sidecars and istio-proxy stop at once.
  std::optional<std::chrono::milliseconds> sigterm_for = std::chrono::milliseconds(0);
  /// What the container prints first, `set -x` style: "python train.py --epochs 3".
  std::string command_line;
};

ContainerScript script_for(const nlohmann::json& pod, const nlohmann::json& container,
                           ContainerRole role, std::chrono::milliseconds default_run_time);

/// One run of a container, from start to exit.
struct ContainerRun {
  int restart_count = 0;
  TimePoint started_at;
  std::optional<TimePoint> finished_at;
  int exit_code = 0;
};

/// One simulated container and its runs.
struct SimulatedContainer {
  enum class State { Waiting, Running, Terminated };

  std::string name;
  std::string image;
  ContainerRole role = ContainerRole::App;
  ContainerScript script;
  State state = State::Waiting;
  std::string waiting_reason = "ContainerCreating";
  std::string waiting_message;
  bool ever_started = false;
  ContainerRun current;                  // the running or last run, once ever_started
  std::optional<ContainerRun> previous;  // the run before `current` (lastState)
  std::optional<TimePoint> restart_at;   // set while waiting out a restart back-off
  /// Once the pod is terminating: when the container stops, and with which exit code.
  std::optional<TimePoint> stop_at;
  int stop_exit_code = 0;

  bool running() const { return state == State::Running; }
  bool istio_proxy() const { return name == "istio-proxy"; }
};

/// A pod as the simulated kubelet runs it: Pending -> (init containers) -> Running ->
/// Succeeded/Failed, with restart policies as the real kubelet applies them.
class SimulatedPod {
 public:
  /// `seen_at`: when the kubelet first saw the pod bound to its node.
  SimulatedPod(const nlohmann::json& pod, TimePoint seen_at, const KubeletTiming& timing);

  /// Plays every scheduled change (start, exits, restarts) up to `now`, each at its own time.
  void advance(TimePoint now);
  /// When the next scheduled change falls due; nullopt when nothing will happen by itself.
  std::optional<TimePoint> next_change() const;
  /// Ends the running `istio-proxy` container with exit code 0 at `now`. False when there is
  /// no such running container.
  bool quit_istio_proxy(TimePoint now);
  /// Graceful deletion seen at `now` with `grace` left: SIGTERM to every running container
  /// (app containers exit 143 once their script's sigterm time has passed, sidecars and
  /// istio-proxy 0 at once); what still runs when the grace period ends is killed (137), and
  /// nothing restarts. Called again with a shorter period, the kill comes sooner. Once all have
  /// stopped the phase is what the real kubelet reports: Succeeded when every app container
  /// exited 0, Failed under restartPolicy Never, Running otherwise (Pending when none started).
  void terminate(TimePoint now, std::chrono::seconds grace);

  const std::string& uid() const { return uid_; }
  bool started() const { return started_; }
  /// Succeeded, Failed, or terminating with every container stopped: nothing will change any
  /// more.
  bool terminal() const;
  std::string phase() const;
  /// Init containers first (in spec order), then app containers.
  const std::vector<SimulatedContainer>& containers() const { return containers_; }
  const SimulatedContainer* container(std::string_view name) const;

  /// Writes the kubelet's part of the pod status (phase, IPs, startTime, container statuses,
  /// conditions Initialized/ContainersReady/Ready/PodScheduled), keeping conditions others own.
  void write_status(nlohmann::json& status, TimePoint now, const std::string& host_ip,
                    const std::string& pod_ip) const;

 private:
  void start_pod(TimePoint t);
  void start_container(SimulatedContainer& c, TimePoint t);
  void end_container(SimulatedContainer& c, TimePoint t, int exit_code);
  void settle(TimePoint t);
  bool init_done() const;
  bool apps_done() const;
  nlohmann::json container_status(const SimulatedContainer& c) const;

  std::string uid_;
  std::string name_;
  std::string namespace_;
  std::string restart_policy_;
  KubeletTiming timing_;
  TimePoint seen_at_;
  TimePoint start_at_;
  bool started_ = false;
  bool init_failed_ = false;
  bool terminating_ = false;
  std::vector<SimulatedContainer> containers_;
};

/// Sets a pod condition the way the API's owners do: lastTransitionTime changes only when the
/// status does. Returns whether anything changed.
bool set_pod_condition(nlohmann::json& status, std::string_view type, std::string_view value,
                       std::string_view reason, std::string_view message, TimePoint now);

/// metav1.Time: "2024-05-01T12:00:00Z".
std::string format_time(TimePoint t);
/// The timestamps of `kubectl logs --timestamps`: RFC 3339 with trailing zeros of the
/// fraction dropped, "2024-05-01T12:00:00.5Z".
std::string format_time_nano(TimePoint t);

// ---- logs ----

/// The most lines kept per container run; older ones are gone, as after log rotation.
inline constexpr std::uint64_t kMaxLogLines = 10'000;

/// One line a simulated container printed.
struct LogLine {
  TimePoint time;
  std::string text;
};

/// Where a reader of a run's log stands: which pod (by uid), which run (by restart count) and how
/// many of its lines it has had. The default starts at the current run's first retained line.
struct LogCursor {
  int restart_count = -1;
  std::uint64_t line = 0;
  /// Set by a read: a follower's next read continues in this pod even once it is deleted (its
  /// containers' lines up to their end, as a kubelet's stream drains the log file of a container
  /// stopped by the deletion), and never in another pod given the same name.
  std::string pod_uid;
};

/// What a container prints in one run: `+ <command line>` at start, `step N/M` each second
/// (M = scripted run seconds; `step N` when it runs until stopped) and `exited with code X` at
/// its end. Lines [from, end-of-run-so-far) of it, at most the last kMaxLogLines.
std::vector<LogLine> run_log(const SimulatedContainer& c, const ContainerRun& run, TimePoint now,
                             std::uint64_t from);
/// How many lines the run has printed by `now` (the index after its last line).
std::uint64_t run_log_size(const ContainerRun& run, TimePoint now);

// ---- exec ----

/// The outcome of a command run in a container, as pods/exec reports it.
struct ExecResult {
  int exit_code = 0;
  std::string stdout_text;
  std::string stderr_text;
  /// Set when the runtime could not start the command at all (its executable is not in the
  /// image): the runtime's error, which pods/exec reports as an InternalError, with no exit code.
  std::string failure;
};

/// What an exec'd command can see: its pod and container, and files mounted from ConfigMaps
/// and Secrets.
struct ExecContext {
  const nlohmann::json& pod;
  const nlohmann::json& container;
  /// Looks up an object of the pod's namespace ("configmaps" or "secrets", name); nullopt when
  /// it does not exist.
  std::function<std::optional<nlohmann::json>(std::string_view, std::string_view)> lookup;
  /// Whether the pod's istio-proxy is running (it shares the pod's localhost).
  bool proxy_running = false;
};

/// The exit code `text` names ("3", " 0 "), as a script's `exit N` or the exit-code annotation
/// gives it; nullopt when it is no integer.
std::optional<int> parse_exit_code(std::string_view text);

/// The commands a simulated container knows: echo, true, false, hostname, cat (of files mounted
/// from ConfigMaps/Secrets), env/printenv, sleep, exit, `sh -c` / `bash -c` with `;`, `&&` and
/// `||`, and Istio's quit (`pilot-agent request POST quitquitquit`, `curl -X POST
/// localhost:15020/quitquitquit` or `:15000/quitquitquit`), which only istio-proxy answers.
/// Anything else exits 127 with "sh: <cmd>: not found". Commands the image lacks
/// (sandbox_absent_commands: per container, else per pod) are "not found" (127) inside a shell;
/// exec'd directly they fail as containerd fails them ("executable file not found in $PATH", in
/// ExecResult::failure). Sets `quit_proxy` when the command told the proxy to quit.
ExecResult run_exec_command(const std::vector<std::string>& argv, const ExecContext& context,
                            bool& quit_proxy);

}  // namespace trainctl::sandbox
