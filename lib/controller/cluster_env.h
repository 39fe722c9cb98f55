#pragma once

// The environment the Kubeflow Training Operator gives each replica so the framework finds its
// peers: TF_CONFIG for TensorFlow, MASTER_ADDR/WORLD_SIZE/RANK and torchrun's PET_* variables
// for PyTorch. Pure functions of a defaulted job (api::apply_defaults).

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "controller/plan.h"

namespace trainctl::controller {

/// TF_CONFIG for TFJob replica `type` `index`, byte for byte as the operator's Go encoder writes
/// it: `{"cluster":{"<type>":["<job>-<type>-<i>.<ns>.svc[.<domain>]:<port>",...],...},
/// "task":{"type":"<type>","index":N},"environment":"cloud"}`, cluster keys sorted, types
/// lower-case. In host-network mode the replica's own entry carries its host port. Empty when the
/// job has one replica in total (local training gets no TF_CONFIG). With spec.enableDynamicWorker
/// the operator's sparse form: `{"cluster":{"worker":{"<i>":"<own>"},"ps":[...]},"task":...}`
/// for a worker, `"ps":["<own>"]` for a PS, `{"worker":{},"ps":[]}` for other roles.
std::string tf_config(const nlohmann::json& job, std::string_view type, int index,
                      const PlanOptions& options);

/// The variables every container of PyTorchJob replica `type` `index` gets, in the operator's
/// order, as `[{name, value}]`: PYTHONUNBUFFERED; with a Master MASTER_PORT, PET_MASTER_PORT,
/// MASTER_ADDR, PET_MASTER_ADDR, WORLD_SIZE (replicas × nprocPerNode, 1 when that is not a
/// number), RANK, PET_NODE_RANK; always PET_NPROC_PER_NODE (spec.nprocPerNode, else the
/// deprecated elasticPolicy.nProcPerNode, else "auto"); with an elasticPolicy PET_RDZV_ENDPOINT,
/// PET_RDZV_BACKEND, PET_NNODES=min:max and the optional PET_MAX_RESTARTS, PET_RDZV_ID,
/// PET_RDZV_CONF, PET_STANDALONE; without one PET_NNODES = total replicas.
nlohmann::json pytorch_env(const nlohmann::json& job, std::string_view type, int index);

}  // namespace trainctl::controller
