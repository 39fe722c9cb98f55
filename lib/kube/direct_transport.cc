#include "kube/direct_transport.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "error.h"
#include "http1.h"
#include "kube/tls_sessions.h"
#include "openssl_handles.h"
#include "text.h"

namespace trainctl::kube {

namespace {

/// How long opening a connection may take, as libcurl's CONNECTTIMEOUT was set.
constexpr std::chrono::seconds kConnectTimeout{30};
/// How long a connect may go unanswered before the next address is tried too: libcurl's
/// happy-eyeballs timeout.
constexpr std::chrono::milliseconds kConnectStagger{200};

using SslCtxPtr = std::unique_ptr<SSL_CTX, OpenSslFree<SSL_CTX_free>>;

bool is_ip_address(const std::string& host) {
  in6_addr ignored{};
  return inet_pton(AF_INET, host.c_str(), &ignored) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &ignored) == 1;
}

/// `[::1]` -> `::1`: the URL form of an IPv6 address to the form getaddrinfo and X.509 take.
std::string unbracketed(const std::string& host) {
  return host.size() > 2 && host.front() == '[' && host.back() == ']'
             ? host.substr(1, host.size() - 2)
             : host;
}

/// A TCP connection to host:port, by `deadline` (connect_first).
int connect_tcp(const std::string& host, const std::string& port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw Error(ErrorKind::Connection,
                fmt::format("cannot resolve host {}: {}", host, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  std::vector<TcpAddress> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    TcpAddress t{.length = a->ai_addrlen};
    std::memcpy(&t.address, a->ai_addr, std::min<std::size_t>(a->ai_addrlen, sizeof t.address));
    addresses.push_back(t);
  }
  return connect_first(addresses, deadline, fmt::format("{} port {}", host, port));
}

/// The status code of a status line (`HTTP/1.1 200 OK`); whether it is HTTP/1.0 in `http10`.
int parse_status_line(std::string_view line, bool& http10) {
  int status = 0;
  if (line.size() < 12 || !line.starts_with("HTTP/1.") || line[8] != ' ' ||
      std::from_chars(line.data() + 9, line.data() + 12, status).ptr != line.data() + 12 ||
      status < 100 || (line.size() > 12 && line[12] != ' ')) {
    throw HttpFailure{502, fmt::format("malformed status line {:?}", line.substr(0, 80))};
  }
  http10 = line[7] == '0';
  return status;
}

/// The fields of a response head (its status line already read), names lower-cased, a repeated
/// field's values joined with ", ".
std::map<std::string, std::string> parse_fields(std::string_view head, std::size_t pos) {
  std::map<std::string, std::string> fields;
  while (pos < head.size()) {
    const std::string_view field = next_line(head, pos);
    if (field.empty())
      break;
    const std::size_t colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon)))
      throw HttpFailure{502, fmt::format("malformed header line {:?}", field.substr(0, 80))};
    std::string& value = fields[to_lower(field.substr(0, colon))];
    value += (value.empty() ? "" : ", ") + std::string(trim(field.substr(colon + 1)));
  }
  return fields;
}

/// How the body of a response to `method` with `status` and `fields` is framed.
BodyFraming response_framing(const std::string& method, int status,
                             const std::map<std::string, std::string>& fields) {
  BodyFraming framing;
  if (method == "HEAD" || status == 204 || status == 304)
    return framing;
  if (const auto te = fields.find("transfer-encoding"); te != fields.end()) {
    if (!has_token(te->second, "chunked"))
      throw HttpFailure{502, fmt::format("unsupported Transfer-Encoding {:?}", te->second)};
    framing.chunked = true;
    return framing;
  }
  const auto length = fields.find("content-length");
  if (length == fields.end()) {
    framing.to_end = true;
    return framing;
  }
  const std::string_view text = length->second;
  if (text.empty() || text.size() > 18 ||
      std::from_chars(text.data(), text.data() + text.size(), framing.length).ptr !=
          text.data() + text.size()) {
    throw HttpFailure{502, fmt::format("invalid Content-Length {:?}", text)};
  }
  return framing;
}

}  // namespace

