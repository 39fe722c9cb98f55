// The HTTPS transport under the client: connection reuse and HTTP/2 negotiation.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "error.h"
#include "kube/client.h"
#include "kube/direct_transport.h"
#include "kube/http.h"
#include "tests/support/expect_error.h"
#include "tests/support/https_test_server.h"
#include "tests/support/scripted_server.h"
#include "tests/support/transports.h"
#include "tls_socket.h"

namespace trainctl::kube {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

/// What both transports do alike.
class BothTransportsTest : public testing::TransportTest {};
INSTANTIATE_TEST_SUITE_P(Transports, BothTransportsTest, testing::kBothTransports,
                         testing::transport_name);

TEST_P(BothTransportsTest, RequestsReuseOneKeepAliveConnection) {
  testing::HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"gitVersion":"v1"})", "application/json");
  });
  server.start();
  Client client(rest_config_for(server));
  for (int i = 0; i < 5; ++i)
    client.server_version();
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  for (const auto& r : reqs)
    EXPECT_EQ(r.remote_port, reqs[0].remote_port);
}

TEST_P(BothTransportsTest, Http11ServerIsSpokenHttp11) {
  testing::HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  server.start();
  HttpTransport transport(rest_config_for(server));
  HttpRequest request;
  request.path = "/version";
  EXPECT_EQ(transport.send(request, {}).http_version, 11);
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool accepting(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

/// nghttpd (Debian's nghttp2-server, installed by the bootstrap) serving a directory over h2;
/// its verbose log (one `[id=N]` per connection) is kept in a file.
class Http2Server {
 public:
  /// Throws when nghttpd is not installed, which fails the test that starts it.
  Http2Server() {
    if (std::system("command -v nghttpd >/dev/null") != 0)
      throw std::runtime_error("nghttpd missing: run packaging/bootstrap-debian.sh");
    char tmpl[] = "/tmp/trainctl-h2-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::filesystem::create_directory(dir_ / "htdocs");
    std::ofstream(dir_ / "htdocs" / "version") << R"({"gitVersion":"v1.31.0-h2"})";
    std::ofstream(dir_ / "key.pem") << testing::TestPki::shared().server.key_pem;
    std::ofstream(dir_ / "cert.pem") << testing::TestPki::shared().server.cert_pem;
    port_ = free_port();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_), docroot = (dir_ / "htdocs").string(),
                        key = (dir_ / "key.pem").string(), cert = (dir_ / "cert.pem").string();
      const std::string log = (dir_ / "nghttpd.log").string();
      if (std::freopen(log.c_str(), "w", stdout) == nullptr)
        ::_exit(126);
      ::execlp("nghttpd", "nghttpd", "-v", "-d", docroot.c_str(), "--address=127.0.0.1",
               port.c_str(), key.c_str(), cert.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !accepting(port_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Http2Server() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    std::filesystem::remove_all(dir_);
  }
  /// A config for this server, trusting the test CA that signed its certificate.
  RestConfig rest_config() const {
    RestConfig config;
    config.server = "https://127.0.0.1:" + std::to_string(port_);
    config.tls.ca_pem = testing::TestPki::shared().ca.cert_pem;
    return config;
  }

  /// What nghttpd has logged so far.
  std::string log() const {
    std::ifstream in(dir_ / "nghttpd.log");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST(HttpTransportTest, Http2IsUsedWhenTheServerOffersIt) {
  Http2Server server;
  const RestConfig config = server.rest_config();
  HttpTransport transport(config);
  HttpRequest request;
  request.path = "/version";
  HttpResponse response = transport.send(request, {});
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.http_version, 2);
  EXPECT_EQ(Client(config).server_version()["gitVersion"], "v1.31.0-h2");
}

TEST(HttpTransportTest, ConcurrentRequestsAreStreamsOfOneHttp2Connection) {
  Http2Server server;
  const RestConfig config = server.rest_config();
  HttpTransport transport(config);
  std::vector<int> statuses(12);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < statuses.size(); ++i) {
    threads.emplace_back([&, i] {
      HttpRequest request;
      request.path = "/version";
      const HttpResponse response = transport.send(request, {});
      statuses[i] = response.http_version == 2 ? response.status : -response.http_version;
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_THAT(statuses, ::testing::Each(200));
  // nghttpd numbers its connections ("[id=N]"; the start-up probe's took one) and logs each
  // request's HEADERS frame: all twelve must have come over one connection.
  std::istringstream log(server.log());
  std::map<std::string, int> requests_per_connection;
  for (std::string line; std::getline(log, line);) {
    if (line.find("recv HEADERS frame") != std::string::npos)
      ++requests_per_connection[line.substr(0, line.find(']') + 1)];
  }
  EXPECT_EQ(requests_per_connection.size(), 1u) << "more than one connection was opened";
  int total = 0;
  for (const auto& [connection, requests] : requests_per_connection)
    total += requests;
  EXPECT_EQ(total, 12);
}

TEST_P(BothTransportsTest, ConcurrentRequestsToAnHttp11ServerEachGetTheirAnswer) {
  testing::HttpsTestServer server;
  server.routes().Get(R"(/echo/(\d+))", [](const httplib::Request& req, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // keeps them in flight together
    res.set_content(req.matches[1].str(), "text/plain");
  });
  server.start();
  HttpTransport transport(rest_config_for(server));
  std::vector<std::string> bodies(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      HttpRequest request;
      request.path = "/echo/" + std::to_string(i);
      bodies[i] = transport.send(request, {}).body;
    });
  }
  for (auto& t : threads)
    t.join();
  for (std::size_t i = 0; i < bodies.size(); ++i)
    EXPECT_EQ(bodies[i], std::to_string(i));
  // Idle connections are reused afterwards: eight more requests, one after another, open none.
  const auto before = server.requests();
  std::set<int> ports;
  for (const auto& r : before)
    ports.insert(r.remote_port);
  for (int i = 0; i < 8; ++i) {
    HttpRequest request;
    request.path = "/echo/1";
    transport.send(request, {});
  }
  for (const auto& r : server.requests())
    EXPECT_TRUE(ports.contains(r.remote_port)) << "a new connection was opened";
}

/// A server that resumes TLS sessions, and configs for it that keep sessions in one directory.
class TlsSessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"gitVersion":"v1"})", "application/json");
    });
    server_.routes().Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // in flight meanwhile
      res.set_content("{}", "application/json");
    });
    server_.start();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  RestConfig not_keeping_sessions(Transport transport = Transport::Direct) const {
    RestConfig config = server_.rest_config();
    config.transport = transport;
    return config;
  }
  RestConfig keeping_sessions(Transport transport = Transport::Direct) const {
    RestConfig config = not_keeping_sessions(transport);
    config.tls.session_cache_dir = dir_.string();
    return config;
  }
  /// One request by a transport of its own, as one command makes it; whether it was resumed.
  bool resumed_by_a_new_process(const RestConfig& config) {
    EXPECT_EQ(Client(config).server_version()["gitVersion"], "v1");
    return server_.requests().back().tls_resumed;
  }
  std::vector<std::filesystem::path> session_files() const {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      files.push_back(entry.path());
    return files;
  }

  testing::HttpsTestServer server_;
  const std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("trainctl-tls-" + std::to_string(::getpid()));
};

