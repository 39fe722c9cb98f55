// core/v1 and events.k8s.io/v1 events: one object in two groups (the new group's share the old
// etcd prefix), created on PUT, printed as kube-apiserver's event printer prints them.

#include <fmt/format.h>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"
#include "text.h"

namespace trainctl::sandbox {

namespace {

using nlohmann::json;

/// A member of an event as core/v1 names it, else as events.k8s.io/v1 does (the sandbox keeps
/// each event as its client wrote it; the real server converts, then prints the same).
const json& event_member(const json& event, std::string_view core, std::string_view events_k8s_io) {
  const json& value = member(event, core);
  return value.is_null() ? member(event, events_k8s_io) : value;
}

/// translateTimestampSince: the time since `timestamp`, "<unknown>" without one.
std::string since(const json& timestamp, TablePrintTime now) {
  const auto age = api::age_of(timestamp, now);
  return age ? api::human_duration(*age) : "<unknown>";
}

// kube-apiserver's printEvent, one cell each (a Table carries every column, the wide ones too;
// kubectl hides those of priority 1 without -o wide).

std::string first_seen(const json& event, TablePrintTime now) {
  const json& first = event_member(event, "firstTimestamp", "deprecatedFirstTimestamp");
  return since(first.is_string() ? first : member(event, "eventTime"), now);
}

/// A series' last observation, else lastTimestamp, else when it was first seen.
std::string last_seen(const json& event, TablePrintTime now) {
  if (const json& series = member(event, "series"); series.is_object())
    return since(member(series, "lastObservedTime"), now);
  const json& last = event_member(event, "lastTimestamp", "deprecatedLastTimestamp");
  return last.is_string() ? since(last, now) : first_seen(event, now);
}

/// A series' count, else count (1 when absent or 0).
std::int64_t count_of(const json& event) {
  if (const json& series = member(event, "series"); series.is_object())
    return integer_member(series, "count");
  const std::int64_t count =
      integer_member(event, member(event, "count").is_null() ? "deprecatedCount" : "count");
  return count == 0 ? 1 : count;
}

/// `pod/worker-0`: the involved object's kind in lower case and name.
std::string object_of(const json& event) {
  const json& regarding = event_member(event, "involvedObject", "regarding");
  const std::string kind = to_lower(string_member(regarding, "kind"));
  const std::string name = string_member(regarding, "name");
  return name.empty() ? kind : fmt::format("{}/{}", kind, name);
}

/// `component, host`: the source, else the reporting controller and instance.
std::string source_of(const json& event) {
  const json& from = event_member(event, "source", "deprecatedSource");
  std::string component = string_member(from, "component");
  if (component.empty())
    component = cell_text(event_member(event, "reportingComponent", "reportingController"));
  std::string host = string_member(from, "host");
  if (host.empty())
    host = cell_text(member(event, "reportingInstance"));
  return host.empty() ? component : fmt::format("{}, {}", component, host);
}

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

  std::vector<PrintColumn> columns(const std::string&) const override {
    const auto text = [](std::string_view core, std::string_view events_k8s_io) {
      return [core, events_k8s_io](const json& event, TablePrintTime) {
        return json(std::string(trim(cell_text(event_member(event, core, events_k8s_io)))));
      };
    };
    return {{"Last Seen", "string",
             "The time at which the most recent occurrence of this event was recorded.", 0,
             [](const json& event, TablePrintTime now) { return json(last_seen(event, now)); }},
            {"Type", "string",
             "Type of this event (Normal, Warning), new types could be added in the future", 0,
             text("type", "type")},
            {"Reason", "string",
             "This should be a short, machine understandable string that gives the reason for the "
             "transition into the object's current status.",
             0, text("reason", "reason")},
            {"Object", "string", "The object that this event is about.", 0,
             [](const json& event, TablePrintTime) { return json(object_of(event)); }},
            {"Subobject", "string",
             "If referring to a piece of an object instead of an entire object, this string should "
             "contain a valid JSON/Go field access statement.",
             1,
             [](const json& event, TablePrintTime) {
               return json(cell_text(
                   member(event_member(event, "involvedObject", "regarding"), "fieldPath")));
             }},
            {"Source", "string",
             "The component reporting this event. Should be a short machine understandable string.",
             1, [](const json& event, TablePrintTime) { return json(source_of(event)); }},
            {"Message", "string", "A human-readable description of the status of this operation.",
             0, text("message", "note")},
            {"First Seen", "string",
             "The time at which the event was first recorded. (Time of server receipt is in "
             "TypeMeta.)",
             1, [](const json& event, TablePrintTime now) { return json(first_seen(event, now)); }},
            {"Count", "string", "The number of times this event has occurred.", 1,
             [](const json& event, TablePrintTime) { return json(count_of(event)); }},
            {"Name", "string", "Name must be unique within a namespace.", 1,
             [](const json& event, TablePrintTime) { return json(name_of(event)); }}};
  }
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