int connect_first(const std::vector<TcpAddress>& addresses, Deadline deadline,
                  std::string_view what) {
  const Deadline until = std::min(deadline, SteadyClock::now() + kConnectTimeout);
  std::vector<pollfd> trying;  // connects in progress, oldest first
  const auto close_all = [&] {
    for (const pollfd& p : trying)
      ::close(p.fd);
  };
  std::string why = "no address";
  std::size_t next = 0;
  Deadline next_at = SteadyClock::now();
  for (;;) {
    // Start the next address: when nothing is in progress, or the last one started has not
    // answered within the stagger.
    while (next < addresses.size() && (trying.empty() || SteadyClock::now() >= next_at)) {
      const TcpAddress& a = addresses[next++];
      const int fd = ::socket(a.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        why = std::strerror(errno);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.address), a.length) == 0) {
        close_all();
        return fd;
      }
      if (errno != EINPROGRESS) {
        why = std::strerror(errno);
        ::close(fd);
        continue;
      }
      trying.push_back({fd, POLLOUT, 0});
      next_at = SteadyClock::now() + kConnectStagger;
    }
    if (trying.empty())
      throw Error(ErrorKind::Connection, fmt::format("cannot connect to {}: {}", what, why));
    const Deadline wake = next < addresses.size() ? std::min(until, next_at) : until;
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(wake - SteadyClock::now(), SteadyClock::duration::zero()));
    int rc;
    do {
      rc = ::poll(trying.data(), trying.size(), static_cast<int>(wait.count()) + 1);
    } while (rc < 0 && errno == EINTR);
    for (std::size_t i = 0; rc > 0 && i < trying.size();) {
      if (trying[i].revents == 0) {
        ++i;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(trying[i].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
      if (err == 0) {
        const int fd = trying[i].fd;
        trying.erase(trying.begin() + static_cast<std::ptrdiff_t>(i));
        close_all();
        return fd;
      }
      why = std::strerror(err);
      ::close(trying[i].fd);
      trying.erase(trying.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (SteadyClock::now() >= until) {
      close_all();
      if (SteadyClock::now() >= deadline)
        throw Error(ErrorKind::Timeout, fmt::format("timed out connecting to {}", what));
      throw Error(ErrorKind::Connection,
                  fmt::format("cannot connect to {}: {}", what, std::strerror(ETIMEDOUT)));
    }
  }
}

ResponseHead read_response_head(MessageReader& reader, const std::string& method) {
  ResponseHead result;
  HttpResponse& response = result.response;
  response.http_version = 11;
  bool http10 = false;
  std::string head;
  do {  // informational responses (100 Continue) come before the final one
    if (!reader.read_head(head)) {
      if (reader.idled_out())
        throw Error(ErrorKind::Timeout, "timed out waiting for the answer");
      throw Error(ErrorKind::Connection, "the server closed the connection before answering");
    }
    std::size_t pos = 0;
    response.status = parse_status_line(next_line(head, pos), http10);
    response.headers = parse_fields(head, pos);
  } while (response.status < 200 && response.status != 101);
  result.framing = response_framing(method, response.status, response.headers);
  result.reusable =
      !result.framing.to_end && !http10 && !has_token(response.header("connection"), "close");
  return result;
}

struct DirectTransport::ReadOnFirstNeed {
  std::mutex mu;
  bool read = false;
  std::string problem;

  std::string why_not() {
    std::lock_guard lock(mu);
    return problem;
  }
};

struct DirectTransport::Identity : ReadOnFirstNeed {
  std::string cert_pem;
  std::string key_pem;
  std::vector<CertPtr> chain;
  KeyPtr key;
};

struct DirectTransport::TrustedCas : ReadOnFirstNeed {
  std::string pem;
  X509_STORE* store = nullptr;  // the context's
};

struct DirectTransport::Context {
  SslCtxPtr ctx;
  Identity identity;
  TrustedCas cas;
};

struct DirectTransport::Connection {
  std::unique_ptr<TlsSocket> socket;  // set once, before any request on it is written
  std::string client_cert_pem;
  std::string buffer;  // read past the last answer; only by the request whose turn it is to read
  // The requests on it (guarded by DirectTransport::mu_), numbered as they are placed; they are
  // written and answered in that order.
  std::size_t placed = 0;
  std::size_t written = 0;             // the next to write
  std::size_t answered = 0;            // the next to read its answer
  std::size_t in_flight = 0;           // placed and not yet left
  std::size_t failed_from = SIZE_MAX;  // requests from this one on get no answer on it
  bool closed_cleanly = false;         // an answer closed it: those requests were not processed
  bool joinable = true;                // every request on it is read whole
  bool carries_write = false;          // a request on it is not a read
  std::optional<Error> open_failure;   // why it could not be opened: the answer of all on it
  std::condition_variable turn;
};

struct DirectTransport::Place {
  std::shared_ptr<Connection> c;
  std::size_t index = 0;
  bool opens = false;   // a new connection this request opens
  bool behind = false;  // others were on the connection before it (pipelined, or taken idle)
  bool sent = false;
  bool answer_started = false;  // a byte of its answer came
  bool left = false;
};

namespace {

/// Thrown to a request whose connection ended before its answer, because of an earlier request
/// on it: `cleanly` when an earlier answer closed it (the request was not processed).
struct Unanswered {
  bool cleanly = false;
};

/// Thrown to the requests pipelined on a connection that could not be opened: they fail as the
/// request that opened it did, without trying again (an unreachable server costs its timeout
/// once).
struct NotOpened {
  Error error;
};

/// SSL_CTX_set_cert_cb: the client certificate, when the server asks for one.
int present_identity(SSL* ssl, void* arg) {
  auto* identity = static_cast<DirectTransport::Identity*>(arg);
  std::lock_guard lock(identity->mu);
  if (!identity->read) {
    identity->read = true;
    identity->chain = read_certificates(identity->cert_pem);
    identity->key = read_private_key(identity->key_pem);
    ERR_clear_error();
  }
  // Returning 0 fails the handshake; open() reports the problem instead of OpenSSL's words.
  if (identity->chain.empty()) {
    identity->problem = "the client certificate holds no PEM certificate";
    return 0;
  }
  if (!identity->key) {
    identity->problem = "the client key is not a PEM private key";
    return 0;
  }
  if (SSL_use_certificate(ssl, identity->chain.front().get()) != 1 ||
      SSL_use_PrivateKey(ssl, identity->key.get()) != 1) {
    ERR_clear_error();
    identity->problem = "the client key does not match the client certificate";
    return 0;
  }
  for (std::size_t i = 1; i < identity->chain.size(); ++i) {
    if (SSL_add1_chain_cert(ssl, identity->chain[i].get()) != 1)
      return 0;
  }
  return 1;
}

/// SSL_CTX_set_cert_verify_callback: the CAs read into the context's store on the first chain to
/// verify, then the chain verified as OpenSSL does without a callback. A resumed handshake
/// verifies no chain, so a command that resumes its session never parses them (decoding a
/// certificate's key, OpenSSL 3 fetches its decoders: ~0.6 ms of a command).
int verify_chain(X509_STORE_CTX* chain, void* arg) {
  auto* cas = static_cast<DirectTransport::TrustedCas*>(arg);
  {
    std::lock_guard lock(cas->mu);
    if (!cas->read) {
      cas->read = true;
      const std::vector<CertPtr> certs = read_certificates(cas->pem);
      if (certs.empty())
        cas->problem = "the certificate-authority data holds no PEM certificate";
      for (const CertPtr& ca : certs)
        X509_STORE_add_cert(cas->store, ca.get());
      ERR_clear_error();
    }
    if (!cas->problem.empty()) {
      X509_STORE_CTX_set_error(chain, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
      return 0;  // open() reports the problem instead of OpenSSL's words
    }
  }
  return X509_verify_cert(chain);
}

}  // namespace

DirectTransport::DirectTransport(const RestConfig& config, Endpoint endpoint)
    : config_(config), endpoint_(std::move(endpoint)) {
  endpoint_.connect_host = unbracketed(endpoint_.connect_host);
  endpoint_.verify_name = unbracketed(endpoint_.verify_name);
}

DirectTransport::~DirectTransport() = default;

DirectTransport::Context& DirectTransport::context_for(const RequestCredentials& creds) {
  std::lock_guard lock(mu_);
  std::unique_ptr<Context>& slot = contexts_[creds.client_cert_pem];
  if (slot)
    return *slot;
  auto c = std::make_unique<Context>();
  c->ctx.reset(SSL_CTX_new(TLS_client_method()));
  if (!c->ctx)
    throw Error(ErrorKind::Connection, "cannot set up TLS: " + openssl_errors());
  SSL_CTX* ctx = c->ctx.get();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  static constexpr unsigned char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof kAlpn - 1);
  const TlsConfig& tls = config_.tls;
  if (tls.insecure_skip_verify) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (tls.ca_pem.empty()) {
      SSL_CTX_set_default_verify_paths(ctx);
    } else {
      c->cas.pem = tls.ca_pem;
      c->cas.store = SSL_CTX_get_cert_store(ctx);
      SSL_CTX_set_cert_verify_callback(ctx, verify_chain, &c->cas);
    }
    if (!tls.session_cache_dir.empty()) {
      keep_tls_sessions(
          ctx, tls_session_file(tls.session_cache_dir, {endpoint_.server, tls.server_name,
                                                        tls.ca_pem, creds.client_cert_pem}));
    }
  }
  if (!creds.client_cert_pem.empty()) {
    c->identity.cert_pem = creds.client_cert_pem;
    c->identity.key_pem = creds.client_key_pem;
    SSL_CTX_set_cert_cb(ctx, present_identity, &c->identity);
  }
  ERR_clear_error();
  slot = std::move(c);
  return *slot;
}

std::unique_ptr<TlsSocket> DirectTransport::open(const RequestCredentials& creds,
                                                 Deadline deadline) {
  Context& context = context_for(creds);
  const int fd = connect_tcp(endpoint_.connect_host, endpoint_.port, deadline);
  auto socket = std::make_unique<TlsSocket>(
      fd, context.ctx.get(), fmt::format("{}:{}", endpoint_.connect_host, endpoint_.port));
  SSL* ssl = socket->ssl();
  const std::string& name = endpoint_.verify_name;
  const bool by_address = is_ip_address(name);
  if (!by_address)
    SSL_set_tlsext_host_name(ssl, name.c_str());
  if (!config_.tls.insecure_skip_verify) {
    const int set = by_address ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str())
                               : SSL_set1_host(ssl, name.c_str());
    if (set != 1)
      throw Error(ErrorKind::Connection, "cannot set up TLS: " + openssl_errors());
  }
  try {
    socket->connect(std::min(deadline, SteadyClock::now() + config_.tls_handshake_timeout));
  } catch (const Error& e) {
    if (const std::string problem = context.cas.why_not(); !problem.empty())
      throw Error(ErrorKind::Config, problem);
    const long verified = SSL_get_verify_result(ssl);
    if (e.kind() == ErrorKind::Connection && verified != X509_V_OK) {
      throw Error(ErrorKind::Connection,
                  fmt::format("the server's certificate is not trusted ({}): give the CA that "
                              "signed it as the cluster's certificate-authority (or "
                              "--certificate-authority)",
                              X509_verify_cert_error_string(verified)));
    }
    if (const std::string problem = context.identity.why_not(); !problem.empty())
      throw Error(ErrorKind::Config, problem);
    throw Error(e.kind(), "TLS handshake: " + e.message());
  }
  return socket;
}

