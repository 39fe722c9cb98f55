#include "controller/autoscaler.h"

#include "api/job_view.h"
#include "controller/objects.h"
#include "controller/replica_pod.h"
#include "json_access.h"

namespace trainctl::controller {

using nlohmann::json;

std::optional<json> desired_autoscaler(const json& job) {
  const json& elastic = object_member(object_member(job, "spec"), "elasticPolicy");
  const json& metrics = elastic.value("metrics", json());
  if (!metrics.is_array())
    return std::nullopt;
  const int workers = api::JobView(job).replica_count("Worker");
  return json{{"apiVersion", "autoscaling/v2"},
              {"kind", "HorizontalPodAutoscaler"},
              {"metadata",
               {{"name", name_of(job)},
                {"namespace", namespace_of(job)},
                {"labels", managed_labels(name_of(job))},
                {"ownerReferences", json::array({controller_reference(job)})}}},
              {"spec",
               {{"scaleTargetRef",
                 {{"kind", job.value("kind", "")},
                  {"name", name_of(job)},
                  {"apiVersion", job.value("apiVersion", "")}}},
                {"minReplicas", elastic.value("minReplicas", workers)},
                {"maxReplicas", elastic.value("maxReplicas", workers)},
                {"metrics", metrics}}}};
}

void sync_autoscaler(JobPlanner& planner) {
  std::optional<json> desired = desired_autoscaler(planner.job());
  if (!desired)
    return;
  const auto& observed = planner.observed().autoscalers;
  if (observed.empty()) {
    planner.create(kube::resources::horizontalpodautoscalers(), std::move(*desired));
    return;
  }
  const json& current = observed.front();
  if (current.value("spec", json()) == (*desired)["spec"])
    return;
  (*desired)["metadata"]["resourceVersion"] =
      object_member(current, "metadata").value("resourceVersion", "");
  planner.update(kube::resources::horizontalpodautoscalers(), std::move(*desired));
}

}  // namespace trainctl::controller
