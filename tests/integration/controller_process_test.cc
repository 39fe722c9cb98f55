// `trainctl controller` as a process: probes and metrics, SIGTERM, crash safety under SIGKILL,
// and leader election between replicas.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "api/status.h"
#include "tests/support/background_command.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl {
namespace {

using nlohmann::json;
using testing::BackgroundCommand;
using testing::wait_until;
using namespace std::chrono_literals;

// The port a controller started with `<flag> 127.0.0.1:0` reports it serves on (its log line
// `serving flag=<flag> address=127.0.0.1:PORT`, text or JSON); 0 until it has logged it.
int served_port(const BackgroundCommand& controller, const std::string& flag) {
  const std::regex pattern(flag + R"(\W+address\W+127\.0\.0\.1:(\d+))");
  std::smatch match;
  const std::string output = controller.output();
  return std::regex_search(output, match, pattern) ? std::stoi(match[1]) : 0;
}

int wait_for_port(const BackgroundCommand& controller, const std::string& flag) {
  int port = 0;
  wait_until([&] { return (port = served_port(controller, flag)) != 0; }, 10s);
  return port;
}

class ControllerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::install_training_crds(client()); }

  kube::Client& client() { return local_.client(); }

  std::vector<std::string> controller_argv(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        TRAINCTL_BINARY,    "controller",
        "--kubeconfig",     local_.sandbox().kubeconfig_path().string(),
        "--gang-scheduler", "none"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  /// A TFJob of `workers` workers running `run_seconds`, each with `gpus` GPUs when not 0.
  void create_job(const std::string& name, int workers, const std::string& run_seconds,
                  int gpus = 0) {
    json job = yaml_to_json(YAML::Load(R"(
apiVersion: kubeflow.org/v1
kind: TFJob
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec: {containers: [{name: tensorflow, image: tf:2}]}
)"));
    job["metadata"]["name"] = name;
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = workers;
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
       ["sandbox.trainctl.io/run-seconds"] = run_seconds;
    if (gpus != 0)
      job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]
         ["limits"]["nvidia.com/gpu"] = std::to_string(gpus);
    client().create(kube::resources::job(api::JobKind::TFJob), "default", job);
  }

  std::string status_of(const std::string& name) {
    return api::job_status(
        client().get(kube::resources::job(api::JobKind::TFJob), "default", name));
  }

  std::vector<json> pods_of(const std::string& name) {
    return client()
        .list_all(kube::resources::pods(), "default",
                  {.label_selector = "training.kubeflow.org/job-name=" + name})["items"]
        .get<std::vector<json>>();
  }

  testing::LocalSandbox local_;
};

TEST_F(ControllerProcessTest, ServesProbesAndMetricsAndExitsCleanlyOnSigterm) {
  BackgroundCommand controller(
      controller_argv({"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address",
                       "127.0.0.1:0", "--log-format", "json"}));
  const int metrics = wait_for_port(controller, "--metrics-bind-address");
  const int health = wait_for_port(controller, "--health-probe-bind-address");
  ASSERT_NE(metrics, 0) << controller.output();
  ASSERT_NE(health, 0) << controller.output();
  httplib::Client probes("127.0.0.1", health);
  ASSERT_TRUE(wait_until(
      [&] {
        const auto r = probes.Get("/readyz");
        return r && r->status == 200;
      },
      10s))
      << controller.output();
  EXPECT_EQ(probes.Get("/healthz")->status, 200);
  create_job("probe", 2, "0.2");
  ASSERT_TRUE(wait_until([&] { return status_of("probe") == "Succeeded"; }, 20s))
      << controller.output();
  const auto page = httplib::Client("127.0.0.1", metrics).Get("/metrics");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("trainctl_api_writes_total{verb=\"create\",resource=\"pods\"} 2"),
            std::string::npos)
      << page->body;
  EXPECT_NE(page->body.find("# TYPE trainctl_reconcile_duration_seconds histogram"),
            std::string::npos);
  // Its requests, watches included, go over connections of its own (rest_config.h: Direct), with
  // the OpenSSL linked in: libcurl, loaded only for a transfer that needs it, is not, nor the
  // shared OpenSSL it would bring.
  std::ifstream maps(fmt::format("/proc/{}/maps", controller.pid()));
  const std::string mapped((std::istreambuf_iterator<char>(maps)), {});
  EXPECT_EQ(mapped.find("libssl"), std::string::npos);
  EXPECT_EQ(mapped.find("libcurl"), std::string::npos);
  const int status = controller.stop(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << controller.output();
  EXPECT_EQ(WEXITSTATUS(status), 0) << controller.output();
  // JSON logs: every line is an object.
  std::istringstream lines(controller.output());
  for (std::string line; std::getline(lines, line);)
    EXPECT_TRUE(json::accept(line)) << line;
}

