#include "sandbox/strategy.h"

#include <fmt/format.h>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/selector.h"

namespace trainctl::sandbox {

using nlohmann::json;

ResourceStrategy::ResourceStrategy(ResourceInfo info, std::vector<std::string> short_names,
                                   std::vector<std::string> categories)
    : info_(std::move(info)),
      short_names_(std::move(short_names)),
      categories_(std::move(categories)),
      go_type_{info_.kind, {{"metadata", "v1.ObjectMeta", GoKind::Struct, &object_meta_type()}}} {}

bool ResourceStrategy::custom() const {
  return !is_builtin_group(info_.group);
}

std::vector<std::string> ResourceStrategy::served_versions() const {
  return {info_.version};
}

json ResourceStrategy::to_version(json stored, const std::string& version) const {
  stored["apiVersion"] = info_.group.empty() ? version : info_.group + "/" + version;
  return stored;
}

json ResourceStrategy::from_version(json object, const std::string&) const {
  return object;
}

ResourceStrategy::Decoded ResourceStrategy::decode(json& object, const std::string&) const {
  if (custom())
    return {};
  return {.error = unmarshal_error(object, go_type())};
}

const GoStruct& ResourceStrategy::go_type() const {
  return go_type_;
}

void ResourceStrategy::admit(json&, const AdmissionContext&) const {}

bool ResourceStrategy::tracks_generation() const {
  return custom();
}

bool ResourceStrategy::allows_create_on_update() const {
  return false;
}

bool ResourceStrategy::allows_unconditional_update() const {
  return !custom();
}

bool ResourceStrategy::orphans_dependents_by_default() const {
  return false;
}

std::vector<std::string> ResourceStrategy::name_errors(std::string_view name) const {
  return api::names::dns1123_subdomain(name);
}

std::string ResourceStrategy::storage_prefix() const {
  // Custom resources (and the aggregated servers' types) are filed under their group.
  return custom() ? info_.group + "/" + info_.plural : info_.plural;
}

void ResourceStrategy::prepare_for_create(json& object) const {
  if (!info_.status_subresource)
    return;
  // Custom resources drop the status; built-ins reset it to its zero value.
  if (custom())
    object.erase("status");
  else
    object["status"] = json::object();
}

void ResourceStrategy::name_generated(json&) const {}

void ResourceStrategy::validate(const json&, WritePart, std::vector<FieldError>&) const {}

void ResourceStrategy::prepare_for_update(const json& old, json& next, WritePart part) const {
  if (part == WritePart::Status) {
    json status;
    const bool has_status = next.contains("status");
    if (has_status)
      status = std::move(next["status"]);
    next = old;
    if (has_status)
      next["status"] = std::move(status);
    else
      next.erase("status");
    return;
  }
  if (!info_.status_subresource)
    return;
  if (old.contains("status"))
    next["status"] = old["status"];
  else
    next.erase("status");
}

bool ResourceStrategy::checks_delete_preconditions_in_storage() const {
  return false;
}

void ResourceStrategy::check_deletable(const std::string&) const {}

DeleteFlow ResourceStrategy::delete_flow() const {
  return DeleteFlow::Finalizers;
}

std::optional<std::int64_t> ResourceStrategy::graceful_delete_period(
    const json&, std::optional<std::int64_t>) const {
  return std::nullopt;
}

bool ResourceStrategy::stored() const {
  return true;
}

std::vector<std::string> ResourceStrategy::verbs() const {
  if (!stored())
    return {"create"};
  return {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"};
}

json ResourceStrategy::answer(json object, const UserInfo&, const std::string&) const {
  return object;
}

std::vector<PrintColumn> ResourceStrategy::columns(const std::string&) const {
  return {name_column(), age_column()};
}

std::vector<std::string> ResourceStrategy::field_labels() const {
  return {};
}

std::vector<Subresource> ResourceStrategy::subresources() const {
  return {};
}

const json* ResourceStrategy::scale(const std::string&) const {
  return nullptr;
}

void ResourceStrategy::after_write(json&, WriteVerb, ServedResources&) const {}

StrategyPtr strategy_for(const ResourceInfo& info) {
  if (StrategyPtr builtin = builtin_strategy(info.group_resource()))
    return builtin;
  return std::make_shared<const ResourceStrategy>(info);
}

StrategyPtr builtin_strategy(std::string_view group_resource) {
  for (const auto& s : builtin_strategies()) {
    if (s->info().group_resource() == group_resource)
      return s;
  }
  return nullptr;
}

PrintColumn name_column() {
  return {"Name", "string", "Name must be unique within a namespace.", 0,
          [](const json& object, TablePrintTime) { return json(name_of(object)); }};
}

PrintColumn age_column() {
  return {"Age", "string",
          "CreationTimestamp is a timestamp representing the server time when this object was "
          "created.",
          0, [](const json& object, TablePrintTime now) {
            return json(api::human_duration_or_none(
                api::age_of(member(object_member(object, "metadata"), "creationTimestamp"), now)));
          }};
}

}  // namespace trainctl::sandbox
