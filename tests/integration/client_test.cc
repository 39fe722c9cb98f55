// The REST client against real HTTPS servers on 127.0.0.1.
#include "kube/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "error.h"
#include "tests/support/expect_error.h"
#include "tests/support/https_test_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/transports.h"

namespace trainctl::kube {
namespace {

using nlohmann::json;
using testing::expect_error;
using ::testing::HasSubstr;
using testing::HttpsTestServer;
using testing::TempDir;

constexpr const char* kJson = "application/json";

json status_body(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
          {"message", message}, {"reason", reason},   {"code", code}};
}

json pod(const std::string& name, const std::string& rv) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"resourceVersion", rv}}}};
}

// Every client test runs over both transports.
#define TRAINCTL_CLIENT_SUITE(name)              \
  class name : public testing::TransportTest {}; \
  INSTANTIATE_TEST_SUITE_P(Transports, name, testing::kBothTransports, testing::transport_name)
TRAINCTL_CLIENT_SUITE(ClientAuthTest);
TRAINCTL_CLIENT_SUITE(ClientLogsTest);
TRAINCTL_CLIENT_SUITE(ClientTlsTest);
TRAINCTL_CLIENT_SUITE(ClientVerbsTest);
TRAINCTL_CLIENT_SUITE(ClientWatchTest);

TEST_P(ClientTlsTest, ClientCertificateIsPresentedAndRequired) {
  HttpsTestServer server(HttpsTestServer::ClientCerts::Required);
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"gitVersion":"v1.30.0"})", kJson);
  });
  server.start();

  RestConfig config = rest_config_for(server);
  config.auth.client_cert_pem = testing::TestPki::shared().client.cert_pem;
  config.auth.client_key_pem = testing::TestPki::shared().client.key_pem;
  EXPECT_EQ(Client(config).server_version()["gitVersion"], "v1.30.0");

  Client anonymous(rest_config_for(server));
  anonymous.set_retry_policy({.max_retries = 0});
  EXPECT_EQ(expect_error([&] { anonymous.server_version(); }).kind(), ErrorKind::Connection);
}

TEST_P(ClientTlsTest, UntrustedServerIsRefusedUnlessInsecure) {
  HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"gitVersion":"v1.30.0"})", kJson);
  });
  server.start();

  RestConfig config = rest_config_for(server);
  config.tls.ca_pem = sandbox::make_certificate_authority("someone-else").cert_pem;
  Client untrusted(config);
  untrusted.set_retry_policy({.max_retries = 0});
  Error e = expect_error([&] { untrusted.server_version(); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  EXPECT_THAT(e.message(), HasSubstr("127.0.0.1"));

  config.tls.insecure_skip_verify = true;
  EXPECT_EQ(Client(config).server_version()["gitVersion"], "v1.30.0");
}

TEST_P(ClientTlsTest, TlsServerNameVerifiesAnotherNameOnTheSameAddress) {
  HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"gitVersion":"v1"})", kJson);
  });
  server.start();
  RestConfig config = rest_config_for(server);
  config.server = "https://localhost:" + std::to_string(server.port());
  config.tls.server_name = "apiserver.test";  // in the certificate's SANs
  EXPECT_EQ(Client(config).server_version()["gitVersion"], "v1");

  config.tls.server_name = "not-in-the-cert.test";
  Client wrong(config);
  wrong.set_retry_policy({.max_retries = 0});
  EXPECT_EQ(expect_error([&] { wrong.server_version(); }).kind(), ErrorKind::Connection);
}

