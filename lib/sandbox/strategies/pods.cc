// core/v1 pods: admission defaults (SetDefaults_Pod, the service account and priority admission
// plugins), the QoS class the registry computes at creation, kubectl's columns, and the log,
// exec and binding subresources.

#include <fmt/format.h>

#include <map>

#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/api_server.h"
#include "sandbox/selector.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// SetDefaults_ContainerPort: a port's protocol is TCP unless it says otherwise (an empty one too).
void default_port_protocols(json& container) {
  const auto ports = container.find("ports");
  if (ports == container.end() || !ports->is_array())
    return;
  for (json& port : *ports) {
    if (port.is_object() && string_member(port, "protocol").empty())
      port["protocol"] = "TCP";
  }
}

}  // namespace

const GoStruct& pod_spec_type() {
  using enum GoKind;
  static const GoStruct resources{
      "ResourceRequirements",
      {{"limits", "v1.ResourceList", ResourceList}, {"requests", "v1.ResourceList", ResourceList}}};
  static const GoStruct port{"ContainerPort",
                             {{"name", "string", String},
                              {"hostPort", "int32", Int32},
                              {"containerPort", "int32", Int32},
                              {"protocol", "v1.Protocol", String},
                              {"hostIP", "string", String}}};
  static const GoStruct env{"EnvVar", {{"name", "string", String}, {"value", "string", String}}};
  static const GoStruct mount{"VolumeMount",
                              {{"name", "string", String},
                               {"readOnly", "bool", Bool},
                               {"mountPath", "string", String},
                               {"subPath", "string", String}}};
  static const GoStruct container{
      "Container",
      {{"name", "string", String},
       {"image", "string", String},
       {"command", "[]string", StringList},
       {"args", "[]string", StringList},
       {"workingDir", "string", String},
       {"ports", "[]v1.ContainerPort", StructList, &port},
       {"env", "[]v1.EnvVar", StructList, &env},
       {"resources", "v1.ResourceRequirements", Struct, &resources},
       {"volumeMounts", "[]v1.VolumeMount", StructList, &mount},
       {"terminationMessagePath", "string", String},
       {"terminationMessagePolicy", "v1.TerminationMessagePolicy", String},
       {"imagePullPolicy", "v1.PullPolicy", String},
       {"stdin", "bool", Bool},
       {"stdinOnce", "bool", Bool},
       {"tty", "bool", Bool}}};
  static const GoStruct toleration{"Toleration",
                                   {{"key", "string", String},
                                    {"operator", "v1.TolerationOperator", String},
                                    {"value", "string", String},
                                    {"effect", "v1.TaintEffect", String},
                                    {"tolerationSeconds", "int64", Int64}}};
  static const GoStruct empty_dir{
      "EmptyDirVolumeSource",
      {{"medium", "v1.StorageMedium", String}, {"sizeLimit", "resource.Quantity", Quantity}}};
  static const GoStruct volume{
      "Volume",
      {{"name", "string", String}, {"emptyDir", "v1.EmptyDirVolumeSource", Struct, &empty_dir}}};
  static const GoStruct spec{"PodSpec",
                             {{"volumes", "[]v1.Volume", StructList, &volume},
                              {"initContainers", "[]v1.Container", StructList, &container},
                              {"containers", "[]v1.Container", StructList, &container},
                              {"restartPolicy", "v1.RestartPolicy", String},
                              {"terminationGracePeriodSeconds", "int64", Int64},
                              {"activeDeadlineSeconds", "int64", Int64},
                              {"dnsPolicy", "v1.DNSPolicy", String},
                              {"nodeSelector", "map[string]string", StringMap},
                              {"serviceAccountName", "string", String},
                              {"automountServiceAccountToken", "bool", Bool},
                              {"nodeName", "string", String},
                              {"hostNetwork", "bool", Bool},
                              {"hostPID", "bool", Bool},
                              {"hostIPC", "bool", Bool},
                              {"shareProcessNamespace", "bool", Bool},
                              {"hostname", "string", String},
                              {"subdomain", "string", String},
                              {"schedulerName", "string", String},
                              {"tolerations", "[]v1.Toleration", StructList, &toleration},
                              {"priorityClassName", "string", String},
                              {"priority", "int32", Int32},
                              {"runtimeClassName", "string", String},
                              {"enableServiceLinks", "bool", Bool},
                              {"overhead", "v1.ResourceList", ResourceList}}};
  return spec;
}

const GoStruct& pod_template_spec_type() {
  static const GoStruct type{"PodTemplateSpec",
                             {{"metadata", "v1.ObjectMeta", GoKind::Struct, &object_meta_type()},
                              {"spec", "v1.PodSpec", GoKind::Struct, &pod_spec_type()}}};
  return type;
}

