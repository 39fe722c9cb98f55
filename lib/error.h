#pragma once

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace trainctl {

/// What went wrong, in the categories callers branch on and exit codes derive from.
enum class ErrorKind {
  // Input the user gave us (exit code 2).
  Usage,
  Config,
  Validation,
  // The API server said no, or could not be reached (exit code 3).
  BadRequest,
  Unauthorized,
  Forbidden,
  NotFound,
  MethodNotAllowed,
  AlreadyExists,
  Conflict,
  Gone,
  UnsupportedMediaType,
  Invalid,
  TooManyRequests,
  ServerError,
  Timeout,
  Connection,
  Protocol,
  // A wait ran out of time (exit code 4).
  WaitTimeout,
  // The awaited job ended otherwise than waited for (exit code 1): it failed, or it succeeded
  // when its failure was awaited.
  JobOutcome,
};

/// The one error type of trainctl: a kind to branch on and a message a person can act on.
/// API errors also carry the HTTP code and the server's Status object.
class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message, int http_code = 0);

  /// Builds the error for a non-2xx response, preferring the server's Status object.
  static Error from_response(int http_code, std::string_view body,
                             std::optional<std::chrono::seconds> retry_after = std::nullopt);

  ErrorKind kind() const { return kind_; }
  int http_code() const { return http_code_; }
  const std::string& message() const { return message_; }
  /// The Status `reason` the server gave ("NotFound", "Expired", ...), empty when none.
  const std::string& reason() const { return reason_; }
  /// The server's Status object, or null when the body was not one.
  const nlohmann::json& status() const { return status_; }
  /// Whether the server's Status names a cause with this reason in details.causes
  /// (apimachinery's HasStatusCause): "NamespaceTerminating", "ResourceVersionTooLarge", ...
  bool has_status_cause(std::string_view reason) const;
  std::optional<std::chrono::seconds> retry_after() const { return retry_after_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  ErrorKind kind_;
  int http_code_;
  std::string message_;
  std::string reason_;
  nlohmann::json status_;
  std::optional<std::chrono::seconds> retry_after_;
  std::string what_;
};

/// The documented process exit code for an error of this kind (see `man trainctl`).
int exit_code(ErrorKind kind);

std::string_view to_string(ErrorKind kind);

/// Maps an HTTP status code and Status reason to a kind, as client-go's errors package does.
ErrorKind kind_for_status(int http_code, std::string_view reason);

}  // namespace trainctl
