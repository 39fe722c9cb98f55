// Controller benchmark (numbers, not pass/fail), issue 5's and issue 17's targets.
//   Sandbox (default): J TFJobs x R workers on a sandbox with N simulated nodes.
//   --kubeconfig FILE: the same against a real API server, in namespaces of its own that are
//   deleted afterwards; pods carry a nodeSelector no node matches, so nothing runs.
// Both print the write rates of two runs on the same server: a raw client (8 threads, qps
// unlimited) creating the J x R pods and J x R services the controller makes for J such jobs
// (its own planner's, from jobs no controller manages), then `trainctl controller` (its own
// process, qps unlimited unless --kube-api-qps is given) materialising the J jobs created before
// it starts. A rate is objects / the time from the first object's ADDED watch event to the
// last's, seen by the same watches in both runs; the ratio is controller / raw client. The
// sandbox run then waits for every job to succeed and prints the controller's API writes per
// job, reconcile latency and peak RSS (from its /metrics and /proc).
// Usage: controller_bench [--kubeconfig FILE] [--kube-api-qps Q|default] [--workers N]
//                         [--rounds N] [--trainctl PATH] [jobs] [replicas] [nodes]
#include <fmt/format.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "api/status.h"
#include "bench/bench_support.h"
#include "controller/job_plan.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "sandbox/sandbox.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"

using namespace trainctl;
using bench::Clock;
using bench::parallel_for;
using bench::seconds_since;
using nlohmann::json;

namespace {

/// What the pods of both runs carry: on the sandbox they run for a while; on a real server they
/// stay Pending (no node matches), so no kubelet is needed.
struct PodShape {
  json annotations = json::object();
  json node_selector = json::object();
};

json tfjob(const std::string& name, const std::string& ns, int replicas, const PodShape& shape) {
  json spec = {{"containers", json::array({{{"name", "tensorflow"},
                                            {"image", "tf:2"},
                                            {"resources", {{"requests", {{"cpu", "1"}}}}}}})}};
  if (!shape.node_selector.empty())
    spec["nodeSelector"] = shape.node_selector;
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec",
           {{"tfReplicaSpecs",
             {{"Worker",
               {{"replicas", replicas},
                {"template",
                 {{"metadata", {{"annotations", shape.annotations}}}, {"spec", spec}}}}}}}}}};
}

/// Times the pods and services appearing in one namespace, from one pod watch and one service
/// watch started before anything is written.
class Appearances {
 public:
  Appearances(kube::Client& client, const std::string& ns) {
    for (const auto& resource : {kube::resources::pods(), kube::resources::services()}) {
      const std::string version =
          client.list(resource, ns, {.limit = 1})["metadata"].value("resourceVersion", "");
      watches_.emplace_back([this, &client, resource, ns, version](std::stop_token stop) {
        client.watch(
            resource, ns, {.resource_version = version, .allow_bookmarks = false},
            [this](const kube::WatchEvent& event) {
              if (event.type == kube::WatchEventType::Added)
                seen();
              return true;
            },
            stop);
      });
    }
  }
  ~Appearances() {
    for (auto& watch : watches_)
      watch.request_stop();
  }

  /// Waits until `n` objects appeared (or `limit` passed); returns the seconds from the first
  /// to the last of them, nullopt on the timeout.
  std::optional<double> span(std::size_t n, std::chrono::seconds limit) {
    std::unique_lock lock(mu_);
    if (!changed_.wait_for(lock, limit, [&] { return count_ >= n; }))
      return std::nullopt;
    return std::chrono::duration<double>(last_ - first_).count();
  }

