#pragma once

// The API server's field.ErrorList and errors.NewInvalid: what a 422 Invalid answer says, shared
// by the store's metadata checks and the API server's admission of each type.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/store.h"

namespace trainctl::sandbox {

/// One entry of a field.ErrorList.
struct FieldError {
  std::string type;   // FieldValueInvalid, FieldValueRequired, ...
  std::string field;  // metadata.name
  std::string body;   // Invalid value: "x": message
};

/// field.Invalid: `Invalid value: <quoted_value>: <msg>`.
FieldError invalid_value(std::string field, const std::string& quoted_value, std::string_view msg);
/// ValidateImmutableField's error: `Invalid value: <quoted_value>: field is immutable`.
FieldError immutable(std::string field, const std::string& quoted_value);
/// field.Required: `Required value[: <detail>]`.
FieldError required_value(std::string field, std::string_view detail);
/// field.Forbidden: `Forbidden: <detail>`.
FieldError forbidden_value(std::string field, std::string_view detail);
/// field.NotFound: `Not found: <quoted_value>`.
FieldError not_found(std::string field, const std::string& quoted_value);
/// field.Duplicate: `Duplicate value: <quoted_value>`.
FieldError duplicate(std::string field, const std::string& quoted_value);
/// field.TooLong: `Too long: must have at most <max> bytes`.
FieldError too_long(std::string field, std::size_t max);
/// field.NotSupported: `Unsupported value: <quoted_value>: supported values: "a", "b"`.
FieldError not_supported(std::string field, const std::string& quoted_value,
                         const std::vector<std::string>& supported);

/// errors.NewInvalid: `Kind[.group] "name" is invalid: <field: body>` (`[a, b]` for several,
/// repeated messages once) with details.causes, as a 422 Invalid.
ApiError invalid(const std::string& group, const std::string& kind, const std::string& name,
                 const std::vector<FieldError>& errs);

}  // namespace trainctl::sandbox
