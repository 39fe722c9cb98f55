#pragma once

// The HTTPS server's connections (http_server*.cc and http_message.cc share them): a TLS socket
// over a BIO that never raises SIGPIPE, with deadlines, graceful close and abort, and the raw
// byte stream an upgraded connection becomes. Not part of the server's interface.

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

namespace trainctl::sandbox {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

/// Request line and headers together; more is answered 431.
inline constexpr std::size_t kMaxHead = std::size_t{64} * 1024;
/// A chunk-size line with its extensions; more is answered 400.
inline constexpr std::size_t kMaxChunkLine = 4096;
inline constexpr std::size_t kReadSize = std::size_t{16} * 1024;
/// Response bodies up to this size go out in one write with their head.
inline constexpr std::size_t kCopyLimit = std::size_t{64} * 1024;
inline constexpr std::chrono::seconds kHandshakeTimeout{10};
/// How long a closing connection keeps reading what the client still sends, so that the kernel
/// does not answer it with a reset that destroys the response the client has not read yet.
inline constexpr std::chrono::seconds kLingerTimeout{2};

Deadline deadline_after(std::chrono::milliseconds timeout);

[[noreturn]] void config_failure(std::string_view what);

// --- A socket BIO that never raises SIGPIPE ----------------------------------------------------
//
// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a connection the peer has
// closed and kills the process unless it ignores the signal. Library code should not change
// process-wide signal handling, so this BIO sends with MSG_NOSIGNAL instead.

struct SocketBioState {
  int fd = -1;
  bool eof = false;  // recv() returned 0: OpenSSL asks, to tell an EOF from an error
};

int socket_bio_write(BIO* bio, const char* data, int len);

int socket_bio_read(BIO* bio, char* out, int len);

long socket_bio_ctrl(BIO* bio, int cmd, long /*num*/, void* /*ptr*/);

int socket_bio_create(BIO* bio);

const BIO_METHOD* socket_bio_method();

// --- One TLS connection --------------------------------------------------------------------------

std::string format_address(const sockaddr_storage& addr);

std::string name_entry_utf8(X509_NAME_ENTRY* entry);

/// An accepted TLS connection on a non-blocking socket. Every wait is a poll(2) that ends on
/// progress, a deadline, or shutdown(2) from abort(). Reads and writes hold the lock only around
/// the OpenSSL call, so one thread may read while another writes (an upgraded stream).
class TlsSocket {
 public:
  TlsSocket(int fd, SSL_CTX* ctx, std::string remote) : fd_(fd), remote_(std::move(remote)) {
    bio_state_.fd = fd;
    ssl_ = SSL_new(ctx);
    BIO* bio = BIO_new(socket_bio_method());
    if (ssl_ == nullptr || bio == nullptr) {
      BIO_free(bio);
      SSL_free(ssl_);
      ::close(fd_);
      throw Error(ErrorKind::Connection, "cannot set up TLS: " + openssl_errors());
    }
    BIO_set_data(bio, &bio_state_);
    SSL_set_bio(ssl_, bio, bio);
  }

  ~TlsSocket() {
    SSL_free(ssl_);
    ::close(fd_);
  }

  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  const std::string& remote() const { return remote_; }

  /// Throws Error(Connection) when the handshake fails, Error(Timeout) when it takes too long.
  void handshake(Deadline deadline) {
    for (;;) {
      int err = 0;
      std::string detail;
      {
        std::lock_guard lock(mu_);
        ERR_clear_error();
        const int rc = SSL_accept(ssl_);
        if (rc == 1)
          return;
        err = SSL_get_error(ssl_, rc);
        detail = describe(err);
      }
      if (err == SSL_ERROR_WANT_READ) {
        wait(POLLIN, deadline, "the TLS handshake");
      } else if (err == SSL_ERROR_WANT_WRITE) {
        wait(POLLOUT, deadline, "the TLS handshake");
      } else {
        throw Error(ErrorKind::Connection, detail);
      }
    }
  }

