#include "api/resources.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/quantity.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

TEST(FormatQuantityTest, WritesCanonicalQuantities) {
  EXPECT_EQ(format_quantity("cpu", 1500), "1500m");
  EXPECT_EQ(format_quantity("cpu", 2000), "2");
  EXPECT_EQ(format_quantity("cpu", 0), "0");
  EXPECT_EQ(format_quantity("cpu", 4'000'000), "4k");
  EXPECT_EQ(format_quantity("nvidia.com/gpu", 2'048'000), "2048");
  EXPECT_EQ(format_quantity("memory", parse_quantity_milli("512Mi")), "512Mi");
  EXPECT_EQ(format_quantity("memory", parse_quantity_milli("1Ti")), "1Ti");
  EXPECT_EQ(format_quantity("memory", parse_quantity_milli("64G")), "64G");
  EXPECT_EQ(format_quantity("memory", parse_quantity_milli("1000")), "1k");
  EXPECT_EQ(format_quantity("hugepages-2Mi", parse_quantity_milli("2Mi")), "2Mi");
}

TEST(FormatQuantityTest, ReadsBackTheSameValue) {
  for (const char* text : {"1536Mi", "3500m", "1.5Gi", "7", "100k", "1e3", "0.25"}) {
    for (const char* resource : {"cpu", "memory"}) {
      const std::int64_t milli = parse_quantity_milli(text);
      EXPECT_EQ(parse_quantity_milli(format_quantity(resource, milli)), milli)
          << resource << " " << text;
    }
  }
}

TEST(FormatQuantityTest, PropertyAnyValueReadsBackTheSameWithTheUsualSuffixes) {
  std::mt19937_64 random(5);
  for (int i = 0; i < 20'000; ++i) {
    // Thousandths times up to four factors of 1000 or 1024 (so suffixes up to T and Ti), either
    // sign.
    std::int64_t milli = static_cast<std::int64_t>(random() % 100'000);
    for (int shifts = static_cast<int>(random() % 5); shifts > 0; --shifts)
      milli *= random() % 2 == 0 ? 1000 : 1024;
    if (random() % 5 == 0)
      milli = -milli;
    for (const char* resource : {"cpu", "memory", "nvidia.com/gpu"}) {
      const std::string text = format_quantity(resource, milli);
      EXPECT_EQ(parse_quantity_milli(text), milli) << resource << " " << text;
      EXPECT_EQ(text.find_first_of(" +"), std::string::npos) << text;
    }
  }
  EXPECT_EQ(format_quantity("cpu", -1500), "-1500m");
  EXPECT_EQ(format_quantity("memory", 3LL * 1024 * 1024 * 1000), "3Mi");
}

TEST(ResourceListTest, ParsesAddsAndWritesLists) {
  ResourceList total = parse_resource_list({{"cpu", "500m"}, {"memory", "1Gi"}});
  add(total, parse_resource_list({{"cpu", 2}, {"nvidia.com/gpu", "4"}}));
  EXPECT_EQ(amount(total, "cpu"), 2500);
  EXPECT_EQ(amount(total, "ephemeral-storage"), 0);
  EXPECT_EQ(resource_list_json(total),
            json({{"cpu", "2500m"}, {"memory", "1Gi"}, {"nvidia.com/gpu", "4"}}));
  EXPECT_TRUE(parse_resource_list(nullptr).empty());
}

TEST(ResourceListTest, BehavesAsAMapOfNamesInOrder) {
  ResourceList list = {{"nvidia.com/gpu", 1000}, {"cpu", 2000}, {"cpu", 9000}};
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list.at("cpu"), 2000);  // of two entries of one name the first counts
  list["memory"] += 5;              // inserted as 0 between the others, then added to
  list["a-first"] = 1;
  list["zz-last"] = 2;
  std::vector<std::string> names;
  for (const auto& [name, value] : list)
    names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"a-first", "cpu", "memory", "nvidia.com/gpu", "zz-last"}));
  EXPECT_EQ(list.at("memory"), 5);
  EXPECT_FALSE(list.try_emplace("cpu", 1).second);
  EXPECT_EQ(list.at("cpu"), 2000);
  EXPECT_TRUE(list.contains("zz-last"));
  EXPECT_EQ(list.count("pods"), 0u);
  EXPECT_THROW(list.at("pods"), std::out_of_range);
  EXPECT_EQ(list.erase("a-first"), 1u);
  EXPECT_EQ(list.erase("a-first"), 0u);
  EXPECT_EQ(erase_if(list, [](const auto& r) { return r.second == 2; }), 1u);
  EXPECT_EQ(list, (ResourceList{{"memory", 5}, {"cpu", 2000}, {"nvidia.com/gpu", 1000}}));
  EXPECT_NE(list, (ResourceList{{"memory", 5}, {"cpu", 2000}}));
  ResourceList empty;
  add(empty, list);
  EXPECT_EQ(empty, list);
}

TEST(ResourceListTest, PropertyAgreesWithAStdMapUnderRandomOperations) {
  std::mt19937 random(11);
  const std::vector<std::string> names = {
      "cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", "example.com/fpga"};
  for (int round = 0; round < 500; ++round) {
    ResourceList list;
    std::map<std::string, std::int64_t> reference;
    for (int op = 0; op < 20; ++op) {
      const std::string& name = names[random() % names.size()];
      const std::int64_t value = static_cast<std::int64_t>(random() % 1000);
      switch (random() % 4) {
        case 0:
          list[name] += value;
          reference[name] += value;
          break;
        case 1:
          list.try_emplace(name, value);
          reference.try_emplace(name, value);
          break;
        case 2:
          list.erase(name);
          reference.erase(name);
          break;
        default: {
          // 1-4 names, in name order as every list is: add walks both lists together.
          ResourceList more = {{name, value}};
          for (int extra = static_cast<int>(random() % 4); extra > 0; --extra)
            more.try_emplace(names[random() % names.size()], extra);
          add(list, more);
          for (const auto& [n, v] : more)
            reference[n] += v;
        }
      }
      ASSERT_EQ(list.size(), reference.size());
      ASSERT_TRUE(std::equal(
          list.begin(), list.end(), reference.begin(), reference.end(),
          [](const auto& a, const auto& b) { return a.first == b.first && a.second == b.second; }));
    }
  }
}

TEST(ResourceListTest, PodRequestsDefaultFromLimitsAndCountInitContainersAtTheirPeak) {
  const json spec = {
      {"initContainers",
       {{{"name", "setup"}, {"resources", {{"requests", {{"cpu", "4"}}}}}},
        {{"name", "proxy"},
         {"restartPolicy", "Always"},
         {"resources", {{"requests", {{"cpu", "100m"}}}}}}}},
      {"containers",
       {{{"name", "main"},
         {"resources",
          {{"requests", {{"cpu", "1"}}}, {"limits", {{"cpu", "2"}, {"nvidia.com/gpu", "1"}}}}}}}}};
  const ResourceList requests = pod_requests(spec);
  EXPECT_EQ(amount(requests, "cpu"), 4000);  // the init container's 4 beats 1 + 100m
  EXPECT_EQ(amount(requests, "nvidia.com/gpu"), 1000);
}

}  // namespace
}  // namespace trainctl::api
