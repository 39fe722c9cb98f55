#include "replicas.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <tuple>

#include "api/well_known.h"
#include "text.h"

namespace trainctl::cli {

using nlohmann::json;

std::string replica_selector(std::string_view job) {
  return fmt::format("{}={}", api::labels::job_name, job);
}

std::string label_of(const json& object, std::string_view key) {
  const json& labels = object.value("metadata", json::object()).value("labels", json::object());
  const auto it = labels.find(key);
  return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
}

namespace {

/// The replica-type label, else the MPI Operator's job-role.
std::string replica_type_label(const json& pod) {
  std::string type = label_of(pod, api::labels::replica_type);
  return type.empty() ? label_of(pod, api::labels::job_role) : type;
}

}  // namespace

std::string replica_display_name(const json& pod) {
  const std::string type = replica_type_label(pod);
  if (type.empty())
    return pod["metadata"].value("name", "");
  const std::string index = label_of(pod, api::labels::replica_index);
  return index.empty() ? to_lower(type) : fmt::format("{}-{}", to_lower(type), index);
}

bool replica_order(const json& a, const json& b) {
  auto key = [](const json& pod) {
    const std::string index = label_of(pod, api::labels::replica_index);
    const bool numeric =
        !index.empty() && index.size() < 9 && std::all_of(index.begin(), index.end(), ::isdigit);
    return std::tuple(to_lower(replica_type_label(pod)), numeric ? std::stoi(index) : -1,
                      pod["metadata"].value("name", ""));
  };
  return key(a) < key(b);
}

std::string log_container(const json& pod, api::JobKind kind) {
  const json annotations =
      pod.value("metadata", json::object()).value("annotations", json::object());
  const std::string annotated =
      annotations.value(std::string(api::annotations::default_container), "");
  if (!annotated.empty())
    return annotated;
  const json containers = pod.value("spec", json::object()).value("containers", json::array());
  const std::string_view preferred = api::job_kind_info(kind).default_container;
  for (const auto& c : containers) {
    if (!preferred.empty() && c.value("name", "") == preferred)
      return std::string(preferred);
  }
  return containers.empty() ? "" : containers[0].value("name", "");
}

json container_status(const json& pod, std::string_view container) {
  for (const auto& cs :
       pod.value("status", json::object()).value("containerStatuses", json::array())) {
    if (cs.value("name", "") == container)
      return cs;
  }
  return nullptr;
}

}  // namespace trainctl::cli
