#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "sandbox/strategy.h"

namespace trainctl::sandbox {

/// The resource a CustomResourceDefinition defines.
struct CustomResource {
  /// Its strategy: custom-resource storage rules (generation, status dropped on create, no
  /// unconditional update), each version's additionalPrinterColumns and scale subresource, the
  /// definition's short names. info() is the storage version.
  StrategyPtr strategy;
  /// Each served version as served (its own status subresource), in the definition's order.
  std::vector<ResourceInfo> served;
};

/// What `crd` (a stored CustomResourceDefinition) defines.
CustomResource custom_resource(const nlohmann::json& crd);

}  // namespace trainctl::sandbox
