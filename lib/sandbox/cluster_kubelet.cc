// The simulated kubelet: pods on its nodes advanced through their containers' lives, status
// written back, and the exec and log endpoints.

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/cluster.h"
#include "sandbox/cluster_internal.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

void SimulatedCluster::Impl::update_pod_status(PodEntry& entry,
                                               const std::function<bool(json&)>& change) {
  const std::string uid = entry.facts.uid;
  try {
    auto stored =
        store.modify(kPods, entry.facts.ns, entry.facts.name, WritePart::Status, [&](json& pod) {
          if (string_member(member(pod, "metadata"), "uid") != uid || !change(pod["status"]))
            throw SkipWrite{};
        });
    upsert_pod(std::move(stored), false);
  } catch (const SkipWrite&) {
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
  }
}

void SimulatedCluster::Impl::write_status(PodEntry& entry, TimePoint now) {
  const std::string host_ip = own_nodes[static_cast<std::size_t>(entry.node_index)].ip;
  update_pod_status(entry, [&](json& status) {
    const json before = status;
    entry.sim->write_status(status, now, host_ip, entry.ip);
    return status != before;
  });
}

void SimulatedCluster::Impl::sync_pod(PodEntry& entry, TimePoint now) {
  const PodFacts& f = entry.facts;
  if (f.node_name.empty())
    return;
  OwnNode* node = own_node(f.node_name);
  if (!node)
    return;
  if (!entry.sim && !entry.finished_before_seen) {
    if (finished(f.phase) || f.terminating) {
      entry.finished_before_seen = finished(f.phase);
    } else {
      entry.sim = std::make_unique<SimulatedPod>(*entry.object, now, options.kubelet);
      allocate_ip(entry, *node);
    }
  }
  if (entry.sim) {
    entry.sim->advance(now);
    if (f.terminating)
      entry.sim->terminate(now, f.grace);
    write_status(entry, now);
    if (entry.sim->terminal())
      release_ip(entry);
    entry.due = entry.sim->next_change();
  }
  if (f.terminating && !entry.deletion_seen)
    entry.deletion_seen = now;
  const auto removal_due = [&] {
    const TimePoint due = *entry.deletion_seen + options.kubelet.removal_delay;
    if (now >= due)
      return true;
    entry.due = entry.due ? std::min(*entry.due, due) : due;
    return false;
  };
  if (f.terminating && !entry.removal_sent && (!entry.sim || entry.sim->terminal()) &&
      removal_due()) {
    // The real kubelet's final delete once the containers have stopped (status manager's
    // syncPod): grace period 0, the pod's uid as precondition.
    entry.removal_sent = true;
    DeleteRequest request;
    request.precondition_uid = f.uid;
    request.grace_period_seconds = 0;
    try {
      store.remove(kPods, f.ns, f.name, request);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound && e.kind() != ErrorKind::Conflict)
        throw;
    }
  }
}

void SimulatedCluster::Impl::kubelet_pass(TimePoint now, bool dirty_only) {
  for (auto& [key, entry] : pods) {
    const bool due = entry.due && *entry.due <= now;
    if (!entry.dirty && (dirty_only || !due))
      continue;
    entry.dirty = false;
    try {
      sync_pod(entry, now);
    } catch (const std::exception& e) {
      report(fmt::format("pod {}: {}", key, e.what()));
    }
  }
}

SimulatedCluster::Impl::PodEntry& SimulatedCluster::Impl::current_pod(const std::string& ns,
                                                                      const std::string& name,
                                                                      TimePoint now) {
  auto object = std::make_shared<const json>(store.get(kPods, ns, name));
  const std::string key = key_of(*object);
  upsert_pod(std::move(object));
  PodEntry& entry = pods.at(key);
  entry.dirty = false;
  sync_pod(entry, now);
  if (entry.facts.node_name.empty())
    throw Error(ErrorKind::BadRequest, fmt::format("pod {} does not have a host assigned", name),
                400);
  return entry;
}

