#include "error.h"

#include <fmt/format.h>

#include <algorithm>

#include "json_access.h"

namespace trainctl {

Error::Error(ErrorKind kind, std::string message, int http_code)
    : kind_(kind), http_code_(http_code), message_(std::move(message)) {
  what_ = message_;
}

ErrorKind kind_for_status(int http_code, std::string_view reason) {
  // The reason is more specific than the code where the server gives one.
  if (reason == "Expired" || reason == "Gone")
    return ErrorKind::Gone;
  if (reason == "AlreadyExists")
    return ErrorKind::AlreadyExists;
  if (reason == "Conflict")
    return ErrorKind::Conflict;
  if (reason == "Invalid")
    return ErrorKind::Invalid;
  if (reason == "NotFound")
    return ErrorKind::NotFound;
  if (reason == "Timeout" || reason == "ServerTimeout")
    return ErrorKind::Timeout;
  switch (http_code) {
    case 400:
      return ErrorKind::BadRequest;
    case 401:
      return ErrorKind::Unauthorized;
    case 403:
      return ErrorKind::Forbidden;
    case 404:
      return ErrorKind::NotFound;
    case 405:
      return ErrorKind::MethodNotAllowed;
    case 409:
      return ErrorKind::Conflict;
    case 410:
      return ErrorKind::Gone;
    case 415:
      return ErrorKind::UnsupportedMediaType;
    case 422:
      return ErrorKind::Invalid;
    case 429:
      return ErrorKind::TooManyRequests;
    case 504:
      return ErrorKind::Timeout;
    default:
      return http_code >= 500 ? ErrorKind::ServerError : ErrorKind::Protocol;
  }
}

Error Error::from_response(int http_code, std::string_view body,
                           std::optional<std::chrono::seconds> retry_after) {
  nlohmann::json status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  const bool is_status = status.is_object() && status.value("kind", "") == "Status";
  std::string reason = is_status ? status.value("reason", "") : "";
  std::string server_message = is_status ? status.value("message", "") : std::string(body);
  if (server_message.size() > 512)
    server_message = server_message.substr(0, 512) + "...";
  ErrorKind kind = kind_for_status(http_code, reason);
  std::string message =
      server_message.empty()
          ? fmt::format("the server answered HTTP {} ({})", http_code, to_string(kind))
          : fmt::format("{} (HTTP {})", server_message, http_code);
  Error err(kind, std::move(message), http_code);
  err.reason_ = std::move(reason);
  if (is_status)
    err.status_ = std::move(status);
  err.retry_after_ = retry_after;
  return err;
}

bool Error::has_status_cause(std::string_view reason) const {
  const nlohmann::json& causes = member(object_member(status_, "details"), "causes");
  return causes.is_array() &&
         std::any_of(causes.begin(), causes.end(), [&](const nlohmann::json& cause) {
           return string_member(cause, "reason") == reason;
         });
}

int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
    case ErrorKind::Config:
    case ErrorKind::Validation:
      return 2;
    case ErrorKind::WaitTimeout:
      return 4;
    case ErrorKind::JobOutcome:
      return 1;
    default:
      return 3;
  }
}

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
      return "Usage";
    case ErrorKind::Config:
      return "Config";
    case ErrorKind::Validation:
      return "Validation";
    case ErrorKind::BadRequest:
      return "BadRequest";
    case ErrorKind::Unauthorized:
      return "Unauthorized";
    case ErrorKind::Forbidden:
      return "Forbidden";
    case ErrorKind::NotFound:
      return "NotFound";
    case ErrorKind::MethodNotAllowed:
      return "MethodNotAllowed";
    case ErrorKind::AlreadyExists:
      return "AlreadyExists";
    case ErrorKind::Conflict:
      return "Conflict";
    case ErrorKind::Gone:
      return "Gone";
    case ErrorKind::UnsupportedMediaType:
      return "UnsupportedMediaType";
    case ErrorKind::Invalid:
      return "Invalid";
    case ErrorKind::TooManyRequests:
      return "TooManyRequests";
    case ErrorKind::ServerError:
      return "ServerError";
    case ErrorKind::Timeout:
      return "Timeout";
    case ErrorKind::Connection:
      return "Connection";
    case ErrorKind::Protocol:
      return "Protocol";
    case ErrorKind::WaitTimeout:
      return "WaitTimeout";
    case ErrorKind::JobOutcome:
      return "JobOutcome";
  }
  return "Unknown";
}

}  // namespace trainctl
