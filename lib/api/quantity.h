#pragma once

// Kubernetes resource quantities ("100m", "1.5", "512Mi", "1e3") as the scheduler counts them.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace trainctl::api {

/// Parses a quantity as resource.ParseQuantity does and returns it in thousandths of its unit,
/// rounded up as Quantity.MilliValue() rounds: "100m" -> 100, "2" -> 2000, "1Gi" ->
/// 1073741824000, "1n" -> 1. Values beyond int64 saturate (Go would overflow). Throws
/// Error(Invalid) with the API server's wording for anything ParseQuantity rejects.
std::int64_t parse_quantity_milli(std::string_view text);

/// The same for a value as it appears in an object: a string, or a number when a manifest said
/// `cpu: 2` (the API server accepts both).
std::int64_t quantity_milli(const nlohmann::json& value);

/// Why resource.Quantity's JSON decoding refuses `value` ("quantities must match the regular
/// expression ...", "unable to parse quantity's suffix"), as the API server's decoder reports
/// it; nullopt when it reads (null reads as zero).
std::optional<std::string> quantity_decode_error(const nlohmann::json& value);

/// Writes thousandths of `resource`'s unit back as a quantity, in canonical form as
/// Quantity.String() writes it: "1500m", "2", "4k"; memory and storage in binary units when
/// that is as short ("512Mi", "1Ti"). parse_quantity_milli reads back the same value.
std::string format_quantity(std::string_view resource, std::int64_t milli);

}  // namespace trainctl::api
