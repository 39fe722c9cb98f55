// The HTTPS transport under the client: connection reuse and HTTP/2 negotiation.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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

/// nghttpd (Debian's nghttp2-server, installed by the bootstrap) serving a directory over h2.
class Http2Server {
 public:
  Http2Server() {
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
      ::execlp("nghttpd", "nghttpd", "-d", docroot.c_str(), "--address=127.0.0.1", port.c_str(),
               key.c_str(), cert.c_str(), static_cast<char*>(nullptr));
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
  int port() const { return port_; }

 private:
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST(HttpTransportTest, Http2IsUsedWhenTheServerOffersIt) {
  ASSERT_EQ(std::system("command -v nghttpd >/dev/null"), 0)
      << "nghttpd missing: run packaging/bootstrap-debian.sh";
  Http2Server server;
  RestConfig config;
  config.server = "https://127.0.0.1:" + std::to_string(server.port());
  config.tls.ca_pem = testing::TestPki::shared().ca.cert_pem;
  HttpTransport transport(config);
  HttpRequest request;
  request.path = "/version";
  HttpResponse response = transport.send(request, {});
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.http_version, 2);
  EXPECT_EQ(Client(config).server_version()["gitVersion"], "v1.31.0-h2");
}

}  // namespace
}  // namespace trainctl::kube
