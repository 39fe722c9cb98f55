#include "controller/probe_server.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

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

TEST(ProbeServerTest, UnknownPathIs404AndAWriteIs405) {
  ProbeServer server("127.0.0.1", 0, "--metrics-bind-address", ready_route());
  httplib::Client client("127.0.0.1", server.port());
  EXPECT_EQ(client.Get("/healthz")->status, 404);
  EXPECT_EQ(client.Post("/metrics", "x", "text/plain")->status, 405);
}

TEST(ProbeServerTest, APortInUseIsAUsageErrorNamingTheFlag) {
  ProbeServer first("127.0.0.1", 0, "--metrics-bind-address", ready_route());
  const Error e = testing::expect_error(
      [&] { ProbeServer("127.0.0.1", first.port(), "--metrics-bind-address", ready_route()); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_THAT(e.message(),
              HasSubstr(fmt::format("--metrics-bind-address: cannot listen on 127.0.0.1:{}",
                                    first.port())));
}

}  // namespace
}  // namespace trainctl::controller
