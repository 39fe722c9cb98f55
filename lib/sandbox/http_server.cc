#include "sandbox/http_server.h"

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
#include "text.h"

namespace trainctl::sandbox {
namespace {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

/// Request line and headers together; more is answered 431.
constexpr std::size_t kMaxHead = std::size_t{64} * 1024;
/// A chunk-size line with its extensions; more is answered 400.
constexpr std::size_t kMaxChunkLine = 4096;
constexpr std::size_t kReadSize = std::size_t{16} * 1024;
/// Response bodies up to this size go out in one write with their head.
constexpr std::size_t kCopyLimit = std::size_t{64} * 1024;
constexpr std::chrono::seconds kHandshakeTimeout{10};
/// How long a closing connection keeps reading what the client still sends, so that the kernel
/// does not answer it with a reset that destroys the response the client has not read yet.
constexpr std::chrono::seconds kLingerTimeout{2};

Deadline deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() <= 0 ? Deadline::max() : SteadyClock::now() + timeout;
}

[[noreturn]] void config_failure(std::string_view what) {
  throw Error(ErrorKind::Config,
              fmt::format("sandbox HTTPS server: {}: {}", what, openssl_errors()));
}

// --- A socket BIO that never raises SIGPIPE ----------------------------------------------------
//
// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a connection the peer has
// closed and kills the process unless it ignores the signal. Library code should not change
// process-wide signal handling, so this BIO sends with MSG_NOSIGNAL instead.

struct SocketBioState {
  int fd = -1;
  bool eof = false;  // recv() returned 0: OpenSSL asks, to tell an EOF from an error
};

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

// --- One TLS connection --------------------------------------------------------------------------

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

// --- HTTP text ----------------------------------------------------------------------------------

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Request Entity Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

/// The Status reason for a status this server answers by itself.
std::string_view status_reason(int status) {
  switch (status) {
    case 400:
      return "BadRequest";
    case 413:
      return "RequestEntityTooLarge";
    case 417:
      return "ExpectationFailed";
    case 431:
      return "RequestHeaderFieldsTooLarge";
    case 501:
      return "NotImplemented";
    case 505:
      return "HTTPVersionNotSupported";
    default:
      return "InternalError";
  }
}

/// A metav1.Status body, so that Kubernetes clients show the message.
std::string status_body(int status, std::string_view message) {
  nlohmann::ordered_json body = {
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", status_reason(status)},
      {"code", status}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The Date header value (RFC 9110 IMF-fixdate), independent of the locale.
std::string http_date() {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  gmtime_r(&now, &t);
  return fmt::format("{}, {:02} {} {} {:02}:{:02}:{:02} GMT", kDays[t.tm_wday], t.tm_mday,
                     kMonths[t.tm_mon], t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
}

bool is_token_char(char c) {
  if (std::isalnum(static_cast<unsigned char>(c)))
    return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char);
}

/// Header values may hold visible characters, spaces and tabs (and obs-text), never CR, LF, NUL.
bool is_field_value(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
}

/// Whether a comma-separated header value lists `token` (case-insensitively).
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    if (to_lower(trim(value.substr(0, comma))) == token)
      return true;
    if (comma == std::string_view::npos)
      break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

/// A request this server refuses by itself: the status to answer with, then close.
struct HttpFailure {
  int status;
  std::string message;
};

/// Headers a handler may not set: the server frames the body itself.
bool is_framing_header(std::string_view lower_name) {
  return lower_name == "content-length" || lower_name == "transfer-encoding";
}

/// Checks a handler's extra headers; reports whether one asks to close the connection.
bool check_extra_headers(const HeaderList& headers) {
  bool close = false;
  for (const auto& [name, value] : headers) {
    if (!is_token(name) || !is_field_value(value))
      throw std::invalid_argument(fmt::format("invalid response header {:?}", name));
    if (to_lower(name) == "connection" && has_token(value, "close"))
      close = true;
  }
  return close;
}

void append_extra_headers(std::string& out, const HeaderList& headers) {
  for (const auto& [name, value] : headers) {
    const std::string lower = to_lower(name);
    if (is_framing_header(lower) || lower == "connection")
      continue;
    fmt::format_to(std::back_inserter(out), "{}: {}\r\n", name, value);
  }
}

// --- Request parsing ----------------------------------------------------------------------------

/// Where the head ends in `buffer`: the index just past the blank line, or npos.
std::size_t find_head_end(std::string_view buffer) {
  for (std::size_t at = buffer.find('\n'); at != std::string_view::npos;
       at = buffer.find('\n', at + 1)) {
    if (at + 1 < buffer.size() && buffer[at + 1] == '\n')
      return at + 2;
    if (at + 2 < buffer.size() && buffer[at + 1] == '\r' && buffer[at + 2] == '\n')
      return at + 3;
  }
  return std::string_view::npos;
}

/// The next line of `text` from `pos`, without its CRLF or LF; advances `pos` past it.
std::string_view next_line(std::string_view text, std::size_t& pos) {
  std::size_t end = text.find('\n', pos);
  if (end == std::string_view::npos)
    end = text.size();
  std::string_view line = text.substr(pos, end - pos);
  pos = end + 1;
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  return line;
}

void parse_target(std::string_view target, Request& req) {
  if (target.empty() || !is_field_value(target) || target.find(' ') != std::string_view::npos)
    throw HttpFailure{400, "malformed request target"};
  req.target = std::string(target);
  std::string_view origin = target;
  // The absolute form (RFC 9112 §3.2.2), as sent to proxies: keep only path and query.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (to_lower(origin.substr(0, scheme.size())) == scheme) {
      origin.remove_prefix(scheme.size());
      const std::size_t slash = origin.find_first_of("/?");
      origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
      break;
    }
  }
  if (origin == "*" && req.method == "OPTIONS") {
    req.path = "*";
    return;
  }
  if (origin.empty() || (origin.front() != '/' && origin.front() != '?'))
    throw HttpFailure{400, "malformed request target"};
  const std::size_t question = origin.find('?');
  req.path = std::string(origin.substr(0, question));
  if (req.path.empty())
    req.path = "/";
  if (question != std::string_view::npos) {
    req.query = std::string(origin.substr(question + 1));
    req.params = parse_query(req.query);
  }
}

/// Parses the request line and the header fields (the head without its blank line).
void parse_head(std::string_view head, Request& req) {
  std::size_t pos = 0;
  const std::string_view line = next_line(head, pos);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    throw HttpFailure{400, "malformed request line"};
  req.method = std::string(line.substr(0, sp1));
  if (!is_token(req.method))
    throw HttpFailure{400, "malformed request method"};
  const std::string_view version = line.substr(sp2 + 1);
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(version[5]) ||
      version[6] != '.' || !std::isdigit(version[7])) {
    throw HttpFailure{400, "malformed HTTP version"};
  }
  if (version[5] != '1')
    throw HttpFailure{505, fmt::format("{} is not supported", version)};
  req.http_minor = version[7] - '0';
  parse_target(line.substr(sp1 + 1, sp2 - sp1 - 1), req);

