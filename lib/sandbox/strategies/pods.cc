// core/v1 pods: admission defaults (SetDefaults_Pod, the service account and priority admission
// plugins), the QoS class the registry computes at creation, kubectl's columns, and the log,
// exec and binding subresources.

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/api_server.h"
#include "sandbox/selector.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"
#include "text.h"

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
  static const GoStruct local_object_reference{"LocalObjectReference",
                                               {{"name", "string", String}}};
  static const GoStruct spec{
      "PodSpec",
      {{"volumes", "[]v1.Volume", StructList, &volume},
       {"initContainers", "[]v1.Container", StructList, &container},
       {"containers", "[]v1.Container", StructList, &container},
       {"restartPolicy", "v1.RestartPolicy", String},
       {"terminationGracePeriodSeconds", "int64", Int64},
       {"activeDeadlineSeconds", "int64", Int64},
       {"dnsPolicy", "v1.DNSPolicy", String},
       {"nodeSelector", "map[string]string", StringMap},
       {"serviceAccountName", "string", String},
       {"serviceAccount", "string", String},
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
       {"preemptionPolicy", "v1.PreemptionPolicy", String},
       {"imagePullSecrets", "[]v1.LocalObjectReference", StructList, &local_object_reference},
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
  // The v1 conversion: serviceAccount is the deprecated name of serviceAccountName, read when
  // that is empty and written back as it.
  std::string account = string_member(spec, "serviceAccountName");
  if (account.empty())
    account = string_member(spec, "serviceAccount");
  if (!account.empty())
    spec["serviceAccountName"] = spec["serviceAccount"] = account;
}

namespace {

/// What kube-apiserver answers when one of its pod admission plugins refuses a create: 403
/// naming the pod as the request did (its generateName when it has no name yet).
[[noreturn]] void forbid_pod(const json& pod, std::string_view why) {
  const json& metadata = object_member(pod, "metadata");
  std::string name = string_member(metadata, "name");
  if (name.empty())
    name = string_member(metadata, "generateName");
  throw forbidden(pod_strategy()->info(), name, why);
}

/// The object `name` of `group_resource` in `ns`, or null when there is none.
std::optional<json> find_object(const Store& store, const std::string& group_resource,
                                const std::string& ns, const std::string& name) {
  try {
    return store.get(group_resource, ns, name);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    return std::nullopt;
  }
}

constexpr std::string_view kTokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount";
constexpr std::string_view kTokenVolumePrefix = "kube-api-access-";

/// The ServiceAccount plugin's mountServiceAccountToken: every app and init container that mounts
/// nothing at the token path gets the pod's `kube-api-access-*` volume there, read-only; the
/// volume (a projection of a bound token, the namespace's kube-root-ca.crt and the namespace's
/// name) is added unless the pod has one of that prefix.
void mount_service_account_token(json& spec) {
  std::string volume;
  for (const json& v : array_member(spec, "volumes")) {
    if (const std::string name = string_member(v, "name"); name.starts_with(kTokenVolumePrefix)) {
      volume = name;
      break;
    }
  }
  const bool has_volume = !volume.empty();
  if (!has_volume)
    volume = std::string(kTokenVolumePrefix) + random_suffix();
  bool needs_volume = false;
  for (const char* list : {"initContainers", "containers"}) {
    const auto containers = spec.find(list);
    if (containers == spec.end() || !containers->is_array())
      continue;
    for (json& c : *containers) {
      if (!c.is_object())
        continue;
      const auto& mounts = array_member(c, "volumeMounts");
      if (std::any_of(mounts.begin(), mounts.end(), [](const json& m) {
            return string_member(m, "mountPath") == kTokenMountPath;
          }))
        continue;
      json& written = c["volumeMounts"];
      if (!written.is_array())
        written = json::array();
      written.push_back({{"name", volume}, {"readOnly", true}, {"mountPath", kTokenMountPath}});
      needs_volume = true;
    }
  }
  if (has_volume || !needs_volume)
    return;
  json& volumes = spec["volumes"];
  if (!volumes.is_array())
    volumes = json::array();
  volumes.push_back(
      {{"name", volume},
       {"projected",
        {{"defaultMode", 420},
         {"sources",
          {{{"serviceAccountToken", {{"path", "token"}, {"expirationSeconds", 3607}}}},
           {{"configMap",
             {{"name", "kube-root-ca.crt"}, {"items", {{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
           {{"downwardAPI",
             {{"items",
               {{{"path", "namespace"},
                 {"fieldRef",
                  {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}}}}}}}}}}});
}

/// The ServiceAccount admission plugin: the pod runs as `default` unless it names an account,
/// which must exist in its namespace (else 403, as kube-apiserver's); its token is mounted unless
/// the pod, else the account, sets automountServiceAccountToken false; a pod without
/// imagePullSecrets gets the account's. A namespace that does not exist or is being deleted is
/// left to the store, whose 404 or 403 kube-apiserver's NamespaceLifecycle plugin answers before
/// this one runs.
void admit_service_account(json& pod, const Store& store) {
  json& spec = pod["spec"];
  const std::string account = string_member(spec, "serviceAccountName");
  const std::string ns = string_member(object_member(pod, "metadata"), "namespace");
  const std::optional<json> found = find_object(store, "serviceaccounts", ns, account);
  if (!found) {
    const std::optional<json> namespace_ = find_object(store, "namespaces", "", ns);
    if (!namespace_ || object_member(*namespace_, "metadata").contains("deletionTimestamp"))
      return;  // NamespaceLifecycle's 404 or 403, which the store gives
    forbid_pod(pod, fmt::format("error looking up service account {}/{}: serviceaccount {:?} not "
                                "found",
                                ns, account, account));
  }
  const json& pod_choice = member(spec, "automountServiceAccountToken");
  const json& account_choice = member(*found, "automountServiceAccountToken");
  const bool automount = pod_choice.is_boolean()       ? pod_choice.get<bool>()
                         : account_choice.is_boolean() ? account_choice.get<bool>()
                                                       : true;
  if (automount)
    mount_service_account_token(spec);
  if (!array_member(spec, "imagePullSecrets").empty())
    return;
  json secrets = json::array();
  for (const json& s : array_member(*found, "imagePullSecrets"))
    secrets.push_back({{"name", string_member(s, "name")}});
  if (!secrets.empty())
    spec["imagePullSecrets"] = std::move(secrets);
}

/// The Priority admission plugin on a create: spec.priority and spec.preemptionPolicy from the
/// pod's PriorityClass (403 when there is no class of that name), or from the globalDefault class
/// of lowest value, whose name the pod then gets, or 0 and PreemptLowerPriority. A pod that gives
/// either field itself must give what the class says (403 otherwise).
void admit_priority(json& pod, const Store& store) {
  json& spec = pod["spec"];
  std::string class_name = string_member(spec, "priorityClassName");
  std::optional<json> chosen;
  if (class_name.empty()) {
    for (json& pc : store.list("priorityclasses.scheduling.k8s.io", {}).items) {
      if (member(pc, "globalDefault") == true &&
          (!chosen || integer_member(pc, "value") < integer_member(*chosen, "value")))
        chosen = std::move(pc);
    }
    if (chosen) {
      class_name = name_of(*chosen);
      spec["priorityClassName"] = class_name;
    }
  } else {
    chosen = find_object(store, "priorityclasses.scheduling.k8s.io", "", class_name);
    if (!chosen)
      forbid_pod(pod, fmt::format("no PriorityClass with name {} was found", class_name));
  }
  // What the class computes; a pod that gives either field itself must give that.
  const auto computed = [&](const char* field, std::string_view what, const json& value) {
    const json& given = member(spec, field);
    if (!given.is_null() && given != value) {
      const auto text = [](const json& v) {
        return v.is_string() ? v.get<std::string>() : v.dump();
      };
      forbid_pod(pod, fmt::format("the {} ({}) must not be provided in pod spec; priority "
                                  "admission controller computed {} from the given PriorityClass "
                                  "name",
                                  what, text(given), text(value)));
    }
    spec[field] = value;
  };
  computed("priority", "integer value of priority", chosen ? integer_member(*chosen, "value") : 0);
  const std::string policy =
      chosen ? string_member(*chosen, "preemptionPolicy") : "PreemptLowerPriority";
  if (!policy.empty())
    computed("preemptionPolicy", "string value of PreemptionPolicy", policy);
}

/// The DefaultTolerationSeconds admission plugin: a pod that does not tolerate the not-ready and
/// unreachable NoExecute taints (a toleration of that key, or of every key, with that effect or
/// every effect) tolerates each for 300 seconds.
void admit_default_toleration_seconds(json& spec) {
  bool not_ready = false, unreachable = false;
  for (const json& t : array_member(spec, "tolerations")) {
    const std::string key = string_member(t, "key");
    const std::string effect = string_member(t, "effect");
    if (!effect.empty() && effect != "NoExecute")
      continue;
    not_ready |= key.empty() || key == "node.kubernetes.io/not-ready";
    unreachable |= key.empty() || key == "node.kubernetes.io/unreachable";
  }
  for (const auto& [key, tolerated] : {std::pair{"node.kubernetes.io/not-ready", not_ready},
                                       std::pair{"node.kubernetes.io/unreachable", unreachable}}) {
    if (tolerated)
      continue;
    json& tolerations = spec["tolerations"];
    if (!tolerations.is_array())
      tolerations = json::array();
    tolerations.push_back({{"key", key},
                           {"operator", "Exists"},
                           {"effect", "NoExecute"},
                           {"tolerationSeconds", 300}});
  }
}

}  // namespace

void admit_pod(json& pod, const Store& store) {
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
  if (string_member(spec, "serviceAccountName").empty())
    spec["serviceAccountName"] = spec["serviceAccount"] = "default";
  if (!spec.contains("enableServiceLinks"))
    spec["enableServiceLinks"] = true;
  // kube-apiserver's order: ServiceAccount, Priority, DefaultTolerationSeconds.
  admit_service_account(pod, store);
  admit_priority(pod, store);
  admit_default_toleration_seconds(spec);
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

  void admit(json& pod, const AdmissionContext& context) const override {
    admit_pod(pod, *context.store);
  }
  /// ValidatePod's spec checks, on create and update: the store lists them after the metadata's.
  /// Not on a status write (the kubelet's): ValidatePodStatusUpdate checks the status alone.
  void validate(const json& pod, WritePart part, std::vector<FieldError>& errs) const override {
    if (part == WritePart::Main)
      validate_pod_spec(object_member(pod, "spec"), "spec", errs);
  }
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