TEST_P(ClientAuthTest, BearerTokenImpersonationAndUserAgentAreSent) {
  HttpsTestServer server;
  server.routes().Get(
      "/api/v1/namespaces/default/pods/a", [](const httplib::Request& req, httplib::Response& res) {
        if (req.get_header_value("Authorization") != "Bearer s3cret") {
          res.status = 401;
          res.set_content(status_body(401, "Unauthorized", "Unauthorized").dump(), kJson);
          return;
        }
        res.set_content(pod("a", "1").dump(), kJson);
      });
  server.start();
  RestConfig config = rest_config_for(server);
  config.auth.token = "s3cret";
  config.auth.impersonate_user = "jane";
  config.auth.impersonate_groups = {"team-a", "team-b"};
  Client client(config);
  EXPECT_EQ(client.get(resources::pods(), "default", "a")["metadata"]["name"], "a");
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].headers.find("Impersonate-User")->second, "jane");
  EXPECT_EQ(reqs[0].headers.count("Impersonate-Group"), 2u);
  EXPECT_THAT(reqs[0].headers.find("User-Agent")->second, HasSubstr("trainctl/"));
  EXPECT_EQ(reqs[0].headers.find("Accept")->second, kJson);

  RestConfig wrong = rest_config_for(server);
  wrong.auth.token = "nope";
  Client rejected(wrong);
  Error e = expect_error([&] { rejected.get(resources::pods(), "default", "a"); });
  EXPECT_EQ(e.kind(), ErrorKind::Unauthorized);
  EXPECT_EQ(e.http_code(), 401);
  EXPECT_THAT(e.message(), ::testing::Not(HasSubstr("nope")));
}

TEST_P(ClientAuthTest, TokenFileRotationIsPickedUpAfter401) {
  TempDir dir;
  auto token_file = dir.write("token", "old-token\n");
  HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer new-token") {
      res.status = 401;
      res.set_content(status_body(401, "Unauthorized", "Unauthorized").dump(), kJson);
      return;
    }
    res.set_content(R"({"gitVersion":"v1"})", kJson);
  });
  server.start();
  RestConfig config = rest_config_for(server);
  config.auth.token_file = token_file;
  Client client(config);
  EXPECT_EQ(expect_error([&] { client.server_version(); }).kind(), ErrorKind::Unauthorized);

  dir.write("token", "new-token\n");  // the kubelet rotated the bound token
  EXPECT_EQ(client.server_version()["gitVersion"], "v1");
  auto reqs = server.requests();
  EXPECT_EQ(reqs.back().headers.find("Authorization")->second, "Bearer new-token");
}

TEST_P(ClientAuthTest, ExecPluginRunsOnceAndAgainAfter401) {
  TempDir dir;
  auto counter = dir.path() / "runs";
  auto plugin =
      dir.write("plugin.sh",
                "#!/bin/sh\n"
                "echo run >> '" +
                    counter.string() +
                    "'\n"
                    "n=$(wc -l < '" +
                    counter.string() +
                    "')\n"
                    "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                    "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"tok-%s\"}}' $n\n",
                true);
  std::atomic<bool> revoke_first{false};
  HttpsTestServer server;
  server.routes().Get("/version", [&](const httplib::Request& req, httplib::Response& res) {
    const auto auth = req.get_header_value("Authorization");
    if (auth == "Bearer tok-1" && !revoke_first.load()) {
      res.set_content(R"({"gitVersion":"v1"})", kJson);
    } else if (auth == "Bearer tok-2") {
      res.set_content(R"({"gitVersion":"v2"})", kJson);
    } else {
      res.status = 401;
    }
  });
  server.start();
  RestConfig config = rest_config_for(server);
  config.auth.exec = ExecPluginConfig{.api_version = "client.authentication.k8s.io/v1",
                                      .command = plugin.string(),
                                      .interactive_mode = "Never"};
  Client client(config);
  EXPECT_EQ(client.server_version()["gitVersion"], "v1");
  EXPECT_EQ(client.server_version()["gitVersion"], "v1");  // cached: the plugin ran once
  revoke_first = true;
  EXPECT_EQ(client.server_version()["gitVersion"], "v2");  // 401, re-run, retried
  EXPECT_EQ(TempDir::read(counter), "run\nrun\n");
}

TEST_P(ClientVerbsTest, ListAllFollowsContinueTokens) {
  HttpsTestServer server;
  server.routes().Get("/api/v1/namespaces/default/pods",
                      [](const httplib::Request& req, httplib::Response& res) {
                        const std::string cont = req.get_param_value("continue");
                        const int page = cont.empty() ? 0 : std::stoi(cont);
                        json list = {{"kind", "PodList"},
                                     {"apiVersion", "v1"},
                                     {"metadata", {{"resourceVersion", "42"}}},
                                     {"items", json::array()}};
                        for (int i = 0; i < 2; ++i) {
                          list["items"].push_back(pod("p" + std::to_string(page * 2 + i), "1"));
                        }
                        if (page < 2)
                          list["metadata"]["continue"] = std::to_string(page + 1);
                        res.set_content(list.dump(), kJson);
                      });
  server.start();
  Client client(rest_config_for(server));
  json all =
      client.list_all(resources::pods(), "default", {.label_selector = "app=mnist", .limit = 2});
  ASSERT_EQ(all["items"].size(), 6u);
  EXPECT_EQ(all["items"][5]["metadata"]["name"], "p5");
  EXPECT_EQ(all["metadata"]["resourceVersion"], "42");
  EXPECT_FALSE(all["metadata"].contains("continue"));
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].target, "/api/v1/namespaces/default/pods?labelSelector=app%3Dmnist&limit=2");
  EXPECT_EQ(reqs[2].params.find("continue")->second, "2");
}

