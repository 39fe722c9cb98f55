// The sandbox's HTTPS server against the project's own client (libcurl) and a raw OpenSSL client
// for what a well-behaved client never sends.
#include "sandbox/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "error.h"
#include "kube/client.h"
#include "kube/exec_protocol.h"
#include "kube/http.h"
#include "kube/websocket.h"
#include "sandbox/pki.h"
#include "tests/support/expect_error.h"
#include "tests/support/https_test_server.h"
#include "text.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using testing::expect_error;
using ::testing::HasSubstr;
using testing::TestPki;
using SteadyClock = std::chrono::steady_clock;

constexpr std::chrono::seconds kWait{5};

HttpsServerConfig test_config() {
  HttpsServerConfig config;
  config.cert_pem = TestPki::shared().server.cert_pem;
  config.key_pem = TestPki::shared().server.key_pem;
  config.client_ca_pem = TestPki::shared().ca.cert_pem;
  return config;
}

/// A client that trusts the test CA, sends no credentials and never retries.
kube::RestConfig client_config(const HttpsServer& server) {
  kube::RestConfig config;
  config.server = "https://127.0.0.1:" + std::to_string(server.port());
  config.tls.ca_pem = TestPki::shared().ca.cert_pem;
  config.qps = 0;
  return config;
}

std::unique_ptr<kube::Client> make_client(const kube::RestConfig& config) {
  auto client = std::make_unique<kube::Client>(config);
  client->set_retry_policy({.max_retries = 0});
  return client;
}

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

/// What handlers saw, for assertions on the test thread.
class Recorder {
 public:
  void add(const Request& req) {
    std::lock_guard lock(mu_);
    requests_.push_back(req);
  }
  std::vector<Request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Request> requests_;
};

/// One line of a watch stream.
std::string watch_line(std::string_view type, std::string_view name, int rv) {
  return json{{"type", type},
              {"object",
               {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"resourceVersion", std::to_string(rv)}}}}}}
             .dump() +
         "\n";
}

// --- A raw TLS client ---------------------------------------------------------------------------

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

/// A blocking OpenSSL client that sends whatever bytes a test wants and reads what comes back;
/// every read gives up after 5 seconds.
class RawClient {
 public:
  explicit RawClient(int port, std::string_view alpn_wire = {}) {
    std::signal(SIGPIPE, SIG_IGN);  // writing to a server that hung up must not end the test
    ctx_ = SSL_CTX_new(TLS_client_method());
    BIO* bio = BIO_new_mem_buf(TestPki::shared().ca.cert_pem.data(), -1);
    X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), ca);
    X509_free(ca);
    BIO_free(bio);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (!alpn_wire.empty()) {
      SSL_CTX_set_alpn_protos(ctx_, reinterpret_cast<const unsigned char*>(alpn_wire.data()),
                              static_cast<unsigned>(alpn_wire.size()));
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("raw client: connect failed");
    set_read_timeout(kWait);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1)
      throw std::runtime_error("raw client: TLS handshake failed");
  }

  ~RawClient() {
    SSL_free(ssl_);
    ::close(fd_);
    SSL_CTX_free(ctx_);
  }

  std::string alpn() const {
    const unsigned char* data = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(ssl_, &data, &len);
    return std::string(reinterpret_cast<const char*>(data), len);
  }

  /// The local port: the server sees it in Request::remote.
  int local_port() const {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    return ntohs(addr.sin_port);
  }

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const int n = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
      if (n <= 0)
        throw std::runtime_error("raw client: write failed");
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  /// Everything up to and including `marker`; throws when the stream ends or stalls first.
  std::string read_until(std::string_view marker) {
    std::size_t at;
    while ((at = buffer_.find(marker)) == std::string::npos) {
      if (fill() != Read::Data)
        throw std::runtime_error(fmt::format("raw client: no {:?} in {:?}", marker, buffer_));
    }
    std::string out = buffer_.substr(0, at + marker.size());
    buffer_.erase(0, at + marker.size());
    return out;
  }

  std::string read_exactly(std::size_t n) {
    while (buffer_.size() < n) {
      if (fill() != Read::Data)
        throw std::runtime_error("raw client: the stream ended early");
    }
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return out;
  }

  RawResponse read_response(bool head_request = false) {
    RawResponse response;
    const std::string head = read_until("\r\n\r\n");
    response.status = std::stoi(head.substr(9, 3));
    std::size_t pos = head.find("\r\n") + 2;
    while (pos < head.size() - 2) {
      const std::size_t eol = head.find("\r\n", pos);
      const std::string line = head.substr(pos, eol - pos);
      const std::size_t colon = line.find(':');
      response.headers[to_lower(line.substr(0, colon))] = std::string(trim(line.substr(colon + 1)));
      pos = eol + 2;
    }
    if (head_request || response.status < 200 || response.status == 204)
      return response;
    if (auto cl = response.headers.find("content-length"); cl != response.headers.end()) {
      response.body = read_exactly(std::stoul(cl->second));
    } else if (response.headers["transfer-encoding"] == "chunked") {
      while (true) {
        const std::size_t size = std::stoul(read_until("\r\n"), nullptr, 16);
        if (size == 0)
          break;
        response.body += read_exactly(size);
        read_exactly(2);
      }
      read_until("\r\n");
    } else {
      while (fill() == Read::Data) {
      }
      response.body = std::exchange(buffer_, {});
    }
    return response;
  }

  /// True when the server closes the connection within `timeout` (bytes before are kept).
  bool closed_within(std::chrono::milliseconds timeout) {
    set_read_timeout(timeout);
    Read r;
    while ((r = fill()) == Read::Data) {
    }
    set_read_timeout(kWait);
    return r == Read::Closed;
  }

 private:
  enum class Read { Data, Closed, TimedOut };

  Read fill() {
    char buf[16384];
    ERR_clear_error();
    const int n = SSL_read(ssl_, buf, sizeof buf);
    if (n > 0) {
      buffer_.append(buf, static_cast<std::size_t>(n));
      return Read::Data;
    }
    return SSL_get_error(ssl_, n) == SSL_ERROR_WANT_READ ? Read::TimedOut : Read::Closed;
  }

  void set_read_timeout(std::chrono::milliseconds timeout) {
    const timeval tv{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
                     .tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  std::string buffer_;
};

/// A handler that echoes method, path and body, and counts its calls.
struct EchoHandler {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);

  void operator()(const Request& req, ResponseWriter& w) const {
    ++*calls;
    w.respond(200, "text/plain", req.method + " " + req.path + " " + req.body);
  }
};

