#include "sandbox/container_script.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>

#include "api/well_known.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::sandbox {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

/// Never back off less than this, so a container scripted to exit at once cannot spin.
constexpr milliseconds kMinRestartBackoff{100};
/// A guard against scripts that would change state forever within one instant.
constexpr int kMaxChangesPerAdvance = 100'000;

std::optional<std::string> annotation(const nlohmann::json& pod, const std::string& key) {
  const nlohmann::json& value = member(member(member(pod, "metadata"), "annotations"), key);
  if (!value.is_string())
    return std::nullopt;
  return value.get<std::string>();
}

/// A literal env value of the container (valueFrom cannot be resolved here).
std::optional<std::string> env_value(const nlohmann::json& container, std::string_view name) {
  const nlohmann::json& env = member(container, "env");
  if (!env.is_array())
    return std::nullopt;
  for (const auto& var : env) {
    if (string_member(var, "name") == name && member(var, "value").is_string())
      return var["value"].get<std::string>();
  }
  return std::nullopt;
}

/// "5", "0.5" -> that long; "forever", "inf", "-1" -> nullopt inside; garbage -> nullopt outside.
std::optional<std::optional<milliseconds>> parse_run_seconds(std::string_view text) {
  text = trim(text);
  const std::string lower = to_lower(text);
  if (lower == "forever" || lower == "inf" || lower == "infinity" || lower == "-1")
    return std::optional<milliseconds>();
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0 ||
      value > 1e9) {
    return std::nullopt;
  }
  return std::optional<milliseconds>(milliseconds(std::llround(value * 1000)));
}

std::optional<int> parse_exit_code(std::string_view text) {
  text = trim(text);
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

/// A word as `set -x` shows it: quoted when the shell would need it.
std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_@%+=:,./-") == std::string::npos;
  if (plain)
    return word;
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'')
      quoted += "'\\''";
    else
      quoted += c;
  }
  return quoted + "'";
}

std::string command_line(const nlohmann::json& container) {
  std::vector<std::string> words;
  for (const char* key : {"command", "args"}) {
    const nlohmann::json& list = member(container, key);
    if (!list.is_array())
      continue;
    for (const auto& word : list) {
      if (word.is_string())
        words.push_back(shell_quote(word.get<std::string>()));
    }
  }
  if (words.empty())
    return fmt::format("(entrypoint of {})", string_member(container, "image"));
  return fmt::format("{}", fmt::join(words, " "));
}

/// Go's time.Duration.String() for whole milliseconds: "100ms", "10s", "1m20s", "5m0s".
std::string go_duration(milliseconds d) {
  if (d < seconds(1))
    return fmt::format("{}ms", d.count());
  const std::int64_t total_ms = d.count();
  const std::int64_t minutes = total_ms / 60'000;
  const std::int64_t ms = total_ms % 60'000;
  std::string secs = ms % 1000 == 0 ? fmt::format("{}", ms / 1000)
                                    : fmt::format("{}", static_cast<double>(ms) / 1000.0);
  if (minutes == 0)
    return secs + "s";
  return fmt::format("{}m{}s", minutes, secs);
}

std::string seconds_text(milliseconds d) {
  if (d.count() % 1000 == 0)
    return fmt::format("{}", d.count() / 1000);
  return fmt::format("{}", static_cast<double>(d.count()) / 1000.0);
}

/// A stable fake digest for an image, so imageID looks like a registry's.
std::string image_digest(const std::string& image) {
  std::string hex;
  std::uint64_t hash = 1469598103934665603ULL;
  for (int round = 0; round < 4; ++round) {
    for (unsigned char c : image) {
      hash ^= c;
      hash *= 1099511628211ULL;
    }
    hash ^= static_cast<std::uint64_t>(round);
    hex += fmt::format("{:016x}", hash);
  }
  return hex;
}

std::string image_id(const std::string& image) {
  std::string repository = image.substr(0, image.find('@'));
  const std::size_t slash = repository.rfind('/');
  const std::size_t colon = repository.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash))
    repository.resize(colon);
  return fmt::format("{}@sha256:{}", repository, image_digest(image));
}

std::string names_list(const std::vector<std::string>& names) {
  return fmt::format("[{}]", fmt::join(names, " "));
}

}  // namespace

// ---- scripts ----

