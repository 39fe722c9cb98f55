#include "controller/replica_pod.h"

#include <fmt/format.h>

#include <cstdint>

#include "api/job_view.h"
#include "api/well_known.h"
#include "controller/cluster_env.h"
#include "controller/gang.h"
#include "controller/objects.h"
#include "controller/replica_network.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

/// The job, labels and owner every object of the job's replica carries.
json replica_metadata(const json& job, api::JobKind kind, std::string_view type, int index) {
  const json& meta = job.at("metadata");
  const std::string name = meta.value("name", "");
  return {{"name", replica_name(name, type, index)},
          {"namespace", meta.value("namespace", "")},
          {"labels", replica_labels(kind, name, type, index)},
          {"ownerReferences", json::array({controller_reference(job)})}};
}

/// TF: Chief or Master when the job has one, else worker 0. PyTorch: Master, else worker 0.
bool is_master_role(const json& job, std::string_view type, int index) {
  if (api::JobView(job).has_replica_type("Chief") || api::JobView(job).has_replica_type("Master"))
    return type == "Chief" || type == "Master";
  return type == "Worker" && index == 0;
}

void append_env(json& container, const json& vars) {
  json& env = container["env"];
  if (!env.is_array())
    env = json::array();
  for (const json& var : vars)
    env.push_back(var);
}

void set_cluster_env(json& containers, const json& job, api::JobKind kind, std::string_view type,
                     int index, const PlanOptions& options) {
  if (!containers.is_array())
    return;
  if (kind == api::JobKind::PyTorchJob) {
    const json env = pytorch_env(job, type, index);
    for (json& container : containers)
      append_env(container, env);
    return;
  }
  const std::string config = tf_config(job, type, index, options);
  if (config.empty())
    return;
  for (json& container : containers) {
    if (container.value("name", "") == info_of(job).default_container) {
      append_env(container, json::array({{{"name", "TF_CONFIG"}, {"value", config}}}));
      return;
    }
  }
}

/// hostNetwork with the default port moved to the replica's host port.
void use_host_network(json& pod_spec, const json& job, std::string_view type, int index) {
  pod_spec["hostNetwork"] = true;
  pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet";
  const api::JobKindInfo& info = info_of(job);
  const int container = default_container(info, pod_spec.value("containers", json()));
  if (container < 0)
    return;
  json& ports = pod_spec["containers"][container]["ports"];
  if (!ports.is_array())
    return;
  const int port = host_port(job, type, index);
  for (json& p : ports) {
    if (p.value("name", "") == info.default_port_name) {
      p["containerPort"] = port;
      p["hostPort"] = port;
    }
  }
}

}  // namespace

void decorate_pod_template(json& pod_template, std::string_view job_name,
                           std::string_view replica_type, const PlanOptions& options) {
  json& meta = pod_template["metadata"];
  json& spec = pod_template["spec"];
  decorate_istio(pod_template, options.istio_namespace, options.istio_native_sidecars);
  const bool scheduler_named = !string_member(spec, "schedulerName").empty();
  switch (options.gang_scheduler) {
    case GangScheduler::None:
      return;
    case GangScheduler::Builtin:
      meta["annotations"][std::string(api::annotations::group_name)] = job_name;
      return;
    case GangScheduler::Volcano:
      meta["annotations"][std::string(api::annotations::group_name)] = job_name;
      meta["annotations"][std::string(api::annotations::volcano_task_spec)] =
          to_lower(replica_type);
      if (!scheduler_named)
        spec["schedulerName"] = std::string(volcano_scheduler_name);
      return;
    case GangScheduler::SchedulerPlugins:
      meta["labels"][std::string(api::labels::pod_group)] = job_name;
      if (!scheduler_named)
        spec["schedulerName"] = options.scheduler_plugins_scheduler_name;
      return;
  }
}

namespace {

/// The Training Operator's init-pytorch container (pytorch/initcontainer.go
/// initContainerTemplate), appended after the template's own init containers.
void add_master_wait(json& pod_spec, const json& job,
                     const PlanOptions::PyTorchInitContainer& init) {
  if (init.image.empty())
    return;
  const std::string master = replica_name(job.at("metadata").value("name", ""), "Master", 0);
  json& init_containers = pod_spec["initContainers"];
  if (!init_containers.is_array())
    init_containers = json::array();
  init_containers.push_back(
      {{"name", "init-pytorch"},
       {"image", init.image},
       {"imagePullPolicy", "IfNotPresent"},
       {"resources",
        {{"limits", {{"cpu", "100m"}, {"memory", "20Mi"}}},
         {"requests", {{"cpu", "50m"}, {"memory", "10Mi"}}}}},
       {"command",
        {"sh", "-c",
         fmt::format("err=1;for i in $(seq {}); do if nslookup {}; then err=0 && break; fi;echo "
                     "waiting for master; sleep 2; done; exit $err",
                     init.max_tries, master)}}});
}

}  // namespace

json replica_pod(const json& job, api::JobKind kind, std::string_view type, int index,
                 const PlanOptions& options) {
  const json& spec = api::JobView(job).replica_spec(type);
  json pod_template = object_member(spec, "template");
  json meta = object_member(pod_template, "metadata");
  json generated = replica_metadata(job, kind, type, index);
  json& labels = meta["labels"];
  if (!labels.is_object())
    labels = json::object();
  labels.update(generated["labels"]);
  if (is_master_role(job, type, index))
    labels[std::string(api::labels::job_role)] = "master";
  meta["name"] = generated["name"];
  meta["namespace"] = generated["namespace"];
  meta["ownerReferences"] = generated["ownerReferences"];
  pod_template["metadata"] = std::move(meta);

  json& pod_spec = pod_template["spec"];
  if (!pod_spec.is_object())
    pod_spec = json::object();
  const std::string restart_policy = spec.value("restartPolicy", "Never");
  pod_spec["restartPolicy"] = restart_policy == "ExitCode" ? "Never" : restart_policy;
  if (pod_spec.contains("containers"))
    set_cluster_env(pod_spec["containers"], job, kind, type, index, options);
  if (host_network(job))
    use_host_network(pod_spec, job, type, index);
  if (kind == api::JobKind::PyTorchJob && type == "Worker" &&
      api::JobView(job).has_replica_type("Master"))
    add_master_wait(pod_spec, job, options.pytorch_init_container);
  decorate_pod_template(pod_template, job.at("metadata").value("name", ""), type, options);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", std::move(pod_template["metadata"])},
          {"spec", std::move(pod_spec)}};
}

json replica_service(const json& job, api::JobKind kind, std::string_view type, int index) {
  json meta = replica_metadata(job, kind, type, index);
  const bool host = host_network(job);
  const std::string default_port_name(info_of(job).default_port_name);
  json ports = json::array();
  for (const json& p : default_container_ports(job, type)) {
    if (!p.is_object() || !p.contains("containerPort"))
      continue;
    json port = {{"port", p["containerPort"]}};
    if (p.contains("name"))
      port["name"] = p["name"];
    if (host && p.value("name", "") == default_port_name)
      port["targetPort"] = host_port(job, type, index);
    ports.push_back(std::move(port));
  }
  json spec = {{"selector", meta["labels"]}, {"ports", std::move(ports)}};
  if (!host)
    spec["clusterIP"] = "None";
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", std::move(meta)},
          {"spec", std::move(spec)}};
}

}  // namespace trainctl::controller
