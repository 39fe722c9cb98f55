#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace trainctl {

/// Standard base64 with padding.
std::string base64_encode(std::string_view in);
/// Every byte of `in` as two lower-case hex digits.
std::string hex_encode(std::span<const unsigned char> in);
/// Standard base64, read leniently: whitespace ignored, padding optional; nullopt for anything
/// else.
std::optional<std::string> base64_decode(std::string_view in);
/// Where Go's base64.StdEncoding, which the API server's decoder reads a []byte field with,
/// finds `in` corrupt: the input byte its CorruptInputError names (padding required, line
/// breaks skipped). nullopt when it decodes.
std::optional<std::size_t> base64_corrupt_at(std::string_view in);
/// '0' to '9', whatever the locale (std::isdigit takes an int and depends on it).
constexpr bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}
/// `s` without leading and trailing whitespace.
std::string_view trim(std::string_view s);
std::string to_lower(std::string_view s);

/// Where `s` stops being UTF-8 as RFC 3629 defines it (no overlong forms, no surrogates, nothing
/// above U+10FFFF): the offset of the first byte of the first malformed or cut-off sequence;
/// nullopt when all of `s` is valid. JSON strings must be UTF-8, so user input is checked with
/// this before it becomes one.
std::optional<std::size_t> invalid_utf8_offset(std::string_view s);

/// The Levenshtein distance between `a` and `b` (insertions, deletions and substitutions of one
/// byte each), comparing letters case-insensitively.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate a user most likely meant by `word`, for a "did you mean" hint, as cobra (kubectl)
/// suggests: the nearest within an edit distance of 2, else one that `word` is a prefix of;
/// nullopt when none is close. Ties go to the earlier candidate.
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates);

/// `length` random characters from apimachinery's name-suffix alphabet (no vowels, no look-alike
/// digits), as generateName and client-go identities use.
std::string random_suffix(std::size_t length = 5);

}  // namespace trainctl
