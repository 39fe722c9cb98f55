#pragma once

// TLS sessions kept on disk between processes: a command's connection resumes the session its
// predecessor was given (a TLS 1.3 ticket) instead of a full handshake, so the server signs
// nothing and the client verifies no certificate chain and signs nothing: about 2 ms of a
// one-request command against kube-apiserver, whose full handshake takes ~3 ms of ~15.
//
// One file per server, trusted CAs, TLS server name and client certificate (a SHA-256 of them
// names it), so a session is only resumed where the handshake it came from would have been
// made: a new CA bundle or certificate means a full handshake. A session file grants what the
// kubeconfig beside it grants for the ticket's lifetime (kube-apiserver's: 7 days), so it is
// written 0600 in a 0700 directory and one that others may write or read is not used. Every
// failure (no directory, a corrupt or expired file) only means a full handshake.

#include <openssl/ssl.h>

#include <string>
#include <string_view>

namespace trainctl::kube {

/// What identifies a TLS session's file.
struct TlsSessionKey {
  std::string_view server;  // scheme://host:port as connected to
  std::string_view server_name;
  std::string_view ca_pem;
  std::string_view client_cert_pem;  // empty without a client certificate
};

/// The file in `dir` that keeps sessions for `key`.
std::string tls_session_file(const std::string& dir, const TlsSessionKey& key);

/// Sets up `ctx`, the SSL_CTX of a direct transport's connections, to resume the session kept
/// in `file` and to keep there each session the server gives a connection.
void keep_tls_sessions(SSL_CTX* ctx, const std::string& file);

}  // namespace trainctl::kube
