// DELETE: preconditions, propagation policy, finalizers and the namespace lifecycle.

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

DeleteResult Store::remove_detailed(const std::string& group_resource, const std::string& ns,
                                    const std::string& name, const DeleteRequest& request) {
  SharedJson object;
  bool deleted = false;
  {
    std::lock_guard lock(core_->mu);
    auto& core = *core_;
    core.deleted_now.clear();
    Table& t = core.table(group_resource);
    t.strategy->check_deletable(name);
    const std::string key = StoreCore::key_of(t.info, ns, name);
    if (!t.objects.count(key))
      throw not_found(t.info, name);
    const std::string uid = uid_of(*t.objects.at(key));
    std::tie(object, deleted) = core.remove(t, key, request);
    if (!request.dry_run) {
      core.run_tasks();
      auto gone_now = core.deleted_now.find(uid);
      if (gone_now != core.deleted_now.end()) {
        object = gone_now->second;
        deleted = true;
      } else if (auto it = t.objects.find(key); it != t.objects.end()) {
        object = it->second;
      }
    }
  }
  return DeleteResult{*object, deleted};
}

json Store::remove(const std::string& group_resource, const std::string& ns,
                   const std::string& name, const DeleteRequest& request) {
  return remove_detailed(group_resource, ns, name, request).object;
}

std::vector<json> Store::remove_collection(const std::string& group_resource,
                                           const ListRequest& which, const DeleteRequest& request) {
  ListRequest all = which;
  all.limit = 0;
  all.continue_token.clear();
  std::vector<json> out;
  for (const auto& item : list(group_resource, all).items) {
    try {
      out.push_back(remove(group_resource, namespace_of(item), name_of(item), request));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)  // deleted meanwhile, e.g. by garbage collection
        throw;
    }
  }
  return out;
}

void StoreCore::check_preconditions(const Table& t, const json& cur, const DeleteRequest& req) {
  const ResourceInfo& info = t.info;
  const std::string name = name_of(cur);
  const std::string rv_now = string_member(meta(cur), "resourceVersion");
  if (t.strategy->checks_delete_preconditions_in_storage()) {
    // Their registries check before deleting, in the storage layer's words.
    if (req.precondition_uid && *req.precondition_uid != uid_of(cur)) {
      throw conflict(info.plural, info.group, name,
                     uid_precondition_failed(*req.precondition_uid, uid_of(cur)));
    }
    if (req.precondition_resource_version && *req.precondition_resource_version != rv_now) {
      throw conflict(info.plural, info.group, name,
                     fmt::format("Precondition failed: ResourceVersion in precondition: {}, "
                                 "ResourceVersion in object meta: {}",
                                 *req.precondition_resource_version, rv_now));
    }
    return;
  }
  // rest.BeforeDelete's words (group and kind as the resource).
  if (req.precondition_uid && *req.precondition_uid != uid_of(cur)) {
    throw conflict(info.kind, info.group, name,
                   fmt::format("the UID in the precondition ({}) does not match the UID in "
                               "record ({}). The object might have been deleted and then "
                               "recreated",
                               *req.precondition_uid, uid_of(cur)));
  }
  if (req.precondition_resource_version && *req.precondition_resource_version != rv_now) {
    throw conflict(info.kind, info.group, name,
                   fmt::format("the ResourceVersion in the precondition ({}) does not match "
                               "the ResourceVersion in record ({}). The object might have "
                               "been modified",
                               *req.precondition_resource_version, rv_now));
  }
}

void StoreCore::validate_policy(const std::string& policy) {
  if (policy.empty() || policy == "Background" || policy == "Foreground" || policy == "Orphan")
    return;
  throw sandbox::invalid("meta.k8s.io", "DeleteOptions", "",
                         {not_supported("propagationPolicy", api::names::go_quote(policy),
                                        {"Foreground", "Background", "Orphan"})});
}

bool StoreCore::should_orphan(const ResourceStrategy& strategy, const std::string& policy,
                              const std::vector<std::string>& finalizers) {
  if (policy == "Orphan")
    return true;
  if (policy == "Background" || policy == "Foreground")
    return false;
  for (const auto& f : finalizers) {
    if (f == kFinalizerOrphan)
      return true;
    if (f == kFinalizerForeground)
      return false;
  }
  return strategy.orphans_dependents_by_default();
}

bool StoreCore::should_delete_dependents(const std::string& policy,
                                         const std::vector<std::string>& finalizers) {
  if (policy == "Foreground")
    return true;
  if (policy == "Background" || policy == "Orphan")
    return false;
  for (const auto& f : finalizers) {
    if (f == kFinalizerForeground)
      return true;
    if (f == kFinalizerOrphan)
      return false;
  }
  return false;
}

SharedJson StoreCore::delete_now(Table& t, const std::string& key, bool dry_run) {
  SharedJson cur = t.objects.at(key);
  if (dry_run)
    return cur;
  auto deleted = commit(t, key, *cur, WatchEventType::Deleted);
  after_removal(t, *deleted);
  return deleted;
}

