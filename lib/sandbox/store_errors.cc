// Errors shaped like the real server's: ApiError and metav1.Status, and the storage and
// registry errors the store throws (NotFound, AlreadyExists, Conflict, Gone, Invalid, 504).

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

/// The Status reason for an error kind: the kind's own name, but for the two reasons the API
/// spells differently, and none for kinds that are not API errors.
std::string reason_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Gone:
      return "Expired";
    case ErrorKind::ServerError:
      return "InternalError";
    case ErrorKind::Usage:
    case ErrorKind::Config:
    case ErrorKind::Validation:
    case ErrorKind::Connection:
    case ErrorKind::Protocol:
    case ErrorKind::WaitTimeout:
      return "";
    default:
      return std::string(to_string(kind));
  }
}

int code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadRequest:
      return 400;
    case ErrorKind::Unauthorized:
      return 401;
    case ErrorKind::Forbidden:
      return 403;
    case ErrorKind::NotFound:
      return 404;
    case ErrorKind::MethodNotAllowed:
      return 405;
    case ErrorKind::AlreadyExists:
    case ErrorKind::Conflict:
      return 409;
    case ErrorKind::Gone:
      return 410;
    case ErrorKind::UnsupportedMediaType:
      return 415;
    case ErrorKind::Invalid:
      return 422;
    case ErrorKind::TooManyRequests:
      return 429;
    case ErrorKind::Timeout:
      return 504;
    default:
      return 500;
  }
}

}  // namespace

ApiError::ApiError(ErrorKind kind, int code, std::string reason, std::string message, json details)
    : Error(kind, message, code) {
  status_ = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
             {"status", "Failure"}, {"message", message}, {"code", code}};
  if (!reason.empty())
    status_["reason"] = std::move(reason);
  if (!details.is_null())
    status_["details"] = std::move(details);
}

ApiError bad_request(std::string message) {
  return ApiError(ErrorKind::BadRequest, 400, "BadRequest", std::move(message));
}

json status_object(const Error& error) {
  if (const auto* api = dynamic_cast<const ApiError*>(&error))
    return api->api_status();
  const int code = error.http_code() != 0 ? error.http_code() : code_for(error.kind());
  json status = {{"kind", "Status"},    {"apiVersion", "v1"},         {"metadata", json::object()},
                 {"status", "Failure"}, {"message", error.message()}, {"code", code}};
  if (auto reason = reason_for(error.kind()); !reason.empty())
    status["reason"] = reason;
  return status;
}

std::string rv_parameter_error(std::string_view s) {
  if (s.empty())
    return "";
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && ptr == s.data() + s.size())
    return "";
  const std::string quoted = api::names::go_quote(std::string(s));
  return fmt::format(
      "resourceVersion: Invalid value: {}: strconv.ParseUint: parsing {}: {}", quoted, quoted,
      ec == std::errc::result_out_of_range ? "value out of range" : "invalid syntax");
}

ApiError rv_parameter_invalid(const std::string& field_error) {
  return ApiError(ErrorKind::ServerError, 500, "", field_error);
}

ApiError too_large_resource_version(std::uint64_t wanted, std::uint64_t current,
                                    int retry_after_seconds) {
  json details = {{"causes", json::array({{{"reason", "ResourceVersionTooLarge"},
                                           {"message", "Too large resource version"}}})}};
  if (retry_after_seconds > 0)
    details["retryAfterSeconds"] = retry_after_seconds;
  return ApiError(
      ErrorKind::Timeout, 504, "Timeout",
      fmt::format("Timeout: Too large resource version: {}, current: {}", wanted, current),
      std::move(details));
}

json resource_details(const ResourceInfo& info, const std::string& name) {
  json d = {{"name", name}, {"kind", info.plural}};
  if (!info.group.empty())
    d["group"] = info.group;
  return d;
}

ApiError forbidden(const ResourceInfo& info, const std::string& name, std::string_view why) {
  const std::string target = name.empty()
                                 ? info.group_resource()
                                 : info.group_resource() + " " + api::names::go_quote(name);
  return ApiError(ErrorKind::Forbidden, 403, "Forbidden",
                  fmt::format("{} is forbidden: {}", target, why), resource_details(info, name));
}

ApiError not_found(const ResourceInfo& info, const std::string& name) {
  return ApiError(ErrorKind::NotFound, 404, "NotFound",
                  fmt::format("{} {} not found", info.group_resource(), api::names::go_quote(name)),
                  resource_details(info, name));
}

ApiError unknown_resource() {
  return ApiError(ErrorKind::NotFound, 404, "NotFound",
                  "the server could not find the requested resource", json::object());
}

ApiError already_exists(const ResourceInfo& info, const std::string& name, bool being_deleted) {
  std::string msg =
      fmt::format("{} {} already exists", info.group_resource(), api::names::go_quote(name));
  if (being_deleted)
    msg = "object is being deleted: " + msg;
  return ApiError(ErrorKind::AlreadyExists, 409, "AlreadyExists", msg,
                  resource_details(info, name));
}

ApiError conflict(const std::string& resource, const std::string& group, const std::string& name,
                  std::string_view why) {
  const std::string qualified = group.empty() ? resource : resource + "." + group;
  json details = {{"name", name}, {"kind", resource}};
  if (!group.empty())
    details["group"] = group;
  return ApiError(ErrorKind::Conflict, 409, "Conflict",
                  fmt::format("Operation cannot be fulfilled on {} {}: {}", qualified,
                              api::names::go_quote(name), why),
                  std::move(details));
}

std::string uid_precondition_failed(std::string_view precondition, std::string_view actual) {
  return fmt::format("Precondition failed: UID in precondition: {}, UID in object meta: {}",
                     precondition, actual);
}

std::string etcd_key(const ResourceStrategy& strategy, const ResourceInfo& info,
                     const std::string& ns, const std::string& name) {
  return "/registry/" + strategy.storage_prefix() + "/" + (info.namespaced ? ns + "/" : "") + name;
}

ApiError storage_precondition_conflict(const ResourceStrategy& strategy, const ResourceInfo& info,
                                       const std::string& ns, const std::string& name,
                                       std::string_view message) {
  return conflict(info.plural, info.group, name,
                  fmt::format("StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, "
                              "AdditionalErrorMsg: {}",
                              etcd_key(strategy, info, ns, name), message));
}

ApiError gone(std::string message) {
  return ApiError(ErrorKind::Gone, 410, "Expired", std::move(message));
}

ApiError invalid(const ResourceInfo& info, const std::string& name,
                 const std::vector<FieldError>& errs) {
  return sandbox::invalid(info.group, info.kind, name, errs);
}

}  // namespace trainctl::sandbox
