// TLS connections: the socket BIO and what the server reads of a peer's address and certificate.

#include "sandbox/http_connection.h"

namespace trainctl::sandbox {

Deadline deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() <= 0 ? Deadline::max() : SteadyClock::now() + timeout;
}

[[noreturn]] void config_failure(std::string_view what) {
  throw Error(ErrorKind::Config,
              fmt::format("sandbox HTTPS server: {}: {}", what, openssl_errors()));
}

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

const BIO_METHOD* socket_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "trainctl socket");
    if (m == nullptr || BIO_meth_set_write(m, socket_bio_write) != 1 ||
        BIO_meth_set_read(m, socket_bio_read) != 1 || BIO_meth_set_ctrl(m, socket_bio_ctrl) != 1 ||
        BIO_meth_set_create(m, socket_bio_create) != 1) {
      throw Error(ErrorKind::Config,
                  "sandbox HTTPS server: cannot create the socket BIO: " + openssl_errors());
    }
    return m;
  }();
  return method;
}

std::string format_address(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
    return fmt::format("{}:{}", host, port);
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
  inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
  port = ntohs(in6.sin6_port);
  return fmt::format("[{}]:{}", host, port);
}

std::string name_entry_utf8(X509_NAME_ENTRY* entry) {
  unsigned char* utf8 = nullptr;
  const int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry));
  if (len < 0)
    return {};
  std::string out(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(len));
  OPENSSL_free(utf8);
  return out;
}

}  // namespace trainctl::sandbox
