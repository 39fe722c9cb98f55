#pragma once

// OpenSSL is loaded on its first call (openssl_loader.cc); this loads it at a chosen moment.

namespace trainctl {

/// Loads libssl and libcrypto now (once): the dynamic loader runs one load at a time, so a
/// thread about to load another library in parallel (libcurl, which needs them) loads them first.
/// Throws Error (ErrorKind::Connection) when they cannot be loaded.
void load_openssl();

}  // namespace trainctl
