#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "sandbox/store.h"

namespace trainctl::sandbox {

/// The PATCH flavours the API server accepts, by Content-Type.
enum class PatchType {
  Json,            // application/json-patch+json (RFC 6902)
  Merge,           // application/merge-patch+json (RFC 7386)
  StrategicMerge,  // application/strategic-merge-patch+json (built-in types only)
  Apply,           // application/apply-patch+yaml (server-side apply; body already as JSON)
};

/// The patch type a request's Content-Type names (parameters such as "; charset=utf-8" are
/// ignored); nullopt for anything else, which the server answers with unsupported_patch_type().
std::optional<PatchType> patch_type_for(std::string_view content_type);
std::string_view content_type_of(PatchType type);

/// Strategic merge needs the Go types' patch tags, so the server serves it for built-in
/// resources only; custom resources answer 415 UnsupportedMediaType (false for them).
bool strategic_merge_supported(const ResourceInfo& info);

/// The server's 415: "the body of the request was in an unknown format - accepted media types
/// include: ..." listing what `info` accepts.
ApiError unsupported_patch_type(const ResourceInfo& info);

/// RFC 7386 JSON merge patch. A patch that is not an object throws ApiError(BadRequest,
/// "Invalid JSON Patch") as the server does.
nlohmann::json apply_merge_patch(nlohmann::json target, const nlohmann::json& patch);

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test; `~0` `~1` escapes; `-` appends).
/// A malformed document throws ApiError(BadRequest); an operation that does not apply throws the
/// server's ApiError(Invalid, 422) "the server rejected our request due to an error in our
/// request", whose details.causes[0].message names the operation and path (e.g. "testing value
/// /spec/x failed: test failed").
nlohmann::json apply_json_patch(nlohmann::json target, const nlohmann::json& operations);

/// Strategic merge patch as kubectl sends it for built-in types: lists merged by key for
/// containers/initContainers/ephemeralContainers, env, volumes, imagePullSecrets (name), ports
/// (containerPort in containers, port in a Service), volumeMounts (mountPath), conditions (type),
/// ownerReferences (uid), ...; metadata.finalizers merged as a set; other lists (tolerations,
/// args, ...) replaced. Directives: `$patch: replace|delete|merge`, `$retainKeys`,
/// `$deleteFromPrimitiveList/<f>`, `$setElementOrder/<f>` (elements named there come first, in
/// that order; the others follow in their previous order).
nlohmann::json apply_strategic_merge_patch(nlohmann::json target, const nlohmann::json& patch);

/// Server-side apply, simplified: the applied configuration merged onto the live object (maps
/// recursively, lists by the strategic merge keys for built-in types and replaced otherwise,
/// null removes). Fields a manager applied before and leaves out now are NOT removed, and field
/// ownership conflicts are not detected (`force` is accepted and ignored).
nlohmann::json merge_applied_configuration(nlohmann::json live, const nlohmann::json& config,
                                           bool builtin);

/// The managedFields entry server-side apply records: {manager, operation: Apply, apiVersion,
/// time, fieldsType: FieldsV1, fieldsV1 (the fields of `config`), subresource}; replaces the
/// manager's earlier Apply entry.
void record_apply_manager(nlohmann::json& object, const ResourceInfo& info,
                          const std::string& manager, const nlohmann::json& config,
                          const std::string& time, WritePart part);

/// A PATCH request after the router parsed it.
struct PatchRequest {
  PatchType type = PatchType::Merge;
  nlohmann::json body;  // the patch document (apply YAML converted to JSON)
  WritePart part = WritePart::Main;
  std::string field_manager;  // required for Apply
  bool force = false;         // Apply only
  bool dry_run = false;
  /// For a version other than the storage version: the stored object as the client's version
  /// shows it (the patch applies to that) and back. Empty = the storage version.
  std::function<nlohmann::json(nlohmann::json)> to_served;
  std::function<nlohmann::json(nlohmann::json)> from_served;
  /// Decodes the patched object (in the client's version) as a request body is decoded: a custom
  /// resource's pruning and defaults; may throw to refuse it. Empty = nothing to do.
  std::function<void(nlohmann::json&)> decode;
};

struct PatchResult {
  nlohmann::json object;
  bool created = false;  // server-side apply created the object (the server answers 201)
};

/// PATCH `name`: applies the patch to the stored object under the store's lock and writes the
/// result with update semantics (a resourceVersion in the patch is a precondition). Apply creates
/// the object when absent. Throws what the server would: 404, 409, 415 (strategic merge on a
/// custom resource), 422, 400 (name or namespace changed by the patch).
PatchResult patch(Store& store, const std::string& group_resource, const std::string& ns,
                  const std::string& name, const PatchRequest& request);

}  // namespace trainctl::sandbox
