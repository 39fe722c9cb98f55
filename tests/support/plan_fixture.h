#pragma once

// Planning a job without a server: a fixed clock, a FakeCluster that applies a Plan's actions to
// the job and the objects it owns, and readers of plans and jobs. Shared by the planner tests
// (lib/controller/job_plan_test.cc) and the Training Operator parity suite
// (lib/controller/parity_test.cc).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "controller/job_plan.h"

namespace trainctl::controller::plan_testing {

using nlohmann::json;
using std::chrono::seconds;

inline const std::chrono::system_clock::time_point kStart{seconds(1'800'000'000)};

/// A PyTorchJob `ddp` in `team`: one Master, two Workers, nprocPerNode 4; `spec_patch` merged in.
inline json pytorch_job(const json& spec_patch = json::object()) {
  json job = json::parse(R"({
    "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
    "metadata": {"name": "ddp", "namespace": "team", "uid": "uid-2"},
    "spec": {"nprocPerNode": "4", "pytorchReplicaSpecs": {
      "Master": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "pt:2"}]}}},
      "Worker": {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "pt:2"}]}}}
    }}
  })");
  job["spec"].merge_patch(spec_patch);
  return job;
}

inline PlanOptions options(seconds after_start = seconds(0)) {
  PlanOptions o;
  o.now = kStart + after_start;
  o.gang_scheduler = GangScheduler::None;
  o.generate_ssh_keys = [] { return SshKeyPair{"PRIVATE", "ecdsa-sha2-nistp521 AAAA\n"}; };
  return o;
}

/// A tiny API server for plans: applies actions to the job and its objects.
struct FakeCluster {
  json job;
  Observed observed;
  int next_uid = 100;
  bool job_deleted = false;

  /// Applies the plan's writes as the API server would (apply_plan), each new object with a uid.
  void apply(const Plan& plan) {
    if (!apply_plan(plan, job, observed)) {
      const bool deletes_job = std::any_of(plan.actions.begin(), plan.actions.end(), [&](auto& a) {
        return a.type == Action::Type::Delete && a.name == job["metadata"]["name"] &&
               a.resource.kind == job["kind"];
      });
      ASSERT_TRUE(deletes_job) << "a write apply_plan cannot follow";
      job_deleted = true;
    }
    const auto give_uid = [&](json& object) {
      if (!object["metadata"].contains("uid"))
        object["metadata"]["uid"] = "u" + std::to_string(next_uid++);
    };
    for (auto* list : {&observed.pods, &observed.services, &observed.config_maps, &observed.secrets,
                       &observed.batch_jobs, &observed.autoscalers}) {
      for (json& object : *list)
        give_uid(object);
    }
    if (observed.pod_group)
      give_uid(*observed.pod_group);
  }

  /// Plans and applies; returns the plan.
  Plan step(const PlanOptions& o) {
    Plan plan = plan_job(job, observed, o);
    apply(plan);
    return plan;
  }

  json& pod(const std::string& name) {
    for (json& p : observed.pods) {
      if (p["metadata"]["name"] == name)
        return p;
    }
    throw std::runtime_error("no pod " + name);
  }

  void set_phase(const std::string& name, const std::string& phase, int exit_code = -1) {
    json& p = pod(name);
    p["status"]["phase"] = phase;
    if (exit_code >= 0)
      p["status"]["containerStatuses"] = {{{"name", p["spec"]["containers"][0]["name"]},
                                           {"restartCount", 0},
                                           {"state", {{"terminated", {{"exitCode", exit_code}}}}}}};
  }

  void set_all(const std::string& phase) {
    for (json& p : observed.pods)
      p["status"]["phase"] = phase;
  }
};

/// A cluster where the pods `job` asked for were created and all run.
inline FakeCluster running_cluster(json job) {
  FakeCluster cluster{.job = std::move(job)};
  cluster.step(options());
  cluster.set_all("Running");
  return cluster;
}

inline std::vector<std::string> names(const Plan& plan, Action::Type type,
                                      std::string_view plural) {
  std::vector<std::string> result;
  for (const Action& a : plan.actions) {
    if (a.type == type && a.resource.plural == plural)
      result.push_back(a.type == Action::Type::Create
                           ? a.object["metadata"]["name"].get<std::string>()
                           : a.name);
  }
  return result;
}

/// Every action's object, to compare whole plans.
inline json objects(const Plan& plan) {
  json result = json::array();
  for (const Action& a : plan.actions)
    result.push_back(a.object);
  return result;
}

inline const json& created(const Plan& plan, const std::string& name,
                           std::string_view plural = "pods") {
  for (const Action& a : plan.actions) {
    if (a.type == Action::Type::Create && a.resource.plural == plural &&
        a.object["metadata"]["name"] == name)
      return a.object;
  }
  throw std::runtime_error("not created: " + name);
}

inline std::string env_value(const json& container, const std::string& name) {
  for (const json& var : container.value("env", json::array())) {
    if (var["name"] == name)
      return var["value"];
  }
  return "<unset>";
}

inline const json* condition_of(const json& job, const std::string& type) {
  if (!job.contains("status") || !job["status"].contains("conditions"))
    return nullptr;
  for (const json& c : job["status"]["conditions"]) {
    if (c["type"] == type)
      return &c;
  }
  return nullptr;
}

inline std::string condition_status(const json& job, const std::string& type) {
  const json* c = condition_of(job, type);
  return c ? (*c)["status"].get<std::string>() : "<none>";
}

inline std::vector<std::string> event_reasons(const Plan& plan) {
  std::vector<std::string> result;
  for (const auto& e : plan.events)
    result.push_back(e.reason);
  return result;
}

inline bool has_event(const Plan& plan, const std::string& reason) {
  const auto reasons = event_reasons(plan);
  return std::find(reasons.begin(), reasons.end(), reason) != reasons.end();
}

}  // namespace trainctl::controller::plan_testing