ContainerScript script_for(const nlohmann::json& pod, const nlohmann::json& container,
                           ContainerRole role, std::chrono::milliseconds default_run_time) {
  const std::string name = string_member(container, "name");
  ContainerScript script;
  script.command_line = command_line(container);
  const bool runs_until_stopped = role == ContainerRole::Sidecar || name == "istio-proxy";
  if (role == ContainerRole::App && !runs_until_stopped)
    script.run_for = default_run_time;
  else if (role == ContainerRole::Init)
    script.run_for = milliseconds(0);

  // Later sources win: pod annotation, env, per-container annotation.
  std::vector<std::optional<std::string>> run_sources, exit_sources;
  if (role == ContainerRole::App && !runs_until_stopped)
    run_sources.push_back(annotation(pod, std::string(api::annotations::sandbox_run_seconds)));
  if (role == ContainerRole::App)
    exit_sources.push_back(annotation(pod, std::string(api::annotations::sandbox_exit_code)));
  run_sources.push_back(env_value(container, "SANDBOX_RUN_SECONDS"));
  exit_sources.push_back(env_value(container, "SANDBOX_EXIT_CODE"));
  run_sources.push_back(
      annotation(pod, fmt::format("{}.{}", api::annotations::sandbox_run_seconds, name)));
  exit_sources.push_back(
      annotation(pod, fmt::format("{}.{}", api::annotations::sandbox_exit_code, name)));
  for (const auto& source : run_sources) {
    if (!source)
      continue;
    if (auto parsed = parse_run_seconds(*source))
      script.run_for = *parsed;
  }
  for (const auto& source : exit_sources) {
    if (!source)
      continue;
    if (auto parsed = parse_exit_code(*source))
      script.exit_code = *parsed;
  }
  return script;
}

// ---- the pod's timeline ----

SimulatedPod::SimulatedPod(const nlohmann::json& pod, TimePoint seen_at,
                           const KubeletTiming& timing)
    : timing_(timing), seen_at_(seen_at), start_at_(seen_at + timing.start_delay) {
  const nlohmann::json& metadata = member(pod, "metadata");
  const nlohmann::json& spec = member(pod, "spec");
  uid_ = string_member(metadata, "uid");
  name_ = string_member(metadata, "name");
  namespace_ = string_member(metadata, "namespace");
  restart_policy_ = string_member(spec, "restartPolicy");
  if (restart_policy_.empty())
    restart_policy_ = "Always";
  const nlohmann::json& init = member(spec, "initContainers");
  const bool has_init = init.is_array() && !init.empty();
  auto add = [&](const nlohmann::json& spec_container, ContainerRole role) {
    SimulatedContainer c;
    c.name = string_member(spec_container, "name");
    c.image = string_member(spec_container, "image");
    c.role = role;
    c.script = script_for(pod, spec_container, role, timing_.default_run_time);
    c.waiting_reason = has_init ? "PodInitializing" : "ContainerCreating";
    containers_.push_back(std::move(c));
  };
  if (has_init) {
    for (const auto& c : init) {
      add(c, string_member(c, "restartPolicy") == "Always" ? ContainerRole::Sidecar
                                                           : ContainerRole::Init);
    }
  }
  const nlohmann::json& apps = member(spec, "containers");
  if (apps.is_array()) {
    for (const auto& c : apps)
      add(c, ContainerRole::App);
  }
}

const SimulatedContainer* SimulatedPod::container(std::string_view name) const {
  for (const auto& c : containers_) {
    if (c.name == name)
      return &c;
  }
  return nullptr;
}

std::optional<TimePoint> SimulatedPod::next_change() const {
  if (terminating_)
    return std::nullopt;
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (!next || t < *next)
      next = t;
  };
  if (!started_)
    consider(start_at_);
  for (const auto& c : containers_) {
    if (c.running() && c.script.run_for)
      consider(c.current.started_at + *c.script.run_for);
    if (c.state == SimulatedContainer::State::Waiting && c.restart_at)
      consider(*c.restart_at);
  }
  return next;
}

