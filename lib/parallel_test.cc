#include "parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace trainctl {
namespace {

TEST(ForEachBoundedTest, RunsEveryTaskOnceWithAtMostInFlightAtATime) {
  std::mutex mu;
  std::vector<int> runs(40, 0);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  for_each_bounded(runs.size(), 4, [&](std::size_t i) {
    const int now = ++running;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --running;
    std::lock_guard lock(mu);
    ++runs[i];
  });
  EXPECT_EQ(runs, std::vector<int>(40, 1));
  EXPECT_LE(most.load(), 4);
  EXPECT_GE(most.load(), 2);  // they did overlap: 40 tasks of 2 ms on 4 threads
}

TEST(ForEachBoundedTest, AFailureStopsNoOtherTaskAndTheLowestIndexIsRethrown) {
  std::atomic<int> ran{0};
  try {
    for_each_bounded(10, 3, [&](std::size_t i) {
      ++ran;
      if (i == 7 || i == 2)
        throw std::runtime_error("task " + std::to_string(i));
    });
    FAIL() << "nothing thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 2");
  }
  EXPECT_EQ(ran.load(), 10);
}

TEST(ForEachBoundedTest, NoTasksRunsNothing) {
  for_each_bounded(0, 16, [](std::size_t) { FAIL(); });
}

}  // namespace
}  // namespace trainctl
