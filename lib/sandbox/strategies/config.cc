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

/// Decoding `data` and `binaryData` into a v1.ConfigMap: maps of strings (base64 for
/// binaryData, not checked); a null value decodes as "".
std::optional<std::string> decode_config_map(json& cm) {
  struct Field {
    const char* name;
    const char* map_type;
    const char* value_type;
  };
  auto error = [](const char* field, const json& value, const char* go_type) {
    return fmt::format("json: cannot unmarshal {} into Go struct field ConfigMap.{} of type {}",
                       json_kind(value), field, go_type);
  };
  for (const Field& f : {Field{"data", "map[string]string", "string"},
                         Field{"binaryData", "map[string][]uint8", "[]uint8"}}) {
    if (!cm.contains(f.name) || cm[f.name].is_null())
      continue;
    json& map = cm[f.name];
    if (!map.is_object())
      return error(f.name, map, f.map_type);
    for (auto& item : map.items()) {
      json& value = item.value();
      if (value.is_null())
        value = "";
      else if (!value.is_string())
        return error(f.name, value, f.value_type);
    }
  }
  return std::nullopt;
}

class ConfigMapStrategy final : public ResourceStrategy {
 public:
  ConfigMapStrategy()
      : ResourceStrategy({"", "v1", "configmaps", "ConfigMap", true, false}, {"cm"}) {}

  Decoded decode(json& cm, const std::string&) const override {
    return {.error = decode_config_map(cm)};
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