void SimulatedPod::advance(TimePoint now) {
  for (int changes = 0; changes < kMaxChangesPerAdvance; ++changes) {
    const std::optional<TimePoint> t = next_change();
    if (!t || *t > now)
      return;
    if (!started_ && start_at_ <= *t) {
      start_pod(*t);
      continue;
    }
    for (auto& c : containers_) {
      if (c.running() && c.script.run_for && c.current.started_at + *c.script.run_for <= *t)
        end_container(c, *t, c.script.exit_code);
      else if (c.state == SimulatedContainer::State::Waiting && c.restart_at && *c.restart_at <= *t)
        start_container(c, *t);
    }
    settle(*t);
  }
}

void SimulatedPod::start_pod(TimePoint t) {
  started_ = true;
  settle(t);
}

void SimulatedPod::start_container(SimulatedContainer& c, TimePoint t) {
  if (c.ever_started) {
    c.previous = c.current;
    c.current = ContainerRun{c.current.restart_count + 1, t, std::nullopt, 0};
  } else {
    c.current = ContainerRun{0, t, std::nullopt, 0};
    c.ever_started = true;
  }
  c.state = SimulatedContainer::State::Running;
  c.restart_at.reset();
  c.waiting_reason.clear();
  c.waiting_message.clear();
}

void SimulatedPod::end_container(SimulatedContainer& c, TimePoint t, int exit_code) {
  c.current.finished_at = t;
  c.current.exit_code = exit_code;
  c.state = SimulatedContainer::State::Terminated;
  bool restart = false;
  if (!terminating_) {
    switch (c.role) {
      case ContainerRole::Init:
        restart = exit_code != 0 && restart_policy_ != "Never";
        break;
      case ContainerRole::Sidecar:
        restart = !apps_done();
        break;
      case ContainerRole::App:
        restart = restart_policy_ == "Always" || (restart_policy_ == "OnFailure" && exit_code != 0);
        break;
    }
  }
  if (!restart)
    return;
  milliseconds backoff = std::max(timing_.restart_backoff, kMinRestartBackoff);
  const milliseconds cap = std::max(timing_.max_restart_backoff, backoff);
  for (int i = 0; i < c.current.restart_count && backoff < cap; ++i)
    backoff *= 2;
  backoff = std::min(backoff, cap);
  c.state = SimulatedContainer::State::Waiting;
  c.restart_at = t + backoff;
  c.waiting_reason = "CrashLoopBackOff";
  c.waiting_message = fmt::format("back-off {} restarting failed container={} pod={}_{}({})",
                                  go_duration(backoff), c.name, name_, namespace_, uid_);
}

bool SimulatedPod::init_done() const {
  for (const auto& c : containers_) {
    if (c.role == ContainerRole::Init &&
        !(c.state == SimulatedContainer::State::Terminated && c.current.exit_code == 0)) {
      return false;
    }
    if (c.role == ContainerRole::Sidecar && !c.ever_started)
      return false;
  }
  return true;
}

bool SimulatedPod::apps_done() const {
  bool any = false;
  for (const auto& c : containers_) {
    if (c.role != ContainerRole::App)
      continue;
    any = true;
    if (!c.ever_started || c.state != SimulatedContainer::State::Terminated)
      return false;
  }
  return any;
}

void SimulatedPod::settle(TimePoint t) {
  if (!started_ || terminating_)
    return;
  auto stop_sidecars = [&] {
    for (auto& c : containers_) {
      if (c.role != ContainerRole::Sidecar)
        continue;
      if (c.running())
        end_container(c, t, 0);
      if (c.state == SimulatedContainer::State::Waiting && c.restart_at) {
        c.restart_at.reset();
        c.state = SimulatedContainer::State::Terminated;
      }
    }
  };
  // Init containers one after another; a sidecar counts as done once started.
  for (auto& c : containers_) {
    if (c.role == ContainerRole::Sidecar) {
      if (!c.ever_started)
        start_container(c, t);
      continue;
    }
    if (c.role != ContainerRole::Init)
      continue;
    if (c.state == SimulatedContainer::State::Terminated) {
      if (c.current.exit_code == 0)
        continue;
      init_failed_ = true;  // restartPolicy Never: the pod fails
      stop_sidecars();
      return;
    }
    if (!c.ever_started && !c.restart_at)
      start_container(c, t);
    return;  // wait for this one
  }
  for (auto& c : containers_) {
    if (c.role == ContainerRole::App && !c.ever_started)
      start_container(c, t);
  }
  if (apps_done())
    stop_sidecars();
}

