#include "sandbox/table.h"

#include <fmt/format.h>

#include <cstdint>
#include <ctime>
#include <set>

#include "api/status.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

struct Column {
  std::string name;
  std::string type = "string";
  std::string description;
  int priority = 0;  // 1 = only with -o wide
};

std::string age(const json& obj, std::chrono::system_clock::time_point now) {
  return api::human_duration_or_none(
      api::age_of(member(object_member(obj, "metadata"), "creationTimestamp"), now));
}

/// The member `key` of `object` when it is an integer, else 0: a stored object's numbers may
/// come in any shape a client wrote, and printing must not throw on them.
std::int64_t integer_member(const json& object, std::string_view key) {
  const json& v = member(object, key);
  return v.is_number_integer() ? v.get<std::int64_t>() : 0;
}

/// The member `key` of `object` when it is an array, else an empty array.
const json& array_member(const json& object, std::string_view key) {
  static const json empty = json::array();
  const json& v = member(object, key);
  return v.is_array() ? v : empty;
}

std::string str(const json& v) {
  if (v.is_null())
    return "";
  if (v.is_string())
    return v.get<std::string>();
  return v.dump();
}

std::string or_none(std::string s) {
  return s.empty() ? "<none>" : s;
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

/// `kubectl get svc`'s PORT(S): "80/TCP", "80:30080/TCP" with a node port, comma-separated
/// (the server's makePortString).
std::string service_ports(const json& spec) {
  std::string ports;
  for (const auto& p : array_member(spec, "ports")) {
    std::string protocol = string_member(p, "protocol");
    if (protocol.empty())
      protocol = "TCP";
    const std::int64_t node_port = integer_member(p, "nodePort");
    ports += ports.empty() ? "" : ",";
    ports += node_port > 0 ? fmt::format("{}:{}/{}", integer_member(p, "port"), node_port, protocol)
                           : fmt::format("{}/{}", integer_member(p, "port"), protocol);
  }
  return ports;
}

std::string join_strings(const json& values) {
  std::string out;
  for (const auto& v : values) {
    if (v.is_string())
      out += (out.empty() ? "" : ",") + v.get<std::string>();
  }
  return out;
}

/// `kubectl get svc`'s EXTERNAL-IP (the server's getServiceExternalIP, printed wide).
std::string service_external_ip(const json& service) {
  const json& spec = object_member(service, "spec");
  const std::string type = string_member(spec, "type");
  const std::string external_ips = join_strings(array_member(spec, "externalIPs"));
  if (type == "ClusterIP" || type == "NodePort")
    return or_none(external_ips);
  if (type == "ExternalName")
    return string_member(spec, "externalName");
  if (type != "LoadBalancer")
    return "<unknown>";
  // loadBalancerStatusStringer: each ingress point's IP, else its hostname; sorted, unique.
  std::set<std::string> points;
  const json& lb = object_member(object_member(service, "status"), "loadBalancer");
  for (const auto& i : array_member(lb, "ingress")) {
    const std::string ip = string_member(i, "ip");
    const std::string point = ip.empty() ? string_member(i, "hostname") : ip;
    if (!point.empty())
      points.insert(point);
  }
  std::string ingress;
  for (const auto& p : points)
    ingress += (ingress.empty() ? "" : ",") + p;
  if (!external_ips.empty())
    return ingress.empty() ? external_ips : ingress + "," + external_ips;
  return ingress.empty() ? "<pending>" : ingress;
}

/// A label map as labels.FormatLabels prints it: "a=1,b=2" (sorted), "<none>" when empty.
std::string format_labels(const json& labels) {
  std::string out;
  for (const auto& [k, v] : labels.items())
    out += (out.empty() ? "" : ",") + k + "=" + str(v);
  return or_none(out);
}

std::vector<Column> columns_for(const std::string& gr, const json& printer_columns) {
  const Column name{"Name", "string", "Name must be unique within a namespace."};
  const Column age_column{"Age", "string",
                          "CreationTimestamp is a timestamp representing the server time when this "
                          "object was created."};
  if (gr == "pods") {
    return {name,
            {"Ready", "string", "The aggregate readiness state of this pod for accepting traffic."},
            {"Status", "string", "The aggregate status of the containers in this pod."},
            {"Restarts", "string",
             "The number of times the containers in this pod have been restarted."},
            age_column,
            {"IP", "string", "IP address allocated to the pod.", 1},
            {"Node", "string", "Name of the Node this pod is assigned to.", 1},
            {"Nominated Node", "string", "Name of the node nominated by the scheduler.", 1},
            {"Readiness Gates", "string", "The readiness gates of the pod.", 1}};
  }
  if (gr == "nodes") {
    return {name,
            {"Status", "string", "The status of the node"},
            {"Roles", "string", "The roles of the node"},
            age_column,
            {"Version", "string", "Kubelet Version reported by the node."},
            {"Internal-IP", "string", "List of internal IPs for the node.", 1},
            {"External-IP", "string", "List of external IPs for the node.", 1},
            {"OS-Image", "string", "OS image reported by the node.", 1},
            {"Kernel-Version", "string", "Kernel version reported by the node.", 1},
            {"Container-Runtime", "string", "Container runtime reported by the node.", 1}};
  }
  if (gr == "namespaces")
    return {name, {"Status", "string", "The status of the namespace"}, age_column};
  if (gr == "services") {
    return {name,
            {"Type", "string", "The type of the service."},
            {"Cluster-IP", "string", "The cluster IP of the service."},
            {"External-IP", "string", "The external IP of the service."},
            {"Port(s)", "string", "The ports of the service."},
            age_column,
            {"Selector", "string", "The label selector of the service.", 1}};
  }
  if (gr == "configmaps")
    return {name, {"Data", "integer", "Number of data entries."}, age_column};
  if (gr == "secrets") {
    return {name,
            {"Type", "string", "The type of the secret."},
            {"Data", "integer", "Number of data entries."},
            age_column};
  }
  if (gr == "jobs.batch") {
    return {name,
            {"Status", "string", "Status of the job."},
            {"Completions", "string", "The completion status of the job."},
            {"Duration", "string", "Time required to complete the job."},
            age_column};
  }
  if (printer_columns.is_array() && !printer_columns.empty()) {
    std::vector<Column> cols{name};
    bool has_age = false;
    for (const auto& c : printer_columns) {
      cols.push_back({c.value("name", ""), c.value("type", "string"), c.value("description", ""),
                      c.value("priority", 0)});
      has_age = has_age || to_lower(c.value("name", "")) == "age";
    }
    if (!has_age)
      cols.push_back(age_column);
    return cols;
  }
  return {name, age_column};
}

json cells_for(const std::string& gr, const json& obj, const json& printer_columns,
               std::chrono::system_clock::time_point now) {
  const json& spec = object_member(obj, "spec");
  const json& status = object_member(obj, "status");
  const std::string name = name_of(obj);
  if (gr == "pods") {
    std::int64_t ready = 0, restarts = 0;
    for (const auto& cs : array_member(status, "containerStatuses")) {
      ready += member(cs, "ready") == json(true) ? 1 : 0;
      restarts += integer_member(cs, "restartCount");
    }
    const std::size_t total = array_member(spec, "containers").size();
    return {name,
            fmt::format("{}/{}", ready, total),
            pod_status(obj),
            std::to_string(restarts),
            age(obj, now),
            or_none(string_member(status, "podIP")),
            or_none(string_member(spec, "nodeName")),
            "<none>",
            "<none>"};
  }
  if (gr == "nodes") {
    std::string ready = "Unknown";
    for (const auto& c : array_member(status, "conditions")) {
      if (string_member(c, "type") == "Ready")
        ready = string_member(c, "status") == "True" ? "Ready" : "NotReady";
    }
    if (member(spec, "unschedulable") == json(true))
      ready += ",SchedulingDisabled";
    std::string internal_ip;
    for (const auto& a : array_member(status, "addresses")) {
      if (string_member(a, "type") == "InternalIP")
        internal_ip = string_member(a, "address");
    }
    const json& info = object_member(status, "nodeInfo");
    return {name,
            ready,
            "<none>",
            age(obj, now),
            string_member(info, "kubeletVersion"),
            or_none(internal_ip),
            "<none>",
            string_member(info, "osImage"),
            string_member(info, "kernelVersion"),
            string_member(info, "containerRuntimeVersion")};
  }
  if (gr == "namespaces") {
    const std::string phase = string_member(status, "phase");
    return {name, phase.empty() ? "Active" : phase, age(obj, now)};
  }
  if (gr == "services") {
    // printService: the first of spec.clusterIPs ("None" for a headless service).
    const json& cluster_ips = array_member(spec, "clusterIPs");
    const std::string cluster_ip = cluster_ips.empty() ? "" : str(cluster_ips[0]);
    const std::string ports = service_ports(spec);
    return {name,
            string_member(spec, "type"),
            or_none(cluster_ip),
            service_external_ip(obj),
            or_none(ports),
            age(obj, now),
            format_labels(object_member(spec, "selector"))};
  }
  if (gr == "configmaps") {
    return {name, object_member(obj, "data").size() + object_member(obj, "binaryData").size(),
            age(obj, now)};
  }
  if (gr == "secrets") {
    const std::string type = string_member(obj, "type");
    return {name, type.empty() ? "Opaque" : type, object_member(obj, "data").size(), age(obj, now)};
  }
  if (gr == "jobs.batch") {
    std::string state = "Running";
    for (const auto& c : array_member(status, "conditions")) {
      const std::string type = string_member(c, "type");
      if (string_member(c, "status") == "True" && (type == "Complete" || type == "Failed"))
        state = type;
    }
    const json& completions = member(spec, "completions");
    return {name, state,
            fmt::format("{}/{}", integer_member(status, "succeeded"),
                        completions.is_number_integer() ? completions.get<std::int64_t>() : 1),
            "", age(obj, now)};
  }
  json cells = {name};
  if (printer_columns.is_array() && !printer_columns.empty()) {
    bool has_age = false;
    for (const auto& c : printer_columns) {
      json value = evaluate_json_path(obj, c.value("jsonPath", ""));
      if (c.value("type", "") == "date" && value.is_string()) {
        if (const auto t = api::parse_timestamp(value.get<std::string>())) {
          value = api::human_duration(std::chrono::duration_cast<std::chrono::seconds>(now - *t));
        }
      }
      cells.push_back(value.is_null() ? json("") : value);
      has_age = has_age || to_lower(c.value("name", "")) == "age";
    }
    if (!has_age)
      cells.push_back(age(obj, now));
    return cells;
  }
  cells.push_back(age(obj, now));
  return cells;
}

}  // namespace