DirectTransport::Place DirectTransport::take_place(const RequestCredentials& creds, bool read,
                                                   bool whole, bool may_join) {
  std::lock_guard lock(mu_);
  const auto placed = [&](const std::shared_ptr<Connection>& c, bool behind) {
    c->joinable = c->joinable && whole;
    c->carries_write = c->carries_write || !read;
    ++c->in_flight;
    return Place{.c = c, .index = c->placed++, .opens = false, .behind = behind};
  };
  if (whole && may_join && config_.pipeline_depth > 1) {
    for (const std::shared_ptr<Connection>& c : busy_) {
      if (c->client_cert_pem == creds.client_cert_pem && c->joinable &&
          c->failed_from == SIZE_MAX && c->in_flight < config_.pipeline_depth &&
          (read || !c->carries_write))
        return placed(c, true);
    }
  }
  while (!idle_.empty()) {
    std::shared_ptr<Connection> c = std::move(idle_.back());
    idle_.pop_back();
    // A connection the server has closed meanwhile is dropped, not tried.
    if (c->client_cert_pem == creds.client_cert_pem && !c->socket->peer_closed()) {
      busy_.push_back(c);
      return placed(c, true);
    }
  }
  auto c = std::make_shared<Connection>();
  c->client_cert_pem = creds.client_cert_pem;
  busy_.push_back(c);
  Place place = placed(c, false);
  place.opens = true;
  return place;
}

