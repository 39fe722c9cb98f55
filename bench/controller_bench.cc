// Controller benchmark (numbers, not pass/fail), issue 5's targets:
//   1,000 TFJobs x 8 workers submitted at once to a sandbox with 500 simulated nodes; the
//   controller runs as its own process (`trainctl controller`, qps unlimited) so its memory is
//   its own. Printed: seconds until all 8,000 pods exist and until every job Succeeded, API
//   writes per job by verb (from its /metrics), reconcile latency p50/p99, the controller's peak
//   RSS. Reference in the same run: the same pods and services created straight through the API
//   by 8 client threads, the floor for "all pods created".
// Usage: controller_bench [jobs] [replicas] [nodes]
#include <fmt/format.h>
#include <httplib.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "api/status.h"
#include "bench/bench_support.h"
#include "kube/client.h"
#include "sandbox/sandbox.h"
#include "sandbox/selector.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"
#include "yaml_json.h"

using namespace trainctl;
using bench::Clock;
using bench::parallel_for;
using bench::seconds_since;
using nlohmann::json;

namespace {

json tfjob(const std::string& name, int replicas) {
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"tfReplicaSpecs",
             {{"Worker",
               {{"replicas", replicas},
                {"template",
                 {{"metadata", {{"annotations", {{"sandbox.trainctl.io/run-seconds", "2"}}}}},
                  {"spec",
                   {{"containers",
                     json::array({{{"name", "tensorflow"},
                                   {"image", "tf:2"},
                                   {"resources", {{"requests", {{"cpu", "1"}}}}}}})}}}}}}}}}}}};
}

std::size_t count(sandbox::Store& store, const std::string& group_resource,
                  const std::string& selector) {
  return store.list(group_resource, {.labels = sandbox::LabelSelector::parse(selector)})
      .items.size();
}

// `name{labels} value` lines of a Prometheus text page.
std::multimap<std::string, std::pair<std::string, double>> parse_metrics(const std::string& text) {
  std::multimap<std::string, std::pair<std::string, double>> out;
  static const std::regex line(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([^ ]+)$)");
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line))
      out.emplace(m[1], std::pair{m[2].str(), std::stod(m[3])});
  }
  return out;
}