bool SimulatedPod::quit_istio_proxy(TimePoint now) {
  for (auto& c : containers_) {
    if (c.istio_proxy() && c.running()) {
      end_container(c, now, 0);
      settle(now);
      return true;
    }
  }
  return false;
}

void SimulatedPod::terminate(TimePoint now) {
  if (terminating_)
    return;
  terminating_ = true;
  for (auto& c : containers_) {
    if (c.running())
      end_container(c, now, c.role == ContainerRole::App && !c.istio_proxy() ? 143 : 0);
    if (c.state == SimulatedContainer::State::Waiting && c.restart_at) {
      c.restart_at.reset();
      c.state = SimulatedContainer::State::Terminated;
    }
  }
}

bool SimulatedPod::terminal() const {
  const std::string p = phase();
  return p == "Succeeded" || p == "Failed";
}

std::string SimulatedPod::phase() const {
  if (init_failed_)
    return "Failed";
  auto all_apps_exited_zero = [&] {
    for (const auto& c : containers_) {
      if (c.role == ContainerRole::App && (!c.ever_started || c.current.exit_code != 0))
        return false;
    }
    return true;
  };
  if (terminating_)
    return started_ && all_apps_exited_zero() ? "Succeeded" : "Failed";
  if (!started_ || !init_done())
    return "Pending";
  if (apps_done())
    return all_apps_exited_zero() ? "Succeeded" : "Failed";
  return "Running";
}

nlohmann::json SimulatedPod::container_status(const SimulatedContainer& c) const {
  using State = SimulatedContainer::State;
  auto container_id = [&](const ContainerRun& run) {
    std::string id = fmt::format("sandbox://{}-{}", uid_, c.name);
    if (run.restart_count > 0)
      id += fmt::format("-{}", run.restart_count);
    return id;
  };
  auto terminated = [&](const ContainerRun& run) {
    return nlohmann::json{{"exitCode", run.exit_code},
                          {"reason", run.exit_code == 0 ? "Completed" : "Error"},
                          {"startedAt", format_time(run.started_at)},
                          {"finishedAt", format_time(run.finished_at.value_or(run.started_at))},
                          {"containerID", container_id(run)}};
  };
  nlohmann::json status = {{"name", c.name}, {"image", c.image}};
  status["imageID"] = c.ever_started ? image_id(c.image) : "";
  if (c.ever_started)
    status["containerID"] = container_id(c.current);
  const bool completed_init =
      c.role == ContainerRole::Init && c.state == State::Terminated && c.current.exit_code == 0;
  status["ready"] = c.running() || completed_init;
  status["started"] = c.running();
  status["restartCount"] = c.ever_started ? c.current.restart_count : 0;
  status["lastState"] = nlohmann::json::object();
  switch (c.state) {
    case State::Running:
      status["state"] = {{"running", {{"startedAt", format_time(c.current.started_at)}}}};
      break;
    case State::Terminated:
      status["state"] = {{"terminated", terminated(c.current)}};
      break;
    case State::Waiting: {
      nlohmann::json waiting = {{"reason", c.waiting_reason}};
      if (!c.waiting_message.empty())
        waiting["message"] = c.waiting_message;
      status["state"] = {{"waiting", waiting}};
      break;
    }
  }
  if (c.state == State::Waiting && c.ever_started)
    status["lastState"] = {{"terminated", terminated(c.current)}};
  else if (c.previous)
    status["lastState"] = {{"terminated", terminated(*c.previous)}};
  return status;
}

