#pragma once

// How the informer store keeps objects: CBOR (RFC 8949), about a third of a decoded object's
// memory. Written for the store's two hot paths, where nlohmann's to_cbor and from_cbor were
// 8 % and 16 % of the controller's CPU: encoding each object the watch delivers, and decoding a
// job's pods and services for every reconcile, with only the top-level members the planner reads
// (a pod's spec, most of it, is skipped over by its length, never built). Decoding gives what
// nlohmann's from_cbor(to_cbor(x)) gives: a non-negative integer as unsigned, doubles exactly.
// The cbor fuzz target compares the two.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace trainctl::kube::cache {

/// Appends `value` to `out`: definite lengths, integers in their shortest form, doubles as
/// 64 bits.
void encode_cbor(const nlohmann::json& value, std::vector<std::uint8_t>& out);

/// The value encode_cbor wrote; with `members`, an object with only those of its top-level
/// members. Throws std::runtime_error on bytes encode_cbor does not write (cut short, indefinite
/// lengths, half floats, nesting deeper than 10,000).
nlohmann::json decode_cbor(std::span<const std::uint8_t> bytes,
                           std::span<const std::string_view> members = {});

}  // namespace trainctl::kube::cache
