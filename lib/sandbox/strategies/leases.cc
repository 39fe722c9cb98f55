// coordination.k8s.io/v1 leases: leader election's objects, created on PUT.

#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

namespace {

class LeaseStrategy final : public ResourceStrategy {
 public:
  LeaseStrategy()
      : ResourceStrategy({"coordination.k8s.io", "v1", "leases", "Lease", true, false}) {}

  bool allows_create_on_update() const override { return true; }
};

}  // namespace

StrategyPtr lease_strategy() {
  static const StrategyPtr strategy = std::make_shared<LeaseStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
