// autoscaling horizontalpodautoscalers: stored only (no controller scales), created by the
// training operator for PyTorchJob elasticPolicy.metrics (autoscaling/v2) and by
// `kubectl autoscale` (autoscaling/v1). Stored as v2; v1 is converted as the real server's
// pkg/apis/autoscaling/v1/conversion.go does: v1 has only a CPU utilization target, so every
// other metric, the current metrics and the conditions travel in
// autoscaling.alpha.kubernetes.io/ annotations and come back out when a v1 object is written.

#include <fmt/format.h>

#include <cctype>

#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

constexpr const char* kMetricsAnnotation = "autoscaling.alpha.kubernetes.io/metrics";
constexpr const char* kCurrentMetricsAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics";
constexpr const char* kConditionsAnnotation = "autoscaling.alpha.kubernetes.io/conditions";
/// autoscaling/v1's implicit target when an HPA names no metric (DefaultCPUUtilization).
constexpr int kDefaultCpuUtilization = 80;

/// Copies `from[key]` to `to[as]` when it is set.
void copy_field(const json& from, const char* key, json& to, const char* as = nullptr) {
  const json& value = member(from, key);
  if (!value.is_null())
    to[as != nullptr ? as : key] = value;
}

/// A v2 metric's kind-specific part ("resource", "pods", ...) of `metric`.
std::string source_key(const json& metric) {
  std::string type = string_member(metric, "type");
  if (!type.empty())
    type[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(type[0])));
  return type;
}

bool is_cpu_resource(const json& metric) {
  return string_member(metric, "type") == "Resource" &&
         string_member(object_member(metric, "resource"), "name") == "cpu";
}

// --- MetricSpec and MetricStatus, v2 <-> v1 (the annotations' form) ---------------------------

/// A v2 MetricSpec (or MetricStatus, with `status`) as autoscaling/v1 spells it in the
/// annotations: the target (current value) flattened into the source's fields as
/// target*/current* fields, metric.name as metricName.
json metric_to_v1(const json& metric, bool status) {
  const std::string key = source_key(metric);
  const json& in = object_member(metric, key);
  const json& value = object_member(in, status ? "current" : "target");
  const json& id = object_member(in, "metric");
  json out = json::object();
  const std::string type = string_member(metric, "type");
  if (type == "Resource" || type == "ContainerResource") {
    copy_field(in, "name", out);
    copy_field(in, "container", out);
    copy_field(value, "averageUtilization", out,
               status ? "currentAverageUtilization" : "targetAverageUtilization");
    copy_field(value, "averageValue", out, status ? "currentAverageValue" : "targetAverageValue");
  } else if (type == "Pods") {
    copy_field(id, "name", out, "metricName");
    copy_field(value, "averageValue", out, status ? "currentAverageValue" : "targetAverageValue");
    copy_field(id, "selector", out);
  } else if (type == "Object") {
    copy_field(in, "describedObject", out, "target");
    copy_field(id, "name", out, "metricName");
    copy_field(value, "value", out, status ? "currentValue" : "targetValue");
    copy_field(value, "averageValue", out);
    copy_field(id, "selector", out);
  } else if (type == "External") {
    copy_field(id, "name", out, "metricName");
    copy_field(id, "selector", out, "metricSelector");
    copy_field(value, "value", out, status ? "currentValue" : "targetValue");
    copy_field(value, "averageValue", out, status ? "currentAverageValue" : "targetAverageValue");
  }
  return {{"type", type}, {key, std::move(out)}};
}

