// CREATE and UPDATE: the registry's create (names, generateName, namespace admission) and
// update (preconditions, the strategy's status split, system fields, generation, validation).

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

namespace {

constexpr std::string_view kOptimisticLockMsg =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The resourceVersion an update carries, read as the etcd3 storage's versioner reads it
/// (strconv.ParseUint, base 10): 0 when empty; anything else that is not a uint64 is the 500 it
/// answers, in Go's words.
std::uint64_t parse_resource_version(const std::string& text) {
  if (text.empty())
    return 0;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc() && end == text.data() + text.size())
    return value;
  const bool digits =
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  throw ApiError(ErrorKind::ServerError, 500, "",
                 fmt::format("strconv.ParseUint: parsing {}: {}", api::names::go_quote(text),
                             digits ? "value out of range" : "invalid syntax"));
}

}  // namespace

void Store::ensure_namespace(const std::string& name) {
  std::lock_guard lock(core_->mu);
  Table& t = core_->tables.at(kNamespaces);
  if (t.objects.count(name))
    return;
  core_->create(t, json{{"metadata", {{"name", name}}}}, false);
}

json Store::create(const std::string& group_resource, json object, bool dry_run) {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    core_->deleted_now.clear();
    result = core_->create(core_->table(group_resource), std::move(object), dry_run);
    core_->run_tasks();
  }
  return *result;
}

json Store::update(const std::string& group_resource, json object, WritePart part, bool dry_run) {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    core_->deleted_now.clear();
    result = core_->put(core_->table(group_resource), std::move(object), part, dry_run);
    core_->run_tasks();
  }
  return *result;
}

SharedJson Store::modify(const std::string& group_resource, const std::string& ns,
                         const std::string& name, WritePart part,
                         const std::function<void(json&)>& mutate, bool dry_run) {
  SharedJson result;
  {
    std::lock_guard lock(core_->mu);
    core_->deleted_now.clear();
    Table& t = core_->table(group_resource);
    const std::string key = StoreCore::key_of(t.info, ns, name);
    auto it = t.objects.find(key);
    if (it == t.objects.end())
      throw not_found(t.info, name);
    json copy = *it->second;
    mutate(copy);
    result = core_->update(t, key, std::move(copy), part, dry_run, /*allow_unconditional=*/true);
    core_->run_tasks();
  }
  return result;
}

void StoreCore::check_namespace_admission(const ResourceInfo& info, const std::string& ns,
                                          const std::string& name) {
  auto& namespaces = tables.at(kNamespaces);
  auto it = namespaces.objects.find(ns);
  if (it == namespaces.objects.end())
    throw not_found(namespaces.info, ns);
  if (terminating(*it->second)) {
    ApiError e = forbidden(info, name,
                           fmt::format("unable to create new content in namespace {} because it "
                                       "is being terminated",
                                       ns));
    e.api_status()["details"]["causes"] =
        json::array({{{"reason", "NamespaceTerminating"},
                      {"message", "namespace " + ns + " is being terminated"},
                      {"field", "metadata.namespace"}}});
    throw e;
  }
}