  while (pos < head.size()) {
    const std::string_view field = next_line(head, pos);
    if (field.empty())
      break;
    if (field.front() == ' ' || field.front() == '\t')
      throw HttpFailure{400, "obsolete line folding in a header"};
    const std::size_t colon = field.find(':');
    const std::string_view name = field.substr(0, colon);
    if (colon == std::string_view::npos || !is_token(name))
      throw HttpFailure{400, "malformed header line"};
    const std::string_view value = trim(field.substr(colon + 1));
    if (!is_field_value(value))
      throw HttpFailure{400, fmt::format("invalid characters in header {}", name)};
    std::string lower = to_lower(name);
    auto [it, inserted] = req.headers.emplace(lower, value);
    if (!inserted)
      it->second.append(", ").append(value);
    req.header_fields.emplace_back(std::move(lower), std::string(value));
  }
  if (req.http_minor >= 1 && req.header_values("host").size() != 1)
    throw HttpFailure{400, "missing required Host header"};
}

/// How the request body is framed.
struct BodyFraming {
  bool chunked = false;
  std::size_t length = 0;
};

BodyFraming body_framing(const Request& req, std::size_t max_body) {
  BodyFraming framing;
  const bool has_length = req.headers.contains("content-length");
  if (auto te = req.headers.find("transfer-encoding"); te != req.headers.end()) {
    if (has_length)
      throw HttpFailure{400, "both Transfer-Encoding and Content-Length"};
    if (req.http_minor == 0)
      throw HttpFailure{400, "Transfer-Encoding in an HTTP/1.0 request"};
    if (to_lower(trim(te->second)) != "chunked")
      throw HttpFailure{501, fmt::format("unsupported Transfer-Encoding {:?}", te->second)};
    framing.chunked = true;
    return framing;
  }
  if (!has_length)
    return framing;
  // Repeated fields, or one field with a list, must all agree (RFC 9112 §6.3).
  const std::vector<std::string> values = req.header_values("content-length");
  std::string_view agreed;  // points into `values`
  for (const std::string& value : values) {
    std::string_view rest = value;
    while (true) {
      const std::size_t comma = rest.find(',');
      const std::string_view one = trim(rest.substr(0, comma));
      if (one.empty() || one.size() > 18 ||
          !std::all_of(one.begin(), one.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          (!agreed.empty() && one != agreed)) {
        throw HttpFailure{400, "invalid Content-Length"};
      }
      agreed = one;
      if (comma == std::string_view::npos)
        break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::from_chars(agreed.data(), agreed.data() + agreed.size(), framing.length);
  if (framing.length > max_body) {
    throw HttpFailure{413, fmt::format("the request body of {} bytes is over the limit of {}",
                                       framing.length, max_body)};
  }
  return framing;
}

/// Reads requests from a connection: the bytes received and not yet used stay in `buffer`.
class RequestReader {
 public:
  RequestReader(TlsSocket& socket, std::string& buffer, const HttpsServerConfig& config)
      : socket_(socket), buffer_(buffer), config_(config) {}

  /// Reads the next request head; false when the connection ends or idles out between requests.
  /// Throws HttpFailure for a request to refuse, Error when the connection fails mid-request.
  bool read_head(Request& req) {
    std::size_t end;
    while (true) {
      // Empty lines before a request line are to be ignored (RFC 9112 §2.2).
      const std::size_t start = buffer_.find_first_not_of("\r\n");
      buffer_.erase(0, start == std::string::npos ? buffer_.size() : start);
      end = find_head_end(buffer_);
      if (end != std::string::npos)
        break;
      if (buffer_.size() >= kMaxHead)
        throw HttpFailure{431, fmt::format("the request head is over {} bytes", kMaxHead)};
      if (buffer_.empty()) {
        try {
          if (!fill())
            return false;
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Timeout)
            throw;
          idled_out_ = true;  // an idle keep-alive connection
          return false;
        }
      } else if (!fill()) {
        throw Error(ErrorKind::Connection, "the client closed the connection mid-request");
      }
    }
    if (end > kMaxHead)
      throw HttpFailure{431, fmt::format("the request head is over {} bytes", kMaxHead)};
    parse_head(std::string_view(buffer_).substr(0, end), req);
    buffer_.erase(0, end);
    return true;
  }

  /// Whether read_head() returned false because the client stayed silent.
  bool idled_out() const { return idled_out_; }

  void read_body(const BodyFraming& framing, std::string& body) {
    if (!framing.chunked) {
      need(framing.length);
      body = buffer_.substr(0, framing.length);
      buffer_.erase(0, framing.length);
      return;
    }
    while (true) {
      const std::string line = read_line(kMaxChunkLine, "chunk size line");
      const std::string_view size_text = trim(std::string_view(line).substr(0, line.find(';')));
      std::size_t size = 0;
      const auto [ptr, ec] =
          std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
      if (size_text.empty() || size_text.size() > 15 || ec != std::errc() ||
          ptr != size_text.data() + size_text.size()) {
        throw HttpFailure{400, "malformed chunk size"};
      }
      if (size == 0)
        break;
      if (body.size() + size > config_.max_body) {
        throw HttpFailure{
            413, fmt::format("the request body is over the limit of {} bytes", config_.max_body)};
      }
      need(size);
      body.append(buffer_, 0, size);
      buffer_.erase(0, size);
      if (!read_line(2, "chunk end").empty())
        throw HttpFailure{400, "chunk data longer than its size"};
    }
    // Trailer fields are read and dropped.
    std::size_t trailers = 0;
    while (true) {
      const std::string line = read_line(kMaxHead, "trailer");
      if (line.empty())
        break;
      trailers += line.size();
      if (trailers > kMaxHead)
        throw HttpFailure{431, "the trailer fields are too large"};
    }
  }

 private:
  /// Reads more bytes into the buffer; false at the end of the stream.
  bool fill() {
    char buf[kReadSize];
    const std::size_t n = socket_.read_some(buf, sizeof buf, deadline_after(config_.idle_timeout));
    buffer_.append(buf, n);
    return n > 0;
  }

  void need(std::size_t n) {
    while (buffer_.size() < n) {
      if (!fill())
        throw Error(ErrorKind::Connection, "the client closed the connection mid-body");
    }
  }

  /// One line of a chunked body, without its CRLF.
  std::string read_line(std::size_t limit, std::string_view what) {
    std::size_t eol;
    while ((eol = buffer_.find('\n')) == std::string::npos) {
      if (buffer_.size() > limit + 1)
        throw HttpFailure{400, fmt::format("malformed chunked body: {} too long", what)};
      if (!fill())
        throw Error(ErrorKind::Connection, "the client closed the connection mid-body");
    }
    if (eol > limit + 1)
      throw HttpFailure{400, fmt::format("malformed chunked body: {} too long", what)};
    std::string line = buffer_.substr(0, eol);
    buffer_.erase(0, eol + 1);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    return line;
  }

  TlsSocket& socket_;
  std::string& buffer_;
  const HttpsServerConfig& config_;
  bool idled_out_ = false;
};

/// "HTTP/1.1 <status> <reason>\r\nDate: ...\r\n"
std::string status_line(int status) {
  return fmt::format("HTTP/1.1 {} {}\r\nDate: {}\r\n", status, reason_phrase(status), http_date());
}

}  // namespace

// --- Request ------------------------------------------------------------------------------------

std::string Request::header(std::string_view lower_name) const {
  const auto it = headers.find(std::string(lower_name));
  return it == headers.end() ? std::string() : it->second;
}

std::vector<std::string> Request::header_values(std::string_view lower_name) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : header_fields) {
    if (name == lower_name)
      out.push_back(value);
  }
  return out;
}