void DirectTransport::wait_turn(Place& place, bool to_write, Deadline deadline) {
  std::unique_lock lock(mu_);
  Connection& c = *place.c;
  const auto ready = [&] {
    return c.failed_from <= place.index ||
           (c.socket && (to_write ? c.written : c.answered) == place.index);
  };
  if (deadline == Deadline::max()) {
    c.turn.wait(lock, ready);
  } else if (!c.turn.wait_until(lock, deadline, ready)) {
    throw Error(ErrorKind::Timeout, to_write ? "timed out waiting for a connection"
                                             : "timed out waiting for the answer");
  }
  if (c.open_failure)
    throw NotOpened{*c.open_failure};
  if (c.failed_from <= place.index)
    throw Unanswered{.cleanly = c.closed_cleanly};
}

void DirectTransport::leave(Place& place, bool reusable, bool closed_cleanly) {
  std::lock_guard lock(mu_);
  Connection& c = *place.c;
  place.left = true;
  if (reusable) {
    c.answered = place.index + 1;
  } else if (place.index + (closed_cleanly ? 1 : 0) < c.failed_from) {
    // Unanswered from here on: this request's own failure, or an answer that closed it.
    c.failed_from = place.index + (closed_cleanly ? 1 : 0);
    c.closed_cleanly = closed_cleanly;
  }
  c.turn.notify_all();
  if (--c.in_flight > 0)
    return;
  std::erase(busy_, place.c);
  if (c.failed_from == SIZE_MAX && c.socket) {
    c.joinable = true;
    c.carries_write = false;
    idle_.push_back(std::move(place.c));
  }
}