SharedJson StoreCore::create(Table& t, json obj, bool dry_run) {
  const ResourceInfo& info = t.info;
  if (!obj.is_object())
    throw bad_request("the body of the request was not a JSON object");
  if (!obj["metadata"].is_object())
    obj["metadata"] = json::object();
  json& md = obj["metadata"];
  // etcd3's store refuses it; a dry run never reaches the store (kube-apiserver answers 201).
  if (!dry_run && parse_rv(string_member(md, "resourceVersion")) != 0) {
    throw ApiError(ErrorKind::ServerError, 500, "",
                   "resourceVersion should not be set on objects to be created");
  }
  md.erase("resourceVersion");
  obj["apiVersion"] = info.api_version();
  obj["kind"] = info.kind;
  const std::string requested_name = string_member(md, "name");
  std::string ns;
  if (info.namespaced) {
    ns = string_member(md, "namespace");
    if (ns.empty())
      throw invalid(info, requested_name, {required_value("metadata.namespace", "")});
    check_namespace_admission(info, ns, requested_name);
  } else {
    md.erase("namespace");
  }
  md.erase("deletionTimestamp");
  md.erase("deletionGracePeriodSeconds");
  drop_empty_metadata(md);
  md["uid"] = new_uid();
  md["creationTimestamp"] = now_text();
  if (t.strategy->tracks_generation())
    md["generation"] = 1;
  else
    md.erase("generation");
  t.strategy->prepare_for_create(obj);

  const std::string generate_name = string_member(md, "generateName");
  const bool generating = requested_name.empty() && !generate_name.empty();
  constexpr int kAttempts = 8;
  for (int attempt = 0;; ++attempt) {
    if (generating) {
      md["name"] = generate_name.substr(0, 58) + random_suffix();
      t.strategy->name_generated(obj);
    }
    const std::string name = string_member(md, "name");
    validate_create(t, obj);
    const std::string key = key_of(info, ns, name);
    auto existing = t.objects.find(key);
    if (existing == t.objects.end())
      break;
    if (generating && attempt + 1 < kAttempts)
      continue;
    throw already_exists(info, name, terminating(*existing->second));
  }
  if (dry_run)
    return std::make_shared<const json>(std::move(obj));
  const std::string key = key_of(info, ns, name_of(obj));
  SharedJson stored = commit(t, key, std::move(obj), WatchEventType::Added);
  check_new_owners(nullptr, *stored);
  return stored;
}

void StoreCore::validate_create(const Table& t, const json& obj) {
  const ResourceInfo& info = t.info;
  const json& md = meta(obj);
  std::vector<FieldError> errs;
  const std::string generate_name = string_member(md, "generateName");
  if (!generate_name.empty()) {
    for (const auto& msg : t.strategy->name_errors(mask_trailing_dash(generate_name))) {
      errs.push_back(
          invalid_value("metadata.generateName", api::names::go_quote(generate_name), msg));
    }
  }
  const std::string name = string_member(md, "name");
  if (name.empty()) {
    errs.push_back(required_value("metadata.name", "name or generateName is required"));
  } else {
    for (const auto& msg : t.strategy->name_errors(name))
      errs.push_back(invalid_value("metadata.name", api::names::go_quote(name), msg));
  }
  if (info.namespaced) {
    const std::string ns = string_member(md, "namespace");
    for (const auto& msg : api::names::dns1123_label(ns))
      errs.push_back(invalid_value("metadata.namespace", api::names::go_quote(ns), msg));
  }
  validate_metadata_content(md, errs);
  t.strategy->validate(obj, WritePart::Main, errs);
  if (!errs.empty())
    throw invalid(info, name, errs);
}