TEST_F(TlsSessionsTest, TheNextTransportResumesTheSessionTheLastOneWasGiven) {
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  const auto files = session_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(std::filesystem::status(dir_).permissions(), std::filesystem::perms::owner_all);
  EXPECT_EQ(std::filesystem::status(files[0]).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  EXPECT_TRUE(resumed_by_a_new_process(keeping_sessions()));
  EXPECT_TRUE(resumed_by_a_new_process(keeping_sessions()));
  EXPECT_EQ(session_files().size(), 1u);  // replaced, no temporary file left
  // The resumption came from the file: without it a new transport shakes hands in full.
  EXPECT_FALSE(resumed_by_a_new_process(not_keeping_sessions()));
}

// libcurl makes its TLS connections with its own (shared) OpenSSL, not the one linked into
// trainctl: they keep no session between processes (ARCHITECTURE.md "Start-up").
TEST_F(TlsSessionsTest, LibcurlsConnectionsKeepNoSessionForTheNextProcess) {
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions(Transport::Multiplexed)));
  EXPECT_FALSE(std::filesystem::exists(dir_));
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions(Transport::Multiplexed)));
  // A direct transport's session is not offered by libcurl either.
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  EXPECT_EQ(session_files().size(), 1u);
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions(Transport::Multiplexed)));
  EXPECT_TRUE(resumed_by_a_new_process(keeping_sessions()));
}

