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
#include "sandbox/http_message.h"
#include "text.h"

namespace trainctl::sandbox {

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
    socket->accept(deadline_after(std::min<std::chrono::milliseconds>(
        kHandshakeTimeout,
        config.idle_timeout.count() > 0 ? config.idle_timeout : kHandshakeTimeout)));
  } catch (const Error& e) {
    if (!stopping)
      log(fmt::format("TLS handshake with {} failed: {}", socket->remote(), e.message()));
    return;
  }
  const PeerCertificate peer = peer_certificate(socket->ssl());
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
  socket->close_gracefully(/*linger=*/!reader.idled_out(), kLingerTimeout);
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
