#pragma once
// What a caller that keeps what it read from each version of an object (admission's cache) asks
// a cache for: whether to decode an object, and an object found with its version.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace trainctl::kube::cache {

/// Whether to hand out the object of this uid and resourceVersion decoded (a caller that read
/// that version already needs only to know it is still there).
using DecodeFilter =
    std::function<bool(const std::string& uid, const std::string& resource_version)>;

/// One cached object: its uid and resourceVersion, and the object itself unless a DecodeFilter
/// declined it.
struct Versioned {
  std::string uid;
  std::string resource_version;
  std::optional<nlohmann::json> object;
};

}  // namespace trainctl::kube::cache
