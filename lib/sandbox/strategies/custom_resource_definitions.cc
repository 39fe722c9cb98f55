// apiextensions.k8s.io/v1 customresourcedefinitions: the definition's validation, and serving
// its resource once written (ServedResources::definition_written).

#include <fmt/format.h>

#include "json_access.h"
#include "sandbox/served_resources.h"
#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

class CustomResourceDefinitionStrategy final : public ResourceStrategy {
 public:
  CustomResourceDefinitionStrategy()
      : ResourceStrategy({"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                          "CustomResourceDefinition", false, true},
                         {"crd", "crds"}) {}

  void admit(json& crd, const AdmissionContext&) const override {
    const json& spec = crd.value("spec", json::object());
    const std::string group = spec.value("group", "");
    const std::string plural = spec.value("names", json::object()).value("plural", "");
    const std::string expected = plural + "." + group;
    if (group.empty())
      reject_field(info(), crd, "spec.group", "Required value");
    if (plural.empty())
      reject_field(info(), crd, "spec.names.plural", "Required value");
    if (spec.value("names", json::object()).value("kind", "").empty())
      reject_field(info(), crd, "spec.names.kind", "Required value");
    if (crd["metadata"].value("name", "") != expected) {
      reject_field(info(), crd, "metadata.name",
                   fmt::format("Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group",
                               crd["metadata"].value("name", "")));
    }
    int storage = 0;
    bool any_served = false;
    for (const auto& v : spec.value("versions", json::array())) {
      storage += v.value("storage", false) ? 1 : 0;
      any_served = any_served || v.value("served", false);
    }
    if (storage != 1) {
      reject_field(info(), crd, "spec.versions",
                   "Invalid value: must have exactly one version marked as storage version");
    }
    if (!any_served) {
      reject_field(info(), crd, "spec.versions",
                   "Invalid value: must have at least one version marked as served");
    }
    const std::string scope = spec.value("scope", "");
    if (scope != "Namespaced" && scope != "Cluster") {
      reject_field(info(), crd, "spec.scope",
                   fmt::format("Unsupported value: {:?}: supported values: \"Cluster\", "
                               "\"Namespaced\"",
                               scope));
    }
  }

  bool tracks_generation() const override { return true; }
  std::string storage_prefix() const override { return info().group + "/" + info().plural; }
  bool checks_delete_preconditions_in_storage() const override { return true; }

  void after_write(json& crd, WriteVerb verb, ServedResources& served) const override {
    // Serves the new versions and subresources, or stops when the write deleted it; a
    // definition that finalizers hold is still served.
    served.definition_written(crd);
    if (verb == WriteVerb::Create)
      crd = served.store().get(info().group_resource(), "", name_of(crd));
  }
};

}  // namespace

StrategyPtr custom_resource_definition_strategy() {
  static const StrategyPtr strategy = std::make_shared<CustomResourceDefinitionStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
