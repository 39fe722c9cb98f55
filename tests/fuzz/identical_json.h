#pragma once

// For the fuzz targets that compare a parser or codec with nlohmann's.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

/// Equal and of the same type throughout, floats to the bit (nlohmann's == takes 1u, 1 and 1.0
/// as equal, and 0.0 as -0.0).
inline bool identical_json(const nlohmann::json& a, const nlohmann::json& b) {
  using nlohmann::json;
  if (a.type() != b.type() || a.size() != b.size())
    return false;
  switch (a.type()) {
    case json::value_t::object:
      for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
        if (i.key() != j.key() || !identical_json(*i, *j))
          return false;
      }
      return true;
    case json::value_t::array:
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!identical_json(a[i], b[i]))
          return false;
      }
      return true;
    case json::value_t::number_float:
      return std::bit_cast<std::uint64_t>(a.get<double>()) ==
             std::bit_cast<std::uint64_t>(b.get<double>());
    default:
      return a == b;
  }
}
