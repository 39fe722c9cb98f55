#include "controller/objects.h"

#include "api/well_known.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::controller {

std::string operator_name(api::JobKind kind) {
  if (kind == api::JobKind::MPIJob)
    return "mpi-operator";
  return to_lower(api::job_kind_info(kind).name) + "-controller";
}

std::string replica_name(std::string_view job_name, std::string_view replica_type, int index) {
  return std::string(job_name) + "-" + to_lower(replica_type) + "-" + std::to_string(index);
}

nlohmann::json job_labels(api::JobKind kind, std::string_view job_name) {
  return {{std::string(api::labels::operator_name), operator_name(kind)},
          {std::string(api::labels::job_name), std::string(job_name)}};
}

nlohmann::json replica_labels(api::JobKind kind, std::string_view job_name,
                              std::string_view replica_type, int index) {
  nlohmann::json result = job_labels(kind, job_name);
  result[std::string(api::labels::replica_type)] = to_lower(replica_type);
  result[std::string(api::labels::replica_index)] = std::to_string(index);
  return result;
}

std::string managed_selector() {
  return std::string(api::labels::job_name);
}

nlohmann::json managed_labels(std::string_view job_name) {
  return {{std::string(api::labels::job_name), std::string(job_name)}};
}

ObjectReference reference_to(const nlohmann::json& object) {
  return {.api_version = string_member(object, "apiVersion"),
          .kind = string_member(object, "kind"),
          .namespace_ = namespace_of(object),
          .name = name_of(object),
          .uid = uid_of(object)};
}

nlohmann::json controller_reference(const nlohmann::json& job) {
  return {{"apiVersion", job.value("apiVersion", "")},
          {"kind", job.value("kind", "")},
          {"name", job.at("metadata").value("name", "")},
          {"uid", job.at("metadata").value("uid", "")},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

}  // namespace trainctl::controller
