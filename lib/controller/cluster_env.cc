#include "controller/cluster_env.h"

#include <fmt/format.h>

#include <charconv>

#include "api/job_view.h"
#include "api/status.h"
#include "controller/objects.h"
#include "controller/replica_network.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

json env_var(std::string_view name, std::string value) {
  return {{"name", name}, {"value", std::move(value)}};
}

/// spec.nprocPerNode as a number; 1 for "auto", "cpu", "gpu" or anything else that is not one,
/// as the operator's getNprocPerNodeInt.
int nproc_per_node(const json& spec) {
  const json& value = spec.value("nprocPerNode", json());
  if (value.is_number_integer())
    return value.get<int>();
  if (!value.is_string())
    return 1;
  const std::string& text = value.get_ref<const std::string&>();
  int n = 1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc() && end == text.data() + text.size() ? n : 1;
}

/// A JSON scalar as the operator formats the string it stands for ("auto", 4 -> "4").
std::string scalar_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

void append_elastic_env(json& env, const json& job, const json& elastic) {
  const std::string name = job.at("metadata").value("name", "");
  const std::string host = elastic.value("rdzvHost", name + "-worker-0");
  const int port = elastic.value("rdzvPort", replica_port(job, "Worker"));
  env.push_back(env_var("PET_RDZV_ENDPOINT", fmt::format("{}:{}", host, port)));
  env.push_back(env_var("PET_RDZV_BACKEND", elastic.value("rdzvBackend", "c10d")));
  const int workers = api::JobView(job).replica_count("Worker");
  env.push_back(env_var("PET_NNODES", fmt::format("{}:{}", elastic.value("minReplicas", workers),
                                                  elastic.value("maxReplicas", workers))));
  if (elastic.contains("maxRestarts"))
    env.push_back(env_var("PET_MAX_RESTARTS", scalar_text(elastic["maxRestarts"])));
  if (elastic.contains("nProcPerNode"))
    env.push_back(env_var("PET_NPROC_PER_NODE", scalar_text(elastic["nProcPerNode"])));
  if (elastic.contains("rdzvId"))
    env.push_back(env_var("PET_RDZV_ID", scalar_text(elastic["rdzvId"])));
  if (elastic.contains("rdzvConf") && elastic["rdzvConf"].is_array()) {
    std::string conf;
    for (const json& kv : elastic["rdzvConf"])
      conf += fmt::format("{}{}={}", conf.empty() ? "" : ",", kv.value("key", ""),
                          kv.value("value", ""));
    env.push_back(env_var("PET_RDZV_CONF", conf));
  }
  if (elastic.value("standalone", false))
    env.push_back(env_var("PET_STANDALONE", ""));
}

/// TF_CONFIG with enableDynamicWorker, as the operator's convertClusterSpecToSparseClusterSpec
/// and SparseTFConfig (tensorflow/tensorflow.go) encode it: a worker sees itself (keyed by its
/// index) and every PS, a PS only itself, any other role nobody; no "environment". The Go struct
/// orders worker before ps, and a job without PS gives a worker `"ps":null` (a nil slice).
std::string sparse_tf_config(const json& cluster, const std::string& type, int index,
                             const std::string& task_type) {
  json workers = json::object();
  json ps = json::array();
  if (type == "ps") {
    ps.push_back(cluster.at("ps").at(index));
  } else if (type == "worker") {
    workers[std::to_string(index)] = cluster.at("worker").at(index);
    ps = cluster.contains("ps") ? cluster["ps"] : json();
  }
  return fmt::format(R"({{"cluster":{{"worker":{},"ps":{}}},"task":{{"type":{},"index":{}}}}})",
                     workers.dump(), ps.dump(), task_type, index);
}

}  // namespace

std::string tf_config(const json& job, std::string_view type, int index,
                      const PlanOptions& options) {
  if (api::JobView(job).total_replicas() == 1)
    return "";
  const json& meta = job.at("metadata");
  const std::string name = meta.value("name", "");
  const std::string ns = meta.value("namespace", "");
  const std::string domain = options.cluster_domain.empty() ? "" : "." + options.cluster_domain;
  const bool host = host_network(job);
  json cluster = json::object();  // keys sorted, as Go encodes a map
  for (const auto& [other, spec] : job.at("spec").at("tfReplicaSpecs").items()) {
    const int port = replica_port(job, other);
    json& endpoints = cluster[to_lower(other)] = json::array();
    for (int i = 0; i < api::JobView(job).replica_count(other); ++i) {
      const bool own = host && other == type && i == index;
      endpoints.push_back(fmt::format("{}.{}.svc{}:{}", replica_name(name, other, i), ns, domain,
                                      own ? host_port(job, other, i) : port));
    }
  }
  const std::string task_type = json(to_lower(type)).dump();
  if (job.at("spec").value("enableDynamicWorker", false))
    return sparse_tf_config(cluster, to_lower(type), index, task_type);
  return fmt::format(R"({{"cluster":{},"task":{{"type":{},"index":{}}},"environment":"cloud"}})",
                     cluster.dump(), task_type, index);
}

json pytorch_env(const json& job, std::string_view type, int index) {
  const json& spec = job.at("spec");
  json env = json::array({env_var("PYTHONUNBUFFERED", "1")});
  const int total = api::JobView(job).total_replicas();
  if (api::JobView(job).has_replica_type("Master")) {
    const std::string master = replica_name(job.at("metadata").value("name", ""), "Master", 0);
    const bool own_host_port = host_network(job) && type == "Master" && index == 0;
    const std::string port =
        std::to_string(own_host_port ? host_port(job, "Master", 0) : replica_port(job, "Master"));
    const std::string rank = std::to_string(type == "Worker" ? index + 1 : index);
    env.push_back(env_var("MASTER_PORT", port));
    env.push_back(env_var("PET_MASTER_PORT", port));
    env.push_back(env_var("MASTER_ADDR", master));
    env.push_back(env_var("PET_MASTER_ADDR", master));
    env.push_back(env_var("WORLD_SIZE", std::to_string(total * nproc_per_node(spec))));
    env.push_back(env_var("RANK", rank));
    env.push_back(env_var("PET_NODE_RANK", rank));
  }
  // Master or not, as the operator's setPodEnv (pytorch/envvar.go): spec.nprocPerNode, which its
  // defaulting sets to "auto" unless the deprecated elasticPolicy.nProcPerNode is given; that one
  // comes with the elastic variables (validation refuses both).
  const json& elastic = spec.value("elasticPolicy", json());
  json nproc = spec.value("nprocPerNode", json());
  if (nproc.is_null() && !(elastic.is_object() && elastic.contains("nProcPerNode")))
    nproc = "auto";
  if (!nproc.is_null())
    env.push_back(env_var("PET_NPROC_PER_NODE", scalar_text(nproc)));
  if (elastic.is_object())
    append_elastic_env(env, job, elastic);
  else
    env.push_back(env_var("PET_NNODES", std::to_string(total)));
  return env;
}

}  // namespace trainctl::controller
