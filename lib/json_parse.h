#pragma once

// JSON text to nlohmann::json, about twice as fast as nlohmann::json::parse on what the API
// server sends (watch events, list pages): decoding watch events was the largest part of the
// controller's CPU. The same values as nlohmann's parser, to the type (unsigned for a
// non-negative integer, signed for a negative one, double with a fraction or an exponent; the
// last of duplicate keys): a document the fast path does not take as it is (invalid JSON, bytes
// outside ASCII, escapes it does not decode, numbers out of range, nesting deeper than 256) goes
// to nlohmann::json::parse, which gives the result or the error. The json fuzz target compares
// the two on every input.

#include <nlohmann/json.hpp>
#include <string_view>

namespace trainctl {

/// nlohmann::json::parse(text, nullptr, allow_exceptions): with allow_exceptions false, invalid
/// text gives a discarded value; with true, nlohmann's exception (parse_error, out_of_range for a
/// number beyond a double).
nlohmann::json parse_json(std::string_view text, bool allow_exceptions = true);

}  // namespace trainctl