TEST_P(ClientVerbsTest, ConflictAndAlreadyExistsAreSurfaced) {
  HttpsTestServer server;
  server.routes().Post(
      "/api/v1/namespaces/default/configmaps", [](const httplib::Request&, httplib::Response& res) {
        res.status = 409;
        res.set_content(status_body(409, "AlreadyExists", "configmaps \"c\" already exists").dump(),
                        kJson);
      });
  server.routes().Put("/api/v1/namespaces/default/configmaps/c", [](const httplib::Request&,
                                                                    httplib::Response& res) {
    res.status = 409;
    res.set_content(status_body(409, "Conflict",
                                "Operation cannot be fulfilled on configmaps \"c\": the "
                                "object has been modified")
                        .dump(),
                    kJson);
  });
  server.start();
  Client client(rest_config_for(server));
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "c"}, {"resourceVersion", "7"}}}};
  Error exists = expect_error([&] { client.create(resources::configmaps(), "default", cm); });
  EXPECT_EQ(exists.kind(), ErrorKind::AlreadyExists);
  Error conflict = expect_error([&] { client.update(resources::configmaps(), "default", cm); });
  EXPECT_EQ(conflict.kind(), ErrorKind::Conflict);
  EXPECT_THAT(conflict.message(), HasSubstr("has been modified"));
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);  // writes are never retried on 409
  EXPECT_EQ(json::parse(reqs[1].body)["metadata"]["resourceVersion"], "7");
}

TEST_P(ClientVerbsTest, TooManyRequestsHonoursRetryAfter) {
  std::atomic<int> calls{0};
  HttpsTestServer server;
  server.routes().Post("/api/v1/namespaces/default/configmaps", [&](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (calls++ == 0) {
      res.status = 429;
      res.set_header("Retry-After", "1");
      res.set_content(status_body(429, "TooManyRequests", "slow down").dump(), kJson);
      return;
    }
    res.status = 201;
    res.set_content(req.body, kJson);
  });
  server.start();
  Client client(rest_config_for(server));
  const auto start = std::chrono::steady_clock::now();
  json created = client.create(resources::configmaps(), "default", {{"metadata", {{"name", "c"}}}});
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(950));
  EXPECT_EQ(created["metadata"]["name"], "c");
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(client.requests_sent(), 2u);
}

TEST_P(ClientVerbsTest, ServerErrorsAreRetriedForGetsOnly) {
  std::atomic<int> gets{0}, posts{0};
  HttpsTestServer server;
  server.routes().Get("/api/v1/namespaces/default/configmaps/c",
                      [&](const httplib::Request&, httplib::Response& res) {
                        if (gets++ < 2) {
                          res.status = 503;
                          return;
                        }
                        res.set_content(R"({"metadata":{"name":"c"}})", kJson);
                      });
  server.routes().Post("/api/v1/namespaces/default/configmaps",
                       [&](const httplib::Request&, httplib::Response& res) {
                         ++posts;
                         res.status = 503;
                       });
  server.start();
  Client client(rest_config_for(server));
  client.set_retry_policy({.max_retries = 4, .base = std::chrono::milliseconds(1)});
  EXPECT_EQ(client.get(resources::configmaps(), "default", "c")["metadata"]["name"], "c");
  EXPECT_EQ(gets.load(), 3);
  Error e = expect_error([&] {
    client.create(resources::configmaps(), "default", {{"metadata", {{"name", "c"}}}});
  });
  EXPECT_EQ(e.kind(), ErrorKind::ServerError);
  EXPECT_EQ(posts.load(), 1);
}

