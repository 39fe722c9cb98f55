#include "controller/placement.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "controller/queue_share.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

json gpu_node(const std::string& name, int gpus, json labels = json::object(),
              json taints = json::array()) {
  return {{"metadata", {{"name", name}, {"labels", std::move(labels)}}},
          {"spec", {{"taints", std::move(taints)}}},
          {"status",
           {{"allocatable", {{"cpu", "32"}, {"memory", "256Gi"}, {"nvidia.com/gpu", gpus}}},
            {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
}

NodeCapacity capacity_of(const std::vector<json>& nodes) {
  std::vector<NodeFacts> facts;
  for (const auto& n : nodes) {
    if (auto f = schedulable_node(n))
      facts.push_back(std::move(*f));
  }
  return NodeCapacity(std::move(facts));
}

PodDemand gpu_pods(const std::string& name, int count, int each, json spec = json::object()) {
  spec["containers"] = {
      {{"name", "main"}, {"resources", {{"limits", {{"nvidia.com/gpu", each}}}}}}};
  return pod_demand(name, 0, count, spec);
}

TEST(PlacementTest, FragmentedGpusDoNotFitAndTheMessageNamesTheLargestFreeNode) {
  NodeCapacity nodes = capacity_of(
      {gpu_node("node-1", 4), gpu_node("node-2", 4), gpu_node("node-3", 4), gpu_node("node-4", 4)});
  for (std::size_t i = 0; i < nodes.size(); ++i)
    nodes.take(i, {{"nvidia.com/gpu", i == 2 ? 1000 : 2000}});  // node-3 has 3 free, others 2
  std::string why;
  EXPECT_FALSE(nodes.place({gpu_pods("bert-worker", 2, 4)}, &why));
  EXPECT_EQ(why,
            "no node fits pod bert-worker-0: needs 4 nvidia.com/gpu, largest free on one node is 3 "
            "(node-3)");
  EXPECT_EQ(nodes.total_free().at("nvidia.com/gpu"), 9000);  // nothing taken by the failure
}

TEST(PlacementTest, FirstFitDecreasingPlacesTheLargestPodsFirstInNodeNameOrder) {
  NodeCapacity nodes = capacity_of({gpu_node("b", 8), gpu_node("a", 4)});
  const auto placed = nodes.place({gpu_pods("small", 2, 2), gpu_pods("big", 1, 8)});
  ASSERT_TRUE(placed);
  // big (8) first: only b has 8; then the 2-GPU pods first-fit: both on a.
  EXPECT_THAT(placed->nodes[1], ::testing::ElementsAre(std::pair<std::size_t, int>{1, 1}));
  EXPECT_THAT(placed->nodes[0], ::testing::ElementsAre(std::pair<std::size_t, int>{0, 2}));
  EXPECT_EQ(nodes.name(0), "a");
  EXPECT_EQ(nodes.free(0).at("nvidia.com/gpu"), 0);
}

TEST(PlacementTest, NodeSelectorAffinityAndTaintsDecideWhereAPodMayGo) {
  const json tainted = json::array({{{"key", "gpu"}, {"value", "a100"}, {"effect", "NoSchedule"}}});
  const json soft =
      json::array({{{"key", "spot"}, {"value", "yes"}, {"effect", "PreferNoSchedule"}}});
  NodeCapacity nodes = capacity_of({gpu_node("a", 8, {{"zone", "x"}, {"gen", "3"}}, tainted),
                                    gpu_node("b", 8, {{"zone", "y"}, {"gen", "5"}}, soft),
                                    gpu_node("c", 8, {{"zone", "x"}, {"gen", "4"}})});
  std::string why;
  // Needs zone x and gen > 3: only c (a is gen 3). PreferNoSchedule on b never matters.
  json affinity = {{"affinity",
                    {{"nodeAffinity",
                      {{"requiredDuringSchedulingIgnoredDuringExecution",
                        {{"nodeSelectorTerms",
                          {{{"matchExpressions",
                             {{{"key", "zone"}, {"operator", "In"}, {"values", {"x"}}},
                              {{"key", "gen"}, {"operator", "Gt"}, {"values", {"3"}}}}}}}}}}}}}}};
  auto placed = nodes.place({gpu_pods("w", 1, 8, affinity)}, &why);
  ASSERT_TRUE(placed) << why;
  EXPECT_EQ(nodes.name(placed->nodes[0][0].first), "c");
  // zone x again: c is full, a is tainted.
  EXPECT_FALSE(nodes.place({gpu_pods("w", 1, 1, {{"nodeSelector", {{"zone", "x"}}}})}, &why));
  EXPECT_EQ(why, "no node fits pod w-0: needs 1 nvidia.com/gpu, largest free on one node is 0 (c)");
  // NotIn / DoesNotExist, with the taint tolerated.
  json tolerant = {{"tolerations", {{{"key", "gpu"}, {"operator", "Exists"}}}},
                   {"affinity",
                    {{"nodeAffinity",
                      {{"requiredDuringSchedulingIgnoredDuringExecution",
                        {{"nodeSelectorTerms",
                          {{{"matchExpressions",
                             {{{"key", "zone"}, {"operator", "NotIn"}, {"values", {"y"}}},
                              {{"key", "spot"}, {"operator", "DoesNotExist"}}}}}}}}}}}}}};
  placed = nodes.place({gpu_pods("t", 1, 8, tolerant)}, &why);
  ASSERT_TRUE(placed) << why;
  EXPECT_EQ(nodes.name(placed->nodes[0][0].first), "a");
  // Untolerated taints and unmatched selectors, counted as kube-scheduler words them.
  EXPECT_FALSE(nodes.place({gpu_pods("u", 1, 1, {{"nodeSelector", {{"zone", "x"}}}})}, &why));
  EXPECT_FALSE(nodes.place({gpu_pods("v", 1, 1, {{"nodeSelector", {{"zone", "z"}}}})}, &why));
  EXPECT_EQ(why,
            "no node fits pod v-0: 0/3 nodes are available: 2 node(s) didn't match Pod's node "
            "affinity/selector, 1 node(s) had untolerated taint {gpu: a100}");
}

TEST(PlacementTest, ExtendedResourcesAndThePodCountLimitAreCapacityToo) {
  json n = gpu_node("a", 0);
  n["status"]["allocatable"]["example.com/fpga"] = "2";
  n["status"]["allocatable"]["pods"] = "3";
  NodeCapacity nodes = capacity_of({n});
  json spec = {
      {"containers", {{{"name", "m"}, {"resources", {{"limits", {{"example.com/fpga", 1}}}}}}}}};
  std::string why;
  EXPECT_FALSE(nodes.place({pod_demand("f", 0, 3, spec)}, &why));
  EXPECT_EQ(why,
            "no node fits pod f-2: needs 1 example.com/fpga, largest free on one node is 0 (a)");
  EXPECT_TRUE(nodes.place({pod_demand("f", 0, 2, spec)}));
  json plain = {{"containers", {{{"name", "m"}}}}};
  EXPECT_FALSE(nodes.place({pod_demand("p", 0, 2, plain)}, &why));
  EXPECT_EQ(why, "no node fits pod p-1: every node it may run on has its most pods");
  json rdma = {{"containers", {{{"name", "m"}, {"resources", {{"limits", {{"rdma/hca", 1}}}}}}}}};
  EXPECT_FALSE(nodes.place({pod_demand("r", 0, 1, rdma)}, &why));
  EXPECT_EQ(why, "no node fits pod r-0: needs 1 rdma/hca, no node has any");
}

// A cluster with no schedulable node (all NotReady or cordoned) fits no pod, and says so: the
// pass threw std::out_of_range here before (its `pods` was not indexed without a node).
TEST(PlacementTest, WithoutNodesNoPodFits) {
  NodeCapacity none(std::vector<NodeFacts>{});
  json spec = {
      {"containers", {{{"name", "m"}, {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}}}}};
  std::string why;
  EXPECT_FALSE(none.place({pod_demand("w", 0, 1, spec)}, &why));
  EXPECT_EQ(why, "no node fits pod w-0: no node is Ready and schedulable");
  EXPECT_FALSE(none.place({pod_demand("p", 0, 1, {{"containers", {{{"name", "m"}}}}})}, &why));
  EXPECT_EQ(why, "no node fits pod p-0: no node is Ready and schedulable");
}

TEST(PlacementTest, AWhatIfTakesNothing) {
  NodeCapacity nodes = capacity_of({gpu_node("a", 4)});
  EXPECT_TRUE(nodes.place({gpu_pods("w", 1, 4)}, nullptr, false));
  EXPECT_TRUE(nodes.place({gpu_pods("w", 1, 4)}));
  EXPECT_FALSE(nodes.place({gpu_pods("w", 1, 1)}));
}

// Admission places on copies (what is free now, in the future, a preemption's trial): a copy
// shares its nodes' names and labels with the original but none of what is free on them.
TEST(PlacementTest, ACopyPlacesIndependentlyOfItsOriginal) {
  NodeCapacity original = capacity_of({gpu_node("a", 8, {{"pool", "h100"}}), gpu_node("b", 8)});
  NodeCapacity copy = original;
  ASSERT_TRUE(copy.place({gpu_pods("w", 2, 8, {{"nodeSelector", {{"pool", "h100"}}}})}) ==
              std::nullopt);
  const auto placed = copy.place({gpu_pods("w", 1, 8, {{"nodeSelector", {{"pool", "h100"}}}})});
  ASSERT_TRUE(placed);
  EXPECT_EQ(copy.name(placed->nodes[0][0].first), "a");
  EXPECT_EQ(copy.free(0).at("nvidia.com/gpu"), 0);
  EXPECT_EQ(original.free(0).at("nvidia.com/gpu"), 8000);
  EXPECT_EQ(original.name(0), "a");
  EXPECT_EQ(original.find("b"), 1U);
  copy = original;  // assignment shares the nodes too and restores what is free
  EXPECT_TRUE(copy.place({gpu_pods("w", 1, 8, {{"nodeSelector", {{"pool", "h100"}}}})}));
}

// total_free is made once and kept until the capacity changes: every change shows in it, a
// what-if's and a refusal's included (they take nothing), and a copy's change not in the
// original's.
TEST(PlacementTest, TotalFreeFollowsEveryChange) {
  NodeCapacity nodes = capacity_of({gpu_node("a", 4), gpu_node("b", 4)});
  const auto gpus = [](const NodeCapacity& c) { return c.total_free().at("nvidia.com/gpu"); };
  EXPECT_EQ(gpus(nodes), 8000);
  ASSERT_TRUE(nodes.place({gpu_pods("w", 1, 3)}));
  EXPECT_EQ(gpus(nodes), 5000);
  nodes.take(1, {{"nvidia.com/gpu", 1000}});
  EXPECT_EQ(gpus(nodes), 4000);
  EXPECT_TRUE(nodes.place({gpu_pods("w", 1, 3)}, nullptr, false));
  EXPECT_FALSE(nodes.place({gpu_pods("w", 2, 3)}));
  EXPECT_EQ(gpus(nodes), 4000);
  NodeCapacity copy = nodes;
  copy.take(0, {{"nvidia.com/gpu", 1000}});
  EXPECT_EQ(gpus(copy), 3000);
  EXPECT_EQ(gpus(nodes), 4000);
}

/// Whether `pods` (GPUs per pod) fit on `free` (GPUs per node) by trying every assignment.
bool fits_brute_force(const std::vector<int>& pods, std::vector<int> free, std::size_t i = 0) {
  if (i == pods.size())
    return true;
  for (auto& f : free) {
    if (f >= pods[i]) {
      f -= pods[i];
      if (fits_brute_force(pods, free, i + 1))
        return true;
      f += pods[i];
    }
  }
  return false;
}

// Property: on many random small clusters, whatever the placement admits fits node by node
// (checked by brute force on its own placement), never takes more than a node has, and a gang it
// refuses is refused whole (nothing taken). First-fit-decreasing may refuse a gang that some
// assignment fits; it must never accept one that none fits.
TEST(PlacementTest, PropertyEveryAcceptedGangFitsNodeByNodeAndRefusalsTakeNothing) {
  std::mt19937 random(42);
  int accepted = 0, refused = 0;
  for (int round = 0; round < 300; ++round) {
    const int node_count = 1 + static_cast<int>(random() % 5);
    std::vector<json> nodes;
    std::vector<int> free;
    for (int n = 0; n < node_count; ++n) {
      free.push_back(static_cast<int>(random() % 9));
      nodes.push_back(gpu_node("n" + std::to_string(n), free.back()));
    }
    NodeCapacity capacity_now = capacity_of(nodes);
    for (int gang = 0; gang < 4; ++gang) {
      std::vector<PodDemand> demands;
      std::vector<int> pods, each_of;
      const int shapes = 1 + static_cast<int>(random() % 2);
      for (int s = 0; s < shapes; ++s) {
        const int count = 1 + static_cast<int>(random() % 3);
        const int each = 1 + static_cast<int>(random() % 4);
        demands.push_back(gpu_pods("g" + std::to_string(s), count, each));
        pods.insert(pods.end(), count, each);
        each_of.push_back(each);
      }
      const int total_before = static_cast<int>(capacity_now.total_free().at("nvidia.com/gpu"));
      const auto placed = capacity_now.place(demands);
      if (!placed) {
        ++refused;
        EXPECT_EQ(capacity_now.total_free().at("nvidia.com/gpu"), total_before);
        continue;
      }
      ++accepted;
      EXPECT_TRUE(fits_brute_force(pods, free));
      for (std::size_t d = 0; d < demands.size(); ++d) {
        int placed_pods = 0;
        for (const auto& [index, count] : placed->nodes[d]) {
          const int node_index = std::stoi(capacity_now.name(index).substr(1));
          free[node_index] -= count * each_of[d];
          placed_pods += count;
        }
        EXPECT_EQ(placed_pods, demands[d].count);
      }
      for (int n = 0; n < node_count; ++n) {
        EXPECT_GE(free[n], 0);
        const auto index = capacity_now.find("n" + std::to_string(n));
        EXPECT_EQ(capacity_now.free(*index).at("nvidia.com/gpu"), free[n] * 1000);
      }
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
}

// take() brings a node's place in the first-fit trees up to date only when the next placement
// needs it (an admission pass takes every bound pod and reservation before it places anything).
// Property: on random clusters of two pools, after random takes, copies and placements, every
// placement and why-not message is the one a capacity built afresh from what is left gives.
TEST(PlacementTest, PropertyTakesAreSeenByTheNextPlacementAsByACapacityBuiltFromTheirResult) {
  std::mt19937 random(7);
  int fitted = 0, refused = 0;
  for (int round = 0; round < 150; ++round) {
    const int node_count = 1 + static_cast<int>(random() % 40);
    std::vector<int> free;
    std::vector<std::string> pools;
    std::vector<json> nodes;
    for (int n = 0; n < node_count; ++n) {
      free.push_back(static_cast<int>(random() % 9));
      pools.push_back(random() % 2 ? "a" : "b");
      nodes.push_back(gpu_node(fmt::format("n{:02}", n), free.back(), {{"pool", pools.back()}}));
    }
    NodeCapacity capacity = capacity_of(nodes);
    for (int step = 0; step < 6; ++step) {
      for (int t = static_cast<int>(random() % 12); t > 0; --t) {
        const int n = static_cast<int>(random() % node_count);
        const int gpus = std::min(free[n], static_cast<int>(random() % 3));
        capacity.take(*capacity.find(fmt::format("n{:02}", n)), {{"nvidia.com/gpu", gpus * 1000}});
        free[n] -= gpus;
      }
      if (random() % 3 == 0)
        capacity = NodeCapacity(capacity);  // a copy carries the takes not yet seen
      std::vector<json> left;
      for (int n = 0; n < node_count; ++n)
        left.push_back(gpu_node(fmt::format("n{:02}", n), free[n], {{"pool", pools[n]}}));
      NodeCapacity reference = capacity_of(left);
      json spec = json::object();
      if (random() % 2)
        spec["nodeSelector"] = {{"pool", "a"}};
      const std::vector<PodDemand> demands = {gpu_pods("w", 1 + static_cast<int>(random() % 3),
                                                       1 + static_cast<int>(random() % 4), spec)};
      std::string why, why_reference;
      const auto placed = capacity.place(demands, &why);
      const auto expected = reference.place(demands, &why_reference);
      ASSERT_EQ(placed.has_value(), expected.has_value()) << "round " << round;
      EXPECT_EQ(why, why_reference);
      if (!placed) {
        ++refused;
        continue;
      }
      ++fitted;
      EXPECT_EQ(placed->nodes, expected->nodes);
      for (const auto& [index, count] : placed->nodes[0])
        free[std::stoi(capacity.name(index).substr(1))] -=
            count * demands[0].requests.at("nvidia.com/gpu") / 1000;
    }
  }
  EXPECT_GT(fitted, 200);
  EXPECT_GT(refused, 100);
}

TEST(QueueShareTest, ProportionSplitsByWeightCappedByRequestAndCapability) {
  // The worked example of gang.h: 40 GPUs, a (weight 3) asks 48, b (weight 1) asks 8, c nothing.
  const auto deserved =
      deserved_shares({{.name = "a", .weight = 3, .request = {{"nvidia.com/gpu", 48000}}},
                       {.name = "b", .weight = 1, .request = {{"nvidia.com/gpu", 8000}}},
                       {.name = "c", .weight = 1}},
                      {{"nvidia.com/gpu", 40000}});
  EXPECT_EQ(deserved.at("a").at("nvidia.com/gpu"), 32000);
  EXPECT_EQ(deserved.at("b").at("nvidia.com/gpu"), 8000);
  EXPECT_EQ(deserved.at("c").at("nvidia.com/gpu"), 0);
  // Capability caps a; guarantee lifts c.
  const auto capped =
      deserved_shares({{.name = "a",
                        .weight = 3,
                        .capability = {{"nvidia.com/gpu", 20000}},
                        .request = {{"nvidia.com/gpu", 48000}}},
                       {.name = "b", .weight = 1, .request = {{"nvidia.com/gpu", 48000}}},
                       {.name = "c", .weight = 1, .guarantee = {{"nvidia.com/gpu", 4000}}}},
                      {{"nvidia.com/gpu", 40000}});
  EXPECT_EQ(capped.at("a").at("nvidia.com/gpu"), 20000);
  EXPECT_EQ(capped.at("b").at("nvidia.com/gpu"), 20000);
  EXPECT_EQ(capped.at("c").at("nvidia.com/gpu"), 4000);
  EXPECT_DOUBLE_EQ(queue_share({{"nvidia.com/gpu", 24000}}, deserved.at("a")), 0.75);
  EXPECT_DOUBLE_EQ(queue_share({}, deserved.at("b")), 0);
}

TEST(QueueShareTest, PriorityClassesResolveByNameWithGlobalDefaultAndUnknownAsZero) {
  const PriorityClasses classes(
      {{{"metadata", {{"name", "high"}}}, {"value", 1000}},
       {{"metadata", {{"name", "normal"}}}, {"value", 100}, {"globalDefault", true}}});
  EXPECT_EQ(classes.resolve("high").value, 1000);
  EXPECT_EQ(classes.resolve("").value, 100);
  EXPECT_EQ(classes.resolve("urgent").value, 0);
  EXPECT_EQ(classes.resolve("urgent").note, "priority class urgent not found, using 0");
  EXPECT_TRUE(classes.resolve("high").note.empty());
}

}  // namespace
}  // namespace trainctl::controller
