#pragma once

// What the API server's files (api_server*.cc) share: the parsed route of a request and the
// helpers that answer it. Not part of the ApiServer interface.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "error.h"
#include "sandbox/api_server.h"
#include "sandbox/http_server.h"
#include "sandbox/strategy.h"

namespace trainctl::sandbox {

using nlohmann::json;

inline constexpr std::string_view kJson = "application/json";
inline constexpr const char* kServerVersion = "v1.31.0";

json failure_status(int code, std::string_view reason, std::string_view message,
                    json details = nullptr);

json success_status();

void respond_json(ResponseWriter& w, int code, const json& body, const HeaderList& extra = {});

void respond_status(ResponseWriter& w, int code, std::string_view reason, std::string_view message,
                    json details = nullptr);

/// errors.NewInternalError: what the real server answers for a failure that is no API error.
void respond_internal_error(ResponseWriter& w, std::string_view what);

[[noreturn]] void fail(ErrorKind kind, int code, std::string message);

/// The request body as JSON, whether the client sent JSON or YAML.
json parse_body(const Request& request);

bool dry_run(const Request& request);

/// A request's target: the served resource (in the version the client addressed), namespace,
/// name and subresource.
struct ApiServer::Route {
  ResourceInfo info;  // as served in `version`
  StrategyPtr strategy;
  std::string group;
  std::string version;
  std::string ns;
  std::string name;
  std::string subresource;
  UserInfo user;  // the authenticated caller

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  /// A stored object as this version shows it.
  nlohmann::json present(nlohmann::json stored) const {
    return strategy->to_version(std::move(stored), version);
  }
};

}  // namespace trainctl::sandbox