/// The inverse of metric_to_v1; a spec's target gets the type its fields imply, as the v1
/// conversion functions pick it.
json metric_from_v1(const json& metric, bool status) {
  const std::string key = source_key(metric);
  const json& in = object_member(metric, key);
  const std::string type = string_member(metric, "type");
  json out = json::object();
  json id = json::object();
  json value = json::object();
  if (type == "Resource" || type == "ContainerResource") {
    copy_field(in, "name", out);
    copy_field(in, "container", out);
    copy_field(in, status ? "currentAverageUtilization" : "targetAverageUtilization", value,
               "averageUtilization");
    copy_field(in, status ? "currentAverageValue" : "targetAverageValue", value, "averageValue");
    if (!status)
      value["type"] = value.contains("averageUtilization") ? "Utilization" : "AverageValue";
  } else if (type == "Pods") {
    copy_field(in, "metricName", id, "name");
    copy_field(in, "selector", id);
    copy_field(in, status ? "currentAverageValue" : "targetAverageValue", value, "averageValue");
    if (!status)
      value["type"] = "AverageValue";
  } else if (type == "Object") {
    copy_field(in, "target", out, "describedObject");
    copy_field(in, "metricName", id, "name");
    copy_field(in, "selector", id);
    copy_field(in, status ? "currentValue" : "targetValue", value, "value");
    copy_field(in, "averageValue", value);
    if (!status)
      value["type"] = value.contains("averageValue") ? "AverageValue" : "Value";
  } else if (type == "External") {
    copy_field(in, "metricName", id, "name");
    copy_field(in, "metricSelector", id, "selector");
    copy_field(in, status ? "currentValue" : "targetValue", value, "value");
    copy_field(in, status ? "currentAverageValue" : "targetAverageValue", value, "averageValue");
    if (!status)
      value["type"] = value.contains("value") ? "Value" : "AverageValue";
  }
  if (!id.empty())
    out["metric"] = std::move(id);
  out[status ? "current" : "target"] = std::move(value);
  return {{"type", type}, {key, std::move(out)}};
}

json cpu_utilization_metric(const json& percentage, bool status) {
  if (status)
    return {{"type", "Resource"},
            {"resource", {{"name", "cpu"}, {"current", {{"averageUtilization", percentage}}}}}};
  return {{"type", "Resource"},
          {"resource",
           {{"name", "cpu"},
            {"target", {{"type", "Utilization"}, {"averageUtilization", percentage}}}}}};
}

/// The annotation `key` of `object` parsed as a JSON array, removed from the object.
json take_annotation(json& object, const char* key) {
  if (!object_member(object_member(object, "metadata"), "annotations").contains(key))
    return nullptr;
  json& annotations = object["metadata"]["annotations"];
  json value = json::parse(string_member(annotations, key), nullptr, false);
  annotations.erase(key);
  if (annotations.empty())
    object["metadata"].erase("annotations");
  if (!value.is_array())
    throw bad_request(fmt::format("annotation {}: expected a JSON array", key));
  return value;
}

void put_annotation(json& object, const char* key, const json& value) {
  object["metadata"]["annotations"][key] = value.dump();
}

// --- HorizontalPodAutoscaler, v2 <-> v1 --------------------------------------------------------

json hpa_to_v1(json hpa) {
  const json spec = object_member(hpa, "spec");
  const json status = object_member(hpa, "status");
  json other_metrics = json::array();
  for (const auto& m : array_member(spec, "metrics")) {
    if (is_cpu_resource(m) &&
        !member(object_member(object_member(m, "resource"), "target"), "averageUtilization")
             .is_null())
      continue;
    other_metrics.push_back(metric_to_v1(m, false));
  }
  if (hpa.contains("spec")) {
    json out = json::object();
    copy_field(spec, "scaleTargetRef", out);
    copy_field(spec, "minReplicas", out);
    copy_field(spec, "maxReplicas", out);
    for (const auto& m : array_member(spec, "metrics")) {
      if (!is_cpu_resource(m))
        continue;
      copy_field(object_member(object_member(m, "resource"), "target"), "averageUtilization", out,
                 "targetCPUUtilizationPercentage");
      break;
    }
    hpa["spec"] = std::move(out);
  }
  const json& current = member(status, "currentMetrics");
  const json& conditions = member(status, "conditions");
  if (hpa.contains("status")) {
    json out = {{"currentReplicas", 0}, {"desiredReplicas", 0}};
    for (const char* key :
         {"observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"})
      copy_field(status, key, out);
    for (const auto& m : array_member(status, "currentMetrics")) {
      if (is_cpu_resource(m))
        copy_field(object_member(object_member(m, "resource"), "current"), "averageUtilization",
                   out, "currentCPUUtilizationPercentage");
    }
    hpa["status"] = std::move(out);
  }
  if (!other_metrics.empty())
    put_annotation(hpa, kMetricsAnnotation, other_metrics);
  if (current.is_array() && !current.empty()) {
    json statuses = json::array();
    for (const auto& m : current)
      statuses.push_back(metric_to_v1(m, true));
    put_annotation(hpa, kCurrentMetricsAnnotation, statuses);
  }
  if (conditions.is_array() && !conditions.empty())
    put_annotation(hpa, kConditionsAnnotation, conditions);
  return hpa;
}

