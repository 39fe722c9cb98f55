// Fair share, live (issue 9: "Weights 3:1 under contention -> admitted GPU-time within 10 % of
// 3:1 over a run of many small jobs"). A sandbox of GPU nodes, `trainctl controller
// --gang-scheduler builtin` as its own process, two queues of weights 3 and 1 without
// capabilities, and more one-worker GPU jobs in each than the cluster can run in the window, each
// running for a set time (sandbox.trainctl.io/run-seconds), so both queues keep the cluster full.
// The store is sampled every 50 ms: per queue, the GPUs of its admitted gangs (PodGroups Inqueue
// or Running, their spec.minResources) and of its running pods, integrated over time. The
// contended window starts once both queues hold admitted gangs and ends at the limit, or when
// either queue has nothing left pending (it would no longer ask for its share). Prints both
// queues' admitted and running GPU-seconds, their ratios against the weights' 3:1, the
// cluster's utilisation, the most GPUs admitted gangs held at once, the run's length and the load
// average; exits 1 when the admitted ratio is more than 10 % from 3:1 (CI runs an 8 s window:
// ctest -L fairshare).
// Usage: fairshare_bench [window_seconds=12] [nodes=2] [gpus_per_job=2] [run_seconds=1]
#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "api/quantity.h"
#include "api/well_known.h"
#include "bench/bench_support.h"
#include "bench/training_sandbox.h"
#include "error.h"
#include "json_access.h"
#include "kube/client.h"
#include "tests/support/temp_dir.h"

using namespace trainctl;
using bench::Clock;
using bench::seconds_since;
using nlohmann::json;

namespace {

constexpr int kNodeGpus = 8;
constexpr std::array<std::pair<const char*, int>, 2> kQueues = {{{"team-a", 3}, {"team-b", 1}}};
constexpr double kTolerance = 0.10;
constexpr auto kSample = std::chrono::milliseconds(50);

/// A TFJob of one worker holding `gpus` GPUs for `run_seconds`, in `queue`.
json small_job(const std::string& name, const std::string& queue, int gpus,
               const std::string& run_seconds) {
  const json resources = {{"nvidia.com/gpu", gpus}, {"cpu", "100m"}};
  return {
      {"apiVersion", "kubeflow.org/v1"},
      {"kind", "TFJob"},
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"runPolicy", {{"schedulingPolicy", {{"queue", queue}}}}},
        {"tfReplicaSpecs",
         {{"Worker",
           {{"replicas", 1},
            {"restartPolicy", "Never"},
            {"template",
             {{"metadata", {{"annotations", {{"sandbox.trainctl.io/run-seconds", run_seconds}}}}},
              {"spec",
               {{"containers",
                 json::array({{{"name", "tensorflow"},
                               {"image", "trainer:1"},
                               {"resources",
                                {{"requests", resources}, {"limits", resources}}}}})}}}}}}}}}}}};
}

/// One sample of the store: per queue, GPUs held by admitted gangs whose pods have not finished
/// (a finished gang's group stays Running until the controller's next pass marks it Completed),
/// GPUs of running pods, and gangs still pending.
struct Sample {
  std::map<std::string, std::int64_t> admitted_milli;
  std::map<std::string, std::int64_t> running_milli;
  std::map<std::string, int> pending;
};

std::int64_t gpu_milli(const json& resources) {
  const json& gpu = member(resources, "nvidia.com/gpu");
  return gpu.is_null() ? 0 : api::quantity_milli(gpu);
}

Sample sample(sandbox::Store& store) {
  Sample s;
  // The groups before the pods: a pod that ends between the two reads is seen ended, never a
  // gang admitted into its room beside it (which would count its GPUs twice).
  const auto groups = store.list("podgroups.scheduling.volcano.sh", {}).items;
  std::map<std::string, std::int64_t> running_by_job;  // GPUs of its running pods
  std::set<std::string> finished;                      // jobs whose pod ended
  for (const auto& pod : store.list("pods", {}).items) {
    const std::string job = label_of(pod, api::labels::job_name);
    const std::string phase = object_member(pod, "status").value("phase", "");
    if (phase == "Succeeded" || phase == "Failed")
      finished.insert(job);
    if (phase != "Running")
      continue;
    for (const auto& c : object_member(pod, "spec").value("containers", json::array()))
      running_by_job[job] += gpu_milli(object_member(object_member(c, "resources"), "requests"));
  }
  for (const auto& g : groups) {
    const std::string queue = object_member(g, "spec").value("queue", "");
    const std::string phase = object_member(g, "status").value("phase", "");
    if ((phase == "Inqueue" || phase == "Running") && !finished.contains(name_of(g)))
      s.admitted_milli[queue] += gpu_milli(object_member(object_member(g, "spec"), "minResources"));
    else if (phase.empty() || phase == "Pending")
      ++s.pending[queue];
    if (const auto it = running_by_job.find(name_of(g)); it != running_by_job.end())
      s.running_milli[queue] += it->second;
  }
  return s;
}