// The file is read (and its session decoded) once per direct transport: its later connections
// resume the session it holds, or the newest the server gave, even with the file gone meanwhile.
TEST_F(TlsSessionsTest, AnotherConnectionOfTheSameTransportResumesWithoutReadingTheFileAgain) {
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  HttpTransport transport(keeping_sessions());
  HttpRequest version;
  version.path = "/version";
  transport.send(version, {});
  EXPECT_TRUE(server_.requests().back().tls_resumed);
  std::filesystem::remove_all(dir_);
  std::thread slow([&] {
    HttpRequest request;
    request.path = "/slow";
    transport.send(request, {});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  transport.send(version, {});  // the first connection is busy: a second one
  slow.join();
  // Requests: the first process's, this transport's first, then /version and /slow in either
  // order.
  const auto requests = server_.requests();
  ASSERT_EQ(requests.size(), 4u);
  const auto& second = requests[2].path == "/version" ? requests[2] : requests[3];
  EXPECT_EQ(second.path, "/version");
  EXPECT_NE(second.remote_port, requests[1].remote_port) << "no second connection was opened";
  EXPECT_TRUE(second.tls_resumed);
}

TEST_F(TlsSessionsTest, AnotherCaBundleOrClientCertificateIsAFullHandshake) {
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  RestConfig other_ca = keeping_sessions();
  other_ca.tls.ca_pem += "\n";  // the same CA, but not the same bundle
  EXPECT_FALSE(resumed_by_a_new_process(other_ca));
  RestConfig as_client = keeping_sessions();
  as_client.auth.client_cert_pem = testing::TestPki::shared().client.cert_pem;
  as_client.auth.client_key_pem = testing::TestPki::shared().client.key_pem;
  EXPECT_FALSE(resumed_by_a_new_process(as_client));
  EXPECT_EQ(session_files().size(), 3u);
  EXPECT_TRUE(resumed_by_a_new_process(as_client));
  RestConfig skipping_verification = keeping_sessions();
  skipping_verification.tls.insecure_skip_verify = true;
  skipping_verification.tls.ca_pem.clear();
  EXPECT_FALSE(resumed_by_a_new_process(skipping_verification));
  EXPECT_EQ(session_files().size(), 3u);  // a server that was not verified leaves none
}

TEST_F(TlsSessionsTest, AFileOthersMayReadOrACorruptOneIsNotResumedButTheRequestWorks) {
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  const std::filesystem::path file = session_files().at(0);
  std::filesystem::permissions(file, std::filesystem::perms::group_read,
                               std::filesystem::perm_options::add);
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  EXPECT_TRUE(resumed_by_a_new_process(keeping_sessions()));  // the request stored a private one

  std::ofstream(file, std::ios::trunc) << "not a session";
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  EXPECT_TRUE(resumed_by_a_new_process(keeping_sessions()));
}

TEST_F(TlsSessionsTest, ADirectoryThatCannotBeMadeOnlyCostsTheResumption) {
  std::ofstream(dir_.string()) << "a file where the directory would be";
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
  EXPECT_FALSE(resumed_by_a_new_process(keeping_sessions()));
}

using testing::ScriptedServer;

HttpResponse get(HttpTransport& transport, const std::string& path, const char* method = "GET") {
  HttpRequest request;
  request.method = method;
  request.path = path;
  return transport.send(request, {});
}

// The direct transport reads whatever framing HTTP/1.1 allows: a 100 Continue before the answer,
// a body that ends with the connection (which is then not kept), chunks with extensions and
// trailer fields, repeated fields joined, and a body-less 204 on a kept connection.
TEST(DirectTransportTest, ReadsEveryFramingAndKeepsOnlyConnectionsThatCanGoOn) {
  ScriptedServer server({
      {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX-Seen: 1\r\nx-seen: 2\r\n\r\nuntil "
       "the end"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=v\r\nhello\r\n"
       "6\r\n world\r\n0\r\nExpires: never\r\n\r\n",
       "HTTP/1.1 204 No Content\r\n\r\n",
       "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
  });
  HttpTransport transport(server.rest_config());
  const HttpResponse first = get(transport, "/a");
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "until the end");
  EXPECT_EQ(first.header("x-seen"), "1, 2");
  EXPECT_EQ(get(transport, "/b").body, "hello world");
  const HttpResponse empty = get(transport, "/c", "DELETE");
  EXPECT_EQ(empty.status, 204);
  EXPECT_EQ(empty.body, "");
  const HttpResponse missing = get(transport, "/d");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "not found");
  EXPECT_EQ(get(transport, "/e").body, "ok");
  EXPECT_THAT(server.requests(), ::testing::ElementsAre("0 GET /a HTTP/1.1", "1 GET /b HTTP/1.1",
                                                        "1 DELETE /c HTTP/1.1", "1 GET /d HTTP/1.1",
                                                        "2 GET /e HTTP/1.1"));
}

// A kept connection the server drops without a word (an idle timeout racing the next request): a
// read is sent again on a new connection, a write that reached the server is not (it may have
// been carried out) and fails saying so.
TEST(DirectTransportTest, AReadTheServerDroppedOnAKeptConnectionIsSentAgainButAWriteIsNot) {
  ScriptedServer server({
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst", ""},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain", ""},
  });
  HttpTransport transport(server.rest_config());
  EXPECT_EQ(get(transport, "/one").body, "first");
  EXPECT_EQ(get(transport, "/two").body, "again");
  const Error e = testing::expect_error([&] { get(transport, "/three", "POST"); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  EXPECT_THAT(e.message(), HasSubstr("POST " + server.rest_config().server +
                                     "/three: the server closed the connection before answering"));
  EXPECT_THAT(server.requests(),
              ::testing::ElementsAre("0 GET /one HTTP/1.1", "0 GET /two HTTP/1.1",
                                     "1 GET /two HTTP/1.1", "1 POST /three HTTP/1.1"));
}

/// Sends GET `paths` from a thread each, all at once; each answer's body (or "error: ...").
std::vector<std::string> get_concurrently(HttpTransport& transport,
                                          const std::vector<std::string>& paths) {
  std::vector<std::string> bodies(paths.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        bodies[i] = get(transport, paths[i]).body;
      } catch (const Error& e) {
        bodies[i] = "error: " + e.message();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  return bodies;
}

/// Waits until `server` has read `n` requests.
void await_requests(const ScriptedServer& server, std::size_t n) {
  const auto until = SteadyClock::now() + std::chrono::seconds(10);
  while (server.requests().size() < n && SteadyClock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(server.requests().size(), n);
}

/// A config for `server` whose requests give up after 5 s (a request that waits for an answer
/// the script never gives fails the test instead of hanging it).
RestConfig impatient(const ScriptedServer& server) {
  RestConfig config = server.rest_config();
  config.timeout = std::chrono::seconds(5);
  config.pipeline_depth = kCommandPipelineDepth;  // as a command's
  return config;
}

// Concurrent reads go over the connection the first opens, written one after another before any
// answer (the server answers none until it has read all three), and each caller gets its own
// answer: one TLS handshake, not three.
TEST(DirectTransportTest, ConcurrentReadsArePipelinedOnOneConnectionAndAnsweredInOrder) {
  ScriptedServer server({{"<read>", "<read>", "<read>", "ECHO", "ECHO", "ECHO"}});
  HttpTransport transport(impatient(server));
  EXPECT_THAT(get_concurrently(transport, {"/a", "/b", "/c"}),
              ::testing::ElementsAre("/a", "/b", "/c"));
  EXPECT_THAT(server.requests(),
              ::testing::UnorderedElementsAre("0 GET /a HTTP/1.1", "0 GET /b HTTP/1.1",
                                              "0 GET /c HTTP/1.1"));
}

// Without pipelining (the controller's pipeline_depth of 1) concurrent reads each have a
// connection of their own: the server here answers each only once both are in its handlers.
TEST(DirectTransportTest, WithoutPipeliningConcurrentReadsEachHaveAConnection) {
  testing::HttpsTestServer server;
  std::mutex mu;
  std::condition_variable both_in;
  int in_handlers = 0;
  server.routes().Get(R"(/(a|b))", [&](const httplib::Request& req, httplib::Response& res) {
    std::unique_lock lock(mu);
    ++in_handlers;
    both_in.notify_all();
    const bool together =
        both_in.wait_for(lock, std::chrono::seconds(5), [&] { return in_handlers == 2; });
    res.set_content(together ? req.path : "alone", "text/plain");
  });
  server.start();
  RestConfig config = server.rest_config();
  config.transport = Transport::Direct;
  ASSERT_EQ(config.pipeline_depth, 1u);
  HttpTransport transport(config);
  std::vector<std::string> bodies(2);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      HttpRequest request;
      request.path = i == 0 ? "/a" : "/b";
      bodies[i] = transport.send(request, {}).body;
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_THAT(bodies, ::testing::ElementsAre("/a", "/b"));
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_NE(requests[0].remote_port, requests[1].remote_port);
}

// The server answers the first of three pipelined reads with Connection: close, so it processed
// none of the others (RFC 9112 section 9.6): those two are sent again, each on a new connection
// (a request sent again does not join another).
TEST(DirectTransportTest, AnAnswerThatClosesThePipelineSendsTheUnansweredRequestsAgain) {
  ScriptedServer server({{"<read>", "<read>", "<read>", "ECHO close"}, {"ECHO"}, {"ECHO"}});
  HttpTransport transport(impatient(server));
  EXPECT_THAT(get_concurrently(transport, {"/a", "/b", "/c"}),
              ::testing::ElementsAre("/a", "/b", "/c"));
  std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests[0][0], '0');
  EXPECT_EQ(requests[3][0], '1');
  EXPECT_EQ(requests[4][0], '2');
  for (std::string& r : requests)
    r.erase(0, 2);  // the connection
  EXPECT_THAT(std::vector(requests.begin() + 3, requests.end()),
              ::testing::UnorderedElementsAre(requests[1], requests[2]));
}

// A malformed answer on a pipeline is a Protocol error for the request it answered; the reads
// behind it, which got no answer, are sent again on connections of their own.
TEST(DirectTransportTest, AMalformedAnswerOnAPipelineFailsItsRequestAndSendsTheOthersAgain) {
  ScriptedServer server(
      {{"<read>", "<read>", "<read>", "HTTP/1.1 abc\r\n\r\n"}, {"ECHO"}, {"ECHO"}});
  HttpTransport transport(impatient(server));
  const std::vector<std::string> paths = {"/a", "/b", "/c"};
  const std::vector<std::string> bodies = get_concurrently(transport, paths);
  int malformed = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (bodies[i] == paths[i])
      continue;
    ++malformed;
    EXPECT_EQ(bodies[i], fmt::format("error: GET {}{}: malformed response: malformed status line "
                                     "\"HTTP/1.1 abc\"",
                                     server.url(), paths[i]));
  }
  EXPECT_EQ(malformed, 1);
  EXPECT_EQ(server.requests().size(), 5u);
}

// A write joins a connection whose only request is a read; when the read's answer closes the
// connection, the write, which the server did not process, is sent again on a new one.
TEST(DirectTransportTest, AWriteBehindAnAnswerThatClosedTheConnectionIsSentAgain) {
  ScriptedServer server({{"<read>", "<read>", "ECHO close"}, {"ECHO"}});
  HttpTransport transport(impatient(server));
  std::string first;
  std::thread reader([&] { first = get(transport, "/a").body; });
  await_requests(server, 1);
  EXPECT_EQ(get(transport, "/b", "POST").body, "/b");
  reader.join();
  EXPECT_EQ(first, "/a");
  EXPECT_THAT(server.requests(), ::testing::ElementsAre("0 GET /a HTTP/1.1", "0 POST /b HTTP/1.1",
                                                        "1 POST /b HTTP/1.1"));
}

// The same connection dropped without an answer: the server may have carried the write out, so
// it is not sent again and fails saying why; the read it followed fails as on any new connection.
TEST(DirectTransportTest, AWriteOnAPipelineThatBreaksFailsWithoutBeingSentAgain) {
  ScriptedServer server({{"<read>", "<read>", ""}});
  HttpTransport transport(impatient(server));
  std::optional<Error> read_failure;
  std::thread reader([&] { read_failure = testing::expect_error([&] { get(transport, "/a"); }); });
  await_requests(server, 1);
  const Error e = testing::expect_error([&] { get(transport, "/b", "POST"); });
  reader.join();
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  EXPECT_THAT(e.message(), HasSubstr("POST " + server.rest_config().server +
                                     "/b: the connection ended before the answer to it came"));
  ASSERT_TRUE(read_failure);
  EXPECT_THAT(read_failure->message(), HasSubstr("closed the connection before answering"));
  EXPECT_THAT(server.requests(), ::testing::ElementsAre("0 GET /a HTTP/1.1", "0 POST /b HTTP/1.1"));
}

/// A socket listening on 127.0.0.1 (an ephemeral port) with `backlog`, and its address.
struct Listener {
  int fd = -1;
  TcpAddress address;
  explicit Listener(int backlog) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in in{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
    socklen_t length = sizeof in;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&in), sizeof in) != 0 ||
        ::listen(fd, backlog) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&in), &length))
      throw std::runtime_error("test listener");
    std::memcpy(&address.address, &in, sizeof in);
    address.length = sizeof in;
  }
  ~Listener() { ::close(fd); }
  int port() const {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&address.address)->sin_port);
  }
};