// ARCHITECTURE.md "Memory": the controller starts again on Debian's libjemalloc.so.2 under its
// own name, and the processes it starts (here its exec credential plugin) get the environment it
// was given: MALLOC_CONF as it was, no LD_PRELOAD, nothing of trainctl's own.
TEST_F(ControllerProcessTest, RunsOnJemallocAndItsCredentialPluginGetsTheEnvironmentItWasGiven) {
#ifndef TRAINCTL_PRELOAD_JEMALLOC
  GTEST_SKIP() << "built without jemalloc (-DTRAINCTL_JEMALLOC=OFF, or sanitizers)";
#else
  testing::TempDir dir;
  // The sandbox's client certificate, handed out by a plugin that first writes its environment.
  YAML::Node config = YAML::LoadFile(local_.sandbox().kubeconfig_path().string());
  YAML::Node user = config["users"][0]["user"];
  const json credential = {
      {"apiVersion", "client.authentication.k8s.io/v1"},
      {"kind", "ExecCredential"},
      {"status",
       {{"clientCertificateData",
         *base64_decode(user["client-certificate-data"].as<std::string>())},
        {"clientKeyData", *base64_decode(user["client-key-data"].as<std::string>())}}}};
  const std::filesystem::path credential_file = dir.write("credential.json", credential.dump());
  const std::filesystem::path environment = dir.path() / "plugin-environment";
  const std::filesystem::path plugin =
      dir.write("plugin.sh", fmt::format("#!/bin/sh\nenv > {}.tmp && mv {}.tmp {}\ncat {}\n",
                                         environment.string(), environment.string(),
                                         environment.string(), credential_file.string()));
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  user.remove("client-certificate-data");
  user.remove("client-key-data");
  user["exec"]["apiVersion"] = "client.authentication.k8s.io/v1";
  user["exec"]["command"] = plugin.string();
  user["exec"]["interactiveMode"] = "Never";
  const std::filesystem::path kubeconfig = dir.write("kubeconfig", YAML::Dump(config));

  std::vector<std::string> argv = controller_argv();
  argv[3] = kubeconfig.string();  // after "--kubeconfig"
  argv.insert(argv.begin(), {"env", "MALLOC_CONF=background_thread:false"});
  BackgroundCommand controller(argv);
  create_job("plugin", 1, "0.1");
  ASSERT_TRUE(wait_until([&] { return status_of("plugin") == "Succeeded"; }, 20s))
      << controller.output();
  std::ifstream maps(fmt::format("/proc/{}/maps", controller.pid()));
  const std::string mapped((std::istreambuf_iterator<char>(maps)), {});
  EXPECT_NE(mapped.find("libjemalloc.so.2"), std::string::npos);
  std::ifstream comm(fmt::format("/proc/{}/comm", controller.pid()));
  std::string name;
  std::getline(comm, name);
  EXPECT_EQ(name, "trainctl");  // not "exe": ps, top and pkill find it by name
  std::ifstream in(environment);
  const std::string seen((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(seen.find("\nMALLOC_CONF=background_thread:false\n"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("LD_PRELOAD"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("TRAINCTL_"), std::string::npos) << seen;
  EXPECT_EQ(controller.stop(SIGTERM), 0) << controller.output();
#endif
}

TEST_F(ControllerProcessTest, RecoversWhenTheSandboxRestartsWithoutItsData) {
  // Take the first sandbox's resourceVersion well past where the restarted one will be, so the
  // controller's informers hold versions the new server has not reached (as after a restore).
  json churn = client().create(
      kube::resources::configmaps(), "default",
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "churn"}}}});
  for (int i = 0; i < 300; ++i) {
    churn["data"]["i"] = std::to_string(i);
    churn = client().update(kube::resources::configmaps(), "default", churn);
  }
  BackgroundCommand controller(controller_argv(
      {"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"}));
  const int health = wait_for_port(controller, "--health-probe-bind-address");
  const int metrics = wait_for_port(controller, "--metrics-bind-address");
  ASSERT_NE(health, 0) << controller.output();
  httplib::Client probes("127.0.0.1", health);
  const auto readyz = [&]() -> std::pair<int, std::string> {
    const auto r = probes.Get("/readyz");
    return r ? std::pair{r->status, r->body} : std::pair{0, std::string()};
  };
  ASSERT_TRUE(wait_until([&] { return readyz().first == 200; }, 10s)) << controller.output();
  create_job("before", 1, "0.2");
  ASSERT_TRUE(wait_until([&] { return status_of("before") == "Succeeded"; }, 20s))
      << controller.output();

  local_.restart([&] {
    // While the API server is gone the controller is not ready, and says which caches are stale.
    EXPECT_TRUE(wait_until(
        [&] {
          const auto [code, body] = readyz();
          return code == 503 && body.find("informers not synced: ") != std::string::npos &&
                 body.find("tfjobs.kubeflow.org/v1") != std::string::npos &&
                 body.find("pods/v1") != std::string::npos;
        },
        10s))
        << readyz().second << "\n"
        << controller.output();
  });
  testing::install_training_crds(client());
  // A job submitted to the restarted server gets its pods and runs to the end.
  create_job("after", 2, "0.2");
  ASSERT_TRUE(wait_until([&] { return status_of("after") == "Succeeded"; }, 40s))
      << controller.output();
  EXPECT_TRUE(wait_until(
      [&] {
        return readyz() == std::pair{200, std::string("ok")};
      },
      20s))
      << readyz().second;
  const std::string output = controller.output();
  EXPECT_THAT(output,
              ::testing::ContainsRegex(
                  "warning lost the API server; relisting .*resource=tfjobs.kubeflow.org/v1"));
  EXPECT_THAT(output,
              ::testing::ContainsRegex(
                  "info relisted after losing the API server resource=tfjobs.kubeflow.org/v1 "
                  "objects=[0-9]+ after=[0-9.]+s"));
  const auto page = httplib::Client("127.0.0.1", metrics).Get("/metrics");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, ::testing::HasSubstr(
                              "trainctl_informer_synced{resource=\"tfjobs.kubeflow.org/v1\"} 1"));
}