void SimulatedPod::write_status(nlohmann::json& status, TimePoint now, const std::string& host_ip,
                                const std::string& pod_ip) const {
  if (!status.is_object())
    status = nlohmann::json::object();
  const std::string current_phase = phase();
  status["phase"] = current_phase;
  status["hostIP"] = host_ip;
  status["hostIPs"] = nlohmann::json::array({{{"ip", host_ip}}});
  if (started_ && !pod_ip.empty()) {
    status["podIP"] = pod_ip;
    status["podIPs"] = nlohmann::json::array({{{"ip", pod_ip}}});
  }
  status["startTime"] = format_time(seen_at_);

  nlohmann::json init_statuses = nlohmann::json::array();
  nlohmann::json app_statuses = nlohmann::json::array();
  std::vector<std::string> incomplete_init, unready;
  for (const auto& c : containers_) {
    (c.role == ContainerRole::App ? app_statuses : init_statuses).push_back(container_status(c));
    const bool init_complete =
        c.role == ContainerRole::Init
            ? c.state == SimulatedContainer::State::Terminated && c.current.exit_code == 0
            : c.ever_started;
    if (c.role != ContainerRole::App && !init_complete)
      incomplete_init.push_back(c.name);
    if (c.role != ContainerRole::Init && !c.running())
      unready.push_back(c.name);
  }
  if (!init_statuses.empty())
    status["initContainerStatuses"] = init_statuses;
  status["containerStatuses"] = app_statuses;

  set_pod_condition(status, "PodScheduled", "True", "", "", now);
  if (incomplete_init.empty()) {
    set_pod_condition(status, "Initialized", "True", "", "", now);
  } else {
    set_pod_condition(status, "Initialized", "False", "ContainersNotInitialized",
                      "containers with incomplete status: " + names_list(incomplete_init), now);
  }
  for (const char* type : {"Ready", "ContainersReady"}) {
    if (current_phase == "Succeeded")
      set_pod_condition(status, type, "False", "PodCompleted", "", now);
    else if (unready.empty())
      set_pod_condition(status, type, "True", "", "", now);
    else
      set_pod_condition(status, type, "False", "ContainersNotReady",
                        "containers with unready status: " + names_list(unready), now);
  }
}

bool set_pod_condition(nlohmann::json& status, std::string_view type, std::string_view value,
                       std::string_view reason, std::string_view message, TimePoint now) {
  if (!status.is_object())
    status = nlohmann::json::object();
  nlohmann::json& conditions = status["conditions"];
  if (!conditions.is_array())
    conditions = nlohmann::json::array();
  nlohmann::json* condition = nullptr;
  for (auto& c : conditions) {
    if (string_member(c, "type") == type)
      condition = &c;
  }
  if (!condition) {
    conditions.push_back({{"type", type}, {"lastProbeTime", nullptr}});
    condition = &conditions.back();
  }
  const nlohmann::json before = *condition;
  if (string_member(*condition, "status") != value || !condition->contains("lastTransitionTime"))
    (*condition)["lastTransitionTime"] = format_time(now);
  (*condition)["status"] = value;
  auto set_or_erase = [&](const char* key, std::string_view text) {
    if (text.empty())
      condition->erase(key);
    else
      (*condition)[key] = text;
  };
  set_or_erase("reason", reason);
  set_or_erase("message", message);
  return *condition != before;
}

// ---- time ----

namespace {

std::string format_civil(TimePoint t, std::string_view fraction) {
  const auto since_epoch = t.time_since_epoch();
  auto secs = std::chrono::floor<seconds>(since_epoch);
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, fraction);
}

}  // namespace

std::string format_time(TimePoint t) {
  return format_civil(t, "");
}

std::string format_time_nano(TimePoint t) {
  const auto since_epoch =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  const auto secs = std::chrono::floor<seconds>(since_epoch);
  const std::int64_t nanos = (since_epoch - secs).count();
  if (nanos == 0)
    return format_civil(t, "");
  std::string fraction = fmt::format(".{:09}", nanos);
  while (fraction.back() == '0')
    fraction.pop_back();
  return format_civil(t, fraction);
}

// ---- logs ----

std::uint64_t run_log_size(const ContainerRun& run, TimePoint now) {
  const TimePoint end = run.finished_at.value_or(now);
  if (end < run.started_at)
    return 0;
  const auto steps =
      static_cast<std::uint64_t>(std::chrono::duration_cast<seconds>(end - run.started_at).count());
  return 1 + steps + (run.finished_at ? 1 : 0);
}

std::vector<LogLine> run_log(const SimulatedContainer& c, const ContainerRun& run, TimePoint now,
                             std::uint64_t from) {
  const std::uint64_t size = run_log_size(run, now);
  const std::uint64_t steps = size == 0 ? 0 : size - 1 - (run.finished_at ? 1 : 0);
  from = std::max(from, size > kMaxLogLines ? size - kMaxLogLines : 0);
  std::vector<LogLine> lines;
  for (std::uint64_t i = from; i < size; ++i) {
    if (i == 0) {
      lines.push_back({run.started_at, "+ " + c.script.command_line});
    } else if (i <= steps) {
      const TimePoint t = run.started_at + seconds(i);
      lines.push_back({t, c.script.run_for
                              ? fmt::format("step {}/{}", i, seconds_text(*c.script.run_for))
                              : fmt::format("step {}", i)});
    } else {
      lines.push_back({*run.finished_at, fmt::format("exited with code {}", run.exit_code)});
    }
  }
  return lines;
}

