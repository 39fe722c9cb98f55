// core/v1 configmaps and secrets: decoding (a Secret's stringData written into its data),
// ValidateConfigMap and ValidateSecret, no status, kubectl's DATA (and TYPE) columns.

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "api/names.h"
#include "json_access.h"
#include "sandbox/go_types.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"
#include "text.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// One map field of v1.ConfigMap or v1.Secret as the decoder reads it.
struct MapField {
  const char* name;
  const char* map_type;    // the Go type UnmarshalTypeError names for the whole field
  const char* value_type;  // ... and for one of its values
  bool bytes;              // []byte values: base64, as Go's base64.StdEncoding reads it
};

/// Decoding the map fields of a `kind` body: maps of strings (base64 for []byte, which the
/// server writes back canonically), a null value decodes as ""; the decoder's error otherwise.
std::optional<std::string> decode_maps(json& object, std::string_view kind,
                                       std::initializer_list<MapField> fields) {
  const auto error = [&](const MapField& f, const json& value, const char* go_type) {
    return fmt::format("json: cannot unmarshal {} into Go struct field {}.{} of type {}",
                       json_kind(value), kind, f.name, go_type);
  };
  for (const MapField& f : fields) {
    if (!object.contains(f.name) || object[f.name].is_null())
      continue;
    json& map = object[f.name];
    if (!map.is_object())
      return error(f, map, f.map_type);
    for (auto& item : map.items()) {
      json& value = item.value();
      if (value.is_null()) {
        value = "";
      } else if (!value.is_string()) {
        return error(f, value, f.value_type);
      } else if (f.bytes) {
        if (const auto at = base64_corrupt_at(value.get_ref<const std::string&>()))
          return fmt::format("illegal base64 data at input byte {}", *at);
        // Kept as the bytes they are: written back in canonical base64 (no line breaks).
        value = base64_encode(*base64_decode(value.get_ref<const std::string&>()));
      }
    }
  }
  return std::nullopt;
}

/// validation.IsConfigMapKey, as the server words each problem.
std::vector<std::string> config_key_errors(std::string_view key) {
  std::vector<std::string> errs;
  if (key.size() > 253)
    errs.emplace_back("must be no more than 253 characters");
  const bool allowed = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!allowed) {
    errs.emplace_back(
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
        "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
        "'[-._a-zA-Z0-9]+')");
  }
  if (key == ".")
    errs.emplace_back("must not be '.'");
  else if (key == "..")
    errs.emplace_back("must not be '..'");
  else if (key.starts_with(".."))
    errs.emplace_back("must not start with '..'");
  return errs;
}

/// core.MaxSecretSize, which a ConfigMap's data is held to as well.
constexpr std::size_t kMaxDataSize = 1024 * 1024;

/// The keys of the map `field` of `object` checked as config keys; returns the bytes its values
/// hold (decoded, for base64).
std::size_t check_keys(const json& object, const char* field, bool bytes,
                       std::vector<FieldError>& errs) {
  std::size_t size = 0;
  for (const auto& [key, value] : object_member(object, field).items()) {
    for (const std::string& msg : config_key_errors(key))
      errs.push_back(
          invalid_value(fmt::format("{}[{}]", field, key), api::names::go_quote(key), msg));
    const std::string text = value.is_string() ? value.get<std::string>() : "";
    size += bytes ? base64_decode(text).value_or("").size() : text.size();
  }
  return size;
}

class ConfigMapStrategy final : public ResourceStrategy {
 public:
  ConfigMapStrategy()
      : ResourceStrategy({"", "v1", "configmaps", "ConfigMap", true, false}, {"cm"}) {}

  Decoded decode(json& cm, const std::string& version) const override {
    Decoded decoded = ResourceStrategy::decode(cm, version);
    if (!decoded.error) {
      decoded.error = decode_maps(cm, "ConfigMap",
                                  {{"data", "map[string]string", "string", false},
                                   {"binaryData", "map[string][]uint8", "[]uint8", true}});
    }
    if (!decoded.error)
      erase_empty_members(cm, {"data", "binaryData"});  // omitempty
    return decoded;
  }

  /// ValidateConfigMap: config keys, no key in both maps, at most 1 MiB.
  void validate(const json& cm, WritePart, std::vector<FieldError>& errs) const override {
    std::size_t size = check_keys(cm, "data", false, errs);
    const json& binary = object_member(cm, "binaryData");
    for (const auto& [key, value] : object_member(cm, "data").items()) {
      if (binary.contains(key))
        errs.push_back(invalid_value(fmt::format("data[{}]", key), api::names::go_quote(key),
                                     "duplicate of key present in binaryData"));
    }
    size += check_keys(cm, "binaryData", true, errs);
    if (size > kMaxDataSize)
      errs.push_back(too_long("[]", kMaxDataSize));  // the whole object, as the server names it
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

  /// The decoder's checks, then the conversion to the internal type: stringData, write-only,
  /// is written into data (base64), overriding a key both have; SetDefaults_Secret's type
  /// Opaque.
  Decoded decode(json& secret, const std::string& version) const override {
    Decoded decoded = ResourceStrategy::decode(secret, version);
    if (!decoded.error) {
      decoded.error = decode_maps(secret, "Secret",
                                  {{"data", "map[string][]uint8", "[]uint8", true},
                                   {"stringData", "map[string]string", "string", false}});
    }
    if (decoded.error)
      return decoded;
    if (string_member(secret, "type").empty())
      secret["type"] = "Opaque";
    if (const auto strings = secret.find("stringData"); strings != secret.end()) {
      if (strings->is_object() && !strings->empty()) {
        json& data = ensure_object(secret, "data");
        for (const auto& [key, value] : strings->items())
          data[key] = base64_encode(value.get<std::string>());
      }
      secret.erase(strings);
    }
    erase_empty_members(secret, {"data"});
    return decoded;
  }

  /// ValidateSecret: config keys, at most 1 MiB, and the keys each type requires.
  void validate(const json& secret, WritePart, std::vector<FieldError>& errs) const override {
    if (check_keys(secret, "data", true, errs) > kMaxDataSize)
      errs.push_back(too_long("data", kMaxDataSize));
    const json& data = object_member(secret, "data");
    const auto require = [&](const char* key) {
      if (!data.contains(key))
        errs.push_back(required_value(fmt::format("data[{}]", key), ""));
    };
    const std::string type = string_member(secret, "type");
    if (type == "kubernetes.io/tls") {
      require("tls.crt");
      require("tls.key");
    } else if (type == "kubernetes.io/ssh-auth") {
      if (base64_decode(string_member(data, "ssh-privatekey")).value_or("").empty())
        errs.push_back(required_value("data[ssh-privatekey]", ""));
    } else if (type == "kubernetes.io/basic-auth") {
      if (!data.contains("username") && !data.contains("password")) {
        require("username");
        require("password");
      }
    } else if (type == "kubernetes.io/dockerconfigjson") {
      require(".dockerconfigjson");
    } else if (type == "kubernetes.io/dockercfg") {
      require(".dockercfg");
    } else if (type == "kubernetes.io/service-account-token") {
      if (string_member(object_member(object_member(secret, "metadata"), "annotations"),
                        "kubernetes.io/service-account.name")
              .empty())
        errs.push_back(
            required_value("metadata.annotations[kubernetes.io/service-account.name]", ""));
    }
  }

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