TEST_F(ControllerProcessTest, BadFlagsExitWithUsageErrors) {
  const std::string kubeconfig = local_.sandbox().kubeconfig_path().string();
  // {flags, what the error says}. Lease timings are durations (15s, 1m; plain integers are
  // seconds), checked with or without --leader-elect.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--metrics-bind-address nowhere",
       "--metrics-bind-address: \"nowhere\" is not HOST:PORT, :PORT or 0"},
      {"--workers 0", "--workers: must be at least 1"},
      {"--pytorch-init-container --pytorch-init-container-max-tries 0",
       "--pytorch-init-container-max-tries: must be at least 1"},
      {"--leader-elect-lease-duration 1.5", "--leader-elect-lease-duration"},
      {"--schedule-timeout 0s", "--schedule-timeout: must be at least 1s"},
      {"--admission-order lifo", "--admission-order"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = testing::run_command(
        fmt::format("{} controller --kubeconfig {} {}", TRAINCTL_BINARY, kubeconfig, flags));
    EXPECT_EQ(r.exit_code, 2) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
  }
}

// --gang-scheduler-name: the coscheduling scheduler's name on pods in scheduler-plugins mode, and
// a usage error in any other mode.
TEST_F(ControllerProcessTest, GangSchedulerNameNamesTheSchedulerPluginsScheduler) {
  const std::string kubeconfig = local_.sandbox().kubeconfig_path().string();
  const auto wrong = testing::run_command(
      fmt::format("{} controller --kubeconfig {} --gang-scheduler volcano --gang-scheduler-name "
                  "coscheduler",
                  TRAINCTL_BINARY, kubeconfig));
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("--gang-scheduler-name: only with --gang-scheduler scheduler-plugins"),
            std::string::npos)
      << wrong.err;

  BackgroundCommand controller({TRAINCTL_BINARY, "controller", "--kubeconfig", kubeconfig,
                                "--gang-scheduler", "scheduler-plugins", "--gang-scheduler-name",
                                "coscheduler", "--metrics-bind-address", "0",
                                "--health-probe-bind-address", "0"});
  create_job("cosched", 2, "forever");
  ASSERT_TRUE(wait_until([&] { return pods_of("cosched").size() == 2; }, 20s))
      << controller.output();
  for (const json& pod : pods_of("cosched"))
    EXPECT_EQ(pod["spec"]["schedulerName"], "coscheduler");
  EXPECT_EQ(client().get(kube::resources::scheduler_plugins_podgroups(), "default",
                         "cosched")["spec"]["minMember"],
            2);
  const int status = controller.stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << controller.output();
}

