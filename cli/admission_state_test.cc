#include "admission_state.h"

#include <gtest/gtest.h>

#include "error.h"
#include "kube/client.h"
#include "tests/support/https_test_server.h"

namespace trainctl::cli {
namespace {

constexpr const char* kForbidden =
    R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,
        "message":"podgroups is forbidden: User \"u\" cannot get resource \"podgroups\""})";
constexpr const char* kNotFound =
    R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,
        "message":"podgroups \"a\" not found"})";

/// A server whose Volcano and scheduler-plugins PodGroup `a` answer with the given status.
void answer(testing::HttpsTestServer& server, int volcano, int scheduler_plugins) {
  const auto with = [](int status) {
    return [status](const httplib::Request&, httplib::Response& res) {
      res.status = status;
      res.set_content(status == 403 ? kForbidden : kNotFound, "application/json");
    };
  };
  server.routes().Get("/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/a",
                      with(volcano));
  server.routes().Get("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/a",
                      with(scheduler_plugins));
  server.start();
}

TEST(JobGangTest, AForbiddenSchedulerPluginsTypeIsNoGang) {
  testing::HttpsTestServer server;
  answer(server, 404, 403);
  kube::Client client(server.rest_config());
  EXPECT_TRUE(job_gang(client, "ns", "a").is_null());
}

TEST(JobGangTest, AForbiddenVolcanoTypeIsStillAnError) {
  testing::HttpsTestServer server;
  answer(server, 403, 404);
  kube::Client client(server.rest_config());
  try {
    job_gang(client, "ns", "a");
    FAIL() << "a refused Volcano PodGroup read was taken for no gang";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Forbidden);
  }
}

}  // namespace
}  // namespace trainctl::cli
