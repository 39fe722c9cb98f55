// Resources served from CustomResourceDefinitions: one strategy per definition, holding what
// the definition says per version (structural schema, printer columns, the scale subresource).

#include "sandbox/strategies/custom_resources.h"

#include <map>

#include "sandbox/structural_schema.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

class CustomResourceStrategy final : public ResourceStrategy {
 public:
  CustomResourceStrategy(ResourceInfo storage, std::vector<std::string> short_names,
                         std::vector<std::string> categories, std::vector<std::string> versions,
                         std::map<std::string, StructuralSchema> schemas,
                         std::map<std::string, json> columns, std::map<std::string, json> scales)
      : ResourceStrategy(std::move(storage), std::move(short_names), std::move(categories)),
        versions_(std::move(versions)),
        schemas_(std::move(schemas)),
        columns_(std::move(columns)),
        scales_(std::move(scales)) {}

  std::vector<std::string> served_versions() const override { return versions_; }

  Decoded decode(json& object, const std::string& version) const override {
    const auto it = schemas_.find(version);
    if (it == schemas_.end())
      return {};
    return {.unknown_fields = it->second.decode(object)};
  }

  void validate(const json& object, WritePart, std::vector<FieldError>& errs) const override {
    // Stored objects are in the storage version; with the "None" conversion every version's
    // object is that one's too.
    const auto it = schemas_.find(info().version);
    if (it == schemas_.end())
      return;
    auto found = it->second.validate(object);
    errs.insert(errs.end(), found.begin(), found.end());
  }

  std::vector<PrintColumn> columns(const std::string& version) const override {
    const auto it = columns_.find(version);
    if (it == columns_.end() || !it->second.is_array() || it->second.empty())
      return ResourceStrategy::columns(version);
    return custom_columns(it->second);
  }

  const json* scale(const std::string& version) const override {
    const auto it = scales_.find(version);
    return it == scales_.end() ? nullptr : &it->second;
  }

 private:
  std::vector<std::string> versions_;
  std::map<std::string, StructuralSchema> schemas_;  // by version: schema.openAPIV3Schema
  std::map<std::string, json> columns_;              // by version: additionalPrinterColumns
  std::map<std::string, json> scales_;               // by version: subresources.scale
};

}  // namespace

CustomResource custom_resource(const json& crd) {
  const json& spec = crd.value("spec", json::object());
  const std::string group = spec.value("group", "");
  const json& names = spec.value("names", json::object());
  const std::string plural = names.value("plural", "");
  ResourceInfo storage;
  CustomResource out;
  std::vector<std::string> versions;
  std::map<std::string, StructuralSchema> schemas;
  std::map<std::string, json> columns;
  std::map<std::string, json> scales;
  for (const auto& v : spec.value("versions", json::array())) {
    ResourceInfo info{group,
                      v.value("name", ""),
                      plural,
                      names.value("kind", ""),
                      spec.value("scope", "Namespaced") == "Namespaced",
                      v.value("subresources", json::object()).contains("status")};
    if (v.value("storage", false))
      storage = info;
    if (v.value("served", false)) {
      out.served.push_back(info);
      versions.push_back(info.version);
    }
    const json& schema = v.value("schema", json::object()).value("openAPIV3Schema", json());
    if (schema.is_object())
      schemas.emplace(info.version, StructuralSchema(schema));
    if (v.contains("additionalPrinterColumns"))
      columns[info.version] = v["additionalPrinterColumns"];
    const json& scale = v.value("subresources", json::object()).value("scale", json());
    if (scale.is_object())
      scales[info.version] = scale;
  }
  const auto strings = [&names](const char* key) {
    std::vector<std::string> list;
    for (const auto& s : names.value(key, json::array())) {
      if (s.is_string())
        list.push_back(s);
    }
    return list;
  };
  out.strategy = std::make_shared<CustomResourceStrategy>(
      std::move(storage), strings("shortNames"), strings("categories"), std::move(versions),
      std::move(schemas), std::move(columns), std::move(scales));
  return out;
}

}  // namespace trainctl::sandbox
