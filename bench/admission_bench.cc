// One builtin admission pass (gang.h: admit) over many pending gangs and thousands of nodes, as
// the controller runs it on every change: the pass's wall time on one core, how it grows with
// the number of gangs, and the placement alone against a linear first-fit scan as reference.
// Arguments, when given, are the numbers of pending gangs to run the pass with (to profile one).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "controller/gang.h"
#include "controller/placement.h"

namespace {

using nlohmann::json;
using trainctl::controller::NodeCapacity;
using trainctl::controller::NodeFacts;
using trainctl::controller::PodDemand;

const auto kNow = std::chrono::system_clock::from_time_t(1'714'564'800);

std::vector<json> cluster(int nodes) {
  std::vector<json> result;
  for (int i = 0; i < nodes; ++i) {
    result.push_back(
        {{"metadata",
          {{"name", fmt::format("node-{:05}", i)},
           {"labels",
            {{"kubernetes.io/hostname", fmt::format("node-{:05}", i)},
             {"pool", i % 10 == 0 ? "a100" : "h100"}}}}},
         {"status",
          {{"allocatable",
            {{"cpu", "96"}, {"memory", "1Ti"}, {"nvidia.com/gpu", "8"}, {"pods", "110"}}},
           {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}});
  }
  return result;
}

/// Pending gangs of 1-64 pods of 1, 2, 4 or 8 GPUs each, in three queues.
std::vector<json> gangs(int count, std::mt19937& random) {
  std::vector<json> result;
  for (int i = 0; i < count; ++i) {
    const int pods = 1 + static_cast<int>(random() % 64);
    const int gpus = 1 << (random() % 4);
    result.push_back({{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                      {"kind", "PodGroup"},
                      {"metadata",
                       {{"name", fmt::format("job-{}", i)},
                        {"namespace", "team"},
                        {"creationTimestamp", fmt::format("2024-05-01T{:02}:{:02}:{:02}Z",
                                                          i / 3600 % 24, i / 60 % 60, i % 60)}}},
                      {"spec",
                       {{"minMember", pods},
                        {"queue", fmt::format("team-{}", i % 3)},
                        {"minResources",
                         {{"nvidia.com/gpu", std::to_string(pods * gpus)},
                          {"cpu", std::to_string(pods * gpus * 8)}}}}}});
  }
  return result;
}

/// The reference: `gangs` gangs of `pods` 1-GPU pods placed first-fit by a linear scan over the
/// nodes' free GPUs for every pod. Aligned so that its inner loop sits in one 64-byte line
/// whatever code comes before it: it ran at half speed when it straddled two.
[[gnu::noinline, gnu::aligned(64)]] void linear_first_fit(std::vector<std::int64_t>& free,
                                                          int gangs, int pods) {
  for (int i = 0; i < gangs; ++i) {
    for (int pod = 0; pod < pods; ++pod) {
      for (auto& f : free) {
        if (f >= 1) {
          --f;
          break;
        }
      }
    }
  }
}

/// CPU seconds `run` takes (the machine may be shared: wall time would count other processes).
double seconds_of(const std::function<void()>& run) {
  const std::clock_t start = std::clock();
  run();
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts = {1'000, 10'000, 100'000};
  if (argc > 1) {
    counts.clear();
    for (int i = 1; i < argc; ++i)
      counts.push_back(std::stoi(argv[i]));
  }
  std::mt19937 random(7);
  const std::vector<json> nodes = cluster(7500);
  std::vector<json> queues;
  for (int q = 0; q < 3; ++q)
    queues.push_back({{"metadata", {{"name", fmt::format("team-{}", q)}}},
                      {"spec", {{"weight", q + 1}}},
                      {"status", {{"state", "Open"}}}});
  fmt::print("admission pass over 7,500 nodes x 8 GPUs (60,000 GPUs), gangs of 1-64 pods:\n");
  for (const int count : counts) {
    const trainctl::controller::AdmissionInput input{
        .pod_groups = gangs(count, random), .queues = queues, .nodes = nodes, .now = kNow};
    std::size_t admitted = 0;
    const double s = seconds_of([&] {
      const auto result = trainctl::controller::admit(input);
      for (const auto& a : result.actions)
        admitted +=
            a.object.contains("status") && a.object["status"].value("phase", "") == "Inqueue";
    });
    // The controller's reconciler always asks for the view too (metrics, `trainctl top`), and
    // runs a pass on every change, on a heap earlier passes have used: the median of three.
    trainctl::controller::AdmissionView view;
    std::vector<double> with_view;
    for (int i = 0; i < 3; ++i)
      with_view.push_back(seconds_of([&] { trainctl::controller::admit(input, {}, &view); }));
    std::sort(with_view.begin(), with_view.end());
    fmt::print(
        "  {:>7} pending gangs: {:8.1f} ms CPU ({} admitted, {:.2f} us per gang); "
        "with the view: {:.1f} ms (median of 3 passes)\n",
        count, s * 1e3, admitted, s * 1e6 / count, with_view[1] * 1e3);
  }

  // Placement alone: 2,000 gangs of 16 x 1-GPU pods first-fit into 7,500 nodes, indexed vs a
  // linear scan over the nodes for every pod (the reference).
  std::vector<NodeFacts> facts;
  for (const auto& n : nodes)
    facts.push_back(*trainctl::controller::schedulable_node(n));
  const json spec = {
      {"containers", {{{"name", "m"}, {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}}}}};
  const PodDemand demand = trainctl::controller::pod_demand("w", 0, 16, spec);
  NodeCapacity capacity(facts);
  const double indexed = seconds_of([&] {
    for (int i = 0; i < 2'000; ++i)
      capacity.place({demand});
  });
  std::vector<std::int64_t> free(facts.size(), 8);
  const double linear = seconds_of([&] { linear_first_fit(free, 2'000, 16); });
  fmt::print(
      "placement of 32,000 pods: indexed {:.1f} ms, linear scan reference {:.1f} ms "
      "(ratio {:.2f})\n",
      indexed * 1e3, linear * 1e3, indexed / linear);
}