json hpa_from_v1(json hpa) {
  const json spec = object_member(hpa, "spec");
  const json status = object_member(hpa, "status");
  json metrics = json::array();
  if (const json others = take_annotation(hpa, kMetricsAnnotation); others.is_array()) {
    for (const auto& m : others)
      metrics.push_back(metric_from_v1(m, false));
  }
  if (!member(spec, "targetCPUUtilizationPercentage").is_null())
    metrics.push_back(cpu_utilization_metric(spec["targetCPUUtilizationPercentage"], false));
  if (metrics.empty())
    metrics.push_back(cpu_utilization_metric(kDefaultCpuUtilization, false));
  json out_spec = json::object();
  copy_field(spec, "scaleTargetRef", out_spec);
  out_spec["minReplicas"] = member(spec, "minReplicas").is_null() ? json(1) : spec["minReplicas"];
  copy_field(spec, "maxReplicas", out_spec);
  out_spec["metrics"] = std::move(metrics);
  hpa["spec"] = std::move(out_spec);

  json out_status = json::object();
  for (const char* key :
       {"observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"})
    copy_field(status, key, out_status);
  if (const json current = take_annotation(hpa, kCurrentMetricsAnnotation); current.is_array()) {
    json converted = json::array();
    for (const auto& m : current)
      converted.push_back(metric_from_v1(m, true));
    out_status["currentMetrics"] = std::move(converted);
  } else if (!member(status, "currentCPUUtilizationPercentage").is_null()) {
    out_status["currentMetrics"] =
        json::array({cpu_utilization_metric(status["currentCPUUtilizationPercentage"], true)});
  }
  if (const json conditions = take_annotation(hpa, kConditionsAnnotation); conditions.is_array())
    out_status["conditions"] = conditions;
  hpa["status"] = std::move(out_status);
  return hpa;
}

class HorizontalPodAutoscalerStrategy final : public ResourceStrategy {
 public:
  HorizontalPodAutoscalerStrategy()
      : ResourceStrategy({"autoscaling", "v2", "horizontalpodautoscalers",
                          "HorizontalPodAutoscaler", true, true},
                         {"hpa"}, {"all"}) {}

  std::vector<std::string> served_versions() const override { return {"v2", "v1"}; }

  json to_version(json stored, const std::string& version) const override {
    if (version == "v1" && stored.is_object())
      stored = hpa_to_v1(std::move(stored));
    return ResourceStrategy::to_version(std::move(stored), version);
  }

  json from_version(json object, const std::string& version) const override {
    if (version != "v1" || !object.is_object())
      return object;
    object = hpa_from_v1(std::move(object));
    object["apiVersion"] = info().api_version();
    return object;
  }
};

}  // namespace

StrategyPtr horizontal_pod_autoscaler_strategy() {
  static const StrategyPtr strategy = std::make_shared<HorizontalPodAutoscalerStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