SharedJson StoreCore::update(Table& t, const std::string& key, json obj, WritePart part,
                             bool dry_run, bool allow_unconditional) {
  const ResourceInfo& info = t.info;
  SharedJson existing = t.objects.at(key);
  const json& old = *existing;
  const json& old_md = meta(old);
  const std::string name = string_member(old_md, "name");
  if (!obj.is_object())
    throw bad_request("the body of the request was not a JSON object");
  if (!obj["metadata"].is_object())
    obj["metadata"] = json::object();

  const std::uint64_t given_rv =
      parse_resource_version(string_member(obj["metadata"], "resourceVersion"));
  if (given_rv == 0) {
    if (!allow_unconditional) {
      throw invalid(
          info.group, info.plural, name,
          {invalid_value("metadata.resourceVersion", "0x0", "must be specified for an update")});
    }
  } else if (given_rv != parse_resource_version(string_member(old_md, "resourceVersion"))) {
    throw conflict(info.plural, info.group, name, kOptimisticLockMsg);
  }

  json next = std::move(obj);
  t.strategy->prepare_for_update(old, next, part);

  std::vector<FieldError> errs;
  json& md = next["metadata"];
  next["apiVersion"] = info.api_version();
  next["kind"] = info.kind;
  if (part == WritePart::Main) {
    if (string_member(md, "name") != name)
      errs.push_back(immutable("metadata.name", api::names::go_quote(string_member(md, "name"))));
    if (info.namespaced && string_member(md, "namespace") != string_member(old_md, "namespace")) {
      errs.push_back(
          immutable("metadata.namespace", api::names::go_quote(string_member(md, "namespace"))));
    }
    const std::string uid = string_member(md, "uid");
    if (!uid.empty() && uid != uid_of(old))
      errs.push_back(immutable("metadata.uid", api::names::go_quote(uid)));
    if (!old_md.contains("deletionTimestamp") && md.contains("deletionTimestamp")) {
      errs.push_back(immutable("metadata.deletionTimestamp",
                               api::names::go_quote(string_member(md, "deletionTimestamp"))));
    }
    if (!info.namespaced)
      md.erase("namespace");
  }
  drop_empty_metadata(md);
  md["uid"] = old_md["uid"];
  md["creationTimestamp"] = old_md.value("creationTimestamp", json());
  for (const char* f : {"deletionTimestamp", "deletionGracePeriodSeconds", "generation"}) {
    if (old_md.contains(f))
      md[f] = old_md[f];
    else
      md.erase(f);
  }
  if (part == WritePart::Main && t.strategy->tracks_generation() && spec_changed(info, old, next))
    md["generation"] = old_md.value("generation", 0) + 1;

  if (part == WritePart::Main) {
    validate_metadata_content(md, errs);
    if (terminating(old)) {
      auto before = finalizers_of(old);
      std::set<std::string> added;
      for (const auto& f : finalizers_of(next)) {
        if (std::find(before.begin(), before.end(), f) == before.end())
          added.insert(f);
      }
      if (!added.empty()) {
        std::string list;
        for (const auto& f : added)
          list += (list.empty() ? "" : ", ") + api::names::go_quote(f);
        errs.push_back(forbidden_value(
            "metadata.finalizers",
            "no new finalizers can be added if the object is being deleted, found new "
            "finalizers []string{" +
                list + "}"));
      }
    }
  }
  t.strategy->validate(next, part, errs);
  if (!errs.empty())
    throw invalid(info, name, errs);
  md["resourceVersion"] = old_md["resourceVersion"];

  // Emptying the finalizers of a terminating object completes its deletion.
  if (terminating(old) && finalizers_of(next).empty() && grace_over(old)) {
    auto result = std::make_shared<const json>(std::move(next));
    if (!dry_run) {
      auto deleted = commit(t, key, old, WatchEventType::Deleted);
      after_removal(t, *deleted);
    }
    return result;
  }
  if (next == old)
    return existing;
  if (dry_run)
    return std::make_shared<const json>(std::move(next));
  auto stored = commit(t, key, std::move(next), WatchEventType::Modified);
  after_update(old, *stored);
  return stored;
}

SharedJson StoreCore::put(Table& t, json obj, WritePart part, bool dry_run) {
  const ResourceInfo& info = t.info;
  const std::string name = name_of(obj);
  const std::string ns = info.namespaced ? namespace_of(obj) : "";
  if (name.empty()) {
    throw invalid(info, name,
                  {required_value("metadata.name", "name or generateName is required")});
  }
  const std::string key = key_of(info, ns, name);
  const auto existing = t.objects.find(key);
  // A uid in the body is the update's precondition, checked against the stored object (an
  // empty one when there is none) before anything else: a real server answers a PUT with a
  // uid to a missing object 409, not 404 (GuaranteedUpdate checks preconditions first).
  const std::string uid = uid_of(obj);
  const std::string stored_uid = existing == t.objects.end() ? "" : uid_of(*existing->second);
  if (!uid.empty() && uid != stored_uid)
    throw storage_precondition_conflict(*t.strategy, info, ns, name,
                                        uid_precondition_failed(uid, stored_uid));
  const bool may_create = part == WritePart::Main && t.strategy->allows_create_on_update();
  if (existing == t.objects.end() && !may_create)
    throw not_found(info, name);
  if (existing == t.objects.end()) {
    obj["metadata"].erase("resourceVersion");
    return create(t, std::move(obj), dry_run);
  }
  return update(t, key, std::move(obj), part, dry_run, t.strategy->allows_unconditional_update());
}

}  // namespace trainctl::sandbox
