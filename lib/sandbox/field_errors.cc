#include "sandbox/field_errors.h"

#include <fmt/format.h>

#include <algorithm>

#include "sandbox/selector.h"

namespace trainctl::sandbox {

using nlohmann::json;

FieldError invalid_value(std::string field, const std::string& quoted_value, std::string_view msg) {
  return {"FieldValueInvalid", std::move(field),
          "Invalid value: " + quoted_value + ": " + std::string(msg)};
}

FieldError immutable(std::string field, const std::string& quoted_value) {
  return invalid_value(std::move(field), quoted_value, "field is immutable");
}

FieldError required_value(std::string field, std::string_view detail) {
  return {"FieldValueRequired", std::move(field),
          detail.empty() ? "Required value" : "Required value: " + std::string(detail)};
}

FieldError forbidden_value(std::string field, std::string_view detail) {
  return {"FieldValueForbidden", std::move(field), "Forbidden: " + std::string(detail)};
}

FieldError not_found(std::string field, const std::string& quoted_value) {
  return {"FieldValueNotFound", std::move(field), "Not found: " + quoted_value};
}

FieldError duplicate(std::string field, const std::string& quoted_value) {
  return {"FieldValueDuplicate", std::move(field), "Duplicate value: " + quoted_value};
}

FieldError too_long(std::string field, std::size_t max) {
  return {"FieldValueTooLong", std::move(field),
          fmt::format("Too long: must have at most {} bytes", max)};
}

FieldError not_supported(std::string field, const std::string& quoted_value,
                         const std::vector<std::string>& supported) {
  std::string values;
  for (const auto& v : supported)
    values += (values.empty() ? "" : ", ") + api::names::go_quote(v);
  return {"FieldValueNotSupported", std::move(field),
          "Unsupported value: " + quoted_value + ": supported values: " + values};
}

ApiError invalid(const std::string& group, const std::string& kind, const std::string& name,
                 const std::vector<FieldError>& errs) {
  const std::string qualified = group.empty() ? kind : kind + "." + group;
  json causes = json::array();
  std::vector<std::string> messages;
  for (const auto& e : errs) {
    causes.push_back({{"reason", e.type}, {"message", e.body}, {"field", e.field}});
    std::string m = e.field + ": " + e.body;
    if (std::find(messages.begin(), messages.end(), m) == messages.end())
      messages.push_back(std::move(m));
  }
  std::string aggregate;
  if (messages.size() == 1) {
    aggregate = messages.front();
  } else {
    aggregate = "[";
    for (std::size_t i = 0; i < messages.size(); ++i)
      aggregate += (i ? ", " : "") + messages[i];
    aggregate += "]";
  }
  // StatusDetails leaves out what is empty (omitempty), as for a patch that does not decode.
  json details = {{"causes", std::move(causes)}};
  for (const auto& [key, value] : {std::pair{"name", &name}, {"group", &group}, {"kind", &kind}}) {
    if (!value->empty())
      details[key] = *value;
  }
  return ApiError(
      ErrorKind::Invalid, 422, "Invalid",
      fmt::format("{} {} is invalid: {}", qualified, api::names::go_quote(name), aggregate),
      std::move(details));
}

}  // namespace trainctl::sandbox
