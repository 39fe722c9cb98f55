#pragma once

// SHA-256 (FIPS 180-4) without OpenSSL: render and submit --dry-run=client hash the job spec
// (trainctl.io/spec-hash) and would otherwise set OpenSSL up (its configuration and
// providers) for it.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainctl {

/// The SHA-256 digest of `data`.
std::array<unsigned char, 32> sha256(std::string_view data);

/// The SHA-256 of `data`, in lower-case hex.
std::string sha256_hex(std::string_view data);

}  // namespace trainctl
