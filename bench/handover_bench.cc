// Gang hand-over (issue 9): on a sandbox with 500 nodes, a queue that holds one gang at a time
// and a line of gangs waiting in it, how long from the last pod of one gang finishing to the
// next gang's pods all created. That span is the controller's whole admission path: the pod's
// status reaching its informer, an admission pass freeing the queue and admitting the next
// PodGroup, its status write, the job reconcile that sees it and the pods' creates.
//
// Reference, same run and sandbox: a raw client doing the least any hand-over needs, as fast as
// it can: it watches a gang's pods, and the moment the last finishes it creates the next gang's
// pods itself (8 concurrent creates). The ratio is controller / reference, per percentile.
//
// Times are those at which the store's own watch (in this process) saw each event, so neither
// run pays for a client between the store and the stopwatch.
//
// Usage: handover_bench [gangs] [nodes]   (defaults: 20 gangs of 8 pods x 8 GPUs, 500 nodes)
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "bench/training_sandbox.h"
#include "kube/client.h"
#include "sandbox/sandbox.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"

using namespace trainctl;
using bench::Clock;
using nlohmann::json;

namespace {

constexpr int kPodsPerGang = 8;
constexpr int kGpusPerPod = 8;
constexpr const char* kRunSeconds = "1";
constexpr const char* kJobLabel = "training.kubeflow.org/job-name";
constexpr const char* kGangLabel = "bench.trainctl.io/gang";  // the reference run's pods

/// When the store saw each gang's pods all created and all finished.
class GangClock {
 public:
  /// Takes one watch event of a pod carrying `label`.
  void see(const json& pod, Clock::time_point at) {
    const json& labels = pod["metadata"].value("labels", json::object());
    const auto gang = labels.find(label_);
    if (gang == labels.end())
      return;
    Gang& g = gangs_[gang->get<std::string>()];
    const std::string name = pod["metadata"]["name"];
    if (g.created.insert(name).second && g.created.size() == kPodsPerGang)
      g.all_created = at;
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    if ((phase == "Succeeded" || phase == "Failed") && g.finished.insert(name).second &&
        g.finished.size() == kPodsPerGang)
      g.all_finished = at;
  }
  explicit GangClock(std::string label) : label_(std::move(label)) {}

  std::optional<Clock::time_point> all_finished(const std::string& gang) const {
    const auto it = gangs_.find(gang);
    return it == gangs_.end() ? std::nullopt : it->second.all_finished;
  }

  /// Hand-over times in ms: gangs in the order they got all their pods; each one's span from
  /// its predecessor's last pod finishing to its own pods all created.
  std::vector<double> handovers() const {
    std::vector<std::pair<Clock::time_point, Clock::time_point>> order;  // {created, finished}
    for (const auto& [name, g] : gangs_) {
      if (g.all_created && g.all_finished)
        order.emplace_back(*g.all_created, *g.all_finished);
    }
    std::sort(order.begin(), order.end());
    std::vector<double> spans;
    for (std::size_t i = 1; i < order.size(); ++i)
      spans.push_back(
          std::chrono::duration<double, std::milli>(order[i].first - order[i - 1].second).count());
    return spans;
  }

 private:
  struct Gang {
    std::set<std::string> created, finished;
    std::optional<Clock::time_point> all_created, all_finished;
  };
  std::string label_;
  std::map<std::string, Gang> gangs_;
};

double percentile(std::vector<double> values, double p) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

json container() {
  return {{"name", "pytorch"},
          {"image", "pt:2"},
          {"resources", {{"limits", {{"nvidia.com/gpu", std::to_string(kGpusPerPod)}}}}}};
}

json gang_job(int index) {
  const json annotations = {{"sandbox.trainctl.io/run-seconds", kRunSeconds}};
  const auto replica = [&](int replicas) {
    return json{{"replicas", replicas},
                {"restartPolicy", "Never"},
                {"template",
                 {{"metadata", {{"annotations", annotations}}},
                  {"spec", {{"containers", json::array({container()})}}}}}};
  };
  return {
      {"apiVersion", "kubeflow.org/v1"},
      {"kind", "PyTorchJob"},
      {"metadata", {{"name", fmt::format("gang-{:03}", index)}, {"namespace", "default"}}},
      {"spec",
       {{"runPolicy", {{"schedulingPolicy", {{"queue", "one-at-a-time"}}}}},
        {"pytorchReplicaSpecs", {{"Master", replica(1)}, {"Worker", replica(kPodsPerGang - 1)}}}}}};
}

json reference_pod(int gang, int index) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", fmt::format("ref-{:03}-{}", gang, index)},
            {"namespace", "default"},
            {"labels", {{kGangLabel, fmt::format("ref-{:03}", gang)}}},
            {"annotations", {{"sandbox.trainctl.io/run-seconds", kRunSeconds}}}}},
          {"spec", {{"restartPolicy", "Never"}, {"containers", json::array({container()})}}}};
}

