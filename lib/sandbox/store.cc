// The store's shared state (StoreCore: tables, the event window, the uid and owner indexes,
// commit) and the Store's registration and reads by name.

#include "sandbox/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/field_errors.h"
#include "sandbox/store_core.h"
#include "sandbox/strategy.h"
#include "text.h"

namespace trainctl::sandbox {

ResourceInfo::ResourceInfo(std::string group, std::string version, std::string plural,
                           std::string kind, bool namespaced, bool status_subresource)
    : kube::Resource{std::move(group), std::move(version), std::move(plural), namespaced,
                     std::move(kind)},
      status_subresource(status_subresource) {}

Store::Store(std::size_t window) : Store(StoreOptions{.window = window}) {}

Store::Store(StoreOptions options) : core_(std::make_shared<StoreCore>(std::move(options))) {
  Table namespaces;
  namespaces.strategy = builtin_strategy(kNamespaces);
  namespaces.info = namespaces.strategy->info();
  core_->tables.emplace(kNamespaces, std::move(namespaces));
}

Store::~Store() {
  std::lock_guard lock(core_->mu);
  for (auto& [gr, t] : core_->tables) {
    for (auto& weak : t.watchers) {
      if (auto w = weak.lock())
        w->shut();
    }
  }
}

void Store::register_resource(const ResourceInfo& info, StrategyPtr strategy) {
  std::lock_guard lock(core_->mu);
  Table& t = core_->tables[info.group_resource()];
  t.info = info;
  t.strategy = strategy ? std::move(strategy) : strategy_for(info);
}

void Store::unregister_resource(const std::string& group_resource) {
  std::lock_guard lock(core_->mu);
  auto& core = *core_;
  core.deleted_now.clear();
  if (group_resource == kNamespaces)
    throw bad_request("the namespaces resource cannot be removed");
  Table& t = core.table(group_resource);
  std::vector<std::string> keys;
  for (const auto& [key, obj] : t.objects)
    keys.push_back(key);
  for (const auto& key : keys) {
    auto deleted = core.commit(t, key, *t.objects.at(key), WatchEventType::Deleted);
    core.after_removal(t, *deleted);
  }
  for (auto& weak : t.watchers) {
    if (auto w = weak.lock())
      w->shut();
  }
  core.tables.erase(group_resource);
  core.run_tasks();
}

std::optional<ResourceInfo> Store::resource(const std::string& group_resource) const {
  std::lock_guard lock(core_->mu);
  auto it = core_->tables.find(group_resource);
  if (it == core_->tables.end())
    return std::nullopt;
  return it->second.info;
}

std::vector<ResourceInfo> Store::resources() const {
  std::lock_guard lock(core_->mu);
  std::vector<ResourceInfo> out;
  for (const auto& [gr, t] : core_->tables)
    out.push_back(t.info);
  return out;
}

json Store::get(const std::string& group_resource, const std::string& ns,
                const std::string& name) const {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    Table& t = core_->table(group_resource);
    auto it = t.objects.find(StoreCore::key_of(t.info, ns, name));
    if (it == t.objects.end())
      throw not_found(t.info, name);
    result = it->second;
  }
  return *result;
}

std::string Store::current_resource_version() const {
  std::lock_guard lock(core_->mu);
  return std::to_string(core_->rv);
}

std::size_t Store::object_count() const {
  std::lock_guard lock(core_->mu);
  std::size_t n = 0;
  for (const auto& [gr, t] : core_->tables)
    n += t.objects.size();
  return n;
}

std::chrono::system_clock::time_point Store::now() const {
  return core_->options.now();
}

Table& StoreCore::table(const std::string& gr) {
  auto it = tables.find(gr);
  if (it == tables.end())
    throw unknown_resource();
  return it->second;
}

std::string StoreCore::key_of(const ResourceInfo& info, const std::string& ns,
                              const std::string& name) {
  return info.namespaced ? ns + "/" + name : name;
}

const json* StoreCore::find_by_uid(const std::string& uid, Table** table_out,
                                   std::string* key_out) {
  auto it = by_uid.find(uid);
  if (it == by_uid.end())
    return nullptr;
  auto t = tables.find(it->second.gr);
  if (t == tables.end())
    return nullptr;
  auto o = t->second.objects.find(it->second.key);
  if (o == t->second.objects.end())
    return nullptr;
  if (table_out)
    *table_out = &t->second;
  if (key_out)
    *key_out = it->second.key;
  return o->second.get();
}

bool StoreCore::waiting_for_dependents(const json& o) {
  return terminating(o) && has_finalizer(o, kFinalizerForeground);
}

std::string StoreCore::new_uid() {
  std::array<unsigned char, 16> b{};
  for (std::size_t i = 0; i < b.size(); i += 8) {
    std::uint64_t r = rng();
    for (std::size_t j = 0; j < 8; ++j)
      b[i + j] = static_cast<unsigned char>(r >> (8 * j));
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out += '-';
    out += fmt::format("{:02x}", b[i]);
  }
  return out;
}

SharedJson StoreCore::commit(Table& t, const std::string& key, json obj, WatchEventType type) {
  SharedJson prev;
  auto it = t.objects.find(key);
  if (it != t.objects.end())
    prev = it->second;
  const std::uint64_t version = ++rv;
  obj["metadata"]["resourceVersion"] = std::to_string(version);
  auto stored = std::make_shared<const json>(std::move(obj));
  if (type == WatchEventType::Deleted) {
    t.objects.erase(it);
    deleted_now[uid_of(*stored)] = stored;
  } else if (it != t.objects.end()) {
    it->second = stored;
  } else {
    t.objects.emplace(key, stored);
  }
  reindex(t, key, prev.get(), type == WatchEventType::Deleted ? nullptr : stored.get());
  window.push_back(Event{version, type, t.info.group_resource(), key, stored, prev});
  fan_out(t, window.back());
  while (window.size() > options.window) {
    evicted_through = window.front().rv;
    window.pop_front();
  }
  rv_advanced.notify_all();
  return stored;
}

void StoreCore::reindex(const Table& t, const std::string& key, const json* before,
                        const json* after) {
  const Ref ref{t.info.group_resource(), key};
  if (after && !before)
    by_uid[uid_of(*after)] = ref;
  if (before && !after)
    by_uid.erase(uid_of(*before));
  if (t.info.namespaced) {
    if (after && !before)
      ++ns_counts[namespace_of(*after)];
    if (before && !after && --ns_counts[namespace_of(*before)] == 0)
      ns_counts.erase(namespace_of(*before));
  }
  const auto old_owners = owner_uids(before);
  const auto new_owners = owner_uids(after);
  for (const auto& o : old_owners) {
    if (new_owners.count(o))
      continue;
    auto d = dependents.find(o);
    if (d != dependents.end()) {
      d->second.erase(ref);
      if (d->second.empty())
        dependents.erase(d);
    }
  }
  for (const auto& o : new_owners) {
    if (!old_owners.count(o))
      dependents[o].insert(ref);
  }
}

}  // namespace trainctl::sandbox