// ---- exec ----

namespace {

std::string basename(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string hostname_of(const nlohmann::json& pod) {
  std::string host = string_member(member(pod, "spec"), "hostname");
  return host.empty() ? string_member(member(pod, "metadata"), "name") : host;
}

/// The container's environment as a shell sees it: literal env values and HOSTNAME.
std::map<std::string, std::string> environment(const ExecContext& context) {
  std::map<std::string, std::string> env;
  env["HOSTNAME"] = hostname_of(context.pod);
  const nlohmann::json& vars = member(context.container, "env");
  if (vars.is_array()) {
    for (const auto& var : vars) {
      if (member(var, "value").is_string())
        env[string_member(var, "name")] = var["value"].get<std::string>();
    }
  }
  return env;
}

/// A file's content when a ConfigMap or Secret volume provides it.
std::optional<std::string> read_file(const ExecContext& context, std::string_view path) {
  if (path == "/etc/hostname")
    return hostname_of(context.pod) + "\n";
  const nlohmann::json& mounts = member(context.container, "volumeMounts");
  const nlohmann::json& volumes = member(member(context.pod, "spec"), "volumes");
  if (!mounts.is_array() || !volumes.is_array())
    return std::nullopt;
  const nlohmann::json* best = nullptr;
  std::string best_rel;
  std::size_t best_len = 0;
  for (const auto& mount : mounts) {
    std::string mount_path = string_member(mount, "mountPath");
    while (mount_path.size() > 1 && mount_path.back() == '/')
      mount_path.pop_back();
    const std::string sub_path = string_member(mount, "subPath");
    std::string rel;
    if (!sub_path.empty()) {
      if (path != mount_path)
        continue;
      rel = sub_path;
    } else if (path.size() > mount_path.size() + 1 && path.starts_with(mount_path + "/")) {
      rel = std::string(path.substr(mount_path.size() + 1));
    } else {
      continue;
    }
    if (mount_path.size() >= best_len) {
      best = &mount;
      best_rel = rel;
      best_len = mount_path.size();
    }
  }
  if (!best)
    return std::nullopt;
  const std::string volume_name = string_member(*best, "name");
  for (const auto& volume : volumes) {
    if (string_member(volume, "name") != volume_name)
      continue;
    const bool is_secret = member(volume, "secret").is_object();
    const nlohmann::json& source = is_secret ? volume["secret"] : member(volume, "configMap");
    if (!source.is_object())
      return std::nullopt;
    std::string key = best_rel;
    const nlohmann::json& items = member(source, "items");
    if (items.is_array() && !items.empty()) {
      key.clear();
      for (const auto& item : items) {
        if (string_member(item, "path") == best_rel)
          key = string_member(item, "key");
      }
      if (key.empty())
        return std::nullopt;
    }
    const std::string object_name = string_member(source, is_secret ? "secretName" : "name");
    if (!context.lookup)
      return std::nullopt;
    const std::optional<nlohmann::json> object =
        context.lookup(is_secret ? "secrets" : "configmaps", object_name);
    if (!object)
      return std::nullopt;
    const nlohmann::json& data = member(*object, "data");
    if (member(data, key).is_string()) {
      const std::string value = data[key].get<std::string>();
      if (!is_secret)
        return value;
      return base64_decode(value);
    }
    const nlohmann::json& binary = member(*object, "binaryData");
    if (!is_secret && member(binary, key).is_string())
      return base64_decode(binary[key].get<std::string>());
    return std::nullopt;
  }
  return std::nullopt;
}

struct ShellState {
  const ExecContext& context;
  std::map<std::string, std::string> env;
  ExecResult result;
  bool& quit_proxy;
  bool exited = false;
};

/// An http://host:port/path URL's pieces.
struct Url {
  std::string host;
  std::string port = "80";
  std::string path = "/";
};

Url parse_url(std::string_view text) {
  Url url;
  if (const std::size_t scheme = text.find("://"); scheme != std::string_view::npos)
    text.remove_prefix(scheme + 3);
  const std::size_t slash = text.find('/');
  std::string_view authority = text.substr(0, slash);
  if (slash != std::string_view::npos)
    url.path = std::string(text.substr(slash));
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    url.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
  }
  url.host = std::string(authority);
  return url;
}

int run_curl(ShellState& shell, const std::vector<std::string>& argv) {
  static const std::vector<std::string_view> kTakesValue = {
      "-X", "--request",   "-d",      "--data",     "--data-raw",        "-H", "--header",
      "-o", "--output",    "-m",      "--max-time", "--connect-timeout", "-u", "--user",
      "-w", "--write-out", "--retry", "-A",         "--user-agent"};
  std::string method = "GET";
  std::string target;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    const bool takes_value =
        std::find(kTakesValue.begin(), kTakesValue.end(), arg) != kTakesValue.end();
    if (takes_value && i + 1 < argv.size()) {
      const std::string& value = argv[++i];
      if (arg == "-X" || arg == "--request")
        method = value;
      else if (arg.starts_with("-d") || arg.starts_with("--data"))
        method = method == "GET" ? "POST" : method;
      continue;
    }
    if (arg.starts_with("-X") && arg.size() > 2) {
      method = arg.substr(2);
    } else if (arg.starts_with("--request=")) {
      method = arg.substr(10);
    } else if (!arg.starts_with("-") && target.empty()) {
      target = arg;
    }
  }
  if (target.empty()) {
    shell.result.stderr_text += "curl: no URL specified!\n";
    return 2;
  }
  const Url url = parse_url(target);
  const bool local = url.host == "localhost" || url.host == "127.0.0.1" || url.host == "[::1]";
  const bool istio_port = url.port == "15020" || url.port == "15000";
  if (local && istio_port && shell.context.proxy_running) {
    if (url.path == "/quitquitquit" && to_lower(method) == "post") {
      shell.quit_proxy = true;
      shell.result.stdout_text += "OK\n";
      return 0;
    }
    shell.result.stdout_text += url.path == "/quitquitquit" ? "Method Not Allowed\n" : "OK\n";
    return 0;
  }
  shell.result.stderr_text += fmt::format(
      "curl: (7) Failed to connect to {} port {} after 0 ms: Couldn't connect to server\n",
      url.host, url.port);
  return 7;
}

