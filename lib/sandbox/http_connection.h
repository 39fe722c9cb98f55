#pragma once

// The HTTPS server's connections (http_server*.cc and http_message.cc share them): what the server
// reads of a peer's address and certificate, and the raw byte stream an upgraded connection
// becomes. Not part of the server's interface.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <ctime>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "error.h"
#include "kube/websocket.h"
#include "openssl_handles.h"
#include "sandbox/http_server.h"
#include "text.h"
#include "tls_socket.h"

namespace trainctl::sandbox {

/// Response bodies up to this size go out in one write with their head.
inline constexpr std::size_t kCopyLimit = std::size_t{64} * 1024;
inline constexpr std::chrono::seconds kHandshakeTimeout{10};
/// How long a closing connection keeps reading what the client still sends, so that the kernel
/// does not answer it with a reset that destroys the response the client has not read yet.
inline constexpr std::chrono::seconds kLingerTimeout{2};

[[noreturn]] void config_failure(std::string_view what);

std::string format_address(const sockaddr_storage& addr);

std::string name_entry_utf8(X509_NAME_ENTRY* entry);

/// The verified client certificate's subject, if the client presented one; right after the
/// handshake.
PeerCertificate peer_certificate(SSL* ssl);

/// What ResponseWriter::upgrade() returns: the bytes already read past the request, then the
/// socket's.
class UpgradedStream final : public kube::ws::ByteStream {
 public:
  UpgradedStream(std::shared_ptr<TlsSocket> socket, std::string pending,
                 std::chrono::milliseconds timeout)
      : socket_(std::move(socket)), pending_(std::move(pending)), timeout_(timeout) {}

  void write_all(std::string_view bytes) override {
    socket_->write_all(bytes, deadline_after(timeout_));
  }

  std::size_t read_some(char* buf, std::size_t n) override {
    if (pos_ < pending_.size()) {
      const std::size_t got = std::min(n, pending_.size() - pos_);
      std::memcpy(buf, pending_.data() + pos_, got);
      pos_ += got;
      return got;
    }
    return socket_->read_some(buf, n, deadline_after(timeout_));
  }

 private:
  std::shared_ptr<TlsSocket> socket_;
  std::string pending_;
  std::size_t pos_ = 0;
  std::chrono::milliseconds timeout_;
};

}  // namespace trainctl::sandbox