// A write whose caller only needs to know it went through (the controller's creates) does not
// decode the answer; a refusal is still the server's error. A patch given as text is sent as it is.
TEST_P(ClientVerbsTest, AnAnswerNotAskedForIsNotDecodedAndATextPatchIsSentAsItIs) {
  HttpsTestServer server;
  server.routes().Post("/api/v1/namespaces/default/configmaps", [](const httplib::Request& req,
                                                                   httplib::Response& res) {
    if (req.body.find("\"taken\"") != std::string::npos) {
      res.status = 409;
      res.set_content(status_body(409, "AlreadyExists", "configmaps \"taken\" exists").dump(),
                      kJson);
      return;
    }
    res.status = 201;
    res.set_content("not JSON: decoding it would fail", kJson);
  });
  server.routes().Patch("/api/v1/namespaces/default/configmaps/c",
                        [](const httplib::Request& req, httplib::Response& res) {
                          res.set_content(req.body, kJson);
                        });
  server.start();
  Client client(rest_config_for(server));
  const auto cm = [](const std::string& name) {
    return json{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}};
  };
  EXPECT_EQ(client.create(resources::configmaps(), "default", cm("c"), {.decode_answer = false}),
            json::object());
  EXPECT_EQ(
      expect_error([&] { client.create(resources::configmaps(), "default", cm("c")); }).kind(),
      ErrorKind::Protocol);
  EXPECT_EQ(expect_error([&] {
              client.create(resources::configmaps(), "default", cm("taken"),
                            {.decode_answer = false});
            }).kind(),
            ErrorKind::AlreadyExists);
  const std::string text = R"({"metadata":{"labels":{"a":"b"},"resourceVersion":"7"}})";
  EXPECT_EQ(client.patch_text(resources::configmaps(), "default", "c", PatchType::Merge, text),
            json::parse(text));
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[3].body, text);
  EXPECT_EQ(reqs[3].headers.find("Content-Type")->second, "application/merge-patch+json");
}

TEST_P(ClientVerbsTest, WritesSendTheRightMethodsQueriesAndContentTypes) {
  HttpsTestServer server;
  auto echo = [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.body.empty() ? R"({"kind":"Status","status":"Success"})" : req.body, kJson);
  };
  server.routes().Post("/apis/kubeflow.org/v1/namespaces/ml/tfjobs", echo);
  server.routes().Patch("/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist", echo);
  server.routes().Patch("/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status", echo);
  server.routes().Put("/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status", echo);
  server.routes().Delete("/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist", echo);
  server.start();
  Client client(rest_config_for(server));
  const Resource tf = resources::job(api::JobKind::TFJob);
  json job = {{"apiVersion", "kubeflow.org/v1"},
              {"kind", "TFJob"},
              {"metadata", {{"name", "mnist"}, {"namespace", "ml"}}}};
  client.create(tf, "", job, {.dry_run = true, .field_manager = "trainctl"});
  client.patch(tf, "ml", "mnist", PatchType::Merge,
               {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  client.patch(tf, "ml", "mnist", PatchType::Json,
               json::array({{{"op", "replace"}, {"path", "/spec/x"}, {"value", 1}}}));
  client.patch(tf, "ml", "mnist", PatchType::Apply, job, {.force = true});
  client.patch(tf, "ml", "mnist", PatchType::Merge, {{"status", {}}}, {.subresource = "status"});
  client.update_status(tf, "ml", job);
  client.remove(tf, "ml", "mnist", {.propagation_policy = "Foreground", .precondition_uid = "u-1"});

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 7u);
  EXPECT_EQ(reqs[0].target,
            "/apis/kubeflow.org/v1/namespaces/ml/tfjobs?dryRun=All&fieldManager=trainctl");
  EXPECT_EQ(reqs[1].headers.find("Content-Type")->second, "application/merge-patch+json");
  EXPECT_EQ(reqs[2].headers.find("Content-Type")->second, "application/json-patch+json");
  EXPECT_EQ(reqs[3].headers.find("Content-Type")->second, "application/apply-patch+yaml");
  EXPECT_EQ(reqs[3].target,
            "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist?fieldManager=trainctl&force=true");
  EXPECT_EQ(reqs[4].path, "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status");
  EXPECT_EQ(reqs[5].method, "PUT");
  EXPECT_EQ(reqs[6].method, "DELETE");
  json del = json::parse(reqs[6].body);
  EXPECT_EQ(del["propagationPolicy"], "Foreground");
  EXPECT_EQ(del["preconditions"]["uid"], "u-1");
  EXPECT_EQ(del["kind"], "DeleteOptions");
}

