#pragma once

// Where a replica listens: its default container, port, and KubeDL's host-network mode with a
// stable host port per replica. Read by the pod builder (replica_pod.h) and by the cluster
// environment (cluster_env.h). Pure functions of a defaulted job.

#include <nlohmann/json.hpp>
#include <string_view>

#include "api/job.h"

namespace trainctl::controller {

/// The kind facts of a job (TFJob's for an object of another kind).
const api::JobKindInfo& info_of(const nlohmann::json& job);

/// The container the operator configures: the one with the kind's default name, else the first
/// (where api::apply_defaults put the default port). -1 when there is none.
int default_container(const api::JobKindInfo& info, const nlohmann::json& containers);

/// The port replica `type` serves on: the default container's port named as the kind's default
/// port (tfjob-port, pytorchjob-port), else the kind's default port number.
int replica_port(const nlohmann::json& job, std::string_view type);

/// KubeDL's host-network mode: the job's annotation `kubedl.io/network-mode: host`.
bool host_network(const nlohmann::json& job);

/// The host port of a replica in host-network mode, in 20000–29999: derived from the job's uid,
/// the replica type and the index, so every reconcile picks the same port.
int host_port(const nlohmann::json& job, std::string_view type, int index);

}  // namespace trainctl::controller