std::string Request::param(std::string_view name) const {
  const auto it = params.find(std::string(name));
  return it == params.end() ? std::string() : it->second;
}

std::string percent_decode(std::string_view s, bool plus_as_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else if (s[i] == '+' && plus_as_space) {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::multimap<std::string, std::string> parse_query(std::string_view query) {
  std::multimap<std::string, std::string> out;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (!pair.empty()) {
      const std::size_t eq = pair.find('=');
      out.emplace(
          percent_decode(pair.substr(0, eq), true),
          eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
    }
    if (amp == std::string_view::npos)
      break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

// --- ResponseWriter -----------------------------------------------------------------------------

struct ResponseWriter::Exchange {
  enum class Phase { Waiting, Responded, Streaming, StreamEnded, Upgraded };

  std::shared_ptr<TlsSocket> socket;
  const Request& request;
  std::string& buffer;  // the connection's unread bytes, handed to an upgraded stream
  const HttpsServerConfig& config;
  const std::atomic<bool>& stopping;
  std::stop_token stop;

  Phase phase = Phase::Waiting;
  bool keep_alive = true;
  bool broken = false;     // a write failed, or the handler failed mid-response: close
  bool chunked = false;    // the stream's framing
  bool head_only = false;  // HEAD: the head of the response without its body

  /// Writes bytes; a failure marks the connection broken instead of throwing.
  bool send(std::string_view bytes) {
    if (broken)
      return false;
    try {
      socket->write_all(bytes, deadline_after(config.idle_timeout));
      return true;
    } catch (const Error&) {
      broken = true;
      return false;
    }
  }

  void require(Phase expected, std::string_view call) const {
    if (phase != expected)
      throw std::logic_error(fmt::format("ResponseWriter::{} in the wrong state", call));
  }
};

void ResponseWriter::respond(int status, std::string_view content_type, std::string_view body,
                             const HeaderList& extra_headers) {
  Exchange& x = exchange_;
  x.require(Exchange::Phase::Waiting, "respond");
  if (status < 200 || status > 999)
    throw std::invalid_argument(fmt::format("respond() with status {}", status));
  if (check_extra_headers(extra_headers))
    x.keep_alive = false;
  x.phase = Exchange::Phase::Responded;
  const bool bodiless = status == 204 || status == 304;
  std::string out = status_line(status);
  if (!content_type.empty() && !bodiless)
    fmt::format_to(std::back_inserter(out), "Content-Type: {}\r\n", content_type);
  if (!bodiless)
    fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n", body.size());
  append_extra_headers(out, extra_headers);
  if (!x.keep_alive)
    out += "Connection: close\r\n";
  out += "\r\n";
  if (x.head_only || bodiless) {
    x.send(out);
  } else if (body.size() > kCopyLimit) {
    if (x.send(out))  // a large list is not worth copying
      x.send(body);
  } else {
    x.send(out.append(body));
  }
}

void ResponseWriter::begin_stream(int status, std::string_view content_type,
                                  const HeaderList& extra_headers) {
  Exchange& x = exchange_;
  x.require(Exchange::Phase::Waiting, "begin_stream");
  if (status < 200 || status > 999 || status == 204 || status == 304)
    throw std::invalid_argument(fmt::format("begin_stream() with status {}", status));
  if (check_extra_headers(extra_headers))
    x.keep_alive = false;
  x.phase = Exchange::Phase::Streaming;
  // HTTP/1.0 knows no chunked encoding: the end of the connection ends the body.
  x.chunked = x.request.http_minor >= 1;
  if (!x.chunked)
    x.keep_alive = false;
  std::string out = status_line(status);
  if (!content_type.empty())
    fmt::format_to(std::back_inserter(out), "Content-Type: {}\r\n", content_type);
  if (x.chunked)
    out += "Transfer-Encoding: chunked\r\n";
  append_extra_headers(out, extra_headers);
  if (!x.keep_alive)
    out += "Connection: close\r\n";
  out += "\r\n";
  x.send(out);
}

bool ResponseWriter::write_chunk(std::string_view data) {
  Exchange& x = exchange_;
  x.require(Exchange::Phase::Streaming, "write_chunk");
  if (!client_connected())
    return false;
  if (data.empty() || x.head_only)
    return true;  // an empty chunk would end the stream
  if (!x.chunked)
    return x.send(data);
  std::string frame = fmt::format("{:x}\r\n", data.size());
  frame.reserve(frame.size() + data.size() + 2);
  frame.append(data).append("\r\n");
  return x.send(frame);
}

void ResponseWriter::end_stream() {
  Exchange& x = exchange_;
  x.require(Exchange::Phase::Streaming, "end_stream");
  x.phase = Exchange::Phase::StreamEnded;
  if (x.chunked && !x.head_only)
    x.send("0\r\n\r\n");
}

std::unique_ptr<kube::ws::ByteStream> ResponseWriter::upgrade(const HeaderList& response_headers) {
  Exchange& x = exchange_;
  x.require(Exchange::Phase::Waiting, "upgrade");
  check_extra_headers(response_headers);
  x.phase = Exchange::Phase::Upgraded;
  x.keep_alive = false;
  std::string out = "HTTP/1.1 101 Switching Protocols\r\n";
  for (const auto& [name, value] : response_headers)
    fmt::format_to(std::back_inserter(out), "{}: {}\r\n", name, value);
  out += "\r\n";
  if (!x.send(out))
    throw Error(ErrorKind::Connection, "the client went away before the protocol switch");
  return std::make_unique<UpgradedStream>(x.socket, std::exchange(x.buffer, {}),
                                          x.config.idle_timeout);
}

bool ResponseWriter::responded() const {
  return exchange_.phase != Exchange::Phase::Waiting;
}

bool ResponseWriter::client_connected() const {
  return !exchange_.broken && !exchange_.stopping && !exchange_.socket->peer_closed();
}

std::stop_token ResponseWriter::stop_token() const {
  return exchange_.stop;
}

// --- HttpsServer --------------------------------------------------------------------------------

struct HttpsServer::State {
  /// A connection thread; `done` is set as its last act so the acceptor can join it.
  struct Worker {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  HttpsServerConfig config;
  Handler handler;
  SSL_CTX* ctx = nullptr;
  int listen_fd = -1;
  int wake_fd = -1;  // an eventfd: readable once stop() begins
  int port = 0;
  std::atomic<bool> stopping{false};
  std::stop_source stop_source;
  std::thread acceptor;

  mutable std::mutex mu;
  bool started = false;
  std::set<std::shared_ptr<TlsSocket>> live;  // connections not yet closed
  std::list<Worker> workers;

  ~State() {
    SSL_CTX_free(ctx);
    if (listen_fd >= 0)
      ::close(listen_fd);
    if (wake_fd >= 0)
      ::close(wake_fd);
  }

  void log(std::string_view message) const {
    if (config.error_log)
      config.error_log(message);
  }

  void make_context();
  void listen();
  void accept_loop();
  void reap_finished_workers();
  void serve(const std::shared_ptr<TlsSocket>& socket);
  /// Runs the handler for one request; true when the connection may carry another.
  bool exchange(const std::shared_ptr<TlsSocket>& socket, std::string& buffer, const Request& req);
  void refuse(TlsSocket& socket, const HttpFailure& failure);
};

namespace {

int select_http11(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
                  const unsigned char* in, unsigned int inlen, void* /*arg*/) {
  static constexpr unsigned char kHttp11[] = "\x08http/1.1";
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof kHttp11 - 1, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // no overlap (an h2-only client): go on without ALPN
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

void HttpsServer::State::make_context() {
  ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr)
    config_failure("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(ctx, select_http11, nullptr);

  std::vector<CertPtr> chain = read_certificates(config.cert_pem);
  if (chain.empty() || SSL_CTX_use_certificate(ctx, chain.front().get()) != 1)
    config_failure("reading the serving certificate");
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1)
      config_failure("adding a chain certificate");
  }
  KeyPtr key = read_private_key(config.key_pem);
  if (!key)
    config_failure("reading the private key");
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1)
    config_failure("the private key does not match the certificate");

  if (config.client_ca_pem.empty())
    return;
  std::vector<CertPtr> cas = read_certificates(config.client_ca_pem);
  if (cas.empty())
    throw Error(ErrorKind::Config, "sandbox HTTPS server: no certificate in the client CA bundle");
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const auto& ca : cas) {
    if (X509_STORE_add_cert(store, ca.get()) != 1 || SSL_CTX_add_client_CA(ctx, ca.get()) != 1)
      config_failure("adding a client CA");
  }
  // Ask for a certificate without requiring one; one that does not verify fails the handshake.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // Resumed sessions keep the client's identity; OpenSSL refuses them without a context id.
  static constexpr unsigned char kSessionContext[] = "trainctl-sandbox";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
}

void HttpsServer::State::listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = fmt::format("{}:{}", config.host, config.port);
  if (const int rc =
          ::getaddrinfo(config.host.c_str(), std::to_string(config.port).c_str(), &hints, &found);
      rc != 0) {
    throw Error(ErrorKind::Config,
                fmt::format("cannot listen on {}: {}", where, ::gai_strerror(rc)));
  }
  std::string failure = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      failure = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      failure = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
  }
  ::freeaddrinfo(found);
  if (listen_fd < 0)
    throw Error(ErrorKind::Config, fmt::format("cannot listen on {}: {}", where, failure));
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
  wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0)
    throw Error(ErrorKind::Config, fmt::format("eventfd: {}", std::strerror(errno)));
}

