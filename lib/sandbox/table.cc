#include "sandbox/table.h"

#include <fmt/format.h>

#include <ctime>

#include "api/status.h"
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
      api::age_of(obj["metadata"].value("creationTimestamp", json()), now));
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
  const json& status = pod.value("status", json::object());
  std::string reason = status.value("reason", status.value("phase", "Unknown"));
  for (const auto& cs : status.value("containerStatuses", json::array())) {
    const json& state = cs.value("state", json::object());
    if (state.contains("waiting") && !state["waiting"].value("reason", "").empty()) {
      reason = state["waiting"]["reason"];
    } else if (state.contains("terminated")) {
      const json& t = state["terminated"];
      reason = t.value("reason", "");
      if (reason.empty())
        reason = fmt::format("ExitCode:{}", t.value("exitCode", 0));
    }
  }
  if (pod["metadata"].contains("deletionTimestamp"))
    reason = "Terminating";
  return reason;
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
  const json& meta = obj["metadata"];
  const json& spec = obj.value("spec", json::object());
  const json& status = obj.value("status", json::object());
  const std::string name = meta.value("name", "");
  if (gr == "pods") {
    int ready = 0, total = 0, restarts = 0;
    for (const auto& cs : status.value("containerStatuses", json::array())) {
      ready += cs.value("ready", false) ? 1 : 0;
      restarts += cs.value("restartCount", 0);
    }
    total = static_cast<int>(spec.value("containers", json::array()).size());
    return {name,
            fmt::format("{}/{}", ready, total),
            pod_status(obj),
            std::to_string(restarts),
            age(obj, now),
            or_none(status.value("podIP", "")),
            or_none(spec.value("nodeName", "")),
            "<none>",
            "<none>"};
  }
  if (gr == "nodes") {
    std::string ready = "Unknown";
    for (const auto& c : status.value("conditions", json::array())) {
      if (c.value("type", "") == "Ready")
        ready = c.value("status", "") == "True" ? "Ready" : "NotReady";
    }
    if (spec.value("unschedulable", false))
      ready += ",SchedulingDisabled";
    std::string internal_ip;
    for (const auto& a : status.value("addresses", json::array())) {
      if (a.value("type", "") == "InternalIP")
        internal_ip = a.value("address", "");
    }
    const json& info = status.value("nodeInfo", json::object());
    return {name,
            ready,
            "<none>",
            age(obj, now),
            info.value("kubeletVersion", ""),
            or_none(internal_ip),
            "<none>",
            info.value("osImage", ""),
            info.value("kernelVersion", ""),
            info.value("containerRuntimeVersion", "")};
  }
  if (gr == "namespaces")
    return {name, status.value("phase", "Active"), age(obj, now)};
  if (gr == "services") {
    std::string ports;
    for (const auto& p : spec.value("ports", json::array())) {
      ports += (ports.empty() ? "" : ",") +
               fmt::format("{}/{}", p.value("port", 0), p.value("protocol", "TCP"));
    }
    std::string selector;
    for (const auto& [k, v] : spec.value("selector", json::object()).items()) {
      selector += (selector.empty() ? "" : ",") + k + "=" + str(v);
    }
    return {name,
            spec.value("type", "ClusterIP"),
            spec.value("clusterIP", ""),
            "<none>",
            or_none(ports),
            age(obj, now),
            or_none(selector)};
  }
  if (gr == "configmaps") {
    return {
        name,
        obj.value("data", json::object()).size() + obj.value("binaryData", json::object()).size(),
        age(obj, now)};
  }
  if (gr == "secrets") {
    return {name, obj.value("type", "Opaque"), obj.value("data", json::object()).size(),
            age(obj, now)};
  }
  if (gr == "jobs.batch") {
    std::string state = "Running";
    for (const auto& c : status.value("conditions", json::array())) {
      if (c.value("status", "") == "True" && (c["type"] == "Complete" || c["type"] == "Failed")) {
        state = c["type"];
      }
    }
    return {name, state,
            fmt::format("{}/{}", status.value("succeeded", 0), spec.value("completions", 1)), "",
            age(obj, now)};
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
                       {"metadata", obj["metadata"]}};
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
