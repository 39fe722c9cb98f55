#include "text.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <random>
#include <vector>

namespace trainctl {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

}  // namespace

std::optional<std::size_t> base64_corrupt_at(std::string_view in) {
  const auto line_break = [](char c) { return c == '\n' || c == '\r'; };
  const auto skip_line_breaks = [&](std::size_t at) {
    while (at < in.size() && line_break(in[at]))
      ++at;
    return at;
  };
  std::size_t at = 0;
  // Quantum by quantum, as decodeQuantum reads them.
  while (at < in.size()) {
    for (int symbols = 0; symbols < 4; ++symbols) {
      if (at == in.size()) {
        if (symbols == 0)
          return std::nullopt;
        return at - static_cast<std::size_t>(symbols);  // a quantum cut short: padding missing
      }
      const char c = in[at++];
      if (base64_value(c) >= 0)
        continue;
      if (line_break(c)) {
        --symbols;
        continue;
      }
      if (c != '=' || symbols < 2)
        return at - 1;
      if (symbols == 2) {  // "==": the second must follow, line breaks aside
        at = skip_line_breaks(at);
        if (at == in.size())
          return in.size();
        if (in[at] != '=')
          return at - 1;
        ++at;
      }
      // Padding ends the input: anything after it is corrupt.
      at = skip_line_breaks(at);
      return at < in.size() ? std::optional(at) : std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<std::string> base64_decode(std::string_view in) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t symbols = 0;
  std::size_t padding = 0;
  for (char c : in) {
    if (std::isspace(static_cast<unsigned char>(c)))
      continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0 || padding > 0)
      return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    ++symbols;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (symbols % 4 == 1 || padding > 2)
    return std::nullopt;
  if (padding > 0 && (symbols + padding) % 4 != 0)
    return std::nullopt;
  return out;
}

std::string hex_encode(std::span<const unsigned char> in) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * in.size());
  for (const unsigned char byte : in) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const std::uint32_t n = (static_cast<unsigned char>(in[i]) << 16) |
                            (static_cast<unsigned char>(in[i + 1]) << 8) |
                            static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i < in.size()) {
    std::uint32_t n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size())
      n |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  // One row of the dynamic-programming table at a time: row[j] is the distance between the
  // prefix of `a` read so far and b[0, j).
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t substitute = diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates) {
  constexpr std::size_t kMaxDistance = 2;
  const std::string* best = nullptr;
  std::size_t best_distance = kMaxDistance + 1;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = &candidate;
      best_distance = d;
    }
  }
  if (best != nullptr)
    return *best;
  const std::string prefix = to_lower(word);
  for (const auto& candidate : candidates) {
    if (!prefix.empty() && to_lower(candidate).starts_with(prefix))
      return candidate;
  }
  return std::nullopt;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::optional<std::size_t> invalid_utf8_offset(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The well-formed sequences of Unicode's table 3-7: the lead byte fixes the length and the
    // range of the second byte; every later byte is 80..BF.
    std::size_t length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      low = lead == 0xe0 ? 0xa0 : 0x80;   // no overlong forms
      high = lead == 0xed ? 0x9f : 0xbf;  // no surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      low = lead == 0xf0 ? 0x90 : 0x80;   // no overlong forms
      high = lead == 0xf4 ? 0x8f : 0xbf;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (s.size() - i < length)
      return i;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < low || second > high)
      return i;
    for (std::size_t k = 2; k < length; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if (next < 0x80 || next > 0xbf)
        return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::string random_suffix(std::size_t length) {
  static constexpr std::string_view kAlphabet = "bcdfghjklmnpqrstvwxz2456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, kAlphabet.size() - 1);
  std::string out;
  for (std::size_t i = 0; i < length; ++i)
    out += kAlphabet[pick(rng)];
  return out;
}

}  // namespace trainctl