void HttpsServer::State::reap_finished_workers() {
  for (auto it = workers.begin(); it != workers.end();) {
    if (it->done) {
      it->thread.join();
      it = workers.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpsServer::State::accept_loop() {
  while (!stopping) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      log(fmt::format("poll on the listener: {}", std::strerror(errno)));
      return;
    }
    if (stopping)
      return;
    if ((fds[0].revents & POLLIN) == 0)
      continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log(fmt::format("accept: {}", std::strerror(errno)));
        pollfd wake{wake_fd, POLLIN, 0};
        ::poll(&wake, 1, 100);  // let connections close before trying again
      }
      continue;
    }
    // Small responses must not wait for Nagle's algorithm and the client's delayed ACK.
    const int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &yes, sizeof yes);
    std::shared_ptr<TlsSocket> socket;
    try {
      socket = std::make_shared<TlsSocket>(fd, ctx, format_address(addr));
    } catch (const Error& e) {
      log(e.message());
      continue;
    }
    std::lock_guard lock(mu);
    reap_finished_workers();
    if (stopping)
      return;
    live.insert(socket);
    Worker& worker = workers.emplace_back();
    try {
      worker.thread = std::thread([this, socket, &worker] {
        serve(socket);
        {
          std::lock_guard inner(mu);
          live.erase(socket);
        }
        worker.done = true;
      });
    } catch (const std::system_error& e) {
      log(fmt::format("cannot start a connection thread: {}", e.what()));
      live.erase(socket);
      workers.pop_back();
    }
  }
}