void default_pod_spec(json& spec) {
  json& containers = spec["containers"];
  for (size_t i = 0; containers.is_array() && i < containers.size(); ++i) {
    json& c = containers[i];
    if (!c.is_object())
      c = json::object();
    const std::string image = c.value("image", "");
    if (!c.contains("imagePullPolicy")) {
      const bool latest = image.find(':') == std::string::npos || image.ends_with(":latest");
      c["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
    }
    if (!c.contains("terminationMessagePath"))
      c["terminationMessagePath"] = "/dev/termination-log";
    if (!c.contains("terminationMessagePolicy"))
      c["terminationMessagePolicy"] = "File";
    if (!c.contains("resources"))
      c["resources"] = json::object();
    default_port_protocols(c);
  }
  if (const auto inits = spec.find("initContainers"); inits != spec.end() && inits->is_array()) {
    for (json& c : *inits) {
      if (c.is_object())
        default_port_protocols(c);
    }
  }
  if (string_member(spec, "restartPolicy").empty())
    spec["restartPolicy"] = "Always";
  if (!spec.contains("schedulerName"))
    spec["schedulerName"] = "default-scheduler";
  if (!spec.contains("dnsPolicy"))
    spec["dnsPolicy"] = "ClusterFirst";
  if (!spec.contains("terminationGracePeriodSeconds"))
    spec["terminationGracePeriodSeconds"] = 30;
  if (!spec.contains("securityContext"))
    spec["securityContext"] = json::object();
}

void admit_pod(json& pod) {
  json& spec = ensure_object(pod, "spec");
  // SetDefaults_Pod (pods only, not templates): a limit without a request is requested too, in
  // app and init containers, before validation, so a bad limit is reported for both.
  for (const char* list : {"containers", "initContainers"}) {
    const auto containers = spec.find(list);
    if (containers == spec.end() || !containers->is_array())
      continue;
    for (json& c : *containers) {
      if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object())
        continue;
      json& resources = c["resources"];
      const json& limits = member(resources, "limits");
      if (!limits.is_object() || limits.empty())
        continue;
      json& requests = ensure_object(resources, "requests");
      for (const auto& [name, value] : limits.items())
        if (!requests.contains(name))
          requests[name] = value;
    }
  }
  // Validation is the store's (PodStrategy::validate), after the metadata's, so a 422 lists
  // both as the server's ValidatePod does.
  default_pod_spec(spec);
  if (!spec.contains("serviceAccountName"))
    spec["serviceAccountName"] = "default";
  if (!spec.contains("enableServiceLinks"))
    spec["enableServiceLinks"] = true;
  if (!spec.contains("priority"))
    spec["priority"] = 0;
  json& status = pod["status"];
  if (!status.is_object() || !status.contains("phase"))
    status = {{"phase", "Pending"}};
  if (!status.contains("qosClass"))
    status["qosClass"] = "BestEffort";
}

namespace {

std::string quantity_text(const json& v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_number())
    return v.dump();
  return "";
}