HttpResponse DirectTransport::attempt(Place& place, const RequestCredentials& creds,
                                      const std::string& request_text, const std::string& method,
                                      Deadline deadline, const BodySink* sink,
                                      const std::stop_token& stop) {
  Connection& c = *place.c;
  if (place.opens) {
    std::unique_ptr<TlsSocket> socket;
    try {
      socket = open(creds, deadline);
    } catch (const Error& e) {
      std::lock_guard lock(mu_);
      c.open_failure = e;  // the requests pipelined behind this one wake when it leaves
      throw;
    }
    std::lock_guard lock(mu_);
    c.socket = std::move(socket);
    c.turn.notify_all();
  }
  wait_turn(place, /*to_write=*/true, deadline);
  c.socket->write_all(request_text, deadline);
  place.sent = true;
  {
    std::lock_guard lock(mu_);
    c.written = place.index + 1;
    c.turn.notify_all();
  }
  wait_turn(place, /*to_write=*/false, deadline);
  TlsSocket& socket = *c.socket;
  MessageReader reader(
      [&](char* buf, std::size_t n) {
        const std::size_t got = socket.read_some(buf, n, deadline);
        place.answer_started = place.answer_started || got > 0;
        return got;
      },
      c.buffer);
  place.answer_started = !c.buffer.empty();
  ResponseHead head = read_response_head(reader, method);
  HttpResponse& response = head.response;
  const bool streamed = sink != nullptr && response.status >= 200 && response.status < 300;
  bool whole = false;
  {
    // A stop request cuts the connection: the read under way returns at once.
    std::stop_callback cut(stop, [&socket] { socket.abort(); });
    try {
      whole = reader.read_body(head.framing, SIZE_MAX, [&](std::string_view piece) {
        if (streamed)
          return (*sink)(piece);
        response.body.append(piece);
        return true;
      });
    } catch (const Error&) {
      if (!stop.stop_requested())
        throw;
    }
  }
  // An answer read whole that does not keep the connection (Connection: close, HTTP/1.0, a body
  // that ends with it) closed it cleanly: the server processes nothing after it.
  leave(place, whole && head.reusable && !stop.stop_requested(), whole && !head.reusable);
  return std::move(response);
}