/// Connects to `l` until a connect goes unanswered (the accept queue is full and the kernel
/// drops the SYNs, as a dead route or a firewall does); the sockets, to close.
std::vector<int> fill_backlog(const Listener& l) {
  std::vector<int> held;
  for (int i = 0; i < 64; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    held.push_back(fd);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&l.address.address), l.address.length) == 0)
      continue;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 100) == 0)
      return held;  // unanswered
  }
  throw std::runtime_error("the test listener's backlog never filled");
}

int peer_port(int fd) {
  sockaddr_in in{};
  socklen_t length = sizeof in;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&in), &length);
  return ntohs(in.sin_port);
}

// An address that does not answer costs the stagger (200 ms), not the 30 s connect timeout: the
// next address is tried meanwhile and the first to answer is taken; one that refuses is passed
// at once; when none answers by the deadline, a Timeout naming what it connected to.
TEST(DirectTransportTest, AnAddressThatDoesNotAnswerIsPassedForTheNextAsHappyEyeballsDo) {
  const Listener silent(0);
  const std::vector<int> held = fill_backlog(silent);
  const Listener good(8);
  const auto started = SteadyClock::now();
  int fd = connect_first({silent.address, good.address}, deadline_after(std::chrono::seconds(20)),
                         "test port");
  EXPECT_EQ(peer_port(fd), good.port());
  EXPECT_LT(SteadyClock::now() - started, std::chrono::seconds(5));  // 0.2 s, not 20
  ::close(fd);

  TcpAddress refused = good.address;
  {
    const Listener gone(1);
    refused = gone.address;
  }  // closed: its port refuses
  fd = connect_first({refused, good.address}, deadline_after(std::chrono::seconds(20)), "x");
  EXPECT_EQ(peer_port(fd), good.port());
  ::close(fd);
  const Error none = testing::expect_error(
      [&] { connect_first({refused}, deadline_after(std::chrono::seconds(20)), "host port 1"); });
  EXPECT_EQ(none.kind(), ErrorKind::Connection);
  EXPECT_THAT(none.message(), HasSubstr("cannot connect to host port 1: Connection refused"));

  const Error late = testing::expect_error([&] {
    connect_first({silent.address}, deadline_after(std::chrono::milliseconds(300)), "host port 2");
  });
  EXPECT_EQ(late.kind(), ErrorKind::Timeout);
  EXPECT_THAT(late.message(), HasSubstr("timed out connecting to host port 2"));
  for (const int h : held)
    ::close(h);
}