int run_command(ShellState& shell, const std::vector<std::string>& argv);

/// Splits a `sh -c` script into words and the operators ; && || between commands, expanding
/// $NAME and ${NAME} outside single quotes.
struct ScriptToken {
  std::string text;
  bool is_operator = false;
};

std::vector<ScriptToken> tokenize(std::string_view script,
                                  const std::map<std::string, std::string>& env) {
  std::vector<ScriptToken> tokens;
  std::string word;
  bool in_word = false;
  auto flush = [&] {
    if (in_word)
      tokens.push_back({word, false});
    word.clear();
    in_word = false;
  };
  auto expand = [&](std::size_t& i) {
    std::string name;
    if (i + 1 < script.size() && script[i + 1] == '{') {
      const std::size_t close = script.find('}', i + 2);
      if (close == std::string_view::npos)
        return std::string("$");
      name = std::string(script.substr(i + 2, close - i - 2));
      i = close;
    } else {
      std::size_t j = i + 1;
      while (j < script.size() &&
             (std::isalnum(static_cast<unsigned char>(script[j])) || script[j] == '_')) {
        ++j;
      }
      if (j == i + 1)
        return std::string("$");
      name = std::string(script.substr(i + 1, j - i - 1));
      i = j - 1;
    }
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  for (std::size_t i = 0; i < script.size(); ++i) {
    const char c = script[i];
    if (c == '\'') {
      const std::size_t close = script.find('\'', i + 1);
      word += script.substr(i + 1, close == std::string_view::npos ? close : close - i - 1);
      in_word = true;
      i = close == std::string_view::npos ? script.size() : close;
    } else if (c == '"') {
      in_word = true;
      for (++i; i < script.size() && script[i] != '"'; ++i) {
        if (script[i] == '\\' && i + 1 < script.size() &&
            std::string_view("\"\\$`").find(script[i + 1]) != std::string_view::npos) {
          word += script[++i];
        } else if (script[i] == '$') {
          word += expand(i);
        } else {
          word += script[i];
        }
      }
    } else if (c == '\\' && i + 1 < script.size()) {
      word += script[++i];
      in_word = true;
    } else if (c == '$') {
      word += expand(i);
      in_word = true;
    } else if (c == ';' || c == '\n') {
      flush();
      tokens.push_back({";", true});
    } else if ((c == '&' || c == '|') && i + 1 < script.size() && script[i + 1] == c) {
      flush();
      tokens.push_back({std::string(2, c), true});
      ++i;
    } else if (c == ' ' || c == '\t') {
      flush();
    } else {
      word += c;
      in_word = true;
    }
  }
  flush();
  return tokens;
}

int run_script(ShellState& shell, std::string_view script) {
  int status = 0;
  std::string pending_operator = ";";
  std::vector<std::string> words;
  auto run_pending = [&] {
    if (words.empty())
      return;
    const bool skip =
        (pending_operator == "&&" && status != 0) || (pending_operator == "||" && status == 0);
    if (!skip)
      status = run_command(shell, words);
    words.clear();
  };
  for (const ScriptToken& token : tokenize(script, shell.env)) {
    if (shell.exited)
      break;
    if (!token.is_operator) {
      words.push_back(token.text);
      continue;
    }
    run_pending();
    pending_operator = token.text;
  }
  if (!shell.exited)
    run_pending();
  return status;
}

int run_command(ShellState& shell, const std::vector<std::string>& argv) {
  if (argv.empty())
    return 0;
  const std::string command = basename(argv[0]);
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  ExecResult& out = shell.result;
  if ((command == "sh" || command == "bash" || command == "ash" || command == "dash")) {
    if (args.size() >= 2 && args[0] == "-c")
      return run_script(shell, args[1]);
    return 0;
  }
  if (command == "echo") {
    const bool newline = args.empty() || args[0] != "-n";
    const auto first = newline ? args.begin() : args.begin() + 1;
    out.stdout_text += fmt::format("{}", fmt::join(first, args.end(), " "));
    if (newline)
      out.stdout_text += "\n";
    return 0;
  }
  if (command == "true" || command == ":" || command == "sleep")
    return 0;
  if (command == "false")
    return 1;
  if (command == "exit") {
    shell.exited = true;
    const std::optional<int> code = args.empty() ? std::optional<int>(0) : parse_exit_code(args[0]);
    return code.value_or(2) & 0xff;
  }
  if (command == "hostname") {
    out.stdout_text += hostname_of(shell.context.pod) + "\n";
    return 0;
  }
  if (command == "env" || command == "printenv") {
    if (args.empty()) {
      for (const auto& [name, value] : shell.env)
        out.stdout_text += fmt::format("{}={}\n", name, value);
      return 0;
    }
    int status = 0;
    for (const auto& name : args) {
      auto it = shell.env.find(name);
      if (it == shell.env.end())
        status = 1;
      else
        out.stdout_text += it->second + "\n";
    }
    return status;
  }
  if (command == "cat") {
    int status = 0;
    for (const auto& path : args) {
      if (auto content = read_file(shell.context, path)) {
        out.stdout_text += *content;
      } else {
        out.stderr_text += fmt::format("cat: {}: No such file or directory\n", path);
        status = 1;
      }
    }
    return status;
  }
  const bool in_proxy = string_member(shell.context.container, "name") == "istio-proxy";
  if (command == "pilot-agent" && in_proxy) {
    if (args.size() == 3 && args[0] == "request" && to_lower(args[1]) == "post" &&
        (args[2] == "quitquitquit" || args[2] == "/quitquitquit")) {
      shell.quit_proxy = true;
      return 0;
    }
    out.stderr_text +=
        fmt::format("Error: unsupported pilot-agent command: {}\n", fmt::join(args, " "));
    return 1;
  }
  if (command == "curl")
    return run_curl(shell, argv);
  out.stderr_text += fmt::format("sh: {}: not found\n", argv[0]);
  return 127;
}

}  // namespace

ExecResult run_exec_command(const std::vector<std::string>& argv, const ExecContext& context,
                            bool& quit_proxy) {
  quit_proxy = false;
  ShellState shell{context, environment(context), {}, quit_proxy};
  shell.result.exit_code = run_command(shell, argv);
  return shell.result;
}

}  // namespace trainctl::sandbox