TEST_F(ControllerProcessTest, SigkillAtAnyPointConvergesWithoutDuplicates) {
  constexpr int kJobs = 6, kWorkers = 4;
  for (int i = 0; i < kJobs; ++i)
    create_job(fmt::format("crash-{}", i), kWorkers, "1");
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> lifetime_ms(20, 400);
  std::set<std::string> uids_seen;
  for (int round = 0; round < 12; ++round) {
    BackgroundCommand controller(
        controller_argv({"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}));
    std::this_thread::sleep_for(std::chrono::milliseconds(lifetime_ms(rng)));
    controller.stop(SIGKILL);
  }
  BackgroundCommand controller(
      controller_argv({"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}));
  for (int i = 0; i < kJobs; ++i) {
    const std::string name = fmt::format("crash-{}", i);
    ASSERT_TRUE(wait_until([&] { return status_of(name) == "Succeeded"; }, 30s))
        << name << ": " << status_of(name) << "\n"
        << controller.output();
    // Worker 0's success ends the job; a worker created after a late restart may still run.
    const auto all_finished = [&] {
      const auto pods = pods_of(name);
      return std::all_of(pods.begin(), pods.end(),
                         [](const json& pod) { return pod["status"]["phase"] == "Succeeded"; });
    };
    EXPECT_TRUE(wait_until(all_finished, 10s)) << name;
    const auto pods = pods_of(name);
    ASSERT_EQ(pods.size(), static_cast<std::size_t>(kWorkers)) << name;
    for (const auto& pod : pods)
      EXPECT_EQ(pod["metadata"]["ownerReferences"].size(), 1u);
    EXPECT_EQ(client()
                  .list_all(kube::resources::services(), "default",
                            {.label_selector = "training.kubeflow.org/job-name=" + name})["items"]
                  .size(),
              static_cast<std::size_t>(kWorkers));
  }
}

// Builtin admission killed at random points of its passes: 4 nodes x 8 GPUs, six gangs of 4 pods
// x 4 GPUs that run for ever, so two fit. Admission state lives only in the PodGroups, so at no
// sample are more than two gangs admitted or more GPUs requested than exist, and once a
// controller stays up exactly two gangs run with all their pods and the other four hold none.
TEST_F(ControllerProcessTest, SigkillMidAdmissionNeverAdmitsTwice) {
  constexpr int kJobs = 6;
  for (int i = 0; i < kJobs; ++i)
    create_job(fmt::format("gang-{}", i), 4, "forever", 4);
  std::vector<std::string> argv =
      controller_argv({"--metrics-bind-address", "0", "--health-probe-bind-address", "0"});
  argv[std::find(argv.begin(), argv.end(), "--gang-scheduler") - argv.begin() + 1] = "builtin";
  // What the API server holds at one instant: admitted gangs and GPUs requested by live pods.
  const auto check = [&] {
    const json groups = client().list_all(kube::resources::podgroups(), "default");
    int admitted = 0;
    for (const json& g : groups["items"]) {
      const std::string phase = g.value("status", json::object()).value("phase", "");
      admitted += phase == "Inqueue" || phase == "Running";
    }
    EXPECT_LE(admitted, 2) << groups.dump();
    const json pods = client().list_all(kube::resources::pods(), "default");
    int gpus = 0;
    for (const json& pod : pods["items"])
      gpus += 4 * (pod["status"].value("phase", "") != "Succeeded");
    EXPECT_LE(gpus, 32);
    return admitted;
  };
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> lifetime_ms(50, 600);
  for (int round = 0; round < 10; ++round) {
    BackgroundCommand controller(argv);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(lifetime_ms(rng));
    while (std::chrono::steady_clock::now() < until)
      check();
    controller.stop(SIGKILL);
    check();
  }
  BackgroundCommand controller(argv);
  std::map<std::string, std::size_t> pods_per_job;
  ASSERT_TRUE(wait_until(
      [&] {
        pods_per_job.clear();
        for (int i = 0; i < kJobs; ++i) {
          const std::string name = fmt::format("gang-{}", i);
          pods_per_job[name] = pods_of(name).size();
        }
        return check() == 2 && std::count_if(pods_per_job.begin(), pods_per_job.end(),
                                             [](const auto& p) { return p.second == 4; }) == 2;
      },
      30s))
      << controller.output();
  for (const auto& [name, pods] : pods_per_job)
    EXPECT_TRUE(pods == 0 || pods == 4) << name << " has " << pods << " pods";
}

TEST_F(ControllerProcessTest, ExactlyOneLeaderActsAndAStandbyTakesOver) {
  const auto replica = [&] {
    return controller_argv(
        {"--leader-elect", "--leader-elect-namespace", "default", "--leader-elect-lease-duration",
         "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "200ms",
         "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0"});
  };
  auto a = std::make_unique<BackgroundCommand>(replica());
  auto b = std::make_unique<BackgroundCommand>(replica());
  const int port_a = wait_for_port(*a, "--metrics-bind-address");
  const int port_b = wait_for_port(*b, "--metrics-bind-address");
  ASSERT_NE(port_a, 0) << a->output();
  ASSERT_NE(port_b, 0) << b->output();
  const auto is_leader = [](int port) {
    const auto page = httplib::Client("127.0.0.1", port).Get("/metrics");
    return page && page->body.find("\ntrainctl_leader 1\n") != std::string::npos;
  };
  ASSERT_TRUE(wait_until([&] { return is_leader(port_a) || is_leader(port_b); }, 10s));
  std::this_thread::sleep_for(500ms);
  ASSERT_NE(is_leader(port_a), is_leader(port_b)) << "exactly one replica leads";
  const bool a_leads = is_leader(port_a);
  const auto standby_page = httplib::Client("127.0.0.1", a_leads ? port_b : port_a).Get("/metrics");
  ASSERT_TRUE(standby_page);
  EXPECT_NE(standby_page->body.find("\ntrainctl_leader 0\n"), std::string::npos)
      << "the standby exports trainctl_leader 0";
  const json lease = client().get(kube::resources::leases(), "default", "trainctl-controller");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 2);
  create_job("before", 1, "0.2");
  ASSERT_TRUE(wait_until([&] { return status_of("before") == "Succeeded"; }, 20s));

  // The leader dies without releasing: the standby takes over once the lease expires.
  const auto killed_at = std::chrono::steady_clock::now();
  (a_leads ? a : b)->stop(SIGKILL);
  const int standby = a_leads ? port_b : port_a;
  ASSERT_TRUE(wait_until([&] { return is_leader(standby); }, 10s));
  // How fast is measured, not asserted (timing is for benchmarks): reported with the test.
  RecordProperty("failover_ms",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - killed_at)
                                      .count()));
  create_job("after", 1, "0.2");
  ASSERT_TRUE(wait_until([&] { return status_of("after") == "Succeeded"; }, 20s));
  const json taken = client().get(kube::resources::leases(), "default", "trainctl-controller");
  EXPECT_GE(taken["spec"].value("leaseTransitions", 0), 1);
}

}  // namespace
}  // namespace trainctl