/// The GPUs `queue` holds in `milli_by_queue`.
double gpus(const std::map<std::string, std::int64_t>& milli_by_queue, const std::string& queue) {
  const auto it = milli_by_queue.find(queue);
  return it == milli_by_queue.end() ? 0 : it->second / 1000.0;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return fmt::format("{} {} {}", one, five, fifteen);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const double window = argc > 1 ? std::atof(argv[1]) : 12;
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 2;
  const int gpus_per_job = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string run_seconds = argc > 4 ? argv[4] : "1";
  const int total_gpus = nodes * kNodeGpus;
  // Enough for the window at the weights' split, twice over, in each queue: neither runs dry.
  const int slots = total_gpus / gpus_per_job;
  const int per_window = static_cast<int>(slots * window / std::atof(run_seconds.c_str()));
  std::map<std::string, int> jobs;
  for (const auto& [queue, weight] : kQueues)
    jobs[queue] = 2 * per_window * weight / 4 + slots;

  trainctl::testing::TempDir dir;
  bench::TrainingSandbox training(
      bench::TrainingSandbox::gpu_nodes(dir.path() / "sandbox", nodes, kNodeGpus));
  kube::Client& client = training.client;
  for (const auto& [queue, weight] : kQueues)
    client.create(kube::resources::queues(), "",
                  {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                   {"kind", "Queue"},
                   {"metadata", {{"name", queue}}},
                   {"spec", {{"weight", weight}}}});
  fmt::print(
      "fairshare_bench: {} nodes x {} GPUs, queues team-a (weight 3) and team-b (weight 1), "
      "{} + {} one-worker jobs of {} GPUs running {} s each, window up to {} s\n",
      nodes, kNodeGpus, jobs["team-a"], jobs["team-b"], gpus_per_job, run_seconds, window);

  const pid_t controller = bench::spawn_logged(
      {TRAINCTL_BINARY, "controller", "--kubeconfig", training.sandbox.kubeconfig_path().string(),
       "--gang-scheduler", "builtin", "--workers", "4", "--metrics-bind-address", "0",
       "--health-probe-bind-address", "0", "-v", "0"},
      (dir.path() / "controller.log").string());
  // Interleaved, so neither queue's gangs are all older than the other's.
  std::vector<std::pair<std::string, std::string>> order;  // {name, queue}
  for (int i = 0; i < std::max(jobs["team-a"], jobs["team-b"]); ++i) {
    for (const auto& [queue, weight] : kQueues) {
      if (i < jobs[queue])
        order.emplace_back(fmt::format("{}-{}", queue, i), queue);
    }
  }
  const auto t0 = Clock::now();
  bench::parallel_for(static_cast<int>(order.size()), 4, [&](int i) {
    client.create(kube::resources::job(api::JobKind::TFJob), "default",
                  small_job(order[i].first, order[i].second, gpus_per_job, run_seconds));
  });
  fmt::print("submitted in {:.1f} s\n", seconds_since(t0));

  // Integrate until the window has run, or a queue has nothing left to ask for.
  std::map<std::string, double> admitted, running;  // GPU-seconds
  double started = -1, ended = -1, busy = 0;
  double peak = 0;                   // the most GPUs admitted gangs held at once
  const double limit = window + 60;  // the controller must start admitting by then
  for (auto next = Clock::now(); seconds_since(t0) < limit; next += kSample) {
    std::this_thread::sleep_until(next);
    const Sample s = sample(training.sandbox.store());
    const double now = seconds_since(t0);
    const bool both_hold = s.admitted_milli.size() == kQueues.size();
    const bool both_wait = s.pending.size() == kQueues.size();
    if (started < 0 && both_hold && both_wait) {
      started = now;
      fmt::print("contended from {:.1f} s after the first submit\n", started);
    }
    if (started < 0)
      continue;
    if (!both_wait || now - started >= window) {
      ended = now;
      if (!both_wait)
        fmt::print("a queue ran out of pending jobs at {:.1f} s\n", now);
      break;
    }
    const double dt = std::chrono::duration<double>(kSample).count();
    for (const auto& [queue, weight] : kQueues) {
      admitted[queue] += dt * gpus(s.admitted_milli, queue);
      running[queue] += dt * gpus(s.running_milli, queue);
    }
    busy += dt;
    peak = std::max(peak, gpus(s.admitted_milli, "team-a") + gpus(s.admitted_milli, "team-b"));
  }
  bench::stop(controller, SIGTERM);
  if (started < 0 || ended < 0) {
    fmt::print("FAIL: no contended window within {:.0f} s (see {})\n", limit,
               (dir.path() / "controller.log").string());
    return 1;
  }
  const double ratio = admitted["team-b"] > 0 ? admitted["team-a"] / admitted["team-b"] : 0;
  const double running_ratio = running["team-b"] > 0 ? running["team-a"] / running["team-b"] : 0;
  const double utilisation = (admitted["team-a"] + admitted["team-b"]) / (total_gpus * busy);
  fmt::print(
      "window {:.1f} s: admitted GPU-seconds team-a {:.1f}, team-b {:.1f}, ratio {:.3f} "
      "(reference 3.000, {:+.1f} %)\n",
      busy, admitted["team-a"], admitted["team-b"], ratio, (ratio / 3 - 1) * 100);
  fmt::print("running GPU-seconds team-a {:.1f}, team-b {:.1f}, ratio {:.3f}\n", running["team-a"],
             running["team-b"], running_ratio);
  fmt::print(
      "admitted share of the cluster's GPUs over the window: {:.0f} % (at most {:.0f} of {} at "
      "once); {:.1f} s in all; load average {}\n",
      utilisation * 100, peak, total_gpus, seconds_since(t0), load_average());
  // Admission places reservations node by node; when the scheduler binds a gang's pod on another
  // node than its reservation and the controller's pod cache has seen some bindings and not
  // others, one node looks over-full and another has room that is not there (known; the ratio
  // is still what this run checks).
  if (peak > total_gpus)
    fmt::print("note: admitted gangs held {:.0f} GPUs at once, the cluster has {}\n", peak,
               total_gpus);
  if (std::abs(ratio / 3 - 1) > kTolerance) {
    fmt::print("FAIL: admitted GPU-time ratio {:.3f} is more than {:.0f} % from 3:1\n", ratio,
               kTolerance * 100);
    return 1;
  }
  return 0;
}
