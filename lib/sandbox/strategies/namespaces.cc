// core/v1 namespaces: the "kubernetes" finalizer and Active phase, the name label, the system
// namespaces that may not be deleted, deletion through the namespace lifecycle (the store
// deletes the contents first), and the default ServiceAccount of a new namespace.

#include <fmt/format.h>

#include "api/well_known.h"
#include "json_access.h"
#include "sandbox/selector.h"
#include "sandbox/served_resources.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

constexpr std::string_view kNamespaceFinalizer = "kubernetes";

class NamespaceStrategy final : public ResourceStrategy {
 public:
  NamespaceStrategy()
      : ResourceStrategy({"", "v1", "namespaces", "Namespace", false, true}, {"ns"}) {}

  void admit(json& ns, const AdmissionContext&) const override {
    const std::string name = ns["metadata"].value("name", "");
    if (!api::names::dns1123_label(name).empty()) {
      reject_field(info(), ns, "metadata.name",
                   fmt::format("Invalid value: {:?}: a lowercase RFC 1123 label must consist of "
                               "lower case alphanumeric characters or '-', and must start and end "
                               "with an alphanumeric character",
                               name));
    }
    ns["spec"]["finalizers"] = json::array({kNamespaceFinalizer});
    ns["status"] = {{"phase", "Active"}};
  }

  std::vector<std::string> name_errors(std::string_view name) const override {
    return api::names::dns1123_label(name);
  }

  void prepare_for_create(json& ns) const override {
    ns["status"] = {{"phase", "Active"}};
    json& finalizers = ns["spec"]["finalizers"];
    if (!finalizers.is_array())
      finalizers = json::array();
    if (std::find(finalizers.begin(), finalizers.end(), json(kNamespaceFinalizer)) ==
        finalizers.end())
      finalizers.push_back(kNamespaceFinalizer);
    ns["metadata"]["labels"][std::string(api::labels::namespace_name)] = name_of(ns);
  }

  void name_generated(json& ns) const override {
    ns["metadata"]["labels"][std::string(api::labels::namespace_name)] = ns["metadata"]["name"];
  }

  void prepare_for_update(const json& old, json& next, WritePart part) const override {
    ResourceStrategy::prepare_for_update(old, next, part);
    if (part != WritePart::Main)
      return;
    // The name label follows the name; spec.finalizers change only through /finalize.
    next["metadata"]["labels"][std::string(api::labels::namespace_name)] = name_of(old);
    if (member(old, "spec").contains("finalizers"))
      next["spec"]["finalizers"] = old["spec"]["finalizers"];
    else if (next.contains("spec") && next["spec"].is_object())
      next["spec"].erase("finalizers");
  }

  bool checks_delete_preconditions_in_storage() const override { return true; }

  void check_deletable(const std::string& name) const override {
    if (name == "default" || name == "kube-system" || name == "kube-public") {
      throw forbidden(info(), name, "this namespace may not be deleted");
    }
  }

  DeleteFlow delete_flow() const override { return DeleteFlow::NamespaceLifecycle; }

  std::vector<std::string> field_labels() const override {
    return {"status.phase", "metadata.name"};
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    return {name_column(),
            {"Status", "string", "The status of the namespace", 0,
             [](const json& ns, TablePrintTime) {
               const std::string phase = string_member(object_member(ns, "status"), "phase");
               return json(phase.empty() ? "Active" : phase);
             }},
            age_column()};
  }

  void after_write(json& ns, WriteVerb verb, ServedResources& served) const override {
    if (verb != WriteVerb::Create)
      return;
    create_default_service_account(served.store(), name_of(ns));
    // As kube-controller-manager's root-ca-cert-publisher: the bundle kube-system has.
    try {
      const json published = served.store().get("configmaps", "kube-system", kRootCaName);
      publish_root_ca(served.store(), name_of(ns),
                      string_member(member(published, "data"), "ca.crt"));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)  // a server without a CA publishes none
        throw;
    }
  }
};

}  // namespace

void publish_root_ca(Store& store, const std::string& ns, const std::string& ca_pem) {
  try {
    store.create(
        "configmaps",
        {{"apiVersion", "v1"},
         {"kind", "ConfigMap"},
         {"metadata",
          {{"name", kRootCaName},
           {"namespace", ns},
           {"annotations",
            {{"kubernetes.io/description",
              "Contains a CA bundle that can be used to verify the kube-apiserver when using "
              "internal endpoints such as the internal service IP or kubernetes.default.svc. No "
              "other usage is guaranteed across distributions of Kubernetes clusters."}}}}},
         {"data", {{"ca.crt", ca_pem}}}});
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::AlreadyExists)
      throw;
  }
}

void create_default_service_account(Store& store, const std::string& ns) {
  try {
    store.create("serviceaccounts", {{"apiVersion", "v1"},
                                     {"kind", "ServiceAccount"},
                                     {"metadata", {{"name", "default"}, {"namespace", ns}}}});
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::AlreadyExists)
      throw;
  }
}

StrategyPtr namespace_strategy() {
  static const StrategyPtr strategy = std::make_shared<NamespaceStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
