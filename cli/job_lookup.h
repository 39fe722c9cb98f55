#pragma once

// Finding training jobs of any of the three kinds: shared by submit, list, get and delete.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/job.h"
#include "kube/client.h"

namespace trainctl::cli {

/// Job lookup shared by the job verbs: a kind's resource, the --kind flag
/// (tfjob|pytorchjob|mpijob, any case, plural too) and one job by name across the kinds.
struct FoundJob {
  api::JobKind kind;
  nlohmann::json object;
};
api::JobKind parse_kind_flag(std::string_view value);
/// NotFound when no kind has it (with `trainctl install` advice when --kind names an unserved
/// kind), Usage when several kinds do.
FoundJob find_job(kube::Client& client, std::string_view ns, std::string_view name,
                  std::optional<api::JobKind> kind);
/// Sorts jobs by namespace, name and kind, as list_jobs returns them.
void sort_jobs(std::vector<FoundJob>& jobs);
/// The jobs matching `label_selector` in `ns` ("" = all namespaces), sorted by namespace/name
///. Kinds the cluster does not serve are skipped unless `kind` names one, or it serves none:
/// then NotFound with `trainctl install` advice.
std::vector<FoundJob> list_jobs(kube::Client& client, std::string_view ns,
                                const std::string& label_selector,
                                std::optional<api::JobKind> kind);

/// The object, or null when it does not exist or its kind is not served (a job's PodGroup when
/// Volcano's CRDs are not installed). Other errors are thrown.
nlohmann::json get_or_null(kube::Client& client, const kube::Resource& resource,
                           std::string_view ns, std::string_view name);

}  // namespace trainctl::cli
