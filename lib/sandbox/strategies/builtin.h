#pragma once

// The built-in resources' strategies, one file each under strategies/ (registry.cc lists them),
// and what several of them share.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sandbox/field_errors.h"
#include "sandbox/strategy.h"

namespace trainctl::sandbox {

class Store;

StrategyPtr namespace_strategy();
/// The `default` ServiceAccount the service account controller makes in every namespace.
void create_default_service_account(Store& store, const std::string& ns);
/// The ConfigMap of the cluster's CA bundle that kube-controller-manager's root-ca-cert-publisher
/// keeps in every namespace (pods' service account token volumes project its ca.crt).
inline constexpr const char* kRootCaName = "kube-root-ca.crt";
/// The PriorityClasses kube-apiserver makes at its start (SystemPriorityClasses).
struct SystemPriorityClass {
  const char* name;
  std::int64_t value;
  const char* description;
};
const std::vector<SystemPriorityClass>& system_priority_classes();
/// Creates `kRootCaName` in `ns` with `ca_pem` (kept when there is one); a namespace created
/// later gets kube-system's.
void publish_root_ca(Store& store, const std::string& ns, const std::string& ca_pem);
StrategyPtr pod_strategy();
StrategyPtr service_strategy();
StrategyPtr configmap_strategy();
StrategyPtr secret_strategy();
StrategyPtr core_event_strategy();
StrategyPtr events_k8s_io_strategy();
StrategyPtr node_strategy();
StrategyPtr service_account_strategy();
StrategyPtr lease_strategy();
StrategyPtr priority_class_strategy();
StrategyPtr job_strategy();
StrategyPtr horizontal_pod_autoscaler_strategy();
StrategyPtr deployment_strategy();
std::vector<StrategyPtr> rbac_strategies();
/// authorization.k8s.io's access reviews and authentication.k8s.io's self review (never stored).
std::vector<StrategyPtr> review_strategies();
StrategyPtr custom_resource_definition_strategy();

/// SetDefaults_PodSpec and SetDefaults_Container, for a pod's spec and a pod template's alike.
/// Defined with the pod strategy.
void default_pod_spec(nlohmann::json& spec);
/// ValidatePodSpec's checks (v1.26) of a defaulted pod spec, in the server's order and words: the
/// app and init containers (name, image, ports, env, volume mounts, resources; names unique
/// among both), restartPolicy, nodeSelector, tolerations. `path` is where `spec` is ("spec",
/// "spec.template.spec"). Defined in pod_spec_validation.cc.
void validate_pod_spec(const nlohmann::json& spec, const std::string& path,
                       std::vector<FieldError>& errs);

/// v1.PodSpec as json.Unmarshal reads it (go_types.h): the fields pods and templates are
/// written with, resource quantities among them. Defined with the pod strategy.
const GoStruct& pod_spec_type();
/// v1.PodTemplateSpec: its metadata and pod_spec_type().
const GoStruct& pod_template_spec_type();

/// errors.NewInvalid for one field of `object` of the strategy's type, the cause's reason read
/// from how `what` starts ("Required value", "Unsupported value", else FieldValueInvalid).
[[noreturn]] void reject_field(const ResourceInfo& info, const nlohmann::json& object,
                               const std::string& field, const std::string& what);

}  // namespace trainctl::sandbox
