// The simulated cluster: its loop over the store's pods (watch, resync, reconcile passes) and
// its public interface; nodes, scheduler and kubelet are in cluster_*.cc.

#include "sandbox/cluster.h"

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
#include "sandbox/cluster_internal.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

std::string node_subnet(int index) {
  return fmt::format("10.{}.{}", 244 + index / 256, index % 256);
}

std::uint64_t resource_version_of(const json& object) {
  const std::string rv = string_member(member(object, "metadata"), "resourceVersion");
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), value);
  return ec == std::errc() && end == rv.data() + rv.size() ? value : 0;
}

std::string key_of(const json& pod) {
  const json& metadata = member(pod, "metadata");
  return string_member(metadata, "namespace") + "/" + string_member(metadata, "name");
}

bool finished(std::string_view phase) {
  return phase == "Succeeded" || phase == "Failed";
}

void ensure_resource(Store& store, const ResourceInfo& info) {
  if (!store.resource(info.group_resource()))
    store.register_resource(info);
}

std::chrono::milliseconds until(TimePoint from, TimePoint to) {
  if (to <= from)
    return std::chrono::milliseconds(0);
  if (to - from >= kIdleWake)
    return kIdleWake;
  return std::chrono::ceil<std::chrono::milliseconds>(to - from);
}

void SimulatedCluster::Impl::report(std::string_view message) const {
  if (options.error_log)
    options.error_log(message);
}

SimulatedCluster::Impl::OwnNode* SimulatedCluster::Impl::own_node(const std::string& name) {
  for (auto& node : own_nodes) {
    if (node.name == name)
      return &node;
  }
  return nullptr;
}

void SimulatedCluster::Impl::upsert_pod(std::shared_ptr<const json> shared, bool mark_dirty) {
  const json& object = *shared;
  const std::string key = key_of(object);
  const std::string uid = string_member(member(object, "metadata"), "uid");
  const std::uint64_t rv = resource_version_of(object);
  auto it = pods.find(key);
  if (it != pods.end() && it->second.facts.uid != uid) {
    erase_pod(key);
    it = pods.end();
  }
  if (it == pods.end())
    it = pods.emplace(key, PodEntry{}).first;
  PodEntry& entry = it->second;
  if (rv != 0 && rv <= entry.resource_version)
    return;  // an event older than what we already have
  // Our own write (a status update) returns what someone else changed just before it too (a
  // deletion's deletionTimestamp); that change's own event is then older than what we hold and is
  // skipped above, so the kubelet must look now or it never sees the pod terminating.
  const auto others_changed = [&] {
    if (!entry.object)
      return false;
    const json& before = member(*entry.object, "metadata");
    const json& after = member(object, "metadata");
    return member(*entry.object, "spec") != member(object, "spec") ||
           member(before, "deletionTimestamp") != member(after, "deletionTimestamp") ||
           member(before, "deletionGracePeriodSeconds") !=
               member(after, "deletionGracePeriodSeconds");
  };
  mark_dirty = mark_dirty || others_changed();
  entry.resource_version = rv;
  entry.facts = facts_of(object);
  entry.object = std::move(shared);
  entry.dirty = entry.dirty || mark_dirty;
}

void SimulatedCluster::Impl::erase_pod(const std::string& key) {
  auto it = pods.find(key);
  if (it == pods.end())
    return;
  release_ip(it->second);
  if (std::unique_ptr<SimulatedPod>& sim = it->second.sim) {
    // Gone from the store, so gone from the node: what still runs is stopped now.
    const TimePoint now = clock.now();
    sim->advance(now);
    sim->terminate(now, std::chrono::seconds(0));
    const std::string uid = sim->uid();
    if (gone.insert_or_assign(uid, std::move(sim)).second)
      gone_order.push_back(uid);
    if (gone_order.size() > kMaxGonePods) {
      gone.erase(gone_order.front());
      gone_order.pop_front();
    }
  }
  pods.erase(it);
}

std::string SimulatedCluster::Impl::resync() {
  SharedListPage page = store.list_shared(kPods, ListRequest{});
  std::set<std::string> seen;
  for (auto& pod : page.items) {
    seen.insert(key_of(*pod));
    upsert_pod(std::move(pod));
  }
  for (auto it = pods.begin(); it != pods.end();) {
    const std::string key = it->first;
    ++it;
    if (!seen.contains(key))
      erase_pod(key);
  }
  return page.resource_version;
}

TimePoint SimulatedCluster::Impl::reconcile(TimePoint now) {
  std::vector<NodeView> nodes = sync_nodes(now);
  kubelet_pass(now, false);
  schedule(nodes, now);
  kubelet_pass(now, true);
  std::optional<TimePoint> next = next_heartbeat();
  for (const auto& [key, entry] : pods) {
    if (entry.due && (!next || *entry.due < *next))
      next = entry.due;
  }
  return next.value_or(TimePoint::max());
}

