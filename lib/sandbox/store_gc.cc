// The garbage collector and namespace controller, run synchronously after each write: owner
// references, orphan and foreground finalizers, emptied namespaces.

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
#include "sandbox/store.h"
#include "sandbox/store_core.h"
#include "sandbox/strategy.h"
#include "text.h"

namespace trainctl::sandbox {

void StoreCore::after_removal(const Table& t, const json& removed) {
  tasks.push_back({TaskKind::CollectDependents, uid_of(removed)});
  for (const auto& owner : owner_uids(&removed)) {
    const json* o = find_by_uid(owner);
    if (o && waiting_for_dependents(*o))
      tasks.push_back({TaskKind::Finalize, owner});
  }
  if (t.info.namespaced) {
    auto& namespaces = tables.at(kNamespaces);
    auto ns = namespaces.objects.find(namespace_of(removed));
    if (ns != namespaces.objects.end() && terminating(*ns->second))
      tasks.push_back({TaskKind::FinishNamespace, ns->first});
  }
}

void StoreCore::check_new_owners(const json* before, const json& after) {
  const auto old_owners = owner_uids(before);
  for (const auto& owner : owner_uids(&after)) {
    if (old_owners.count(owner))
      continue;
    if (!find_by_uid(owner)) {
      tasks.push_back({TaskKind::AttemptDeleteDependent, uid_of(after)});
      return;
    }
  }
}

void StoreCore::after_update(const json& before, const json& after) {
  check_new_owners(&before, after);
  const auto now_owners = owner_uids(&after);
  for (const auto& owner : owner_uids(&before)) {
    if (now_owners.count(owner))
      continue;
    const json* o = find_by_uid(owner);
    if (o && waiting_for_dependents(*o))
      tasks.push_back({TaskKind::Finalize, owner});
  }
}

void StoreCore::remove_owner_refs(Table& t, const std::string& key,
                                  const std::set<std::string>& drop) {
  json next = *t.objects.at(key);
  json& refs = next["metadata"]["ownerReferences"];
  json kept = json::array();
  for (auto& ref : refs) {
    if (!drop.count(string_member(ref, "uid")))
      kept.push_back(std::move(ref));
  }
  if (kept.empty())
    next["metadata"].erase("ownerReferences");
  else
    refs = std::move(kept);
  auto stored = commit(t, key, std::move(next), WatchEventType::Modified);
  (void)stored;
  for (const auto& owner : drop) {
    const json* o = find_by_uid(owner);
    if (o && waiting_for_dependents(*o))
      tasks.push_back({TaskKind::Finalize, owner});
  }
}

void StoreCore::attempt_delete_dependent(const Ref& ref) {
  auto t = tables.find(ref.gr);
  if (t == tables.end())
    return;
  auto it = t->second.objects.find(ref.key);
  if (it == t->second.objects.end() || terminating(*it->second))
    return;
  const json& dep = *it->second;
  std::set<std::string> solid, stale;
  bool waiting = false;
  for (const auto& owner : owner_uids(&dep)) {
    const json* o = find_by_uid(owner);
    if (!o) {
      stale.insert(owner);
    } else if (waiting_for_dependents(*o)) {
      stale.insert(owner);
      waiting = true;
    } else {
      solid.insert(owner);
    }
  }
  if (!solid.empty()) {
    if (!stale.empty())
      remove_owner_refs(t->second, ref.key, stale);
    return;
  }
  DeleteRequest req;
  if (waiting && dependents.count(uid_of(dep)))
    req.propagation_policy = "Foreground";
  remove(t->second, ref.key, req);
}

void StoreCore::finalize(const std::string& uid) {
  Table* t = nullptr;
  std::string key;
  const json* obj = find_by_uid(uid, &t, &key);
  if (!obj || !terminating(*obj))
    return;
  if (has_finalizer(*obj, kFinalizerOrphan)) {
    auto deps = dependents.count(uid) ? dependents.at(uid) : std::set<Ref>{};
    for (const auto& d : deps) {
      auto dt = tables.find(d.gr);
      if (dt != tables.end() && dt->second.objects.count(d.key))
        remove_owner_refs(dt->second, d.key, {uid});
    }
    json next = *t->objects.at(key);
    remove_finalizer(next, kFinalizerOrphan);
    commit(*t, key, std::move(next), WatchEventType::Modified);
  }
  obj = t->objects.at(key).get();
  if (has_finalizer(*obj, kFinalizerForeground)) {
    auto deps = dependents.count(uid) ? dependents.at(uid) : std::set<Ref>{};
    for (const auto& d : deps)
      attempt_delete_dependent(d);
    auto again = t->objects.find(key);
    if (again == t->objects.end())
      return;
    if (blocking_dependents(uid) > 0)
      return;
    json next = *again->second;
    remove_finalizer(next, kFinalizerForeground);
    commit(*t, key, std::move(next), WatchEventType::Modified);
  }
  auto latest = t->objects.find(key);
  if (latest != t->objects.end() && finalizers_of(*latest->second).empty() &&
      grace_over(*latest->second))
    delete_now(*t, key, false);
}

std::size_t StoreCore::blocking_dependents(const std::string& owner) {
  std::size_t n = 0;
  auto deps = dependents.find(owner);
  if (deps == dependents.end())
    return 0;
  for (const auto& d : deps->second) {
    auto t = tables.find(d.gr);
    if (t == tables.end())
      continue;
    auto it = t->second.objects.find(d.key);
    if (it == t->second.objects.end())
      continue;
    const json& refs = member(meta(*it->second), "ownerReferences");
    for (const auto& ref : refs) {
      if (string_member(ref, "uid") == owner && member(ref, "blockOwnerDeletion") == json(true))
        ++n;
    }
  }
  return n;
}

void StoreCore::collect_dependents(const std::string& owner) {
  if (by_uid.count(owner))
    return;
  auto deps = dependents.find(owner);
  if (deps == dependents.end())
    return;
  const auto copy = deps->second;
  for (const auto& d : copy)
    attempt_delete_dependent(d);
}

void StoreCore::finish_namespace(const std::string& name) {
  auto& namespaces = tables.at(kNamespaces);
  auto it = namespaces.objects.find(name);
  if (it == namespaces.objects.end() || !terminating(*it->second) || ns_counts.count(name))
    return;
  if (member(member(*it->second, "spec"), "finalizers").size() > 0) {
    json next = *it->second;
    next["spec"].erase("finalizers");
    commit(namespaces, name, std::move(next), WatchEventType::Modified);
  }
  if (finalizers_of(*namespaces.objects.at(name)).empty())
    delete_now(namespaces, name, false);
}

void StoreCore::run_tasks() {
  for (std::size_t steps = 0; !tasks.empty() && steps < 1'000'000; ++steps) {
    Task task = std::move(tasks.front());
    tasks.pop_front();
    switch (task.kind) {
      case TaskKind::Finalize:
        finalize(task.id);
        break;
      case TaskKind::CollectDependents:
        collect_dependents(task.id);
        break;
      case TaskKind::AttemptDeleteDependent:
        if (const auto ref = by_uid.find(task.id); ref != by_uid.end())
          attempt_delete_dependent(Ref(ref->second));
        break;
      case TaskKind::FinishNamespace:
        finish_namespace(task.id);
        break;
    }
  }
  tasks.clear();
}

}  // namespace trainctl::sandbox
