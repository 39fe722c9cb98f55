// ObjectMeta as the store reads and checks it: finalizers, owner references, resource
// versions, ValidateObjectMetaAccessor's checks, what counts as a spec change.

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

namespace trainctl::sandbox {

const json& meta(const json& object) {
  return member(object, "metadata");
}

bool terminating(const json& o) {
  return meta(o).contains("deletionTimestamp");
}

bool grace_over(const json& o) {
  const json& grace = member(meta(o), "deletionGracePeriodSeconds");
  return grace.is_null() || grace == json(0);
}

std::vector<std::string> finalizers_of(const json& o) {
  std::vector<std::string> out;
  const json& list = member(meta(o), "finalizers");
  if (list.is_array()) {
    for (const auto& f : list) {
      if (f.is_string())
        out.push_back(f.get<std::string>());
    }
  }
  return out;
}

bool has_finalizer(const json& o, std::string_view f) {
  auto fs = finalizers_of(o);
  return std::find(fs.begin(), fs.end(), f) != fs.end();
}

void set_finalizers(json& o, const std::vector<std::string>& fs) {
  if (fs.empty())
    o["metadata"].erase("finalizers");
  else
    o["metadata"]["finalizers"] = fs;
}

void remove_finalizer(json& o, std::string_view f) {
  auto fs = finalizers_of(o);
  fs.erase(std::remove(fs.begin(), fs.end(), f), fs.end());
  set_finalizers(o, fs);
}

std::set<std::string> owner_uids(const json* o) {
  std::set<std::string> out;
  if (!o)
    return out;
  const json& refs = member(meta(*o), "ownerReferences");
  if (refs.is_array()) {
    for (const auto& ref : refs) {
      if (auto uid = string_member(ref, "uid"); !uid.empty())
        out.insert(uid);
    }
  }
  return out;
}

std::uint64_t parse_rv(std::string_view s) {
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || ptr != s.data() + s.size())
    return 0;
  return n;
}

void validate_metadata_content(const json& md, std::vector<FieldError>& errs) {
  for (const auto& e : api::names::label_errors(member(md, "labels")))
    errs.push_back({e.reason, "metadata.labels", e.body});
  for (const auto& e : api::names::annotation_errors(member(md, "annotations")))
    errs.push_back({e.reason, "metadata.annotations", e.body});
  const json& refs = member(md, "ownerReferences");
  if (refs.is_array()) {
    std::string first_controller;
    for (const auto& ref : refs) {
      const std::string api_version = string_member(ref, "apiVersion");
      const auto slash = api_version.find('/');
      const std::string version =
          slash == std::string::npos ? api_version : api_version.substr(slash + 1);
      if (version.empty()) {
        errs.push_back(invalid_value("metadata.ownerReferences.apiVersion",
                                     api::names::go_quote(api_version),
                                     "version must not be empty"));
      }
      for (const char* field : {"kind", "name", "uid"}) {
        if (string_member(ref, field).empty()) {
          errs.push_back(invalid_value(std::string("metadata.ownerReferences.") + field, "\"\"",
                                       "must not be empty"));
        }
      }
      if (member(ref, "controller") == json(true)) {
        const std::string current = string_member(ref, "kind") + "/" + string_member(ref, "name");
        if (!first_controller.empty()) {
          errs.push_back(invalid_value(
              "metadata.ownerReferences", refs.dump(),
              fmt::format("Only one reference can have Controller set to true. Found \"true\" in "
                          "references for {} and {}",
                          first_controller, current)));
        } else {
          first_controller = current;
        }
      }
    }
  }
  const json& finalizers = member(md, "finalizers");
  if (finalizers.is_array()) {
    bool orphan = false;
    bool foreground = false;
    for (const auto& f : finalizers) {
      const std::string name = f.is_string() ? f.get<std::string>() : f.dump();
      for (const auto& msg : api::names::qualified_name(name))
        errs.push_back(invalid_value("metadata.finalizers", api::names::go_quote(name), msg));
      orphan |= name == kFinalizerOrphan;
      foreground |= name == kFinalizerForeground;
    }
    if (orphan && foreground) {
      errs.push_back(invalid_value("metadata.finalizers", finalizers.dump(),
                                   "finalizer orphan and foregroundDeletion cannot be both set"));
    }
  }
}

std::string mask_trailing_dash(const std::string& name) {
  if (name.size() > 1 && name.back() == '-')
    return name.substr(0, name.size() - 2) + "a";
  return name;
}

bool spec_changed(const ResourceInfo& info, const json& before, const json& after) {
  auto skip = [&](const std::string& k) {
    return k == "metadata" || k == "apiVersion" || k == "kind" ||
           (k == "status" && info.status_subresource);
  };
  for (const auto& [k, v] : before.items()) {
    if (skip(k))
      continue;
    auto it = after.find(k);
    if (it == after.end() || *it != v)
      return true;
  }
  for (const auto& [k, v] : after.items()) {
    if (!skip(k) && !before.contains(k))
      return true;
  }
  return false;
}

}  // namespace trainctl::sandbox