void SimulatedCluster::Impl::run_loop() {
  std::shared_ptr<WatchStream> watch;
  for (;;) {
    {
      std::lock_guard lock(loop_mu);
      if (stopping)
        break;
    }
    try {
      if (!watch || watch->closed()) {
        std::string rv;
        {
          std::lock_guard lock(mu);
          rv = resync();
        }
        watch = store.watch(kPods, WatchRequest{.resource_version = rv, .unbounded = true});
        std::lock_guard lock(loop_mu);
        active_watch = watch;
        if (stopping)
          break;
      }
      const TimePoint now = clock.now();
      TimePoint due;
      {
        std::lock_guard lock(mu);
        due = reconcile(now);
      }
      std::optional<SharedWatchEvent> event = watch->next_shared(until(now, due));
      std::lock_guard lock(mu);
      while (event) {
        if (event->type == kube::WatchEventType::Error) {
          watch->close();  // relist and watch again
          break;
        }
        if (event->type == kube::WatchEventType::Deleted)
          erase_pod(key_of(*event->object));
        else if (event->type != kube::WatchEventType::Bookmark)
          upsert_pod(event->object);
        event = watch->next_shared(std::chrono::milliseconds(0));
      }
    } catch (const std::exception& e) {
      report(fmt::format("simulated cluster: {}", e.what()));
      if (watch)
        watch->close();
      std::unique_lock lock(loop_mu);
      loop_cv.wait_for(lock, kIdleWake, [&] { return stopping; });
    }
  }
  if (watch)
    watch->close();
}

SimulatedCluster::SimulatedCluster(Store& store, ClusterOptions options, kube::Clock& clock) {
  if (options.nodes < 0 || options.nodes > kMaxNodes)
    throw Error(ErrorKind::Validation, fmt::format("node count must be between 0 and {}, not {}",
                                                   kMaxNodes, options.nodes));
  if (options.pods_per_node < 1 || options.pods_per_node > kLastPodHost - kFirstPodHost + 1)
    throw Error(ErrorKind::Validation,
                fmt::format("pods per node must be between 1 and {}, not {}",
                            kLastPodHost - kFirstPodHost + 1, options.pods_per_node));
  if (options.node_gpus < 0)
    throw Error(ErrorKind::Validation,
                fmt::format("GPUs per node must not be negative, not {}", options.node_gpus));
  for (const auto& [what, value] :
       {std::pair<const char*, const std::string&>{"node cpu", options.node_cpu},
        {"node memory", options.node_memory},
        {"node ephemeral storage", options.node_ephemeral_storage}}) {
    try {
      if (parse_quantity_milli(value) <= 0)
        throw Error(ErrorKind::Invalid, "must be positive");
    } catch (const Error& e) {
      throw Error(ErrorKind::Validation, fmt::format("{} \"{}\": {}", what, value, e.message()));
    }
  }
  impl_ = std::make_unique<Impl>(store, std::move(options), clock);
  for (int i = 0; i < impl_->options.nodes; ++i) {
    Impl::OwnNode node;
    node.name = impl_->options.node_name_prefix + std::to_string(i);
    node.index = i;
    node.ip = node_subnet(i) + ".1";
    impl_->own_nodes.push_back(std::move(node));
  }
  ensure_resource(store, {"", "v1", kPods, "Pod", true, true});
  ensure_resource(store, {"", "v1", kNodes, "Node", false, true});
  ensure_resource(store, {"", "v1", "events", "Event", true, false});  // the scheduler's
}

SimulatedCluster::~SimulatedCluster() {
  stop();
}

void SimulatedCluster::start() {
  {
    std::lock_guard lock(impl_->loop_mu);
    if (impl_->loop.joinable() || impl_->stopping)
      return;
  }
  step();
  std::lock_guard lock(impl_->loop_mu);
  impl_->loop = std::thread([impl = impl_.get()] { impl->run_loop(); });
}

void SimulatedCluster::stop() {
  {
    std::lock_guard lock(impl_->loop_mu);
    impl_->stopping = true;
    if (impl_->active_watch)
      impl_->active_watch->close();
  }
  impl_->loop_cv.notify_all();
  if (impl_->loop.joinable())
    impl_->loop.join();
}

TimePoint SimulatedCluster::step() {
  std::lock_guard lock(impl_->mu);
  impl_->resync();
  return impl_->reconcile(impl_->clock.now());
}

std::vector<std::string> SimulatedCluster::node_names() const {
  std::vector<std::string> names;
  for (const auto& node : impl_->own_nodes)
    names.push_back(node.name);
  return names;
}

}  // namespace trainctl::sandbox