TEST(HttpTransportTest, WarningHeadersAreReadAsClientGoReadsThem) {
  EXPECT_EQ(warning_texts(R"(299 - "unknown field \"spec.bogus\"")"),
            std::vector<std::string>{R"(unknown field "spec.bogus")"});
  // Repeated fields joined by commas, a comma inside a text, a date, another agent.
  EXPECT_EQ(
      warning_texts(R"(299 - "a, b", 299 - "c" "Sat, 25 Aug 2012 23:34:45 GMT",199 host "d")"),
      (std::vector<std::string>{"a, b", "c", "d"}));
  EXPECT_TRUE(warning_texts("").empty());
  EXPECT_TRUE(warning_texts("garbage").empty());
  EXPECT_EQ(warning_texts(R"(299 - "ok", 299 - "unterminated)"), std::vector<std::string>{"ok"});
}

// A server that takes the connection and never answers the handshake: a Timeout after the
// handshake's own limit (client-go's 10 s; shorter here), though the request has none.
TEST(DirectTransportTest, AHandshakeTheServerNeverAnswersTimesOutWithoutARequestTimeout) {
  const Listener mute(8);  // the kernel completes the TCP handshake; nobody reads
  RestConfig config;
  config.server = fmt::format("https://127.0.0.1:{}", mute.port());
  config.transport = Transport::Direct;
  config.tls.insecure_skip_verify = true;
  config.tls_handshake_timeout = std::chrono::milliseconds(300);
  ASSERT_EQ(config.timeout.count(), 0);
  HttpTransport transport(config);
  HttpRequest request;
  request.path = "/version";
  const auto started = SteadyClock::now();
  const Error e = testing::expect_error([&] { transport.send(request, {}); });
  EXPECT_EQ(e.kind(), ErrorKind::Timeout) << e.what();
  EXPECT_THAT(e.message(), HasSubstr("TLS handshake"));
  EXPECT_LT(SteadyClock::now() - started, std::chrono::seconds(5));
}

/// Starts `server` answering GET /version with {}; returns a config reaching it over the direct
/// transport.
RestConfig direct_to_version(testing::HttpsTestServer& server) {
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  server.start();
  RestConfig config = server.rest_config();
  config.transport = Transport::Direct;
  return config;
}

// A client certificate the server asks for but that cannot be given is a Config error saying
// what is wrong with it (the kubeconfig's), not OpenSSL's words for the failed handshake.
TEST(DirectTransportTest, ABrokenClientCertificateIsAConfigErrorSayingWhy) {
  testing::HttpsTestServer server(testing::HttpsTestServer::ClientCerts::Required);
  const RestConfig config = direct_to_version(server);
  const testing::TestPki& pki = testing::TestPki::shared();
  const struct {
    std::string cert, key, why;
  } cases[] = {
      {"not a certificate", pki.client.key_pem, "the client certificate holds no PEM certificate"},
      {pki.client.cert_pem, "not a key", "the client key is not a PEM private key"},
      {pki.client.cert_pem, pki.server.key_pem,
       "the client key does not match the client certificate"},
  };
  for (const auto& c : cases) {
    HttpTransport transport(config);
    HttpRequest request;
    request.path = "/version";
    const Error e = testing::expect_error(
        [&] { transport.send(request, {.client_cert_pem = c.cert, .client_key_pem = c.key}); });
    EXPECT_EQ(e.kind(), ErrorKind::Config) << c.why;
    EXPECT_EQ(e.message(), "GET " + config.server + "/version: " + c.why);
    EXPECT_THAT(e.message(), Not(HasSubstr("PRIVATE KEY")));
  }
  EXPECT_TRUE(server.requests().empty());
}

// The CAs are read on the first chain to verify (a resumed handshake verifies none): data that
// holds no certificate fails that handshake as a Config error saying so, and nothing is sent.
TEST(DirectTransportTest, CaDataWithoutACertificateIsAConfigErrorSayingWhy) {
  testing::HttpsTestServer server;
  RestConfig config = direct_to_version(server);
  config.tls.ca_pem = "not a certificate";
  HttpTransport transport(config);
  HttpRequest request;
  request.path = "/version";
  for (int attempt = 0; attempt < 2; ++attempt) {  // read once, reported on every handshake
    const Error e = testing::expect_error([&] { transport.send(request, {}); });
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_EQ(e.message(), "GET " + config.server +
                               "/version: the certificate-authority data holds no PEM certificate");
  }
  EXPECT_TRUE(server.requests().empty());
}

// A value with a line break would end its header and start another: it is refused before
// anything is sent, without showing the value (it may be a credential).
TEST(DirectTransportTest, AHeaderValueThatWouldStartAnotherHeaderIsRefused) {
  testing::HttpsTestServer server;
  const RestConfig config = direct_to_version(server);
  HttpTransport transport(config);
  HttpRequest request;
  request.path = "/version";
  const Error e = testing::expect_error([&] {
    transport.send(request, {.authorization = "Bearer secret\r\nImpersonate-User: admin"});
  });
  EXPECT_EQ(e.kind(), ErrorKind::Config);
  EXPECT_EQ(e.message(),
            "GET " + config.server +
                "/version: the Authorization header holds characters a header may not");
  EXPECT_TRUE(server.requests().empty());
}

TEST(DirectTransportTest, AMalformedAnswerIsAProtocolErrorNamingTheRequest) {
  ScriptedServer server({
      {"HTTP/1.1 abc\r\n\r\n"},
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"},
  });
  HttpTransport transport(server.rest_config());
  for (const char* why : {"malformed status line \"HTTP/1.1 abc\"", "invalid Content-Length \"-1\"",
                          "malformed chunk size", "unsupported Transfer-Encoding \"gzip\""}) {
    const Error e = testing::expect_error([&] { get(transport, "/version"); });
    EXPECT_EQ(e.kind(), ErrorKind::Protocol) << why;
    EXPECT_THAT(e.message(), HasSubstr("GET " + server.rest_config().server +
                                       "/version: malformed response: " + why));
  }
}

// A connection that cannot be opened (here: the server closes it instead of shaking hands) fails
// the requests pipelined on it as it failed the one that opened it, without each trying again:
// an unreachable server costs its timeout once, not once more for those behind.
TEST(DirectTransportTest, AConnectionThatCannotBeOpenedFailsTheRequestsOnItWithoutTryingAgain) {
  const Listener listener(8);
  std::atomic<int> accepted{0};
  std::thread server([&] {
    for (;;) {
      pollfd p{listener.fd, POLLIN, 0};
      if (::poll(&p, 1, 1500) <= 0)
        return;  // quiet for 1.5 s: done
      const int fd = ::accept(listener.fd, nullptr, nullptr);
      if (fd < 0)
        return;
      ++accepted;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all three are on it by now
      ::close(fd);
    }
  });
  RestConfig config;
  config.server = fmt::format("https://127.0.0.1:{}", listener.port());
  config.tls.ca_pem = testing::TestPki::shared().ca.cert_pem;
  config.transport = Transport::Direct;
  config.pipeline_depth = kCommandPipelineDepth;
  config.timeout = std::chrono::seconds(5);
  HttpTransport transport(config);
  const std::vector<std::string> bodies = get_concurrently(transport, {"/a", "/b", "/c"});
  server.join();
  EXPECT_EQ(accepted.load(), 1);
  for (const char* path : {"/a", "/b", "/c"}) {
    EXPECT_THAT(bodies, ::testing::Contains(::testing::StartsWith(
                            fmt::format("error: GET {}{}: TLS handshake: ", config.server, path))));
  }
}

}  // namespace
}  // namespace trainctl::kube
