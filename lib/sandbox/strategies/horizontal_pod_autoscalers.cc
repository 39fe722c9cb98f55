// autoscaling horizontalpodautoscalers: stored only (no controller scales), created by the
// training operator for PyTorchJob elasticPolicy.metrics.

#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

namespace {

class HorizontalPodAutoscalerStrategy final : public ResourceStrategy {
 public:
  HorizontalPodAutoscalerStrategy()
      : ResourceStrategy({"autoscaling", "v2", "horizontalpodautoscalers",
                          "HorizontalPodAutoscaler", true, true},
                         {"hpa"}) {}
};

}  // namespace

StrategyPtr horizontal_pod_autoscaler_strategy() {
  static const StrategyPtr strategy = std::make_shared<HorizontalPodAutoscalerStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
