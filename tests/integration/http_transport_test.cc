// The HTTPS transport under the client: connection reuse and HTTP/2 negotiation.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "kube/client.h"
#include "kube/http.h"
#include "tests/support/https_test_server.h"

namespace trainctl::kube {
namespace {

TEST(HttpTransportTest, RequestsReuseOneKeepAliveConnection) {
  testing::HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"gitVersion":"v1"})", "application/json");
  });
  server.start();
  Client client(server.rest_config());
  for (int i = 0; i < 5; ++i)
    client.server_version();
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  for (const auto& r : reqs)
    EXPECT_EQ(r.remote_port, reqs[0].remote_port);
}

TEST(HttpTransportTest, Http11ServerIsSpokenHttp11) {
  testing::HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  server.start();
  HttpTransport transport(server.rest_config());
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

TEST(HttpTransportTest, ConcurrentRequestsToAnHttp11ServerEachGetTheirAnswer) {
  testing::HttpsTestServer server;
  server.routes().Get(R"(/echo/(\d+))", [](const httplib::Request& req, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // keeps them in flight together
    res.set_content(req.matches[1].str(), "text/plain");
  });
  server.start();
  HttpTransport transport(server.rest_config());
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
    server_.start();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  RestConfig keeping_sessions() const {
    RestConfig config = server_.rest_config();
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
  EXPECT_FALSE(resumed_by_a_new_process(server_.rest_config()));
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

}  // namespace
}  // namespace trainctl::kube