TEST_P(ClientVerbsTest, DiscoveryNamesWhatIsMissing) {
  HttpsTestServer server;
  server.routes().Get("/apis/kubeflow.org/v1", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        R"({"kind":"APIResourceList","groupVersion":"kubeflow.org/v1",
            "resources":[{"name":"tfjobs","namespaced":true,"kind":"TFJob"}]})",
        kJson);
  });
  server.routes().Get("/apis/kubeflow.org/v2beta1",
                      [](const httplib::Request&, httplib::Response& res) {
                        res.status = 404;
                        res.set_content(status_body(404, "NotFound", "not found").dump(), kJson);
                      });
  server.start();
  Client client(rest_config_for(server));
  EXPECT_NO_THROW(client.require_served(resources::job(api::JobKind::TFJob)));
  Error pt = expect_error([&] { client.require_served(resources::job(api::JobKind::PyTorchJob)); });
  EXPECT_EQ(pt.kind(), ErrorKind::NotFound);
  EXPECT_EQ(pt.message(),
            "kubeflow.org/v1 pytorchjobs is not served by this cluster: run `trainctl install`");
  Error mpi = expect_error([&] { client.require_served(resources::job(api::JobKind::MPIJob)); });
  EXPECT_THAT(mpi.message(), HasSubstr("kubeflow.org/v2beta1 mpijobs is not served"));
}

TEST_P(ClientVerbsTest, RequestTimeoutIsATimeoutError) {
  HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    res.set_content("{}", kJson);
  });
  server.start();
  RestConfig config = rest_config_for(server);
  config.timeout = std::chrono::milliseconds(200);
  Client client(config);
  client.set_retry_policy({.max_retries = 0});
  const auto start = std::chrono::steady_clock::now();
  Error e = expect_error([&] { client.server_version(); });
  EXPECT_EQ(e.kind(), ErrorKind::Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1200));
}

TEST_P(ClientVerbsTest, InvalidJsonFromTheServerIsAProtocolError) {
  HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("<html>proxy error</html>", "text/html");
  });
  server.start();
  Client client(rest_config_for(server));
  Error e = expect_error([&] { client.server_version(); });
  EXPECT_EQ(e.kind(), ErrorKind::Protocol);
  EXPECT_THAT(e.message(), HasSubstr("GET /version"));
}

/// Serves a watch: events after the requested resourceVersion, or 410 when it is too old.
void serve_watch(httplib::Server& routes) {
  routes.Get(
      "/api/v1/namespaces/default/pods", [](const httplib::Request& req, httplib::Response& res) {
        const int from = std::stoi(req.get_param_value("resourceVersion"));
        if (from < 10) {
          res.set_chunked_content_provider(kJson, [](size_t, httplib::DataSink& sink) {
            const std::string line =
                json{{"type", "ERROR"},
                     {"object", status_body(410, "Expired", "too old resource version: 5 (10)")}}
                    .dump() +
                "\n";
            sink.write(line.data(), line.size());
            sink.done();
            return true;
          });
          return;
        }
        res.set_chunked_content_provider(kJson, [from](size_t, httplib::DataSink& sink) {
          for (int rv = from + 1; rv <= from + 3; ++rv) {
            std::string line = json{{"type", rv == from + 3 ? "BOOKMARK" : "MODIFIED"},
                                    {"object", pod("p", std::to_string(rv))}}
                                   .dump() +
                               "\n";
            // Split each event across writes to exercise partial chunks.
            sink.write(line.data(), 7);
            sink.write(line.data() + 7, line.size() - 7);
          }
          sink.done();
          return true;
        });
      });
}