StoreCore::Graceful StoreCore::before_delete(const Table& t, json& next,
                                             const DeleteRequest& req) const {
  std::optional<std::int64_t> requested = req.grace_period_seconds;
  if (requested && *requested < 0)
    requested = 1;  // negative periods count as 1 s on the delete path
  const auto period = t.strategy->graceful_delete_period(next, requested);
  if (!period)
    return Graceful::No;
  json& md = next["metadata"];
  if (md.contains("deletionTimestamp")) {
    // Under way: only a shorter period is taken, measured from when the deletion began.
    if (grace_over(next))
      return Graceful::No;
    const std::int64_t current =
        std::max(md["deletionGracePeriodSeconds"].get<std::int64_t>(), std::int64_t{1});
    if (!requested || *requested >= current)
      return Graceful::Pending;
    const auto began = api::parse_timestamp(string_member(md, "deletionTimestamp"))
                           .value_or(options.now() + std::chrono::seconds(current)) -
                       std::chrono::seconds(current);
    md["deletionTimestamp"] = api::format_timestamp(began + std::chrono::seconds(*requested));
    md["deletionGracePeriodSeconds"] = *requested;
    return Graceful::Yes;
  }
  md["deletionTimestamp"] = api::format_timestamp(options.now() + std::chrono::seconds(*period));
  md["deletionGracePeriodSeconds"] = *period;
  if (md.contains("generation"))
    md["generation"] = md["generation"].get<std::int64_t>() + 1;
  return Graceful::Yes;
}

void StoreCore::mark_as_deleting(json& next) const {
  json& md = next["metadata"];
  const auto now = options.now();
  if (!md.contains("deletionTimestamp")) {
    if (md.contains("generation"))
      md["generation"] = md["generation"].get<std::int64_t>() + 1;
    md["deletionTimestamp"] = api::format_timestamp(now);
  } else if (api::parse_timestamp(string_member(md, "deletionTimestamp")).value_or(now) > now) {
    md["deletionTimestamp"] = api::format_timestamp(now);
  }
  md["deletionGracePeriodSeconds"] = 0;
}

std::pair<SharedJson, bool> StoreCore::remove(Table& t, const std::string& key,
                                              const DeleteRequest& req) {
  validate_policy(req.propagation_policy);
  const SharedJson cur = t.objects.at(key);
  check_preconditions(t, *cur, req);
  if (t.strategy->delete_flow() == DeleteFlow::NamespaceLifecycle)
    return remove_namespace(t, key, req);

  json next = *cur;
  const Graceful graceful = before_delete(t, next, req);
  if (graceful == Graceful::Pending)  // nor can DeleteOptions change the finalizers then
    return {cur, false};
  const auto finalizers = finalizers_of(*cur);
  std::vector<std::string> next_finalizers;
  for (const auto& f : finalizers) {
    if (f != kFinalizerOrphan && f != kFinalizerForeground)
      next_finalizers.push_back(f);
  }
  if (should_orphan(*t.strategy, req.propagation_policy, finalizers))
    next_finalizers.emplace_back(kFinalizerOrphan);
  if (should_delete_dependents(req.propagation_policy, finalizers))
    next_finalizers.emplace_back(kFinalizerForeground);
  if (graceful == Graceful::No && next_finalizers.empty())
    return {delete_now(t, key, req.dry_run), true};

  if (std::set(finalizers.begin(), finalizers.end()) !=
      std::set(next_finalizers.begin(), next_finalizers.end()))
    set_finalizers(next, next_finalizers);
  if (graceful == Graceful::No)
    mark_as_deleting(next);
  // A graceful delete with period 0 is written, then removed: watchers see both.
  const bool goes_now = next_finalizers.empty() && grace_over(next);
  if (req.dry_run)
    return {std::make_shared<const json>(std::move(next)), goes_now};
  SharedJson stored = cur;
  if (next != *cur)
    stored = commit(t, key, std::move(next), WatchEventType::Modified);
  if (goes_now)
    return {delete_now(t, key, false), true};
  if (!next_finalizers.empty())
    tasks.push_back({TaskKind::Finalize, uid_of(*stored)});
  return {stored, false};
}

std::pair<SharedJson, bool> StoreCore::remove_namespace(Table& t, const std::string& key,
                                                        const DeleteRequest& req) {
  const SharedJson cur = t.objects.at(key);
  if (terminating(*cur))
    return {cur, false};
  json next = *cur;
  next["metadata"]["deletionTimestamp"] = now_text();
  next["status"]["phase"] = "Terminating";
  if (req.dry_run)
    return {std::make_shared<const json>(std::move(next)), false};
  auto stored = commit(t, key, std::move(next), WatchEventType::Modified);
  // The namespace controller's work: delete everything in it.
  const std::string prefix = key + "/";
  for (auto& [gr, content] : tables) {
    if (!content.info.namespaced)
      continue;
    std::vector<std::string> keys;
    for (auto it = content.objects.lower_bound(prefix);
         it != content.objects.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      keys.push_back(it->first);
    for (const auto& k : keys) {
      auto it = content.objects.find(k);
      if (it != content.objects.end() && !terminating(*it->second))
        remove(content, k, DeleteRequest{.propagation_policy = "Background"});
    }
  }
  tasks.push_back({TaskKind::FinishNamespace, key});
  return {stored, false};
}

}  // namespace trainctl::sandbox
