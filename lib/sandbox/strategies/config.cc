// core/v1 configmaps and secrets: no status, kubectl's DATA (and TYPE) columns.

#include <fmt/format.h>

#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// encoding/json's name for the kind of a JSON value, as UnmarshalTypeError prints it.
std::string json_kind(const json& value) {
  if (value.is_object())
    return "object";
  if (value.is_array())
    return "array";
  if (value.is_boolean())
    return "bool";
  if (value.is_number())
    return "number";
  return "string";
}

/// Decoding `data` and `binaryData` into a v1.ConfigMap: maps of strings (base64 for binaryData);
/// a null value decodes as "". Anything else is the decoder's 400, as the real server answers.
void check_decodes(json& cm) {
  auto fail = [](const std::string& field, const json& value, const char* go_type) {
    throw bad_request(
        fmt::format("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot "
                    "unmarshal {} into Go struct field ConfigMap.{} of type {}",
                    json_kind(value), field, go_type));
  };
  struct Field {
    const char* name;
    const char* map_type;
    const char* value_type;
  };
  for (const Field& f : {Field{"data", "map[string]string", "string"},
                         Field{"binaryData", "map[string][]uint8", "[]uint8"}}) {
    if (!cm.contains(f.name) || cm[f.name].is_null())
      continue;
    json& map = cm[f.name];
    if (!map.is_object())
      fail(f.name, map, f.map_type);
    for (auto& [key, value] : map.items()) {
      if (value.is_null())
        value = "";
      else if (!value.is_string())
        fail(f.name, value, f.value_type);
    }
  }
}

class ConfigMapStrategy final : public ResourceStrategy {
 public:
  ConfigMapStrategy()
      : ResourceStrategy({"", "v1", "configmaps", "ConfigMap", true, false}, {"cm"}) {}

  void admit(json& cm, const AdmissionContext&) const override { check_decodes(cm); }

  void prepare_for_update(const json& old, json& next, WritePart part) const override {
    ResourceStrategy::prepare_for_update(old, next, part);
    check_decodes(next);
  }

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