 private:
  void seen() {
    std::lock_guard lock(mu_);
    last_ = Clock::now();
    if (count_++ == 0)
      first_ = last_;
    changed_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable changed_;
  std::size_t count_ = 0;
  Clock::time_point first_, last_;
  std::vector<std::jthread> watches_;
};

void create_namespace(kube::Client& client, const std::string& ns) {
  client.create(kube::resources::namespaces(), "",
                {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  // A real server admits pods only once the namespace's default ServiceAccount exists.
  for (int i = 0; i < 200; ++i) {
    try {
      client.get({"", "v1", "serviceaccounts", true, "ServiceAccount"}, ns, "default");
      return;
    } catch (const Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

/// Deletes `ns` and waits (up to 5 minutes) until it is gone: deleting its thousands of pods and
/// services costs the server as much CPU as making them, and must not overlap the next run.
void delete_namespace(kube::Client& client, const std::string& ns) {
  client.remove(kube::resources::namespaces(), "", ns);
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (Clock::now() < deadline) {
    try {
      client.get(kube::resources::namespaces(), "", ns);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound)
        return;
      throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fmt::print("namespace {} still exists 5 minutes after its delete; going on\n", ns);
}

/// The raw client's run: the pods and services the controller makes for `jobs` TFJobs of
/// `replicas` workers (planned by its own planner from the jobs as created, so objects of the
/// same size and content, owner references included), created by 8 threads; objects per second.
/// The jobs are made first, untimed, with a managedBy no controller answers to.
double raw_client_rate(kube::Client& client, const std::string& ns, int jobs, int replicas,
                       const PodShape& shape) {
  create_namespace(client, ns);
  std::mutex mu;
  std::vector<controller::Action> creates;
  parallel_for(jobs, 8, [&](int i) {
    json job = tfjob(fmt::format("ref-{}", i), ns, replicas, shape);
    job["spec"]["runPolicy"]["managedBy"] = "bench.trainctl.io/none";
    job = client.create(kube::resources::job(api::JobKind::TFJob), ns, job);
    job["spec"]["runPolicy"].erase("managedBy");  // planned as the controller's own
    controller::Plan plan =
        controller::plan_job(job, {},
                             {.now = std::chrono::system_clock::now(),
                              .gang_scheduler = controller::GangScheduler::None});
    std::lock_guard lock(mu);
    for (controller::Action& a : plan.actions)
      if (a.type == controller::Action::Type::Create)
        creates.push_back(std::move(a));
  });
  Appearances appearances(client, ns);
  parallel_for(static_cast<int>(creates.size()), 8,
               [&](int i) { client.create(creates[i].resource, ns, creates[i].object); });
  const auto span = appearances.span(creates.size(), std::chrono::seconds(60));
  return span && *span > 0 ? static_cast<double>(creates.size()) / *span : 0;
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

/// User + system CPU seconds `pid` has used so far (/proc/PID/stat fields 14 and 15).
double cpu_seconds(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14)
      ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long peak_rss_mib(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmHWM:"))
      return std::stol(line.substr(6)) / 1024;
  }
  return -1;
}

struct Options {
  std::string kubeconfig;  // empty: a sandbox of our own
  std::string qps = "0";
  std::string trainctl = TRAINCTL_BINARY;  // --trainctl: another build's, to compare
  std::string workers;                     // --workers: the controller's; empty = its default
  int rounds = 1;                          // --rounds: raw client and controller, alternately
  int jobs = 1000, replicas = 8, nodes = 500;
};

constexpr std::string_view kUsage =
    "usage: controller_bench [--kubeconfig FILE] [--kube-api-qps Q|default] [--workers N]\n"
    "                        [--rounds N] [--trainctl PATH] [jobs] [replicas] [nodes]\n";

/// The options, or nullopt (after printing why) when an argument is not one of them: a mistyped
/// flag must not run a benchmark of 0 jobs.
std::optional<Options> parse(int argc, char** argv) {
  Options o;
  std::vector<int> numbers;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int number = 0;
    const auto [end, error] = std::from_chars(arg.data(), arg.data() + arg.size(), number);
    if (arg == "--kubeconfig" && i + 1 < argc)
      o.kubeconfig = argv[++i];
    else if (arg == "--kube-api-qps" && i + 1 < argc)
      o.qps = argv[++i];
    else if (arg == "--trainctl" && i + 1 < argc)
      o.trainctl = argv[++i];
    else if (arg == "--workers" && i + 1 < argc)
      o.workers = argv[++i];
    else if (arg == "--rounds" && i + 1 < argc)
      o.rounds = std::max(1, std::atoi(argv[++i]));
    else if (error == std::errc() && end == arg.data() + arg.size() && number > 0)
      numbers.push_back(number);
    else
      return std::nullopt;
  }
  if (!o.kubeconfig.empty())
    o.jobs = 100;
  if (numbers.size() > 0)
    o.jobs = numbers[0];
  if (numbers.size() > 1)
    o.replicas = numbers[1];
  if (numbers.size() > 2)
    o.nodes = numbers[2];
  return o;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Prints the controller's API writes per job and reconcile latency from its /metrics page.
void print_metrics(const std::string& page, int jobs, int replicas) {
  const auto metrics = parse_metrics(page);
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
  std::map<std::string, double> reconciles;
  const auto [count_first, count_last] =
      metrics.equal_range("trainctl_reconcile_duration_seconds_count");
  for (auto it = count_first; it != count_last; ++it)
    reconciles[it->second.first] += it->second.second;
  for (const auto& [labels, n] : reconciles)
    fmt::print("reconciles {} {:.2f}/job\n", labels, n / jobs);
  const auto [unchanged_first, unchanged_last] =
      metrics.equal_range("trainctl_reconcile_unchanged_total");
  for (auto it = unchanged_first; it != unchanged_last; ++it)
    fmt::print("  of which found the job changed only by its own writes (no plan) {} {:.2f}/job\n",
               it->second.first, it->second.second / jobs);
  fmt::print("reconcile latency p50 {:.2f} ms, p99 {:.2f} ms\n",
             1000 * quantile(metrics, "trainctl_reconcile_duration_seconds", 0.5),
             1000 * quantile(metrics, "trainctl_reconcile_duration_seconds", 0.99));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    fmt::print("{}", kUsage);
    return 0;
  }
  const std::optional<Options> parsed = parse(argc, argv);
  if (!parsed) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  const Options& o = *parsed;
  const int objects = 2 * o.jobs * o.replicas;
  const std::string suffix = std::to_string(::getpid());

  trainctl::testing::TempDir dir;
  std::unique_ptr<sandbox::Sandbox> sb;
  kube::RestConfig config;
  std::string kubeconfig = o.kubeconfig;
  PodShape shape;
  if (kubeconfig.empty()) {
    sandbox::SandboxOptions options;
    options.data_dir = dir.path() / "sandbox";
    options.port = 0;
    options.cluster.nodes = o.nodes;
    options.cluster.kubelet.start_delay = std::chrono::milliseconds(200);
    sb = std::make_unique<sandbox::Sandbox>(options);
    sb->start();
    config = sb->admin_config();
    kubeconfig = sb->kubeconfig_path().string();
    shape.annotations = {{"sandbox.trainctl.io/run-seconds", "2"}};
  } else {
    config = kube::resolve_rest_config({.kubeconfig = kubeconfig},
                                       kube::ConfigEnvironment::from_process());
    shape.node_selector = {{"trainctl.io/bench", "no-such-node"}};
  }
  config.qps = 0;
  // The reference client uses the transport the controller does (cli/controller.cc): on both
  // servers the faster of the two (HTTP/1.1 connections of trainctl's own, against libcurl).
  config.transport = kube::Transport::Direct;
  kube::Client client(config);
  if (sb)
    trainctl::testing::install_training_crds(client);
  fmt::print("controller_bench: {} jobs x {} replicas on {}\n", o.jobs, o.replicas,
             sb ? fmt::format("a sandbox with {} nodes", o.nodes) : client.config().server);

  // Rounds alternate the two runs, so a machine that gets busier or quieter part-way through
  // weighs on both; the ratio printed last is that of the medians.
  std::vector<double> raw_rates, controller_rates;
  for (int round = 1; round <= o.rounds; ++round) {
    const bool last = round == o.rounds;
    const std::string ref_ns = fmt::format("ctlbench-ref-{}-{}", suffix, round);
    raw_rates.push_back(raw_client_rate(client, ref_ns, o.jobs, o.replicas, shape));
    delete_namespace(client, ref_ns);
    fmt::print("round {}: raw client (8 threads): {} pods + {} services at {:.0f} objects/s\n",
               round, objects / 2, objects / 2, raw_rates.back());

    // The jobs exist before the controller starts, so its rate is that of materialising them.
    const std::string ns = fmt::format("ctlbench-{}-{}", suffix, round);
    create_namespace(client, ns);
    Appearances appearances(client, ns);
    parallel_for(o.jobs, 8, [&](int i) {
      client.create(kube::resources::job(api::JobKind::TFJob), ns,
                    tfjob(fmt::format("job-{}", i), ns, o.replicas, shape));
    });
    const int metrics_port = 20000 + static_cast<int>((::getpid() + round) % 20000);
    std::vector<std::string> args = {o.trainctl,
                                     "controller",
                                     "--kubeconfig",
                                     kubeconfig,
                                     "-n",
                                     ns,
                                     "--gang-scheduler",
                                     "none",
                                     "--metrics-bind-address",
                                     fmt::format("127.0.0.1:{}", metrics_port),
                                     "--health-probe-bind-address",
                                     "0"};
    if (o.qps != "default")
      args.insert(args.end(), {"--kube-api-qps", o.qps});
    if (!o.workers.empty())
      args.insert(args.end(), {"--workers", o.workers});
    const auto t0 = Clock::now();
    const pid_t controller = bench::spawn(args);
    const double server_cpu = sb ? cpu_seconds(::getpid()) : 0;
    const auto span = appearances.span(objects, std::chrono::seconds(600));
    const double all_objects = seconds_since(t0);
    const double controller_cpu = cpu_seconds(controller);
    controller_rates.push_back(span && *span > 0 ? objects / *span : 0);
    fmt::print(
        "round {}: controller (--kube-api-qps {}): {} pods + {} services at {:.0f} objects/s "
        "(all exist {:.2f} s after its start); CPU until then: controller {:.2f} s{}\n",
        round, o.qps, objects / 2, objects / 2, controller_rates.back(), all_objects,
        controller_cpu,
        sb ? fmt::format(", sandbox (and bench) {:.2f} s", cpu_seconds(::getpid()) - server_cpu)
           : std::string());
    if (!last) {
      bench::stop(controller, SIGTERM);
      delete_namespace(client, ns);
      continue;
    }

    if (sb) {
      double all_done = 0;
      while (seconds_since(t0) < 600) {
        int succeeded = 0;
        for (const auto& job : sb->store().list("tfjobs.kubeflow.org", {.ns = ns}).items)
          succeeded += api::job_status(job) == "Succeeded";
        if (succeeded == o.jobs) {
          all_done = seconds_since(t0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      // Most reconciles come after the creates (each pod's Running and Succeeded), each
      // reading its job's pods and services from the caches.
      const double cpu = cpu_seconds(controller);
      fmt::print(
          "all {} jobs Succeeded {:.2f} s after the controller's start; controller CPU until "
          "then {:.2f} s = {:.0f} us per object created\n",
          o.jobs, all_done, cpu, cpu / objects * 1e6);
    }
    httplib::Client scrape("127.0.0.1", metrics_port);
    const auto page = scrape.Get("/metrics");
    const long rss = peak_rss_mib(controller);
    const int status = bench::stop(controller, SIGTERM);
    if (page && page->status == 200)
      print_metrics(page->body, o.jobs, o.replicas);
    else
      fmt::print("could not scrape the controller's /metrics\n");
    fmt::print(
        "controller peak RSS {} MiB with {} pods and {} services cached (target <= 100 MB "
        "at 10,000 pods); exit status {}\n",
        rss, objects / 2, objects / 2, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    client.remove(kube::resources::namespaces(), "", ns);
  }
  const double raw = median(raw_rates), controlled = median(controller_rates);
  fmt::print(
      "median of {} rounds: raw client {:.0f} objects/s, controller {:.0f} objects/s; ratio "
      "controller / raw client {:.2f} (target >= 0.90)\n",
      o.rounds, raw, controlled, raw > 0 ? controlled / raw : 0);
  return 0;
}