const SimulatedContainer& SimulatedCluster::Impl::pick_container(const PodEntry& entry,
                                                                 const std::string& name,
                                                                 bool for_exec) const {
  const std::string& pod = entry.facts.name;
  const json& spec = member(*entry.object, "spec");
  auto names = [&](const char* list) {
    std::vector<std::string> out;
    if (member(spec, list).is_array()) {
      for (const auto& c : spec[list])
        out.push_back(string_member(c, "name"));
    }
    return out;
  };
  std::string wanted = name;
  if (wanted.empty()) {
    const std::vector<std::string> apps = names("containers");
    const std::vector<std::string> inits = names("initContainers");
    if (apps.size() != 1) {
      std::string message =
          fmt::format("a container name must be specified for pod {}, choose one of: [{}]", pod,
                      fmt::join(apps, " "));
      if (!inits.empty())
        message += fmt::format(" or one of the init containers: [{}]", fmt::join(inits, " "));
      throw Error(ErrorKind::BadRequest, message, 400);
    }
    wanted = apps[0];
  }
  const SimulatedContainer* c = entry.sim ? entry.sim->container(wanted) : nullptr;
  if (!c) {
    const std::vector<std::string> apps = names("containers");
    const std::vector<std::string> inits = names("initContainers");
    const bool known = std::find(apps.begin(), apps.end(), wanted) != apps.end() ||
                       std::find(inits.begin(), inits.end(), wanted) != inits.end();
    if (!known)
      throw Error(ErrorKind::BadRequest,
                  fmt::format("container {} is not valid for pod {}", wanted, pod), 400);
    throw Error(ErrorKind::BadRequest,
                fmt::format("container \"{}\" in pod \"{}\" is waiting to start: {}", wanted, pod,
                            "ContainerCreating"),
                400);
  }
  if (for_exec && !c->running()) {
    if (entry.sim->terminal())
      throw Error(ErrorKind::BadRequest,
                  fmt::format("cannot exec into a container in a completed pod; current phase "
                              "is {}",
                              entry.sim->phase()),
                  400);
    throw Error(ErrorKind::BadRequest,
                fmt::format("unable to upgrade connection: container not found (\"{}\")", wanted),
                400);
  }
  return *c;
}

const json& SimulatedCluster::Impl::container_spec(const PodEntry& entry,
                                                   const std::string& name) const {
  static const json kEmpty = json::object();
  const json& spec = member(*entry.object, "spec");
  for (const char* list : {"containers", "initContainers"}) {
    if (!member(spec, list).is_array())
      continue;
    for (const auto& c : spec[list]) {
      if (string_member(c, "name") == name)
        return c;
    }
  }
  return kEmpty;
}

void SimulatedCluster::Impl::after_quit(PodEntry& entry, TimePoint now) {
  write_status(entry, now);
  if (entry.sim->terminal())
    release_ip(entry);
  entry.due = entry.sim->next_change();
}

ExecResult SimulatedCluster::exec(const std::string& ns, const std::string& pod,
                                  const std::string& container,
                                  const std::vector<std::string>& argv) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  const SimulatedContainer& c = impl_->pick_container(entry, container, true);
  if (argv.empty())
    throw Error(ErrorKind::BadRequest, "you must specify at least one command for the container",
                400);
  const SimulatedContainer* proxy = entry.sim->container("istio-proxy");
  const std::shared_ptr<const json> object = entry.object;  // what the context refers into
  ExecContext context{*object, impl_->container_spec(entry, c.name),
                      [&](std::string_view resource, std::string_view name) {
                        try {
                          return std::optional<json>(
                              impl_->store.get(std::string(resource), ns, std::string(name)));
                        } catch (const Error&) {
                          return std::optional<json>();
                        }
                      },
                      proxy && proxy->running()};
  bool quit = false;
  ExecResult result = run_exec_command(argv, context, quit);
  if (quit && entry.sim->quit_istio_proxy(now))
    impl_->after_quit(entry, now);
  if (impl_->execs.size() == kMaxExecHistory)
    impl_->execs.pop_front();
  impl_->execs.push_back({ns, pod, c.name, argv, result.exit_code, result.failure, now});
  return result;
}

std::vector<ExecRecord> SimulatedCluster::exec_history() const {
  std::lock_guard lock(impl_->mu);
  return {impl_->execs.begin(), impl_->execs.end()};
}

void SimulatedCluster::quit_istio_proxy(const std::string& ns, const std::string& pod) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  impl_->pick_container(entry, "istio-proxy", true);
  entry.sim->quit_istio_proxy(now);
  impl_->after_quit(entry, now);
}

