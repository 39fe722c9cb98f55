#include "parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
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

TEST(WorkerPoolTest, RunsEveryTaskOnceAndRethrowsTheLowestIndexOnceAllHaveEnded) {
  WorkerPool pool(4);
  std::mutex mu;
  std::vector<int> runs(8, 0);
  try {
    pool.for_each(runs.size(), [&](std::size_t i) {
      {
        std::lock_guard lock(mu);
        ++runs[i];
      }
      if (i == 6 || i == 3)
        throw std::runtime_error("task " + std::to_string(i));
    });
    FAIL() << "nothing thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 3");
  }
  EXPECT_EQ(runs, std::vector<int>(8, 1));
}

// The executor's slow-start batches: one batch after another must reuse the pool's threads, not
// start new ones, and a batch asks for no more threads than it has tasks beside the caller's.
TEST(WorkerPoolTest, KeepsItsThreadsFromOneBatchToTheNext) {
  WorkerPool pool(16);
  std::atomic<int> threads_seen{0};
  for (int batch = 0; batch < 50; ++batch) {
    pool.for_each(4, [&](std::size_t) {
      // A new thread has its own copy, even where it reuses an ended thread's id and stack.
      thread_local bool counted = false;
      if (!counted) {
        counted = true;
        ++threads_seen;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
  }
  EXPECT_LE(pool.threads(), 3u);
  EXPECT_LE(threads_seen.load(), 4) << "the caller and at most three pool threads";
}

TEST(WorkerPoolTest, ASingleTaskRunsOnTheCallingThread) {
  WorkerPool pool(4);
  std::thread::id ran_on;
  pool.for_each(1, [&](std::size_t) { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(pool.threads(), 0u);
  pool.for_each(0, [](std::size_t) { FAIL(); });
}

TEST(WorkerPoolTest, ManyCallersShareAtMostItsThreads) {
  WorkerPool pool(3);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  std::atomic<int> ran{0};
  {
    std::vector<std::jthread> callers;
    for (int c = 0; c < 4; ++c) {
      callers.emplace_back([&] {
        for (int batch = 0; batch < 10; ++batch) {
          pool.for_each(8, [&](std::size_t) {
            const int now = ++running;
            for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            --running;
            ++ran;
          });
        }
      });
    }
  }
  EXPECT_EQ(ran.load(), 4 * 10 * 8);
  EXPECT_EQ(pool.threads(), 3u);
  EXPECT_LE(most.load(), 4 + 3) << "four callers and the pool's three threads";
}

// A caller runs its own tasks: its batch ends even while every pool thread is held by another
// caller's task, so workers sharing a pool never wait on each other.
TEST(WorkerPoolTest, ABatchEndsWhileEveryPoolThreadIsBusyElsewhere) {
  WorkerPool pool(1);
  std::latch both_held(2), release(1);
  std::jthread other([&] {
    pool.for_each(2, [&](std::size_t) {
      both_held.count_down();
      release.wait();
    });
  });
  both_held.wait();  // the other caller and the pool's one thread are each inside a task
  std::vector<int> runs(5, 0);
  auto mine = std::async(std::launch::async,
                         [&] { pool.for_each(runs.size(), [&](std::size_t i) { ++runs[i]; }); });
  const bool ended = mine.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release.count_down();
  mine.get();
  EXPECT_TRUE(ended) << "the batch waited for a busy pool thread";
  EXPECT_EQ(runs, std::vector<int>(5, 1));
}

}  // namespace
}  // namespace trainctl
