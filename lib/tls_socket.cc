#include "tls_socket.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

#include "error.h"
#include "openssl_handles.h"

namespace trainctl {

Deadline deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() <= 0 ? Deadline::max() : SteadyClock::now() + timeout;
}

namespace {

int socket_bio_write(BIO* bio, const char* data, int len) {
  auto* state = static_cast<SocketBioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::send(state->fd, data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
  if (n >= 0)
    return static_cast<int>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    BIO_set_retry_write(bio);
  return -1;
}

int socket_bio_read(BIO* bio, char* out, int len) {
  auto* state = static_cast<SocketBioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::recv(state->fd, out, static_cast<std::size_t>(len), 0);
  if (n == 0)
    state->eof = true;
  if (n >= 0)
    return static_cast<int>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    BIO_set_retry_read(bio);
  return -1;
}

long socket_bio_ctrl(BIO* bio, int cmd, long /*num*/, void* /*ptr*/) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_EOF:
      return static_cast<SocketBioState*>(BIO_get_data(bio))->eof ? 1 : 0;
    default:
      return 0;
  }
}

int socket_bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

}  // namespace

const BIO_METHOD* socket_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "trainctl socket");
    if (m == nullptr || BIO_meth_set_write(m, socket_bio_write) != 1 ||
        BIO_meth_set_read(m, socket_bio_read) != 1 || BIO_meth_set_ctrl(m, socket_bio_ctrl) != 1 ||
        BIO_meth_set_create(m, socket_bio_create) != 1) {
      throw Error(ErrorKind::Config, "cannot create the socket BIO: " + openssl_errors());
    }
    return m;
  }();
  return method;
}

TlsSocket::TlsSocket(int fd, SSL_CTX* ctx, std::string remote)
    : fd_(fd), remote_(std::move(remote)) {
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

TlsSocket::~TlsSocket() {
  SSL_free(ssl_);
  ::close(fd_);
}

void TlsSocket::handshake(int (*step)(SSL*), Deadline deadline) {
  for (;;) {
    int err = 0;
    std::string detail;
    {
      std::lock_guard lock(mu_);
      ERR_clear_error();
      const int rc = step(ssl_);
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

std::size_t TlsSocket::read_some(char* buf, std::size_t n, Deadline deadline) {
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

void TlsSocket::write_all(std::string_view data, Deadline deadline) {
  while (!data.empty()) {
    if (aborted_)
      throw Error(ErrorKind::Connection, "the connection was closed");
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

bool TlsSocket::peer_closed() const {
  if (aborted_)
    return true;
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void TlsSocket::close_gracefully(bool linger, std::chrono::milliseconds linger_timeout) {
  if (!aborted_) {
    std::lock_guard lock(mu_);
    ERR_clear_error();
    if (SSL_is_init_finished(ssl_))
      SSL_shutdown(ssl_);  // non-blocking: one attempt is all a closing side owes
  }
  ::shutdown(fd_, SHUT_WR);
  const Deadline deadline = SteadyClock::now() + linger_timeout;
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

void TlsSocket::abort() {
  aborted_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

std::string TlsSocket::describe(int err) const {
  switch (err) {
    case SSL_ERROR_SYSCALL:
      return errno != 0 ? std::string(std::strerror(errno)) : "connection closed";
    case SSL_ERROR_SSL:
      return openssl_errors();
    default:
      return fmt::format("TLS error {}", err);
  }
}

void TlsSocket::wait(short events, Deadline deadline, std::string_view during) const {
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

}  // namespace trainctl