/// Feeds every pod event of `store` to `clock` until `done(clock)`; false after `limit`.
template <typename Done>
bool follow(sandbox::Store& store, const std::string& from, GangClock& clock, Done done,
            std::chrono::seconds limit) {
  const auto watch = store.watch("pods", {.resource_version = from});
  const auto end_by = Clock::now() + limit;
  while (!done(clock)) {
    if (Clock::now() >= end_by)
      return false;
    if (const auto event = watch->next(std::chrono::milliseconds(100)))
      clock.see(event->object, Clock::now());
  }
  return true;
}

void print_row(const char* what, const std::vector<double>& spans) {
  fmt::print("{:<32} p50 {:7.1f} ms  p99 {:7.1f} ms  max {:7.1f} ms  ({} hand-overs)\n", what,
             percentile(spans, 0.5), percentile(spans, 0.99), percentile(spans, 1.0), spans.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int gangs = argc > 1 ? std::max(2, std::atoi(argv[1])) : 20;
  const int nodes = argc > 2 ? std::max(1, std::atoi(argv[2])) : 500;
  trainctl::testing::TempDir dir;
  bench::TrainingSandbox training(
      bench::TrainingSandbox::gpu_nodes(dir.path() / "sandbox", nodes, kGpusPerPod));
  sandbox::Sandbox& sb = training.sandbox;
  kube::Client& client = training.client;
  fmt::print("handover_bench: {} gangs of {} pods x {} GPUs, one at a time, on {} nodes\n", gangs,
             kPodsPerGang, kGpusPerPod, nodes);

  // Reference: the raw client hands over itself.
  GangClock reference(kGangLabel);
  for (int g = 0; g < gangs; ++g) {
    const std::string from = sb.store().current_resource_version();
    bench::parallel_for(kPodsPerGang, kPodsPerGang, [&](int i) {
      client.create(kube::resources::pods(), "default", reference_pod(g, i));
    });
    const std::string gang = fmt::format("ref-{:03}", g);
    if (!follow(
            sb.store(), from, reference,
            [&](const GangClock& c) { return c.all_finished(gang).has_value(); },
            std::chrono::seconds(60))) {
      fmt::print("reference gang {} did not finish in 60 s\n", gang);
      return 1;
    }
  }

  // The controller: every job waits in a queue that holds one gang's GPUs.
  client.create(
      kube::resources::queues(), "",
      {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
       {"kind", "Queue"},
       {"metadata", {{"name", "one-at-a-time"}}},
       {"spec",
        {{"weight", 1},
         {"capability", {{"nvidia.com/gpu", std::to_string(kPodsPerGang * kGpusPerPod)}}}}}});
  const std::string from = sb.store().current_resource_version();
  for (int g = 0; g < gangs; ++g)
    client.create(kube::resources::job(api::JobKind::PyTorchJob), "default", gang_job(g));
  const pid_t controller =
      bench::spawn({TRAINCTL_BINARY, "controller", "--kubeconfig", sb.kubeconfig_path().string(),
                    "--gang-scheduler", "builtin", "--metrics-bind-address", "0",
                    "--health-probe-bind-address", "0", "-v", "0"});
  GangClock controlled(kJobLabel);
  const bool all = follow(
      sb.store(), from, controlled,
      [&](const GangClock& c) {
        for (int g = 0; g < gangs; ++g) {
          if (!c.all_finished(fmt::format("gang-{:03}", g)))
            return false;
        }
        return true;
      },
      std::chrono::seconds(30 + 10 * gangs));
  bench::stop(controller, SIGTERM);
  if (!all) {
    fmt::print("the controller's gangs did not all finish\n");
    return 1;
  }

  const std::vector<double> by_controller = controlled.handovers();
  const std::vector<double> by_reference = reference.handovers();
  print_row("controller (builtin admission)", by_controller);
  print_row("reference (raw client)", by_reference);
  fmt::print("ratio controller / reference: p50 {:.1f}, p99 {:.1f}\n",
             percentile(by_controller, 0.5) / std::max(percentile(by_reference, 0.5), 0.001),
             percentile(by_controller, 0.99) / std::max(percentile(by_reference, 0.99), 0.001));
  return 0;
}
