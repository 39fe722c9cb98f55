#include "controller/probe_server.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "tests/support/expect_error.h"

namespace trainctl::controller {
namespace {

using ::testing::HasSubstr;

ProbeServer::Routes ready_route() {
  return {{"/readyz",
           [] {
             return ProbeResponse{503, "informers not synced: pods"};
           }},
          {"/metrics", [] {
             return ProbeResponse{200, "up 1\n", "text/plain; version=0.0.4"};
           }}};
}

TEST(ProbeServerTest, AnswersARouteWithItsStatusBodyAndContentType) {
  ProbeServer server("127.0.0.1", 0, "--health-probe-bind-address", ready_route());
  httplib::Client client("127.0.0.1", server.port());
  const auto readyz = client.Get("/readyz?verbose");  // the query is not part of the path
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 503);
  EXPECT_EQ(readyz->body, "informers not synced: pods");
  const auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body, "up 1\n");
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4");
}

// A client that connects and sends nothing (or too slowly) must not hold up the kubelet's probe,
// whose timeout is 1 s by default.
TEST(ProbeServerTest, ASilentConnectionDoesNotHoldUpAProbe) {
  ProbeServer server("127.0.0.1", 0, "--health-probe-bind-address", ready_route());
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(1, 0);  // the kubelet's default probe timeout
  const auto readyz = client.Get("/readyz");
  ASSERT_TRUE(readyz) << "the probe waited behind the silent connection";
  EXPECT_EQ(readyz->status, 503);
  close(silent);
}

TEST(ProbeServerTest, UnknownPathIs404AndAWriteIs405) {
  ProbeServer server("127.0.0.1", 0, "--metrics-bind-address", ready_route());
  httplib::Client client("127.0.0.1", server.port());
  EXPECT_EQ(client.Get("/healthz")->status, 404);
  EXPECT_EQ(client.Post("/metrics", "x", "text/plain")->status, 405);
}

TEST(ProbeServerTest, APortHeldExclusivelyIsAUsageErrorNamingTheFlag) {
  // A socket without SO_REUSEPORT holds the port (another ProbeServer would share it).
  const int holder = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  socklen_t len = sizeof addr;
  getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const Error e = testing::expect_error(
      [&] { ProbeServer("127.0.0.1", port, "--metrics-bind-address", ready_route()); });
  close(holder);
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_THAT(e.message(), HasSubstr(fmt::format(
                               "--metrics-bind-address: cannot listen on 127.0.0.1:{}", port)));
}

}  // namespace
}  // namespace trainctl::controller
