// The scale subresource (autoscaling/v1 Scale) over the replica paths a strategy names.

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "error.h"
#include "json_access.h"
#include "kube/exec_protocol.h"
#include "kube/websocket.h"
#include "sandbox/api_server.h"
#include "sandbox/api_server_internal.h"
#include "sandbox/field_errors.h"
#include "sandbox/patch.h"
#include "sandbox/table.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// A scale path (".spec.pytorchReplicaSpecs.Worker.replicas") as a JSON pointer.
json::json_pointer scale_pointer(const std::string& path) {
  json::json_pointer pointer;
  std::string_view rest = path;
  if (rest.starts_with("."))
    rest.remove_prefix(1);
  while (!rest.empty()) {
    const std::size_t dot = rest.find('.');
    pointer /= std::string(rest.substr(0, dot));
    rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  }
  return pointer;
}

/// The integer at `path` of `object`; nullopt when absent, 500 when it is not an integer (the
/// apiextensions server's NestedInt64 error).
std::optional<std::int64_t> scale_int_at(const json& object, const std::string& path) {
  const json::json_pointer pointer = scale_pointer(path);
  if (path.empty() || !object.contains(pointer))
    return std::nullopt;
  const json& value = object.at(pointer);
  if (!value.is_number_integer())
    throw ApiError(ErrorKind::ServerError, 500, "InternalError",
                   fmt::format("Internal error occurred: {} accessor error: {} is of the type {}, "
                               "expected int64",
                               path, value.dump(), value.type_name()));
  return value.get<std::int64_t>();
}

/// autoscaling/v1 Scale of a custom resource (apiextensions' scaleFromCustomResource).
json scale_of(const json& object, const json& paths) {
  const json& meta = object.at("metadata");
  json scale_meta = json::object();
  for (const char* field : {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}) {
    if (meta.contains(field))
      scale_meta[field] = meta[field];
  }
  json status = {
      {"replicas", scale_int_at(object, paths.value("statusReplicasPath", "")).value_or(0)}};
  const std::string selector_path = paths.value("labelSelectorPath", "");
  if (!selector_path.empty() && object.contains(scale_pointer(selector_path)) &&
      object.at(scale_pointer(selector_path)).is_string())
    status["selector"] = object.at(scale_pointer(selector_path));
  return {{"kind", "Scale"},
          {"apiVersion", "autoscaling/v1"},
          {"metadata", std::move(scale_meta)},
          {"spec",
           {{"replicas", scale_int_at(object, paths.value("specReplicasPath", "")).value_or(0)}}},
          {"status", std::move(status)}};
}

}  // namespace

void ApiServer::serve_scale(const Request& request, ResponseWriter& response, const Route& route) {
  const json* scale_paths = route.strategy->scale(route.info.version);
  if (scale_paths == nullptr) {
    respond_status(response, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  const json& paths = *scale_paths;
  const std::string gr = route.info.group_resource();
  const std::string spec_path = paths.value("specReplicasPath", "");
  if (request.method == "GET") {
    const json object = store_.get(gr, route.ns, route.name);
    if (!scale_int_at(object, spec_path))
      throw ApiError(ErrorKind::ServerError, 500, "InternalError",
                     fmt::format("Internal error occurred: the spec replicas field {:?} does not "
                                 "exist",
                                 spec_path));
    respond_json(response, 200, scale_of(object, paths));
    return;
  }
  const json body = parse_body(request);
  const std::optional<PatchType> type =
      request.method == "PUT" ? std::nullopt : patch_type_for(request.header("content-type"));
  if (request.method != "PUT" && type.value_or(PatchType::Apply) == PatchType::Apply)
    throw unsupported_patch_type(route.info);
  // Read, scaled and written under the store's lock, as kube-apiserver's GuaranteedUpdate retries
  // its read-modify-write: a write to the object meanwhile (a controller's status) is no conflict.
  // Only a resourceVersion in the Scale itself is the client's precondition.
  const auto scale_object = [&](json& object) {
    json scale;
    if (!type) {
      scale = body;
    } else {
      json current = scale_of(object, paths);
      if (!scale_int_at(object, spec_path))
        current["spec"]["replicas"] = nullptr;
      // A strategic merge is a merge: Scale has no lists.
      scale = *type == PatchType::Json ? apply_json_patch(std::move(current), body)
                                       : apply_merge_patch(std::move(current), body);
    }
    const json& replicas = member(object_member(scale, "spec"), "replicas");
    if (replicas.is_null())
      throw bad_request(fmt::format("the spec replicas field {:?} cannot be empty", spec_path));
    if (!replicas.is_number_integer())
      throw bad_request("Scale.spec.replicas: expected an integer");
    if (replicas.get<std::int64_t>() < 0) {
      const std::string qualified = route.info.kind + "." + route.info.group;
      throw ApiError(
          ErrorKind::Invalid, 422, "Invalid",
          fmt::format("{} {:?} is invalid: {}: Invalid value: {}: should be a "
                      "non-negative integer",
                      qualified, route.name, spec_path, replicas.get<std::int64_t>()),
          {{"name", route.name},
           {"group", route.info.group},
           {"kind", route.info.kind},
           {"causes",
            {{{"reason", "FieldValueInvalid"},
              {"message", fmt::format("Invalid value: {}: should be a non-negative integer",
                                      replicas.get<std::int64_t>())},
              {"field", spec_path}}}}});
    }
    object[scale_pointer(spec_path)] = replicas;
    const std::string precondition =
        object_member(scale, "metadata").value("resourceVersion", std::string());
    if (!precondition.empty())
      object["metadata"]["resourceVersion"] = precondition;  // modify() checks it
  };
  const auto updated =
      store_.modify(gr, route.ns, route.name, WritePart::Main, scale_object, dry_run(request));
  respond_json(response, 200, scale_of(*updated, paths));
}

}  // namespace trainctl::sandbox
