#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/store.h"
#include "sandbox/strategy.h"

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

/// The Table for `objects` printed with `columns` (a strategy's).
nlohmann::json to_table(const std::vector<PrintColumn>& columns,
                        const std::vector<nlohmann::json>& objects, std::string_view include_object,
                        std::chrono::system_clock::time_point now);

/// A CRD version's additionalPrinterColumns as Table columns: NAME, then each column's JSONPath
/// (dates printed as ages), then AGE unless a column is named so.
std::vector<PrintColumn> custom_columns(const nlohmann::json& printer_columns);

// Cell helpers for the strategies' printers: a stored object's fields may come in any shape a
// client wrote, and printing must not throw on them.

/// The member `key` of `object` when it is an integer, else 0.
std::int64_t integer_member(const nlohmann::json& object, std::string_view key);
/// The member `key` of `object` when it is an array, else an empty array.
const nlohmann::json& array_member(const nlohmann::json& object, std::string_view key);
/// A string as is, null as "", anything else as JSON.
std::string cell_text(const nlohmann::json& value);
/// "<none>" for an empty string.
std::string or_none(std::string s);

/// Evaluates a printer column's simple JSONPath (`.status.phase`, `.spec.replicas`,
/// `.status.conditions[0].type`, `.metadata.labels.team`) against an object; null when absent.
nlohmann::json evaluate_json_path(const nlohmann::json& object, std::string_view path);

}  // namespace trainctl::sandbox