// --- Requests through the project's client --------------------------------------------------

TEST(HttpsServerTest, AnswersGetAndPostOnOneKeptAliveConnection) {
  Recorder recorder;
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    recorder.add(req);
    if (req.method == "GET" && req.path == "/version") {
      w.respond(200, "application/json", R"({"major":"1","minor":"30","gitVersion":"v1.30.0"})");
    } else if (req.method == "POST") {
      w.respond(201, "application/json", req.body);
    } else {
      w.respond(404, "text/plain", "no");
    }
  });
  server.start();
  auto client = make_client(client_config(server));

  EXPECT_EQ(client->server_version()["gitVersion"], "v1.30.0");
  // Large enough to arrive in many TLS records.
  const json configmap = {{"apiVersion", "v1"},
                          {"kind", "ConfigMap"},
                          {"metadata", {{"name", "big"}, {"namespace", "default"}}},
                          {"data", {{"blob", std::string(std::size_t{300} * 1024, 'x')}}}};
  EXPECT_EQ(client->create(kube::resources::configmaps(), "default", configmap), configmap);
  EXPECT_EQ(client->server_version()["minor"], "30");

  const auto requests = recorder.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].method, "POST");
  EXPECT_EQ(requests[1].path, "/api/v1/namespaces/default/configmaps");
  EXPECT_EQ(json::parse(requests[1].body), configmap);
  EXPECT_EQ(requests[1].header("content-type"), "application/json");
  EXPECT_THAT(requests[0].remote, HasSubstr("127.0.0.1:"));
  EXPECT_EQ(requests[0].remote, requests[1].remote) << "keep-alive: one connection";
  EXPECT_EQ(requests[1].remote, requests[2].remote);
  EXPECT_EQ(server.open_connections(), 1u);
}

TEST(HttpsServerTest, NegotiatesOnlyHttp11) {
  HttpsServer server(test_config(), EchoHandler{});
  server.start();

  kube::HttpTransport transport(client_config(server));
  kube::HttpRequest request;
  request.path = "/version";
  const kube::HttpResponse response = transport.send(request, {});
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.http_version, 11) << "libcurl must not be offered h2";

  EXPECT_EQ(RawClient(server.port(), "\x02h2\x08http/1.1").alpn(), "http/1.1");
  RawClient h2_only(server.port(), "\x02h2");
  EXPECT_EQ(h2_only.alpn(), "");
  h2_only.send("GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(h2_only.read_response().body, "GET /x ");
}

