// core/v1 and events.k8s.io/v1 events: one object in two groups (the new group's share the old
// etcd prefix), created on PUT.

#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

namespace {

class EventStrategy final : public ResourceStrategy {
 public:
  explicit EventStrategy(std::string group)
      : ResourceStrategy({std::move(group), "v1", "events", "Event", true, false}, {"ev"}) {}

  // Both groups' events select on the core type's fields.
  std::vector<std::string> field_labels() const override {
    return {"involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name"};
  }
  bool allows_create_on_update() const override { return true; }
  std::string storage_prefix() const override { return "events"; }
};

}  // namespace

StrategyPtr core_event_strategy() {
  static const StrategyPtr strategy = std::make_shared<EventStrategy>("");
  return strategy;
}

StrategyPtr events_k8s_io_strategy() {
  static const StrategyPtr strategy = std::make_shared<EventStrategy>("events.k8s.io");
  return strategy;
}

}  // namespace trainctl::sandbox
