// Proxy terminator benchmark (numbers, not pass/fail), issue 10's targets:
//   1,000 pods with a training container and a regular istio-proxy, in a namespace labelled
//   trainctl.io/proxy-terminator=enabled, whose training containers all finish within about the
//   same second, while the controller also reconciles TFJobs. Printed: the spread of the
//   training exits, p50/p99 from a pod's training exit to its proxy's exit (both seen by one
//   watch, so delivery delays cancel out; target p99 <= 1 s), the number of quit execs the
//   sandbox ran (target exactly 1,000), the controller's own latency histogram (whole seconds, as
//   pod status records them). Reference in the same run: 1,000 execs sent straight by 8 threads,
//   the floor for the time the controller needs to quit them all.
// The controller runs in-process against the sandbox with an unlimited client-side rate limit.
// Usage: sidecar_bench [pods] [jobs] [proxy workers (default 16, ControllerOptions::proxy_workers)]
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "api/status.h"
#include "bench/bench_support.h"
#include "bench/training_sandbox.h"
#include "controller/controller.h"
#include "json_access.h"
#include "kube/cache/informer.h"
#include "kube/client.h"
#include "sandbox/sandbox.h"
#include "tests/support/sandbox_fixture.h"

using namespace trainctl;
using bench::Clock;
using bench::parallel_for;
using bench::seconds_since;
using nlohmann::json;

namespace {

json meshed_pod(const std::string& name, double run_seconds) {
  return {{"metadata",
           {{"name", name},
            {"annotations",
             {{"sandbox.trainctl.io/run-seconds", fmt::format("{:.2f}", run_seconds)}}}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"containers",
             {{{"name", "main"}, {"image", "busybox"}},
              {{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}}}}}}};
}

json tfjob(const std::string& name) {
  return {
      {"apiVersion", "kubeflow.org/v1"},
      {"kind", "TFJob"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"tfReplicaSpecs",
         {{"Worker",
           {{"replicas", 4},
            {"template",
             {{"metadata", {{"annotations", {{"sandbox.trainctl.io/run-seconds", "3"}}}}},
              {"spec", {{"containers", {{{"name", "tensorflow"}, {"image", "tf:2"}}}}}}}}}}}}}}};
}

std::string state_of(const json& pod, const std::string& container) {
  for (const auto& s : member(object_member(pod, "status"), "containerStatuses")) {
    if (string_member(s, "name") == container && object_member(s, "state").is_object() &&
        !s["state"].empty())
      return s["state"].begin().key();
  }
  return "";
}

double percentile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

/// When one watch first saw each pod's training container and its proxy terminated.
class ExitTimes {
 public:
  void seen(const json& pod) {
    const std::string name = name_of(pod);
    const auto now = Clock::now();
    std::lock_guard lock(mu_);
    if (state_of(pod, "main") == "terminated")
      main_.try_emplace(name, now);
    if (state_of(pod, "istio-proxy") == "terminated")
      proxy_.try_emplace(name, now);
  }
  std::size_t proxies() {
    std::lock_guard lock(mu_);
    return proxy_.size();
  }
  /// Training exit -> proxy exit, seconds, per pod with both; and the spread of training exits.
  std::pair<std::vector<double>, double> latencies() {
    std::lock_guard lock(mu_);
    std::vector<double> out;
    Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
    for (const auto& [name, main] : main_) {
      first = std::min(first, main);
      last = std::max(last, main);
      if (const auto p = proxy_.find(name); p != proxy_.end())
        out.push_back(std::chrono::duration<double>(p->second - main).count());
    }
    return {out, main_.empty() ? 0 : std::chrono::duration<double>(last - first).count()};
  }

 private:
  std::mutex mu_;
  std::map<std::string, Clock::time_point> main_, proxy_;
};

}  // namespace