TEST(HttpsServerTest, SeesTheClientCertificateSubject) {
  Recorder recorder;
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    recorder.add(req);
    w.respond(200, "application/json", "{}");
  });
  server.start();
  const CertifiedKey alice =
      issue_certificate(TestPki::shared().ca, {.common_name = "alice",
                                               .organizations = {"team-a", "system:authenticated"},
                                               .client_auth = true});
  kube::RestConfig config = client_config(server);
  config.auth.client_cert_pem = alice.cert_pem;
  config.auth.client_key_pem = alice.key_pem;
  make_client(config)->server_version();
  make_client(client_config(server))->server_version();

  const auto requests = recorder.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_TRUE(requests[0].peer.present);
  EXPECT_EQ(requests[0].peer.common_name, "alice");
  EXPECT_THAT(requests[0].peer.organizations, ElementsAre("team-a", "system:authenticated"));
  EXPECT_FALSE(requests[1].peer.present) << "no certificate presented";
  EXPECT_EQ(requests[1].peer.common_name, "");
}

TEST(HttpsServerTest, RefusesACertificateFromAnotherCa) {
  std::mutex mu;
  std::vector<std::string> log;
  HttpsServerConfig config = test_config();
  config.error_log = [&](std::string_view line) {
    std::lock_guard lock(mu);
    log.emplace_back(line);
  };
  EchoHandler handler;
  HttpsServer server(config, handler);
  server.start();
  const CertifiedKey other_ca = make_certificate_authority("someone-else");
  const CertifiedKey mallory =
      issue_certificate(other_ca, {.common_name = "mallory", .client_auth = true});
  kube::RestConfig client = client_config(server);
  client.auth.client_cert_pem = mallory.cert_pem;
  client.auth.client_key_pem = mallory.key_pem;

  const Error e = expect_error([&] { make_client(client)->server_version(); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection) << e.what();
  EXPECT_EQ(*handler.calls, 0);
  // Under TLS 1.3 the client may see the alert before the server has logged its side.
  const auto deadline = SteadyClock::now() + kWait;
  std::unique_lock lock(mu);
  while (log.empty() && SteadyClock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    lock.lock();
  }
  ASSERT_FALSE(log.empty());
  EXPECT_THAT(log.front(), HasSubstr("TLS handshake with 127.0.0.1:"));
  EXPECT_THAT(log.front(), HasSubstr("certificate verify failed"));
}

TEST(HttpsServerTest, RepeatedHeadersAndQueryParametersReachTheHandler) {
  Recorder recorder;
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    recorder.add(req);
    w.respond(200, "application/json",
              R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},)"
              R"("items":[]})");
  });
  server.start();
  kube::RestConfig config = client_config(server);
  config.auth.impersonate_user = "bob";
  config.auth.impersonate_groups = {"devs", "system:authenticated"};
  make_client(config)->list(
      kube::resources::pods(), "team-a",
      {.label_selector = "app in (a,b),tier!=db", .field_selector = "status.phase=Running"});

  const auto requests = recorder.requests();
  ASSERT_EQ(requests.size(), 1u);
  const Request& req = requests[0];
  EXPECT_EQ(req.path, "/api/v1/namespaces/team-a/pods");
  EXPECT_EQ(req.param("labelSelector"), "app in (a,b),tier!=db");
  EXPECT_EQ(req.param("fieldSelector"), "status.phase=Running");
  EXPECT_EQ(req.param("absent"), "");
  EXPECT_EQ(req.header("impersonate-user"), "bob");
  EXPECT_THAT(req.header_values("impersonate-group"), ElementsAre("devs", "system:authenticated"));
  EXPECT_EQ(req.header("impersonate-group"), "devs, system:authenticated");
}

TEST(HttpsServerTest, HandlerFailuresBecomeInternalErrorStatuses) {
  HttpsServer server(test_config(), [](const Request& req, ResponseWriter& w) {
    if (req.path.ends_with("/throws"))
      throw std::runtime_error("the disk is on fire");
    if (req.path.ends_with("/silent"))
      return;
    w.respond(200, "application/json", R"({"kind":"Pod"})");
  });
  server.start();
  auto client = make_client(client_config(server));

  const Error thrown =
      expect_error([&] { client->get(kube::resources::pods(), "default", "throws"); });
  EXPECT_EQ(thrown.kind(), ErrorKind::ServerError);
  EXPECT_EQ(thrown.http_code(), 500);
  EXPECT_EQ(thrown.reason(), "InternalError");
  EXPECT_THAT(thrown.message(), HasSubstr("the disk is on fire"));
  EXPECT_EQ(thrown.status()["kind"], "Status");
  EXPECT_EQ(thrown.status()["code"], 500);

  const Error silent =
      expect_error([&] { client->get(kube::resources::pods(), "default", "silent"); });
  EXPECT_EQ(silent.http_code(), 500);
  EXPECT_THAT(silent.message(),
              HasSubstr("no response to GET /api/v1/namespaces/default/pods/silent"));

  EXPECT_EQ(client->get(kube::resources::pods(), "default", "fine")["kind"], "Pod")
      << "the connection survives a failed handler";
}