// histogram_quantile over all series of a histogram (buckets summed by `le`).
double quantile(const std::multimap<std::string, std::pair<std::string, double>>& metrics,
                const std::string& name, double q) {
  std::map<double, double> buckets;
  static const std::regex le(R"(le="([^"]+)\")");
  const auto [first, last] = metrics.equal_range(name + "_bucket");
  for (auto it = first; it != last; ++it) {
    std::smatch m;
    if (std::regex_search(it->second.first, m, le))
      buckets[m[1] == "+Inf" ? INFINITY : std::stod(m[1])] += it->second.second;
  }
  if (buckets.empty() || buckets.rbegin()->second == 0)
    return 0;
  const double rank = q * buckets.rbegin()->second;
  double lower = 0, below = 0;
  for (const auto& [bound, cumulative] : buckets) {
    if (cumulative >= rank) {
      if (std::isinf(bound))
        return lower;
      return lower + (bound - lower) * (rank - below) / std::max(cumulative - below, 1.0);
    }
    lower = bound;
    below = cumulative;
  }
  return lower;
}

long peak_rss_mib(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmHWM:"))
      return std::stol(line.substr(6)) / 1024;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int replicas = argc > 2 ? std::atoi(argv[2]) : 8;
  const int nodes = argc > 3 ? std::atoi(argv[3]) : 500;
  const int total_pods = jobs * replicas;

  trainctl::testing::TempDir dir;
  sandbox::SandboxOptions options;
  options.data_dir = dir.path() / "sandbox";
  options.port = 0;
  options.cluster.nodes = nodes;
  options.cluster.kubelet.start_delay = std::chrono::milliseconds(200);
  sandbox::Sandbox sb(options);
  sb.start();
  kube::RestConfig admin = sb.admin_config();
  admin.qps = 0;
  kube::Client client(admin);
  trainctl::testing::install_training_crds(client);
  fmt::print("controller_bench: {} jobs x {} replicas, {} nodes\n", jobs, replicas, nodes);

  // Reference: the pods and services the controller must create, written by 8 threads.
  {
    client.create(
        kube::resources::namespaces(), "",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "bench-ref"}}}});
    auto t0 = Clock::now();
    parallel_for(total_pods, 8, [&](int i) {
      const std::string name = fmt::format("ref-{}", i);
      client.create(kube::resources::services(), "bench-ref",
                    {{"apiVersion", "v1"},
                     {"kind", "Service"},
                     {"metadata", {{"name", name}}},
                     {"spec", {{"clusterIP", "None"}, {"ports", {{{"port", 2222}}}}}}});
      client.create(
          kube::resources::pods(), "bench-ref",
          {{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata",
            {{"name", name}, {"annotations", {{"sandbox.trainctl.io/run-seconds", "0"}}}}},
           {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}});
    });
    const double reference = seconds_since(t0);
    fmt::print("reference: {} pods + {} services created directly by 8 threads in {:.2f} s\n",
               total_pods, total_pods, reference);
    client.remove(kube::resources::namespaces(), "", "bench-ref");
  }

  // The controller, as its own process.
  const int metrics_port = 20000 + static_cast<int>(::getpid() % 20000);
  std::vector<std::string> args = {TRAINCTL_BINARY,
                                   "controller",
                                   "--kubeconfig",
                                   sb.kubeconfig_path().string(),
                                   "--kube-api-qps",
                                   "0",
                                   "--workers",
                                   "8",
                                   "--gang-scheduler",
                                   "none",
                                   "--metrics-bind-address",
                                   fmt::format("127.0.0.1:{}", metrics_port),
                                   "--health-probe-bind-address",
                                   "0"};
  const pid_t controller = bench::spawn(args);

  auto t0 = Clock::now();
  parallel_for(jobs, 8, [&](int i) {
    client.create(kube::resources::job(api::JobKind::TFJob), "default",
                  tfjob(fmt::format("job-{}", i), replicas));
  });
  const double submitted = seconds_since(t0);
  double all_pods = 0, all_done = 0;
  sandbox::Store& store = sb.store();
  const std::string selector = "training.kubeflow.org/job-name";
  while (seconds_since(t0) < 600) {
    if (all_pods == 0 && count(store, "pods", selector) >= static_cast<std::size_t>(total_pods))
      all_pods = seconds_since(t0);
    if (all_pods > 0) {
      int succeeded = 0;
      for (const auto& job : store.list("tfjobs.kubeflow.org", {}).items)
        succeeded += api::job_status(job) == "Succeeded";
      if (succeeded == jobs) {
        all_done = seconds_since(t0);
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  httplib::Client scrape("127.0.0.1", metrics_port);
  const auto page = scrape.Get("/metrics");
  const long rss = peak_rss_mib(controller);
  const int status = bench::stop(controller, SIGTERM);

  fmt::print("jobs created by the bench in {:.2f} s\n", submitted);
  fmt::print("all {} pods exist after {:.2f} s (target <= 20 s)\n", total_pods, all_pods);
  fmt::print("all {} jobs Succeeded after {:.2f} s\n", jobs, all_done);
  if (page && page->status == 200) {
    const auto metrics = parse_metrics(page->body);
    std::map<std::string, double> by_verb;
    double writes = 0, events = 0;
    const auto [first, last] = metrics.equal_range("trainctl_api_writes_total");
    for (auto it = first; it != last; ++it) {
      by_verb[it->second.first] += it->second.second;
      (it->second.first.find("resource=\"events\"") != std::string::npos ? events : writes) +=
          it->second.second;
    }
    fmt::print(
        "API writes per job: {:.1f} without events, {:.1f} events (target <= 2 x {} + 4 "
        "= {} plus status changes)\n",
        writes / jobs, events / jobs, replicas, 2 * replicas + 4);
    for (const auto& [labels, n] : by_verb)
      fmt::print("  {} {:.2f}/job\n", labels, n / jobs);
    fmt::print("reconcile latency p50 {:.2f} ms, p99 {:.2f} ms\n",
               1000 * quantile(metrics, "trainctl_reconcile_duration_seconds", 0.5),
               1000 * quantile(metrics, "trainctl_reconcile_duration_seconds", 0.99));
  } else {
    fmt::print("could not scrape the controller's /metrics\n");
  }
  fmt::print(
      "controller peak RSS {} MiB with {} pods and {} services cached (target <= 100 MB "
      "at 10,000 pods); exit status {}\n",
      rss, total_pods, total_pods, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}
