#pragma once

// A CustomResourceDefinition version's schema (spec.versions[].schema.openAPIV3Schema) applied to
// a custom resource as apiextensions-apiserver applies it: pruning of undeclared fields
// (pkg/apiserver/schema/pruning), defaulting (pkg/apiserver/schema/defaulting) and validation
// (pkg/apiserver/validation with kube-openapi's validators), with the real server's words.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sandbox/field_errors.h"

namespace trainctl::sandbox {

/// The structural schema of one served version of a custom resource.
class StructuralSchema {
 public:
  explicit StructuralSchema(nlohmann::json openapi_v3_schema);

  /// What decoding a request body does before the registry sees it: drops every field the schema
  /// does not declare (kept under x-kubernetes-preserve-unknown-fields; metadata as ObjectMeta;
  /// apiVersion, kind and metadata always at the root and in embedded resources), drops nulls
  /// of fields that are not nullable, then fills in `default`s. Returns the fields dropped as
  /// unknown, as the server's "unknown field" warnings name them ("metadata.x" first, then the
  /// rest sorted: "spec.foo", "spec.items[0].bar").
  std::vector<std::string> decode(nlohmann::json& object) const;

  /// ValidateCustomResource: each way the object breaks the schema (type, nullable, enum,
  /// required, minimum/maximum, exclusive bounds, multipleOf, minLength/maxLength, pattern,
  /// format date-time/date, minItems/maxItems, min/maxProperties, allOf/anyOf/oneOf/not), with
  /// kube-openapi's messages: `spec.x: Invalid value: "string": spec.x in body must be of type
  /// integer: "string"`. The errors come in schema order (the real server's order is random).
  std::vector<FieldError> validate(const nlohmann::json& object) const;

 private:
  nlohmann::json schema_;
};

/// The strict decoding error of unknown fields: `strict decoding error: unknown field "a",
/// unknown field "b"`.
std::string strict_decoding_error(const std::vector<std::string>& unknown_fields);

}  // namespace trainctl::sandbox