void HttpsServer::State::serve(const std::shared_ptr<TlsSocket>& socket) {
  try {
    socket->handshake(deadline_after(std::min<std::chrono::milliseconds>(
        kHandshakeTimeout,
        config.idle_timeout.count() > 0 ? config.idle_timeout : kHandshakeTimeout)));
  } catch (const Error& e) {
    if (!stopping)
      log(fmt::format("TLS handshake with {} failed: {}", socket->remote(), e.message()));
    return;
  }
  const PeerCertificate peer = socket->peer_certificate();
  std::string buffer;
  RequestReader reader(*socket, buffer, config);
  while (!stopping) {
    Request req;
    req.peer = peer;
    req.remote = socket->remote();
    try {
      if (!reader.read_head(req))
        break;
      const BodyFraming framing = body_framing(req, config.max_body);
      if (auto expect = req.headers.find("expect"); expect != req.headers.end()) {
        if (to_lower(trim(expect->second)) != "100-continue")
          throw HttpFailure{417, fmt::format("unsupported expectation {:?}", expect->second)};
        if (req.http_minor >= 1 && (framing.chunked || framing.length > 0))
          socket->write_all("HTTP/1.1 100 Continue\r\n\r\n", deadline_after(config.idle_timeout));
      }
      reader.read_body(framing, req.body);
    } catch (const HttpFailure& failure) {
      refuse(*socket, failure);
      break;
    } catch (const Error&) {
      break;  // the client went away or stalled mid-request: nobody to answer
    }
    if (!exchange(socket, buffer, req))
      break;
  }
  // A silent client has nothing in flight that a reset could destroy.
  socket->close_gracefully(/*linger=*/!reader.idled_out());
}