// The pod's QoS class as the API server computes it at creation.
std::string pod_qos(const json& pod) {
  bool any = false;
  bool guaranteed = true;
  const json& spec = member(pod, "spec");
  for (const char* list : {"containers", "initContainers"}) {
    const json& containers = member(spec, list);
    if (!containers.is_array())
      continue;
    for (const auto& c : containers) {
      const json& resources = member(c, "resources");
      const json& requests = member(resources, "requests");
      const json& limits = member(resources, "limits");
      for (const char* r : {"cpu", "memory"}) {
        const std::string req = quantity_text(member(requests, r));
        const std::string lim = quantity_text(member(limits, r));
        const bool has_req = !req.empty() && req != "0";
        const bool has_lim = !lim.empty() && lim != "0";
        any |= has_req || has_lim;
        if (!has_lim || (has_req && req != lim))
          guaranteed = false;
      }
    }
  }
  if (!any)
    return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

/// What `kubectl get pods` shows in STATUS: the phase, or a container's waiting/terminated reason.
std::string pod_status(const json& pod) {
  const json& status = object_member(pod, "status");
  std::string reason = string_member(status, "reason");
  if (reason.empty())
    reason = string_member(status, "phase");
  if (reason.empty())
    reason = "Unknown";
  for (const auto& cs : array_member(status, "containerStatuses")) {
    const json& state = object_member(cs, "state");
    const json& waiting = object_member(state, "waiting");
    if (!string_member(waiting, "reason").empty()) {
      reason = string_member(waiting, "reason");
    } else if (member(state, "terminated").is_object()) {
      const json& t = object_member(state, "terminated");
      reason = string_member(t, "reason");
      if (reason.empty())
        reason = fmt::format("ExitCode:{}", integer_member(t, "exitCode"));
    }
  }
  if (object_member(pod, "metadata").contains("deletionTimestamp"))
    reason = "Terminating";
  return reason;
}

class PodStrategy final : public ResourceStrategy {
 public:
  PodStrategy() : ResourceStrategy({"", "v1", "pods", "Pod", true, true}, {"po"}, {"all"}) {}

  void admit(json& pod, const AdmissionContext&) const override { admit_pod(pod); }
  /// ValidatePod's spec checks, on create and update: the store lists them after the metadata's.
  /// Not on a status write (the kubelet's): ValidatePodStatusUpdate checks the status alone.
  void validate(const json& pod, WritePart part, std::vector<FieldError>& errs) const override {
    if (part == WritePart::Main)
      validate_pod_spec(object_member(pod, "spec"), "spec", errs);
  }
  bool tracks_generation() const override { return true; }

  const GoStruct& go_type() const override {
    static const GoStruct type{"Pod",
                               {{"metadata", "v1.ObjectMeta", GoKind::Struct, &object_meta_type()},
                                {"spec", "v1.PodSpec", GoKind::Struct, &pod_spec_type()}}};
    return type;
  }

  /// podStrategy.CheckGracefulDelete: the requested period, else terminationGracePeriodSeconds;
  /// 0 for a pod no kubelet runs (unscheduled) or one already finished.
  std::optional<std::int64_t> graceful_delete_period(
      const json& pod, std::optional<std::int64_t> requested) const override {
    const json& spec = object_member(pod, "spec");
    const std::string phase = string_member(object_member(pod, "status"), "phase");
    if (string_member(spec, "nodeName").empty() || phase == "Succeeded" || phase == "Failed")
      return 0;
    const std::int64_t period =
        requested.value_or(integer_member(spec, "terminationGracePeriodSeconds"));
    return period < 0 ? 1 : period;
  }

  void prepare_for_create(json& pod) const override {
    pod["status"] = {{"phase", "Pending"}, {"qosClass", pod_qos(pod)}};
  }

  void prepare_for_update(const json& old, json& next, WritePart part) const override {
    const json written_metadata =
        part == WritePart::Status ? object_member(next, "metadata") : json::object();
    ResourceStrategy::prepare_for_update(old, next, part);
    if (part != WritePart::Status)
      return;
    // podStatusStrategy.PrepareForUpdate keeps only the spec and ownerReferences of the stored
    // pod: a status write also sets the labels and annotations it carries.
    for (const char* field : {"labels", "annotations"}) {
      if (written_metadata.contains(field))
        next["metadata"][field] = written_metadata[field];
      else
        next["metadata"].erase(field);
    }
    // The QoS class is fixed at creation: a status write without one keeps it.
    if (!member(next["status"], "qosClass").is_string() &&
        member(member(old, "status"), "qosClass").is_string())
      next["status"]["qosClass"] = old["status"]["qosClass"];
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    auto containers = [](const json& pod) {
      std::int64_t ready = 0, restarts = 0;
      for (const auto& cs : array_member(object_member(pod, "status"), "containerStatuses")) {
        ready += member(cs, "ready") == json(true) ? 1 : 0;
        restarts += integer_member(cs, "restartCount");
      }
      return std::pair{ready, restarts};
    };
    return {
        name_column(),
        {"Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0,
         [containers](const json& pod, TablePrintTime) {
           const std::size_t total = array_member(object_member(pod, "spec"), "containers").size();
           return json(fmt::format("{}/{}", containers(pod).first, total));
         }},
        {"Status", "string", "The aggregate status of the containers in this pod.", 0,
         [](const json& pod, TablePrintTime) { return json(pod_status(pod)); }},
        {"Restarts", "string",
         "The number of times the containers in this pod have been restarted.", 0,
         [containers](const json& pod, TablePrintTime) {
           return json(std::to_string(containers(pod).second));
         }},
        age_column(),
        {"IP", "string", "IP address allocated to the pod.", 1,
         [](const json& pod, TablePrintTime) {
           return json(or_none(string_member(object_member(pod, "status"), "podIP")));
         }},
        {"Node", "string", "Name of the Node this pod is assigned to.", 1,
         [](const json& pod, TablePrintTime) {
           return json(or_none(string_member(object_member(pod, "spec"), "nodeName")));
         }},
        {"Nominated Node", "string", "Name of the node nominated by the scheduler.", 1,
         [](const json&, TablePrintTime) { return json("<none>"); }},
        {"Readiness Gates", "string", "The readiness gates of the pod.", 1,
         [](const json&, TablePrintTime) { return json("<none>"); }},
    };
  }

  std::vector<std::string> field_labels() const override {
    return {"metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
            "spec.host"};
  }

  std::vector<Subresource> subresources() const override {
    return {{"log", "Pod", {"get"}},
            {"exec", "PodExecOptions", {"create", "get"}},
            {"binding", "Binding", {"create"}}};
  }
};

}  // namespace

StrategyPtr pod_strategy() {
  static const StrategyPtr strategy = std::make_shared<PodStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
