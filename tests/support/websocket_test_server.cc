#include "tests/support/websocket_test_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <stdexcept>

#include "error.h"
#include "http_status.h"
#include "openssl_handles.h"
#include "text.h"

namespace trainctl::testing {
namespace {

using kube::ws::Frame;
using kube::ws::Opcode;

// A read that waits longer than this fails, so a test whose two ends wait for each other fails
// instead of hanging.
constexpr std::chrono::seconds kReadTimeout{10};

// --- OpenSSL helpers -------------------------------------------------------------------------

[[noreturn]] void openssl_failure(std::string_view what) {
  throw std::runtime_error(fmt::format("{}: {}", what, openssl_errors()));
}

void check(int ok, std::string_view what) {
  if (ok != 1)
    openssl_failure(what);
}

std::string bio_to_string(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<std::size_t>(size));
}

// --- HTTP helpers ----------------------------------------------------------------------------

// --- TLS socket as a ByteStream --------------------------------------------------------------

class SslStream final : public kube::ws::ByteStream {
 public:
  explicit SslStream(SSL* ssl) : ssl_(ssl) {}

  void write_all(std::string_view bytes) override {
    while (!bytes.empty()) {
      const int n = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
      if (n <= 0) {
        throw Error(ErrorKind::Connection, "test server: TLS write failed: " + openssl_errors());
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  std::size_t read_some(char* buf, std::size_t n) override {
    errno = 0;
    const int got = SSL_read(ssl_, buf, static_cast<int>(n));
    if (got > 0)
      return static_cast<std::size_t>(got);
    const int read_errno = errno;
    const int err = SSL_get_error(ssl_, got);
    if (err == SSL_ERROR_ZERO_RETURN)
      return 0;
    if (read_errno == EAGAIN || read_errno == EWOULDBLOCK) {
      throw Error(ErrorKind::Timeout, fmt::format("test server: the client sent nothing for {} s",
                                                  kReadTimeout.count()));
    }
    if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
      return 0;
    throw Error(ErrorKind::Connection, "test server: TLS read failed: " + openssl_errors());
  }

 private:
  SSL* ssl_;
};

bool is_exec_upgrade(const RequestHead& head, std::string_view subprotocol) {
  const std::vector<std::string> offered = head.header_tokens("sec-websocket-protocol");
  return head.method == "GET" && head.path.find("/exec") != std::string::npos &&
         to_lower(head.header("upgrade")) == "websocket" &&
         !head.header("sec-websocket-key").empty() &&
         std::find(offered.begin(), offered.end(), subprotocol) != offered.end();
}

}  // namespace

// --- Request heads ---------------------------------------------------------------------------

std::vector<std::string> RequestHead::header_values(std::string_view name) const {
  std::vector<std::string> out;
  const std::string wanted = to_lower(name);
  for (const auto& [key, value] : headers) {
    if (to_lower(key) == wanted)
      out.push_back(value);
  }
  return out;
}

std::vector<std::string> RequestHead::header_tokens(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& value : header_values(name)) {
    std::string_view rest = value;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      if (const std::string_view token = trim(rest.substr(0, comma)); !token.empty())
        out.emplace_back(token);
      if (comma == std::string_view::npos)
        break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

std::string RequestHead::header(std::string_view name) const {
  auto values = header_values(name);
  return values.empty() ? std::string() : values.front();
}

RequestHead parse_request_head(std::string_view raw) {
  RequestHead head;
  head.raw = std::string(raw);
  std::size_t eol = raw.find("\r\n");
  const std::string_view request_line = raw.substr(0, eol);
  const std::size_t sp1 = request_line.find(' ');
  const std::size_t sp2 = request_line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) {
    throw Error(ErrorKind::Protocol,
                fmt::format("bad request line {:?}", std::string(request_line)));
  }
  head.method = std::string(request_line.substr(0, sp1));
  head.target = std::string(request_line.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::size_t question = head.target.find('?');
  head.path = head.target.substr(0, question);
  if (question != std::string::npos)
    head.query = head.target.substr(question + 1);
  while (eol != std::string_view::npos) {
    const std::size_t start = eol + 2;
    eol = raw.find("\r\n", start);
    const std::string_view line =
        raw.substr(start, eol == std::string_view::npos ? std::string_view::npos : eol - start);
    if (line.empty())
      continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      continue;
    head.headers.emplace_back(std::string(trim(line.substr(0, colon))),
                              std::string(trim(line.substr(colon + 1))));
  }
  return head;
}

// --- In-memory pipe --------------------------------------------------------------------------

struct PipeStream::Buffer {
  std::mutex mu;
  std::condition_variable cv;
  std::string data;
  bool writer_done = false;  // the writing end will write no more
  bool reader_gone = false;  // the reading end no longer exists
};

PipeStream::PipeStream(std::shared_ptr<Buffer> in, std::shared_ptr<Buffer> out)
    : in_(std::move(in)), out_(std::move(out)) {}

PipeStream::~PipeStream() {
  close_write();
  std::lock_guard lock(in_->mu);
  in_->reader_gone = true;
}

void PipeStream::write_all(std::string_view bytes) {
  std::lock_guard lock(out_->mu);
  if (out_->reader_gone || out_->writer_done) {
    throw Error(ErrorKind::Connection, "pipe: the other end is closed");
  }
  out_->data.append(bytes);
  out_->cv.notify_all();
}

std::size_t PipeStream::read_some(char* buf, std::size_t n) {
  std::unique_lock lock(in_->mu);
  // A test whose two ends wait for each other fails instead of hanging.
  if (!in_->cv.wait_for(lock, kReadTimeout,
                        [&] { return !in_->data.empty() || in_->writer_done; })) {
    throw Error(ErrorKind::Timeout, "pipe: nothing to read for 10 seconds");
  }
  const std::size_t got = std::min(n, in_->data.size());
  in_->data.copy(buf, got);
  in_->data.erase(0, got);
  return got;
}

void PipeStream::close_write() {
  std::lock_guard lock(out_->mu);
  out_->writer_done = true;
  out_->cv.notify_all();
}

std::pair<std::unique_ptr<PipeStream>, std::unique_ptr<PipeStream>> make_pipe_pair() {
  auto to_server = std::make_shared<PipeStream::Buffer>();
  auto to_client = std::make_shared<PipeStream::Buffer>();
  return {std::make_unique<PipeStream>(to_client, to_server),
          std::make_unique<PipeStream>(to_server, to_client)};
}

// --- Server session --------------------------------------------------------------------------

ServerSession::ServerSession(kube::ws::ByteStream& stream)
    : stream_(stream),
      decoder_(kube::ws::FrameDecoder::Options{.max_payload = kube::ws::kDefaultMaxPayload,
                                               .expect_masked = true}) {}

RequestHead ServerSession::read_request_head() {
  std::size_t end = std::string::npos;
  char buf[4096];
  while ((end = pending_.find("\r\n\r\n")) == std::string::npos) {
    const std::size_t n = stream_.read_some(buf, sizeof buf);
    if (n == 0)
      throw Error(ErrorKind::Connection, "test server: end of stream before a request");
    pending_.append(buf, n);
  }
  RequestHead head = parse_request_head(std::string_view(pending_).substr(0, end + 4));
  pending_.erase(0, end + 4);
  return head;
}

std::string ServerSession::upgrade_response(const RequestHead& request,
                                            std::string_view subprotocol) {
  std::string out = fmt::format(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Accept: {}\r\n",
      kube::ws::websocket_accept_key(request.header("sec-websocket-key")));
  if (!subprotocol.empty())
    out += fmt::format("Sec-WebSocket-Protocol: {}\r\n", subprotocol);
  return out + "\r\n";
}

void ServerSession::accept(const RequestHead& request, std::string_view subprotocol) {
  write_raw(upgrade_response(request, subprotocol));
}

void ServerSession::respond(int code, std::string_view body, std::string_view content_type) {
  write_raw(fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      code, reason_phrase(code), content_type, body.size(), body));
}

void ServerSession::write_raw(std::string_view bytes) {
  stream_.write_all(bytes);
}

void ServerSession::send_frame(const Frame& frame) {
  write_raw(kube::ws::encode_frame(frame, std::nullopt));
}

void ServerSession::send(Opcode opcode, std::string_view payload) {
  send_frame(Frame{true, opcode, std::string(payload)});
}

void ServerSession::send_channel(kube::ExecChannel channel, std::string_view data) {
  send(Opcode::Binary, kube::encode_channel(channel, data));
}

void ServerSession::send_status(const nlohmann::json& status) {
  send_channel(kube::ExecChannel::Error, status.dump());
}

void ServerSession::send_close(std::uint16_t code, std::string_view reason) {
  send(Opcode::Close, kube::ws::encode_close_payload(code, reason));
}

std::optional<Frame> ServerSession::read_frame() {
  if (!pending_.empty()) {
    decoder_.feed(pending_);
    pending_.clear();
  }
  for (;;) {
    if (auto frame = decoder_.next())
      return frame;
    char buf[16 * 1024];
    const std::size_t n = stream_.read_some(buf, sizeof buf);
    if (n == 0)
      return std::nullopt;
    decoder_.feed(std::string_view(buf, n));
  }
}

std::optional<kube::ws::Message> ServerSession::read_message() {
  while (auto frame = read_frame()) {
    if (auto msg = reader_.push(std::move(*frame)))
      return msg;
  }
  return std::nullopt;
}

// --- Status objects --------------------------------------------------------------------------

nlohmann::json success_status() {
  return {{"metadata", nlohmann::json::object()}, {"status", "Success"}};
}

nlohmann::json exit_code_status(int exit_code) {
  return {{"metadata", nlohmann::json::object()},
          {"status", "Failure"},
          {"message", fmt::format("command terminated with non-zero exit code: error executing "
                                  "command [sh -c exit {}], exit code {}",
                                  exit_code, exit_code)},
          {"reason", "NonZeroExitCode"},
          {"details",
           {{"causes", {{{"reason", "ExitCode"}, {"message", std::to_string(exit_code)}}}}}}};
}

nlohmann::json failure_status(int code, std::string_view reason, std::string_view message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

// --- Scripted pipe server --------------------------------------------------------------------

ScriptedPipeServer::ScriptedPipeServer(ServerScript script) {
  std::tie(client_, server_) = make_pipe_pair();
  thread_ = std::thread([this, script = std::move(script)] {
    try {
      ServerSession session(*server_);
      script(session);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    server_->close_write();
  });
}

ScriptedPipeServer::~ScriptedPipeServer() {
  finish();
}

std::string ScriptedPipeServer::finish() {
  if (!finished_) {
    finished_ = true;
    client_->close_write();  // a script waiting for the client sees end of stream
    thread_.join();
  }
  return error_;
}

// --- TLS server ------------------------------------------------------------------------------

struct WebSocketTestServer::Tls {
  SSL_CTX* ctx = nullptr;
  ~Tls() { SSL_CTX_free(ctx); }
};

namespace {

void load_certificate(SSL_CTX* ctx, const sandbox::CertifiedKey& pair) {
  std::vector<CertPtr> certs = read_certificates(pair.cert_pem);
  if (certs.empty())
    openssl_failure("test server: reading the certificate");
  check(SSL_CTX_use_certificate(ctx, certs.front().get()), "test server: using the certificate");
  KeyPtr key = read_private_key(pair.key_pem);
  if (!key)
    openssl_failure("test server: reading the private key");
  check(SSL_CTX_use_PrivateKey(ctx, key.get()), "test server: using the private key");
  check(SSL_CTX_check_private_key(ctx), "test server: the key does not match the certificate");
}

void require_client_certificates(SSL_CTX* ctx, const std::string& ca_pem) {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  const std::vector<CertPtr> cas = read_certificates(ca_pem);
  for (const auto& ca : cas) {
    check(X509_STORE_add_cert(store, ca.get()), "test server: adding a client CA");
    check(SSL_CTX_add_client_CA(ctx, ca.get()), "test server: listing a client CA");
  }
  const size_t loaded = cas.size();
  if (loaded == 0)
    throw std::runtime_error("test server: no certificate in client_ca_pem");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

// Closing a socket with unread input makes the kernel send a reset, which can destroy what the
// client has not read yet (the status, the Close). Half-close and drain first, as servers do.
void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) < 0)
      break;
    if (pfd.revents == 0)
      continue;
    if (::recv(fd, buf, sizeof buf, 0) <= 0)
      break;
  }
}

std::string subject_of(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  return bio_to_string(bio.get());
}

}  // namespace

WebSocketTestServer::WebSocketTestServer(Options options)
    : tls_(std::make_unique<Tls>()), options_(std::move(options)) {
  // A client that hangs up mid-write must not kill the test process.
  std::signal(SIGPIPE, SIG_IGN);
  tls_->ctx = SSL_CTX_new(TLS_server_method());
  if (tls_->ctx == nullptr)
    openssl_failure("test server: SSL_CTX_new");
  SSL_CTX_set_min_proto_version(tls_->ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(tls_->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  load_certificate(tls_->ctx, options_.certificate);
  if (!options_.client_ca_pem.empty())
    require_client_certificates(tls_->ctx, options_.client_ca_pem);

  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw std::runtime_error("test server: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("test server: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

WebSocketTestServer::~WebSocketTestServer() {
  stop();
}

std::string WebSocketTestServer::host_port() const {
  return fmt::format("127.0.0.1:{}", port_);
}

void WebSocketTestServer::set_exec_script(ServerScript script) {
  std::lock_guard lock(mu_);
  options_.exec_script = std::move(script);
}

void WebSocketTestServer::set_response(int status, std::string body) {
  std::lock_guard lock(mu_);
  options_.status = status;
  options_.body = std::move(body);
}

std::vector<RequestHead> WebSocketTestServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

std::vector<std::string> WebSocketTestServer::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

bool WebSocketTestServer::wait_for_connections(std::size_t n,
                                               std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return finished_cv_.wait_for(lock, timeout, [&] { return finished_ >= n; });
}

void WebSocketTestServer::record_error(std::string message) {
  std::lock_guard lock(mu_);
  errors_.push_back(std::move(message));
}

void WebSocketTestServer::accept_loop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0)
      continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    const timeval read_timeout{.tv_sec = kReadTimeout.count(), .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &read_timeout, sizeof read_timeout);
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    open_fds_.push_back(fd);
    connections_.emplace_back([this, fd] { serve(fd); });
  }
}

void WebSocketTestServer::serve(int fd) {
  SSL* ssl = SSL_new(tls_->ctx);
  SSL_set_fd(ssl, fd);
  try {
    if (SSL_accept(ssl) != 1) {
      throw std::runtime_error("TLS handshake failed: " + openssl_errors());
    }
    SslStream stream(ssl);
    ServerSession session(stream);
    RequestHead head = session.read_request_head();
    if (X509* peer = SSL_get0_peer_certificate(ssl))
      head.client_subject = subject_of(peer);
    ServerScript script;
    int status = 0;
    bool upgrade = false;
    std::string body, subprotocol;
    {
      std::lock_guard lock(mu_);
      requests_.push_back(head);
      script = options_.exec_script;
      status = options_.status;
      body = options_.body;
      subprotocol = options_.subprotocol;
      upgrade = !options_.refuse_upgrades && is_exec_upgrade(head, subprotocol);
    }
    if (upgrade) {
      session.accept(head, subprotocol);
      if (script)
        script(session);
    } else {
      session.respond(status, body);
    }
    SSL_shutdown(ssl);
  } catch (const std::exception& e) {
    record_error(e.what());
  }
  SSL_free(ssl);
  linger_close(fd);
  {
    std::lock_guard lock(mu_);
    open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
    ::close(fd);
    ++finished_;
  }
  finished_cv_.notify_all();
}

void WebSocketTestServer::stop() {
  if (stopping_.exchange(true))
    return;
  if (acceptor_.joinable())
    acceptor_.join();
  std::vector<std::thread> connections;
  {
    std::lock_guard lock(mu_);
    // Wake connections blocked on a client that will never speak again.
    for (int fd : open_fds_)
      ::shutdown(fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& t : connections)
    t.join();
  if (listen_fd_ >= 0)
    ::close(listen_fd_);
  listen_fd_ = -1;
}

}  // namespace trainctl::testing
