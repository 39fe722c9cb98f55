// core/v1 configmaps and secrets: no status, kubectl's DATA (and TYPE) columns.

#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

class ConfigMapStrategy final : public ResourceStrategy {
 public:
  ConfigMapStrategy()
      : ResourceStrategy({"", "v1", "configmaps", "ConfigMap", true, false}, {"cm"}) {}

  std::vector<PrintColumn> columns(const std::string&) const override {
    return {
        name_column(),
        {"Data", "integer", "Number of data entries.", 0,
         [](const json& cm, TablePrintTime) {
           return json(object_member(cm, "data").size() + object_member(cm, "binaryData").size());
         }},
        age_column()};
  }
};

class SecretStrategy final : public ResourceStrategy {
 public:
  SecretStrategy() : ResourceStrategy({"", "v1", "secrets", "Secret", true, false}) {}

  std::vector<std::string> field_labels() const override {
    return {"type", "metadata.namespace", "metadata.name"};
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    return {name_column(),
            {"Type", "string", "The type of the secret.", 0,
             [](const json& secret, TablePrintTime) {
               const std::string type = string_member(secret, "type");
               return json(type.empty() ? "Opaque" : type);
             }},
            {"Data", "integer", "Number of data entries.", 0,
             [](const json& secret, TablePrintTime) {
               return json(object_member(secret, "data").size());
             }},
            age_column()};
  }
};

}  // namespace

StrategyPtr configmap_strategy() {
  static const StrategyPtr strategy = std::make_shared<ConfigMapStrategy>();
  return strategy;
}

StrategyPtr secret_strategy() {
  static const StrategyPtr strategy = std::make_shared<SecretStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