HttpResponse DirectTransport::exchange(
    const std::string& method, const std::string& target,
    const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
    std::chrono::milliseconds timeout, const RequestCredentials& creds, const BodySink* sink,
    std::stop_token stop) {
  const Deadline deadline = deadline_after(timeout);
  const std::string url = endpoint_.server + target;
  std::string text = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n", method, target,
                                 endpoint_.server.substr(endpoint_.server.find("://") + 3));
  for (const auto& [name, value] : headers) {
    // A line break in a value would end the field and start another (a token or a user name
    // from a kubeconfig must not add headers); the value is not shown, it may be a credential.
    if (!is_token(name) || !is_field_value(value)) {
      throw Error(
          ErrorKind::Config,
          fmt::format("{} {}: the {} header holds characters a header may not", method, url, name));
    }
    if (!value.empty())
      fmt::format_to(std::back_inserter(text), "{}: {}\r\n", name, value);
  }
  if (!body.empty() || (method != "GET" && method != "HEAD"))
    fmt::format_to(std::back_inserter(text), "Content-Length: {}\r\n", body.size());
  text += "\r\n";
  text += body;
  // A request that fails on a connection others used before it, before any answer (the server
  // closed it while idle, or an earlier request's failure ended it), is sent again once on
  // another if sending it twice cannot do harm: it is a read, it never left, or the server
  // closed the connection with an answer before it (and so did not process it).
  const bool idempotent = method == "GET" || method == "HEAD" || method == "OPTIONS";
  for (int tries = 0;; ++tries) {
    Place place = take_place(creds, idempotent, sink == nullptr, /*may_join=*/tries == 0);
    const auto failed = [&] {
      if (!place.left)
        leave(place, /*reusable=*/false, /*closed_cleanly=*/false);
    };
    try {
      return attempt(place, creds, text, method, deadline, sink, stop);
    } catch (const NotOpened& not_opened) {
      failed();
      throw Error(not_opened.error.kind(),
                  fmt::format("{} {}: {}", method, url, not_opened.error.message()));
    } catch (const Unanswered& unanswered) {
      failed();
      if (tries == 0 && (!place.sent || idempotent || unanswered.cleanly))
        continue;
      throw Error(ErrorKind::Connection,
                  fmt::format("{} {}: the connection ended before the answer to it came (a "
                              "request before it on the connection went unanswered)",
                              method, url));
    } catch (const HttpFailure& failure) {
      failed();
      throw Error(ErrorKind::Protocol,
                  fmt::format("{} {}: malformed response: {}", method, url, failure.message));
    } catch (const Error& e) {
      failed();
      if (place.behind && tries == 0 && e.kind() == ErrorKind::Connection &&
          (!place.sent || (idempotent && !place.answer_started)))
        continue;
      throw Error(e.kind(), fmt::format("{} {}: {}", method, url, e.message()));
    } catch (...) {
      failed();  // whatever else (a sink that threw): the requests behind it do not wait for it
      throw;
    }
  }
}

}  // namespace trainctl::kube