bool HttpsServer::State::exchange(const std::shared_ptr<TlsSocket>& socket, std::string& buffer,
                                  const Request& req) {
  ResponseWriter::Exchange x{.socket = socket,
                             .request = req,
                             .buffer = buffer,
                             .config = config,
                             .stopping = stopping,
                             .stop = stop_source.get_token()};
  x.keep_alive = req.http_minor >= 1 && !has_token(req.header("connection"), "close");
  x.head_only = req.method == "HEAD";
  ResponseWriter writer(x);
  std::string failure;
  try {
    handler(req, writer);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  using Phase = ResponseWriter::Exchange::Phase;
  if (!failure.empty()) {
    log(fmt::format("{} {}: handler failed: {}", req.method, req.path, failure));
    if (x.phase == Phase::Waiting) {
      writer.respond(500, "application/json", status_body(500, failure));
    } else {
      x.broken = true;  // mid-response: cut it short rather than pretend it is complete
    }
  } else if (x.phase == Phase::Waiting) {
    writer.respond(500, "application/json",
                   status_body(500, fmt::format("no response to {} {}", req.method, req.path)));
  } else if (x.phase == Phase::Streaming) {
    writer.end_stream();
  }
  return x.keep_alive && !x.broken && x.phase != Phase::Upgraded;
}

void HttpsServer::State::refuse(TlsSocket& socket, const HttpFailure& failure) {
  log(fmt::format("refused a request from {}: {} {}", socket.remote(), failure.status,
                  failure.message));
  const std::string body = status_body(failure.status, failure.message);
  const std::string out = fmt::format(
      "{}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      status_line(failure.status), body.size(), body);
  try {
    socket.write_all(out, deadline_after(config.idle_timeout));
  } catch (const Error&) {
  }
}

HttpsServer::HttpsServer(HttpsServerConfig config, Handler handler)
    : state_(std::make_unique<State>()) {
  state_->config = std::move(config);
  state_->handler = std::move(handler);
}

HttpsServer::~HttpsServer() {
  stop();
}

void HttpsServer::start() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (s.started)
      throw std::logic_error("HttpsServer::start() called twice");
    s.started = true;
  }
  s.make_context();
  s.listen();
  s.acceptor = std::thread([&s] { s.accept_loop(); });
}

void HttpsServer::stop() {
  State& s = *state_;
  if (s.stopping.exchange(true))
    return;
  s.stop_source.request_stop();
  if (s.wake_fd >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(s.wake_fd, &one, sizeof one);
  }
  if (s.acceptor.joinable())
    s.acceptor.join();
  std::list<State::Worker> workers;
  {
    std::lock_guard lock(s.mu);
    for (const auto& socket : s.live)
      socket->abort();
    workers.swap(s.workers);
  }
  for (auto& worker : workers)
    worker.thread.join();
  if (s.listen_fd >= 0) {
    ::close(s.listen_fd);
    s.listen_fd = -1;
  }
}

int HttpsServer::port() const {
  return state_->port;
}

std::size_t HttpsServer::open_connections() const {
  std::lock_guard lock(state_->mu);
  return state_->live.size();
}

}  // namespace trainctl::sandbox
