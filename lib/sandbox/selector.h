#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/names.h"

namespace trainctl::sandbox {

/// True for the API groups the real kube-apiserver serves itself ("" core, apps, batch,
/// *.k8s.io groups of Kubernetes); anything else is served from a CustomResourceDefinition.
bool is_builtin_group(std::string_view group);

/// One term of a label selector.
struct LabelRequirement {
  enum class Op { Equals, DoubleEquals, NotEquals, In, NotIn, Exists, DoesNotExist, Greater, Less };
  std::string key;
  Op op = Op::Exists;
  std::vector<std::string> values;  // sorted, without duplicates, as the server keeps them

  bool matches(const nlohmann::json& labels) const;
};

/// A parsed `labelSelector` query parameter: requirements that must all match.
class LabelSelector {
 public:
  /// Parses the full grammar (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
  /// `a>1`, `a<1`, comma-separated); throws Error(BadRequest) with the server's message.
  static LabelSelector parse(std::string_view text);
  /// A metav1.LabelSelector object (`matchLabels`, `matchExpressions` with In, NotIn, Exists,
  /// DoesNotExist), as metav1.LabelSelectorAsSelector reads it: nullopt for a null or missing
  /// selector, which selects nothing; `{}` selects everything. Throws Error(Invalid) on an unknown
  /// operator.
  static std::optional<LabelSelector> from_api(const nlohmann::json& selector);

  /// `labels` is an object of string values (metadata.labels), or null when the object has none.
  bool matches(const nlohmann::json& labels) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<LabelRequirement>& requirements() const { return requirements_; }
  /// Canonical text, requirements sorted by key as the server prints them.
  std::string to_string() const;

 private:
  std::vector<LabelRequirement> requirements_;
};

/// One term of a field selector.
struct FieldRequirement {
  std::string field;
  std::string value;
  bool negated = false;  // `!=`
};

/// A parsed `fieldSelector` query parameter: `f=v`, `f==v`, `f!=v`, comma-separated, values with
/// `\,` `\=` `\\` escapes.
class FieldSelector {
 public:
  /// Throws Error(BadRequest) with the server's message on bad syntax.
  static FieldSelector parse(std::string_view text);

  bool matches(const nlohmann::json& object) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<FieldRequirement>& requirements() const { return requirements_; }
  /// Throws Error(BadRequest) as the server does when a field is not selectable for the resource
  /// ("field label not supported: f" for types whose strategy lists its fields (field_labels()),
  /// "\"f\" is not a known field selector: only ..." for the other built-ins). `namespaced`
  /// matters for custom resources only.
  void check_supported(const std::string& group_resource, bool namespaced = true) const;
  /// The value `metadata.namespace=` pins, when the selector names exactly one namespace.
  std::string single_namespace() const;

 private:
  std::vector<FieldRequirement> requirements_;
};

/// What a field selector compares for `field` of `object`: "" when absent, booleans and numbers
/// as text, with the server's derived fields (status.podIP from podIPs, events' `source`, ...).
std::string field_value(const nlohmann::json& object, std::string_view field);

}  // namespace trainctl::sandbox