bool wants_table(std::string_view accept) {
  return accept.find("as=Table") != std::string_view::npos;
}

json evaluate_json_path(const json& object, std::string_view path) {
  std::string_view p = trim(path);
  if (p.starts_with("{") && p.ends_with("}"))
    p = p.substr(1, p.size() - 2);
  if (p.starts_with("$"))
    p.remove_prefix(1);
  const json* cur = &object;
  while (!p.empty()) {
    if (p.front() == '.') {
      p.remove_prefix(1);
      const size_t end = p.find_first_of(".[");
      const std::string key(p.substr(0, end));
      if (!cur->is_object() || !cur->contains(key))
        return nullptr;
      cur = &(*cur)[key];
      p = end == std::string_view::npos ? std::string_view() : p.substr(end);
    } else if (p.front() == '[') {
      const size_t close = p.find(']');
      if (close == std::string_view::npos)
        return nullptr;
      const std::string index(p.substr(1, close - 1));
      p.remove_prefix(close + 1);
      if (!cur->is_array())
        return nullptr;
      try {
        // "[-1:]" (the Kubeflow CRDs' last condition) and "[-1]" count from the end.
        const long i = std::stol(index.ends_with(":") ? index.substr(0, index.size() - 1) : index);
        const long size = static_cast<long>(cur->size());
        const long at = i < 0 ? size + i : i;
        if (at < 0 || at >= size)
          return nullptr;
        cur = &(*cur)[static_cast<size_t>(at)];
      } catch (const std::exception&) {
        return nullptr;  // filters such as [?(@.type=="Ready")] are not evaluated
      }
    } else {
      return nullptr;
    }
  }
  return *cur;
}

json to_table(const ResourceInfo& info, const std::vector<json>& objects,
              const json& printer_columns, std::string_view include_object,
              std::chrono::system_clock::time_point now) {
  const std::string gr = info.group_resource();
  json definitions = json::array();
  for (const auto& c : columns_for(gr, printer_columns)) {
    json d = {{"name", c.name},
              {"type", c.type},
              {"format", c.name == "Name" ? "name" : ""},
              {"description", c.description},
              {"priority", c.priority}};
    definitions.push_back(d);
  }
  json rows = json::array();
  for (const auto& obj : objects) {
    json row = {{"cells", cells_for(gr, obj, printer_columns, now)}};
    if (include_object == "Object") {
      row["object"] = obj;
    } else if (include_object != "None") {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", object_member(obj, "metadata")}};
    }
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", json::object()},
          {"columnDefinitions", definitions},
          {"rows", rows}};
}

}  // namespace trainctl::sandbox
