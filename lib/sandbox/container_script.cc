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

std::optional<int> parse_exit_code(std::string_view text) {
  text = trim(text);
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

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

  // Later sources win: pod annotation (when `pod_wide`), env, per-container annotation.
  auto sources = [&](std::string_view key, const char* env, bool pod_wide) {
    std::vector<std::optional<std::string>> out;
    if (pod_wide)
      out.push_back(annotation(pod, std::string(key)));
    out.push_back(env_value(container, env));
    out.push_back(annotation(pod, fmt::format("{}.{}", key, name)));
    return out;
  };
  const bool app = role == ContainerRole::App;
  for (const auto& source : sources(api::annotations::sandbox_run_seconds, "SANDBOX_RUN_SECONDS",
                                    app && !runs_until_stopped)) {
    if (auto parsed = source ? parse_run_seconds(*source) : std::nullopt)
      script.run_for = *parsed;
  }
  for (const auto& source :
       sources(api::annotations::sandbox_exit_code, "SANDBOX_EXIT_CODE", app)) {
    if (auto parsed = source ? parse_exit_code(*source) : std::nullopt)
      script.exit_code = *parsed;
  }
  if (!app || runs_until_stopped)
    return script;
  for (const auto& source :
       sources(api::annotations::sandbox_sigterm_seconds, "SANDBOX_SIGTERM_SECONDS", true)) {
    if (auto parsed = source ? parse_run_seconds(*source) : std::nullopt)
      script.sigterm_for = *parsed;
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
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (!next || t < *next)
      next = t;
  };
  if (!started_ && !terminating_)
    consider(start_at_);
  for (const auto& c : containers_) {
    if (c.running() && c.script.run_for)
      consider(c.current.started_at + *c.script.run_for);
    if (c.running() && c.stop_at)
      consider(*c.stop_at);
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
      if (c.running() && c.stop_at && *c.stop_at <= *t)
        end_container(c, *t, c.stop_exit_code);
      else if (c.running() && c.script.run_for && c.current.started_at + *c.script.run_for <= *t)
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

void SimulatedPod::terminate(TimePoint now, std::chrono::seconds grace) {
  const TimePoint kill_at = now + grace;
  const bool first = !terminating_;
  terminating_ = true;
  for (auto& c : containers_) {
    if (c.running() && first) {
      // SIGTERM: an app container exits 143 once its script lets it; the rest stop at once.
      const bool app = c.role == ContainerRole::App && !c.istio_proxy();
      const auto sigterm_for = app ? c.script.sigterm_for : milliseconds(0);
      c.stop_at = sigterm_for ? now + *sigterm_for : TimePoint::max();
      c.stop_exit_code = app ? 143 : 0;
    }
    if (c.running() && c.stop_at.value_or(TimePoint::max()) > kill_at) {  // then SIGKILL
      c.stop_at = kill_at;
      c.stop_exit_code = 137;
    }
    if (c.state == SimulatedContainer::State::Waiting && c.restart_at) {
      c.restart_at.reset();
      c.state = SimulatedContainer::State::Terminated;
    }
  }
  advance(now);
}

bool SimulatedPod::terminal() const {
  if (terminating_) {
    return std::none_of(containers_.begin(), containers_.end(),
                        [](const SimulatedContainer& c) { return c.running(); });
  }
  const std::string p = phase();
  return p == "Succeeded" || p == "Failed";
}

std::string SimulatedPod::phase() const {
  if (init_failed_)
    return "Failed";
  auto all_apps_exited_zero = [&] {
    for (const auto& c : containers_) {
      if (c.role == ContainerRole::App &&
          (!c.ever_started || c.running() || c.current.exit_code != 0))
        return false;
    }
    return true;
  };
  if (terminating_) {
    // kubelet 1.26's getPhase: Running while a container runs; once every one has stopped,
    // only all-succeeded and Never are terminal; Always and OnFailure report Running ("in the
    // process of restarting").
    if (!started_)
      return "Pending";
    if (!terminal())
      return "Running";
    if (all_apps_exited_zero())
      return "Succeeded";
    return restart_policy_ == "Never" ? "Failed" : "Running";
  }
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

}  // namespace trainctl::sandbox