namespace {

/// The lines of `c`'s run `from` names (a new reader: the current run, or the last one with
/// `options.previous`) after `from`, read at `now`.
LogChunk read_run_log(const SimulatedContainer& c, const std::string& pod,
                      const LogOptions& options, const LogCursor& from, TimePoint now) {
  // As the kubelet picks: a container waiting to restart shows its last run, and "previous"
  // is what lastState reports.
  const bool backing_off = c.state == SimulatedContainer::State::Waiting && c.ever_started;
  const ContainerRun* last_state = backing_off ? &c.current : c.previous ? &*c.previous : nullptr;
  const ContainerRun* run = nullptr;
  if (from.restart_count >= 0) {
    if (c.ever_started && c.current.restart_count == from.restart_count)
      run = &c.current;
    else if (c.previous && c.previous->restart_count == from.restart_count)
      run = &*c.previous;
    else
      return LogChunk{{}, from, false};  // that run's log is gone
  } else if (options.previous) {
    if (!last_state)
      throw Error(
          ErrorKind::BadRequest,
          fmt::format("previous terminated container \"{}\" in pod \"{}\" not found", c.name, pod),
          400);
    run = last_state;
  } else {
    if (!c.ever_started)
      throw Error(ErrorKind::BadRequest,
                  fmt::format("container \"{}\" in pod \"{}\" is waiting to start: {}", c.name, pod,
                              c.waiting_reason),
                  400);
    run = &c.current;
  }
  std::vector<LogLine> lines = run_log(c, *run, now, from.line);
  if (options.since_time) {
    std::erase_if(lines, [&](const LogLine& line) { return line.time < *options.since_time; });
  }
  const bool first_read = from.restart_count < 0 && from.line == 0;
  if (first_read && options.tail_lines && *options.tail_lines >= 0 &&
      lines.size() > static_cast<std::size_t>(*options.tail_lines)) {
    lines.erase(lines.begin(), lines.end() - *options.tail_lines);
  }
  LogChunk chunk;
  for (const auto& line : lines) {
    chunk.lines.push_back(options.timestamps ? format_time_nano(line.time) + " " + line.text
                                             : line.text);
  }
  chunk.next = LogCursor{run->restart_count, run_log_size(*run, now), from.pod_uid};
  chunk.running = !run->finished_at;
  return chunk;
}

}  // namespace

LogChunk SimulatedCluster::read_logs(const std::string& ns, const std::string& pod,
                                     const std::string& container, const LogOptions& options,
                                     LogCursor from) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  // A follower's pod that was deleted (or replaced by another of its name) since its last read:
  // the rest of what its containers printed before they were stopped, then the end.
  const auto gone = [&]() -> std::optional<LogChunk> {
    if (from.pod_uid.empty())
      return std::nullopt;
    const auto it = impl_->gone.find(from.pod_uid);
    const SimulatedContainer* c =
        it == impl_->gone.end() ? nullptr : it->second->container(container);
    if (c == nullptr)
      return LogChunk{{}, from, false};
    LogChunk chunk = read_run_log(*c, pod, options, from, now);
    chunk.running = false;
    return chunk;
  };
  Impl::PodEntry* entry = nullptr;
  try {
    entry = &impl_->current_pod(ns, pod, now);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    if (auto chunk = gone())
      return *chunk;
    throw;
  }
  if (!from.pod_uid.empty() && entry->facts.uid != from.pod_uid)
    return *gone();
  from.pod_uid = entry->facts.uid;
  return read_run_log(impl_->pick_container(*entry, container, false), pod, options, from, now);
}

bool SimulatedCluster::container_running(const std::string& ns, const std::string& pod,
                                         const std::string& container) {
  std::lock_guard lock(impl_->mu);
  const TimePoint now = impl_->clock.now();
  Impl::PodEntry& entry = impl_->current_pod(ns, pod, now);
  if (!entry.sim)
    return false;
  return impl_->pick_container(entry, container, false).running();
}

std::string SimulatedCluster::logs(const std::string& ns, const std::string& pod,
                                   const std::string& container, const LogOptions& options) {
  std::string text;
  for (const auto& line : read_logs(ns, pod, container, options).lines)
    text += line + "\n";
  return text;
}

}  // namespace trainctl::sandbox
