#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/store.h"

namespace trainctl::sandbox {

/// Whether a request's Accept header asks for server-side printing (kubectl get does).
bool wants_table(std::string_view accept);

/// The meta.k8s.io/v1 Table the real server prints for `objects` of one resource: the columns of
/// the built-in printers for pods, nodes, namespaces, services, configmaps, secrets, events and
/// jobs; a CRD's additionalPrinterColumns (`printer_columns`, from the served version); NAME and
/// AGE otherwise. `include_object` is "Metadata" (default), "Object" or "None", as the query
/// parameter includeObject.
nlohmann::json to_table(const ResourceInfo& info, const std::vector<nlohmann::json>& objects,
                        const nlohmann::json& printer_columns, std::string_view include_object,
                        std::chrono::system_clock::time_point now);

/// Evaluates a printer column's simple JSONPath (`.status.phase`, `.spec.replicas`,
/// `.status.conditions[0].type`, `.metadata.labels.team`) against an object; null when absent.
nlohmann::json evaluate_json_path(const nlohmann::json& object, std::string_view path);

}  // namespace trainctl::sandbox