int main(int argc, char** argv) {
  const int pods = argc > 1 ? std::stoi(argv[1]) : 1000;
  const int jobs = argc > 2 ? std::stoi(argv[2]) : 100;
  const int proxy_workers = argc > 3 ? std::stoi(argv[3]) : 16;
  trainctl::testing::TempDir dir;
  sandbox::SandboxOptions options;
  options.data_dir = dir.path() / "sandbox";
  options.port = 0;
  options.cluster.nodes = 40;
  options.cluster.kubelet.start_delay = std::chrono::milliseconds(50);
  bench::TrainingSandbox training(options);
  sandbox::Sandbox& sandbox = training.sandbox;
  kube::Client& client = training.client;
  fmt::print("sidecar_bench: {} meshed pods, {} TFJobs x 4 workers alongside, {} proxy workers\n",
             pods, jobs, proxy_workers);

  // Reference: `pods`/10 running pods, 10 execs each, sent straight by 8 threads.
  client.create(kube::resources::namespaces(), "", {{"metadata", {{"name", "reference"}}}});
  const int ref_pods = std::max(1, pods / 10);
  parallel_for(ref_pods, 8, [&](int i) {
    client.create(kube::resources::pods(), "reference", meshed_pod(fmt::format("r-{}", i), 600));
  });
  while (true) {
    const auto list = client.list_all(kube::resources::pods(), "reference")["items"];
    if (std::all_of(list.begin(), list.end(),
                    [](const json& p) { return state_of(p, "istio-proxy") == "running"; }))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto ref_start = Clock::now();
  parallel_for(ref_pods * 10, 8, [&](int i) {
    client.exec("reference", fmt::format("r-{}", i % ref_pods),
                {.container = "istio-proxy", .command = {"echo", "ok"}});
  });
  const double reference = seconds_since(ref_start);
  fmt::print("reference: {} execs sent straight by 8 threads in {:.2f} s ({:.0f}/s)\n",
             ref_pods * 10, reference, ref_pods * 10 / reference);

  // The controller, and a watch of the meshed pods.
  client.create(kube::resources::namespaces(), "",
                {{"metadata",
                  {{"name", "opted"}, {"labels", {{"trainctl.io/proxy-terminator", "enabled"}}}}}});
  std::ostringstream log_text;
  Logger log(log_text, LogFormat::Text, 0);
  controller::MetricsRegistry metrics;
  controller::declare_controller_metrics(metrics);
  controller::ControllerOptions controller_options{.workers = 4, .proxy_workers = proxy_workers};
  controller_options.plan.gang_scheduler = controller::GangScheduler::None;
  kube::Client controller_client(client.config());
  controller::Manager manager(controller_client, {}, metrics, log);
  const bool with_jobs = jobs > 0;
  controller::add_reconcilers(manager, controller_options);
  std::jthread controller_thread([&](std::stop_token stop) { manager.run(stop); });
  ExitTimes exits;
  kube::cache::Informer watch(client, {.resource = kube::resources::pods(), .namespace_ = "opted"});
  watch.add_handlers({.on_add = [&](const json& p) { exits.seen(p); },
                      .on_modify = [&](const json& p) { exits.seen(p); }});
  std::jthread watch_thread([&](std::stop_token stop) { watch.run(stop); });
  while (!manager.synced() || !watch.has_synced())
    std::this_thread::sleep_for(std::chrono::milliseconds(50));

  // Every pod's training container is scripted to end at about `finish`.
  const auto t0 = Clock::now();
  const double finish = 10 + pods / 200.0;
  parallel_for(pods, 8, [&](int i) {
    const double run = std::max(1.0, finish - seconds_since(t0) - 0.1);
    client.create(kube::resources::pods(), "opted", meshed_pod(fmt::format("p-{}", i), run));
  });
  fmt::print("{} pods created in {:.2f} s; training scheduled to end at ~{:.0f} s\n", pods,
             seconds_since(t0), finish);
  if (with_jobs) {
    parallel_for(jobs, 4, [&](int i) {
      client.create(kube::resources::job(api::JobKind::TFJob), "default",
                    tfjob(fmt::format("job-{}", i)));
    });
  }
  const auto deadline = t0 + std::chrono::seconds(static_cast<int>(finish) + 120);
  while (exits.proxies() < static_cast<std::size_t>(pods) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto [latency, spread] = exits.latencies();
  std::size_t quit_execs = 0;
  for (const auto& record : sandbox.cluster().exec_history())
    quit_execs += record.namespace_ == "opted";
  int succeeded_jobs = 0;
  if (with_jobs) {
    const json list = client.list_all(kube::resources::job(api::JobKind::TFJob), "default");
    for (const auto& job : list["items"])
      succeeded_jobs += api::job_status(job) == "Succeeded";
  }
  controller_thread = {};
  watch_thread = {};

  fmt::print("training exits spread over {:.2f} s\n", spread);
  fmt::print("proxies exited: {} of {}\n", latency.size(), pods);
  fmt::print(
      "training exit -> proxy exit: p50 {:.3f} s, p99 {:.3f} s, max {:.3f} s (target p99 <= 1 s)\n",
      percentile(latency, 0.5), percentile(latency, 0.99), percentile(latency, 1.0));
  fmt::print("quit execs run by the sandbox: {} (target exactly {})\n", quit_execs, pods);
  fmt::print("controller: {} pilot-agent quits attempted, {} succeeded\n",
             metrics.value("trainctl_proxy_quit_attempts_total", {"pilot-agent"}),
             metrics.value("trainctl_proxy_quits_succeeded_total", {"pilot-agent"}));
  fmt::print("controller histogram (whole seconds): p50 {:.2f} s, p99 {:.2f} s\n",
             metrics.histogram_quantile("trainctl_proxy_exit_latency_seconds", {}, 0.5),
             metrics.histogram_quantile("trainctl_proxy_exit_latency_seconds", {}, 0.99));
  if (with_jobs)
    fmt::print("TFJobs Succeeded meanwhile: {} of {}\n", succeeded_jobs, jobs);
  const double all_quit = latency.empty() ? 0 : percentile(latency, 1.0);
  fmt::print(
      "ratio: slowest proxy exit {:.2f} s vs the reference's time for as many execs "
      "{:.2f} s = {:.2f}x\n",
      all_quit, reference * pods / (ref_pods * 10.0),
      all_quit / std::max(1e-9, reference * pods / (ref_pods * 10.0)));
  return 0;
}