TEST(HttpsServerTest, StartFailsClearlyOnABusyPortOrABadKey) {
  HttpsServer first(test_config(), EchoHandler{});
  first.start();
  HttpsServerConfig same_port = test_config();
  same_port.port = first.port();
  HttpsServer second(same_port, EchoHandler{});
  const Error busy = expect_error([&] { second.start(); });
  EXPECT_EQ(busy.kind(), ErrorKind::Config);
  EXPECT_THAT(busy.message(),
              HasSubstr(fmt::format("cannot listen on 127.0.0.1:{}: Address already in use",
                                    first.port())));

  HttpsServerConfig wrong_key = test_config();
  wrong_key.key_pem = TestPki::shared().client.key_pem;
  HttpsServer third(wrong_key, EchoHandler{});
  const Error mismatch = expect_error([&] { third.start(); });
  EXPECT_EQ(mismatch.kind(), ErrorKind::Config);
  EXPECT_THAT(mismatch.message(), HasSubstr("does not match the certificate"));
}

// --- Streaming ----------------------------------------------------------------------------------

TEST(HttpsServerTest, StreamsChunksToAWatchAsTheyAreWritten) {
  std::promise<void> first_seen;
  const std::shared_future<void> first_seen_future = first_seen.get_future().share();
  std::atomic<bool> seen_before_end{false};
  Recorder recorder;
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    recorder.add(req);
    if (req.param("watch") != "true") {
      w.respond(200, "application/json", R"({"kind":"Pod"})");
      return;
    }
    w.begin_stream(200, "application/json");
    ASSERT_TRUE(w.write_chunk(watch_line("ADDED", "a", 1)));
    // The client must have decoded the first event while the stream is still open.
    seen_before_end = first_seen_future.wait_for(kWait) == std::future_status::ready;
    const std::string second = watch_line("MODIFIED", "a", 2);
    ASSERT_TRUE(w.write_chunk(second.substr(0, 10)));  // an event split across chunks
    ASSERT_TRUE(w.write_chunk(second.substr(10)));
    w.end_stream();
  });
  server.start();
  auto client = make_client(client_config(server));

  std::vector<std::string> seen;
  const kube::WatchResult result = client->watch(
      kube::resources::pods(), "default", {.timeout_seconds = 30}, [&](const kube::WatchEvent& e) {
        seen.push_back(std::string(kube::to_string(e.type)) + " " +
                       e.object["metadata"]["resourceVersion"].get<std::string>());
        if (seen.size() == 1)
          first_seen.set_value();
        return true;
      });
  EXPECT_TRUE(seen_before_end) << "the first event did not arrive before the stream ended";
  EXPECT_THAT(seen, ElementsAre("ADDED 1", "MODIFIED 2"));
  EXPECT_EQ(result.resource_version, "2");

  // The next stream goes over the same connection (the client sends other requests over
  // connections of their own).
  client->watch(kube::resources::pods(), "default", {.timeout_seconds = 30},
                [](const kube::WatchEvent&) { return true; });
  const auto requests = recorder.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].remote, requests[1].remote) << "the connection outlives a finished stream";
}