  /// The verified client certificate's subject, if the client presented one.
  PeerCertificate peer_certificate() {
    std::lock_guard lock(mu_);
    PeerCertificate peer;
    X509* cert = SSL_get0_peer_certificate(ssl_);
    if (cert == nullptr || SSL_get_verify_result(ssl_) != X509_V_OK)
      return peer;
    peer.present = true;
    X509_NAME* subject = X509_get_subject_name(cert);
    // Go's crypto/x509, and so Kubernetes, takes the last CN when there are several.
    for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;)
      peer.common_name = name_entry_utf8(X509_NAME_get_entry(subject, i));
    for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_organizationName, i)) >= 0;)
      peer.organizations.push_back(name_entry_utf8(X509_NAME_get_entry(subject, i)));
    return peer;
  }

  /// Reads at least one byte; 0 at the end of the stream (or once aborted). Throws
  /// Error(Timeout) when nothing arrives before `deadline`, Error(Connection) on failure.
  std::size_t read_some(char* buf, std::size_t n, Deadline deadline) {
    for (;;) {
      if (aborted_)
        return 0;
      int err = 0;
      std::string detail;
      {
        std::lock_guard lock(mu_);
        ERR_clear_error();
        std::size_t got = 0;
        if (SSL_read_ex(ssl_, buf, n, &got) == 1)
          return got;
        err = SSL_get_error(ssl_, 0);
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && bio_state_.eof))
          return 0;
        detail = describe(err);
      }
      if (err == SSL_ERROR_WANT_READ) {
        wait(POLLIN, deadline, "a read");
      } else if (err == SSL_ERROR_WANT_WRITE) {
        wait(POLLOUT, deadline, "a read");
      } else {
        throw Error(ErrorKind::Connection, detail);
      }
    }
  }

  /// Writes every byte or throws Error(Connection) (Error(Timeout) when the client stops reading).
  void write_all(std::string_view data, Deadline deadline) {
    while (!data.empty()) {
      if (aborted_)
        throw Error(ErrorKind::Connection, "the server is stopping");
      int err = 0;
      std::string detail;
      {
        std::lock_guard lock(mu_);
        ERR_clear_error();
        std::size_t written = 0;
        if (SSL_write_ex(ssl_, data.data(), data.size(), &written) == 1) {
          data.remove_prefix(written);
          continue;
        }
        err = SSL_get_error(ssl_, 0);
        detail = describe(err);
      }
      if (err == SSL_ERROR_WANT_WRITE) {
        wait(POLLOUT, deadline, "a write");
      } else if (err == SSL_ERROR_WANT_READ) {
        wait(POLLIN, deadline, "a write");
      } else {
        throw Error(ErrorKind::Connection, detail);
      }
    }
  }

  /// True once the client has closed its side or reset the connection (or abort() ran).
  bool peer_closed() const {
    if (aborted_)
      return true;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  /// Sends close_notify and a FIN; with `linger`, then reads (and drops) what the client still
  /// sends until it closes too, for at most kLingerTimeout.
  void close_gracefully(bool linger) {
    if (!aborted_) {
      std::lock_guard lock(mu_);
      ERR_clear_error();
      if (SSL_is_init_finished(ssl_))
        SSL_shutdown(ssl_);  // non-blocking: one attempt is all a closing server owes
    }
    ::shutdown(fd_, SHUT_WR);
    const Deadline deadline = SteadyClock::now() + kLingerTimeout;
    char buf[4096];
    while (linger && !aborted_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0)
        break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        break;
    }
  }

  /// Cuts the connection from any thread: every wait on it ends, later writes fail.
  void abort() {
    aborted_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  std::string describe(int err) const {
    switch (err) {
      case SSL_ERROR_SYSCALL:
        return errno != 0 ? std::string(std::strerror(errno)) : "connection closed";
      case SSL_ERROR_SSL:
        return openssl_errors();
      default:
        return fmt::format("TLS error {}", err);
    }
  }

  void wait(short events, Deadline deadline, std::string_view during) const {
    for (;;) {
      int timeout_ms = -1;
      if (deadline != Deadline::max()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
        if (left.count() <= 0)
          throw Error(ErrorKind::Timeout, fmt::format("timed out waiting for {}", during));
        timeout_ms = static_cast<int>(std::min<std::int64_t>(left.count() + 1, INT_MAX));
      }
      pollfd p{fd_, events, 0};
      const int rc = ::poll(&p, 1, timeout_ms);
      if (rc > 0)
        return;  // ready, hung up or failed: the next OpenSSL call tells which
      if (rc < 0 && errno != EINTR)
        throw Error(ErrorKind::Connection, fmt::format("poll: {}", std::strerror(errno)));
    }
  }

  int fd_;
  SSL* ssl_ = nullptr;
  SocketBioState bio_state_;
  std::string remote_;
  std::mutex mu_;
  std::atomic<bool> aborted_{false};
};

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