TEST_P(ClientWatchTest, ResumesFromTheLastResourceVersion) {
  HttpsTestServer server;
  serve_watch(server.routes());
  server.start();
  Client client(rest_config_for(server));
  std::vector<std::string> seen;
  auto handler = [&](const WatchEvent& e) {
    seen.push_back(std::string(to_string(e.type)) + ":" +
                   e.object["metadata"]["resourceVersion"].get<std::string>());
    return true;
  };
  WatchResult first = client.watch(resources::pods(), "default",
                                   {.label_selector = "app=x", .resource_version = "10"}, handler);
  EXPECT_EQ(first.resource_version, "13");
  EXPECT_EQ(first.events, 3u);
  WatchResult second = client.watch(resources::pods(), "default",
                                    {.resource_version = first.resource_version}, handler);
  EXPECT_EQ(second.resource_version, "16");
  EXPECT_THAT(seen, ::testing::ElementsAre("MODIFIED:11", "MODIFIED:12", "BOOKMARK:13",
                                           "MODIFIED:14", "MODIFIED:15", "BOOKMARK:16"));
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].params.find("watch")->second, "true");
  EXPECT_EQ(reqs[0].params.find("allowWatchBookmarks")->second, "true");
  const int timeout = std::stoi(reqs[0].params.find("timeoutSeconds")->second);
  EXPECT_GE(timeout, 300);
  EXPECT_LT(timeout, 600);
  EXPECT_EQ(reqs[1].params.find("resourceVersion")->second, "13");
}

TEST_P(ClientWatchTest, ExpiredResourceVersionIsGone) {
  HttpsTestServer server;
  serve_watch(server.routes());
  server.start();
  Client client(rest_config_for(server));
  Error e = expect_error([&] {
    client.watch(resources::pods(), "default", {.resource_version = "5", .timeout_seconds = 30},
                 [](const WatchEvent&) { return true; });
  });
  EXPECT_EQ(e.kind(), ErrorKind::Gone);
  EXPECT_THAT(e.message(), HasSubstr("too old resource version"));
}

TEST_P(ClientWatchTest, HandlerCanStopTheWatch) {
  HttpsTestServer server;
  serve_watch(server.routes());
  server.start();
  Client client(rest_config_for(server));
  int n = 0;
  WatchResult r = client.watch(resources::pods(), "default", {.resource_version = "20"},
                               [&](const WatchEvent&) { return ++n < 2; });
  EXPECT_EQ(n, 2);
  EXPECT_EQ(r.resource_version, "22");
}

TEST_P(ClientLogsTest, FollowStreamsLinesAsTheyArriveWithTheRightQuery) {
  HttpsTestServer server;
  server.routes().Get("/api/v1/namespaces/default/pods/w-0/log", [](const httplib::Request&,
                                                                    httplib::Response& res) {
    res.set_chunked_content_provider("text/plain", [](size_t, httplib::DataSink& sink) {
      for (int i = 0; i < 3; ++i) {
        std::string line = "step " + std::to_string(i) + "\n";
        sink.write(line.data(), line.size());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      sink.done();
      return true;
    });
  });
  server.start();
  Client client(rest_config_for(server));
  std::vector<std::string> chunks;
  client.stream_logs("default", "w-0",
                     {.container = "tensorflow",
                      .follow = true,
                      .tail_lines = 10,
                      .since_seconds = 60,
                      .timestamps = true,
                      .previous = false},
                     [&](std::string_view c) {
                       chunks.emplace_back(c);
                       return true;
                     });
  std::string all;
  for (const auto& c : chunks)
    all += c;
  EXPECT_EQ(all, "step 0\nstep 1\nstep 2\n");
  EXPECT_GE(chunks.size(), 3u);  // delivered as it came, not buffered to the end
  auto reqs = server.requests();
  EXPECT_EQ(reqs[0].target,
            "/api/v1/namespaces/default/pods/w-0/log?container=tensorflow&follow=true&"
            "tailLines=10&sinceSeconds=60&timestamps=true");
}

TEST_P(ClientLogsTest, MissingPodIsNotFound) {
  HttpsTestServer server;
  server.routes().Get("/api/v1/namespaces/default/pods/gone/log", [](const httplib::Request&,
                                                                     httplib::Response& res) {
    res.status = 404;
    res.set_content(status_body(404, "NotFound", "pods \"gone\" not found").dump(), kJson);
  });
  server.start();
  Client client(rest_config_for(server));
  Error e = expect_error(
      [&] { client.stream_logs("default", "gone", {}, [](std::string_view) { return true; }); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_THAT(e.message(), HasSubstr("pods \"gone\" not found"));
}

}  // namespace
}  // namespace trainctl::kube