TEST(HttpsServerTest, WriteChunkFailsSoonAfterTheClientLeaves) {
  std::promise<SteadyClock::time_point> failed_at;
  std::atomic<int> writes{0};
  HttpsServer server(test_config(), [&](const Request&, ResponseWriter& w) {
    w.begin_stream(200, "application/json");
    const auto give_up = SteadyClock::now() + std::chrono::seconds(10);
    while (SteadyClock::now() < give_up) {
      if (!w.write_chunk(watch_line("ADDED", "p", ++writes))) {
        EXPECT_FALSE(w.client_connected());
        failed_at.set_value(SteadyClock::now());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  server.start();
  auto client = make_client(client_config(server));

  client->watch(kube::resources::pods(), "default", {.timeout_seconds = 30},
                [](const kube::WatchEvent&) { return false; });
  const auto left_at = SteadyClock::now();
  auto future = failed_at.get_future();
  ASSERT_EQ(future.wait_for(kWait), std::future_status::ready)
      << "write_chunk kept succeeding after the client left";
  EXPECT_LE(std::chrono::duration<double>(future.get() - left_at).count(), 1.0);
}

TEST(HttpsServerTest, ClientConnectedTurnsFalseWhenTheClientHangsUp) {
  std::promise<void> started;
  std::promise<SteadyClock::time_point> noticed;
  HttpsServer server(test_config(), [&](const Request&, ResponseWriter& w) {
    w.begin_stream(200, "text/plain");
    started.set_value();
    // A handler waiting for events, not writing: it polls instead.
    const auto give_up = SteadyClock::now() + std::chrono::seconds(10);
    while (w.client_connected() && SteadyClock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    noticed.set_value(SteadyClock::now());
  });
  server.start();
  SteadyClock::time_point hung_up;
  {
    RawClient raw(server.port());
    raw.send("GET /logs HTTP/1.1\r\nHost: a\r\n\r\n");
    ASSERT_EQ(started.get_future().wait_for(kWait), std::future_status::ready);
    hung_up = SteadyClock::now();
  }
  auto future = noticed.get_future();
  ASSERT_EQ(future.wait_for(kWait), std::future_status::ready);
  EXPECT_LE(std::chrono::duration<double>(future.get() - hung_up).count(), 1.0);
}

TEST(HttpsServerTest, WritingToAVanishedClientDoesNotRaiseSigpipe) {
  std::atomic<int> failed_writes{0};
  HttpsServer server(test_config(), [&](const Request&, ResponseWriter& w) {
    auto stream = w.upgrade({{"Upgrade", "echo"}, {"Connection", "Upgrade"}});
    const auto give_up = SteadyClock::now() + kWait;
    while (w.client_connected() && SteadyClock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Writes that do not look first: the first ones meet a reset, later ones EPIPE.
    for (int i = 0; i < 20; ++i) {
      try {
        stream->write_all(std::string(std::size_t{64} * 1024, 'x'));
      } catch (const Error&) {
        ++failed_writes;
      }
    }
  });
  server.start();
  auto raw = std::make_unique<RawClient>(server.port());
  // SIGPIPE's default action ends the process; the server must not rely on it being ignored.
  const auto previous = std::signal(SIGPIPE, SIG_DFL);
  raw->send("GET /raw HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n");
  raw->read_until("\r\n\r\n");
  raw.reset();
  const auto deadline = SteadyClock::now() + kWait;
  while (server.open_connections() > 0 && SteadyClock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.open_connections(), 0u);
  EXPECT_GE(failed_writes, 18);
  std::signal(SIGPIPE, previous);
}

TEST(HttpsServerTest, ManyLongStreamsDoNotBlockOtherRequestsAndStopEndsThem) {
  constexpr int kStreams = 60;
  std::atomic<int> streaming{0}, ended_by_stop{0};
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    if (req.param("watch") != "true") {
      w.respond(200, "application/json", R"({"gitVersion":"v1.30.0"})");
      return;
    }
    w.begin_stream(200, "application/json");
    ++streaming;
    while (w.write_chunk(watch_line("BOOKMARK", "", 1)))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (w.stop_token().stop_requested())
      ++ended_by_stop;
  });
  server.start();
  auto client = make_client(client_config(server));

  std::vector<std::thread> watchers;
  watchers.reserve(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    watchers.emplace_back([&] {
      try {
        client->watch(kube::resources::pods(), "default", {.timeout_seconds = 60},
                      [](const kube::WatchEvent&) { return true; });
      } catch (const Error&) {
        // The server going away mid-stream is what this test does.
      }
    });
  }
  const auto deadline = SteadyClock::now() + std::chrono::seconds(20);
  while (streaming < kStreams && SteadyClock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(streaming, kStreams);
  EXPECT_EQ(server.open_connections(), static_cast<std::size_t>(kStreams));

  const auto asked = SteadyClock::now();
  EXPECT_EQ(client->server_version()["gitVersion"], "v1.30.0");
  EXPECT_LT(seconds_since(asked), 1.0) << "a request waited behind the streams";

  const auto stopping = SteadyClock::now();
  server.stop();
  EXPECT_LT(seconds_since(stopping), 2.0);
  EXPECT_EQ(ended_by_stop, kStreams);
  EXPECT_EQ(server.open_connections(), 0u);
  for (auto& t : watchers)
    t.join();
}

TEST(HttpsServerTest, StopWakesIdleAndUpgradedConnections) {
  std::promise<void> upgraded;
  std::atomic<bool> read_ended{false};
  HttpsServer server(test_config(), [&](const Request&, ResponseWriter& w) {
    auto stream = w.upgrade({{"Upgrade", "echo"}, {"Connection", "Upgrade"}});
    upgraded.set_value();
    char buf[16];
    try {
      while (stream->read_some(buf, sizeof buf) > 0) {
      }
    } catch (const Error&) {
    }
    read_ended = true;
  });
  server.start();
  RawClient idle(server.port());  // connected, never sends a request
  RawClient silent(server.port());
  silent.send("GET /raw HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n");
  ASSERT_EQ(upgraded.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(server.open_connections(), 2u);

  const auto stopping = SteadyClock::now();
  server.stop();
  EXPECT_LT(seconds_since(stopping), 2.0) << "stop() waited for the idle timeout";
  EXPECT_TRUE(read_ended);
  EXPECT_TRUE(idle.closed_within(kWait));
  EXPECT_TRUE(silent.closed_within(kWait));
}

// --- Upgrade ------------------------------------------------------------------------------------

/// The server end of a WebSocket over an upgraded stream.
class ServerSocket {
 public:
  explicit ServerSocket(kube::ws::ByteStream& stream)
      : stream_(stream),
        decoder_({.max_payload = kube::ws::kDefaultMaxPayload, .expect_masked = true}) {}

  void send(kube::ws::Opcode opcode, std::string_view payload) {
    stream_.write_all(kube::ws::encode_frame({true, opcode, std::string(payload)}, std::nullopt));
  }

  std::optional<kube::ws::Message> receive() {
    char buf[4096];
    for (;;) {
      while (auto frame = decoder_.next()) {
        if (auto message = reader_.push(std::move(*frame)))
          return message;
      }
      const std::size_t n = stream_.read_some(buf, sizeof buf);
      if (n == 0)
        return std::nullopt;
      decoder_.feed(std::string_view(buf, n));
    }
  }

 private:
  kube::ws::ByteStream& stream_;
  kube::ws::FrameDecoder decoder_;
  kube::ws::MessageReader reader_;
};

TEST(HttpsServerTest, UpgradesPodsExecToAWebSocket) {
  Recorder recorder;
  std::promise<bool> client_closed;  // set when the handler ends
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    recorder.add(req);
    if (to_lower(req.header("upgrade")) != "websocket") {
      w.respond(400, "text/plain", "upgrade required");
      return;
    }
    auto stream = w.upgrade(
        {{"Upgrade", "websocket"},
         {"Connection", "Upgrade"},
         {"Sec-WebSocket-Accept", kube::ws::websocket_accept_key(req.header("sec-websocket-key"))},
         {"Sec-WebSocket-Protocol", std::string(kube::kExecProtocolV4)}});
    EXPECT_TRUE(w.responded());
    ServerSocket socket(*stream);
    const auto stdin_message = socket.receive();
    ASSERT_TRUE(stdin_message);
    ASSERT_EQ(stdin_message->payload.substr(0, 1), std::string(1, '\0'));  // channel 0
    std::string command;
    for (auto [it, end] = req.params.equal_range("command"); it != end; ++it)
      command += (command.empty() ? "" : " ") + it->second;
    socket.send(kube::ws::Opcode::Binary,
                kube::encode_channel(kube::ExecChannel::Stdout,
                                     command + " read " + stdin_message->payload.substr(1)));
    socket.send(kube::ws::Opcode::Binary,
                kube::encode_channel(kube::ExecChannel::Error, R"({"status":"Success"})"));
    bool closed = false;
    while (auto message = socket.receive()) {
      if (message->opcode == kube::ws::Opcode::Close) {
        closed = true;
        socket.send(kube::ws::Opcode::Close, kube::ws::encode_close_payload(1000, ""));
        break;
      }
    }
    client_closed.set_value(closed);
  });
  server.start();
  auto client = make_client(client_config(server));

  const kube::ExecOutcome outcome =
      client->exec("default", "trainer-0",
                   {.container = "main", .command = {"cat", "-n"}, .stdin_data = "ping"});
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(outcome.stdout_data, "cat -n read ping");
  auto closed = client_closed.get_future();
  ASSERT_EQ(closed.wait_for(kWait), std::future_status::ready);
  EXPECT_TRUE(closed.get()) << "the client's Close frame reached the handler";
  const auto requests = recorder.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path, "/api/v1/namespaces/default/pods/trainer-0/exec");
  EXPECT_EQ(requests[0].param("container"), "main");
}

TEST(HttpsServerTest, UpgradedStreamFirstReturnsBytesSentWithTheRequest) {
  HttpsServer server(test_config(), [](const Request&, ResponseWriter& w) {
    auto stream = w.upgrade({{"Upgrade", "echo"}, {"Connection", "Upgrade"}});
    for (int round = 0; round < 2; ++round) {
      char buf[64];
      const std::size_t n = stream->read_some(buf, sizeof buf);
      stream->write_all("got:" + std::string(buf, n) + ";");
    }
  });
  server.start();
  RawClient raw(server.port());
  // The first bytes of the new protocol ride in the same TLS record as the request.
  raw.send("GET /raw HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nearly");
  const std::string head = raw.read_until("\r\n\r\n");
  EXPECT_THAT(head, ::testing::StartsWith("HTTP/1.1 101 Switching Protocols\r\n"));
  EXPECT_THAT(head, HasSubstr("\r\nUpgrade: echo\r\n"));
  EXPECT_EQ(raw.read_until(";"), "got:early;");
  raw.send("late");
  EXPECT_EQ(raw.read_until(";"), "got:late;");
  EXPECT_TRUE(raw.closed_within(kWait)) << "the connection ends with the handler";
}

// --- Protocol details over a raw socket -------------------------------------------------------

TEST(HttpsServerTest, ReadsChunkedBodiesAndPipelinedRequests) {
  EchoHandler handler;
  HttpsServer server(test_config(), handler);
  server.start();
  RawClient raw(server.port());
  raw.send(
      "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\nWiki\r\n5;note=x\r\npedia\r\n0\r\nX-Trailer: y\r\n\r\n"
      "\r\nGET /second?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  const RawResponse first = raw.read_response();
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "POST /upload Wikipedia");
  EXPECT_EQ(first.headers.count("connection"), 0u);
  EXPECT_EQ(raw.read_response().body, "GET /second ");
  EXPECT_EQ(*handler.calls, 2);
  EXPECT_FALSE(raw.closed_within(std::chrono::milliseconds(200))) << "kept alive";
}

TEST(HttpsServerTest, AnswersExpectContinueBeforeTheBodyIsSent) {
  HttpsServerConfig config = test_config();
  config.max_body = 100;
  EchoHandler handler;
  HttpsServer server(config, handler);
  server.start();

  RawClient raw(server.port());
  raw.send("PUT /obj HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(raw.read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(*handler.calls, 0);
  raw.send("hello");
  EXPECT_EQ(raw.read_response().body, "PUT /obj hello");

  // Too large: refused at once, without inviting the body.
  raw.send("PUT /obj HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 101\r\n\r\n");
  const RawResponse refused = raw.read_response();
  EXPECT_EQ(refused.status, 413);
  EXPECT_EQ(json::parse(refused.body)["reason"], "RequestEntityTooLarge");
  EXPECT_TRUE(raw.closed_within(kWait));
  EXPECT_EQ(*handler.calls, 1);
}

TEST(HttpsServerTest, RefusesOversizedBodiesWith413) {
  HttpsServerConfig config = test_config();
  config.max_body = 1024;
  EchoHandler handler;
  HttpsServer server(config, handler);
  server.start();

  RawClient by_length(server.port());
  by_length.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1025\r\n\r\n" +
                 std::string(1025, 'x'));
  const RawResponse response = by_length.read_response();
  EXPECT_EQ(response.status, 413);
  EXPECT_EQ(response.headers.at("connection"), "close");
  const json status = json::parse(response.body);
  EXPECT_EQ(status["kind"], "Status");
  EXPECT_EQ(status["code"], 413);
  EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("over the limit of 1024"));
  EXPECT_TRUE(by_length.closed_within(kWait));

  RawClient chunked(server.port());
  chunked.send(
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "400\r\n" +
      std::string(1024, 'x') + "\r\n1\r\nx\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.read_response().status, 413);
  EXPECT_TRUE(chunked.closed_within(kWait));

  RawClient at_limit(server.port());
  at_limit.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1024\r\n\r\n" +
                std::string(1024, 'x'));
  EXPECT_EQ(at_limit.read_response().status, 200);
  EXPECT_EQ(*handler.calls, 1);
}

TEST(HttpsServerTest, RefusesAnOversizedHeadWith431) {
  EchoHandler handler;
  HttpsServer server(test_config(), handler);
  server.start();
  RawClient raw(server.port());
  raw.send("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(std::size_t{70} * 1024, 'a') +
           "\r\n\r\n");
  const RawResponse response = raw.read_response();
  EXPECT_EQ(response.status, 431);
  EXPECT_EQ(json::parse(response.body)["code"], 431);
  EXPECT_TRUE(raw.closed_within(kWait));
  EXPECT_EQ(*handler.calls, 0);

  RawClient fine(server.port());
  fine.send("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(std::size_t{60} * 1024, 'a') +
            "\r\n\r\n");
  EXPECT_EQ(fine.read_response().status, 200);
}

TEST(HttpsServerTest, RefusesMalformedRequestsWith400AndCloses) {
  const std::vector<std::string> malformed = {
      "GET /\r\n\r\n",
      "GET / HTTP/1.1 extra\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",  // no Host
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nNo colon here\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
      "GET relative HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTX/1.1\r\nHost: a\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12abc\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
  };
  EchoHandler handler;
  HttpsServer server(test_config(), handler);
  server.start();
  for (const std::string& request : malformed) {
    SCOPED_TRACE(request);
    RawClient raw(server.port());
    raw.send(request);
    const RawResponse response = raw.read_response();
    EXPECT_EQ(response.status, 400);
    EXPECT_EQ(json::parse(response.body)["reason"], "BadRequest");
    EXPECT_TRUE(raw.closed_within(kWait));
  }
  EXPECT_EQ(*handler.calls, 0);

  RawClient http2(server.port());
  http2.send("GET / HTTP/2.0\r\nHost: a\r\n\r\n");
  EXPECT_EQ(http2.read_response().status, 505);
  RawClient gzip(server.port());
  gzip.send("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n");
  EXPECT_EQ(gzip.read_response().status, 501);
}

TEST(HttpsServerTest, HonoursConnectionCloseAndClosesAfterHttp10) {
  HttpsServer server(test_config(), EchoHandler{});
  server.start();

  RawClient close(server.port());
  close.send("GET /a HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n");
  const RawResponse closing = close.read_response();
  EXPECT_EQ(closing.body, "GET /a ");
  EXPECT_EQ(closing.headers.at("connection"), "close");
  EXPECT_TRUE(close.closed_within(kWait));

  RawClient old(server.port());
  old.send("GET /b HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.read_response().body, "GET /b ");
  EXPECT_TRUE(old.closed_within(kWait));

  RawClient kept(server.port());
  kept.send("GET /c HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(kept.read_response().body, "GET /c ");
  EXPECT_FALSE(kept.closed_within(std::chrono::milliseconds(300)));
}

TEST(HttpsServerTest, HeadResponsesCarryNoBody) {
  HttpsServer server(test_config(), [](const Request& req, ResponseWriter& w) {
    w.respond(200, "text/plain", "hello " + req.method);
  });
  server.start();
  RawClient raw(server.port());
  raw.send("HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
  const RawResponse head = raw.read_response(/*head_request=*/true);
  EXPECT_EQ(head.headers.at("content-length"), "10");
  EXPECT_EQ(raw.read_response().body, "hello GET") << "no body bytes after the HEAD response";
}

TEST(HttpsServerTest, RemoteNamesTheClientsAddress) {
  Recorder recorder;
  HttpsServer server(test_config(), [&](const Request& req, ResponseWriter& w) {
    recorder.add(req);
    w.respond(204, "", "");
  });
  server.start();
  RawClient raw(server.port());
  raw.send("DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n");
  const RawResponse response = raw.read_response();
  EXPECT_EQ(response.status, 204);
  EXPECT_EQ(response.headers.count("content-length"), 0u);
  ASSERT_EQ(recorder.requests().size(), 1u);
  EXPECT_EQ(recorder.requests()[0].remote, fmt::format("127.0.0.1:{}", raw.local_port()));
}

TEST(HttpsServerTest, ClosesIdleConnections) {
  HttpsServerConfig config = test_config();
  config.idle_timeout = std::chrono::milliseconds(300);
  HttpsServer server(config, EchoHandler{});
  server.start();
  RawClient raw(server.port());
  raw.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(raw.read_response().status, 200);
  const auto idle_since = SteadyClock::now();
  EXPECT_TRUE(raw.closed_within(kWait));
  EXPECT_GE(seconds_since(idle_since), 0.2);
  const auto deadline = SteadyClock::now() + kWait;
  while (server.open_connections() > 0 && SteadyClock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.open_connections(), 0u);
}

// --- Query strings ------------------------------------------------------------------------------

TEST(QueryTest, DecodesPercentEscapesAndPlus) {
  EXPECT_EQ(percent_decode("a%20b+c%2Fd"), "a b+c/d");
  EXPECT_EQ(percent_decode("a+b", /*plus_as_space=*/true), "a b");
  EXPECT_EQ(percent_decode("100%"), "100%");
  EXPECT_EQ(percent_decode("%zz%4"), "%zz%4");
  EXPECT_EQ(percent_decode("%e2%9c%93"), "\xe2\x9c\x93");
}

TEST(QueryTest, SplitsParametersKeepingRepeats) {
  const auto params = parse_query("command=sh&command=-c&watch&&label%3D=a%3Db+c&empty=");
  EXPECT_EQ(params.count("command"), 2u);
  auto [first, last] = params.equal_range("command");
  EXPECT_EQ(first->second, "sh");
  EXPECT_EQ(std::next(first)->second, "-c");
  EXPECT_EQ(params.find("watch")->second, "");
  EXPECT_EQ(params.find("label=")->second, "a=b c");
  EXPECT_EQ(params.find("empty")->second, "");
  EXPECT_EQ(params.size(), 5u);
}

}  // namespace
}  // namespace trainctl::sandbox
