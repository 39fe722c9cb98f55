#include "kube/cache/work_queue.h"

#include <gtest/gtest.h>

#include <future>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "kube/clock.h"
#include "tests/support/fake_clock.h"

namespace trainctl::kube::cache {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(WorkQueueTest, AddDeduplicatesWaitingKeys) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.add("ns/a");
  queue.add("ns/b");
  queue.add("ns/a");
  EXPECT_EQ(queue.len(), 2u);
  EXPECT_EQ(queue.get(), "ns/a");
  EXPECT_EQ(queue.get(), "ns/b");
  EXPECT_EQ(queue.len(), 0u);
}

TEST(WorkQueueTest, KeyAddedWhileProcessingIsQueuedAgainOnlyWhenDone) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.add("ns/a");
  ASSERT_EQ(queue.get(), "ns/a");
  queue.add("ns/a");
  queue.add("ns/a");
  EXPECT_EQ(queue.len(), 0u) << "a second worker must not get a key being processed";
  queue.done("ns/a");
  EXPECT_EQ(queue.len(), 1u);
  EXPECT_EQ(queue.get(), "ns/a");
  queue.done("ns/a");
  EXPECT_EQ(queue.len(), 0u);
}

TEST(WorkQueueTest, GetBlocksUntilAKeyIsAdded) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  std::optional<std::string> got;
  std::thread worker([&] { got = queue.get(); });
  queue.add("ns/late");
  worker.join();
  EXPECT_EQ(got, "ns/late");
}

TEST(WorkQueueTest, RateLimitedBackoffDoublesPerFailureUpToTheCap) {
  testing::FakeClock clock;
  WorkQueue queue(clock, {.qps = 0});  // the token bucket off: per-item backoff alone
  std::vector<milliseconds> delays;
  for (int i = 0; i < 4; ++i) {
    queue.add_rate_limited("ns/a");
    milliseconds waited{0};
    while (queue.len() == 0) {
      clock.advance(milliseconds(1));
      waited += milliseconds(1);
    }
    ASSERT_EQ(queue.get(), "ns/a");
    queue.done("ns/a");
    delays.push_back(waited);
  }
  EXPECT_EQ(delays, (std::vector<milliseconds>{milliseconds(5), milliseconds(10), milliseconds(20),
                                               milliseconds(40)}));
  EXPECT_EQ(queue.num_requeues("ns/a"), 4);

  // After 38 failures 5 ms * 2^38 is far beyond the cap.
  for (int i = 0; i < 38; ++i) {
    queue.add_rate_limited("ns/b");
    clock.advance(seconds(1000));
    ASSERT_EQ(queue.get(), "ns/b");
    queue.done("ns/b");
  }
  queue.add_rate_limited("ns/b");
  clock.advance(seconds(999));
  EXPECT_EQ(queue.len(), 0u) << "the backoff is capped at 1000 s, not less";
  clock.advance(seconds(1));
  EXPECT_EQ(queue.len(), 1u);
}

TEST(WorkQueueTest, ForgetResetsTheBackoff) {
  testing::FakeClock clock;
  WorkQueue queue(clock, {.qps = 0});
  for (int i = 0; i < 5; ++i)
    queue.add_rate_limited("ns/a");
  EXPECT_EQ(queue.num_requeues("ns/a"), 5);
  clock.advance(milliseconds(5));  // the earliest of the five retries
  ASSERT_EQ(queue.get(), "ns/a");
  queue.done("ns/a");
  queue.forget("ns/a");
  EXPECT_EQ(queue.num_requeues("ns/a"), 0);

  queue.add_rate_limited("ns/a");
  clock.advance(milliseconds(5));
  EXPECT_EQ(queue.len(), 1u) << "after forget the next retry waits the base delay, not 160 ms";
}

TEST(WorkQueueTest, TokenBucketSpacesRetriesOfManyKeys) {
  testing::FakeClock clock;
  WorkQueue queue(clock, {.qps = 10, .burst = 2});
  for (const char* key : {"ns/a", "ns/b", "ns/c"})
    queue.add_rate_limited(key);
  clock.advance(milliseconds(5));
  EXPECT_EQ(queue.len(), 2u) << "the burst goes after the per-item delay";
  clock.advance(milliseconds(94));
  EXPECT_EQ(queue.len(), 2u);
  clock.advance(milliseconds(1));
  EXPECT_EQ(queue.len(), 3u) << "the third waits for a token: 100 ms at 10 qps";
}

TEST(WorkQueueTest, AddAfterHandsKeysOutInDueOrder) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.add_after("ns/late", seconds(2));
  queue.add_after("ns/early", seconds(1));
  queue.add_after("ns/late", seconds(3));  // a later time does not postpone it
  EXPECT_EQ(queue.len(), 0u);
  clock.advance(seconds(1));
  EXPECT_EQ(queue.len(), 1u);
  EXPECT_EQ(queue.get(), "ns/early");
  clock.advance(seconds(1));
  EXPECT_EQ(queue.get(), "ns/late");
  queue.add_after("ns/now", seconds(0));
  EXPECT_EQ(queue.len(), 1u);
}

TEST(WorkQueueTest, AddAfterOfAWaitingKeyMovesItEarlier) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.add_after("ns/a", seconds(10));
  queue.add_after("ns/a", seconds(1));
  clock.advance(seconds(1));
  EXPECT_EQ(queue.len(), 1u);
  EXPECT_EQ(queue.get(), "ns/a");
  queue.done("ns/a");
  clock.advance(seconds(9));
  EXPECT_EQ(queue.len(), 0u) << "the key waited once, not twice";
}

// Keys delayed by another thread (an informer's handler) while every worker sleeps in get():
// with nothing due, or until a later key is due.
TEST(WorkQueueTest, AKeyDelayedFromAnotherThreadReachesASleepingWorkerInTime) {
  for (const bool later_key : {false, true}) {
    WorkQueue queue(kube::real_clock());
    if (later_key)
      queue.add_after("ns/late", seconds(30));
    std::stop_source give_up;
    auto got = std::async(std::launch::async, [&] { return queue.get(give_up.get_token()); });
    std::this_thread::sleep_for(milliseconds(50));  // asleep in get()
    queue.add_after("ns/early", milliseconds(20));
    const bool in_time = got.wait_for(seconds(5)) == std::future_status::ready;
    give_up.request_stop();
    EXPECT_TRUE(in_time) << (later_key ? "with a later key due" : "with nothing due");
    EXPECT_EQ(got.get(), "ns/early");
  }
}

TEST(WorkQueueTest, ShutdownHandsOutQueuedKeysThenNullopt) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.add("ns/a");
  queue.add_after("ns/delayed", seconds(1));
  queue.shutdown();
  queue.add("ns/b");
  EXPECT_TRUE(queue.shutting_down());
  EXPECT_EQ(queue.get(), "ns/a");
  clock.advance(seconds(1));
  EXPECT_EQ(queue.get(), std::nullopt);
}

TEST(WorkQueueTest, ShutdownWakesBlockedWorkers) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  std::vector<std::thread> workers;
  std::atomic<int> ended{0};
  for (int i = 0; i < 3; ++i) {
    workers.emplace_back([&] {
      if (!queue.get())
        ++ended;
    });
  }
  queue.shutdown();
  for (auto& w : workers)
    w.join();
  EXPECT_EQ(ended, 3);
}

TEST(WorkQueueTest, GetReturnsNulloptWhenStopped) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  std::stop_source stop;
  std::optional<std::string> got = "unset";
  std::thread worker([&] { got = queue.get(stop.get_token()); });
  stop.request_stop();
  worker.join();
  EXPECT_EQ(got, std::nullopt);
}

TEST(WorkQueueTest, ShutdownWithDrainWaitsForInFlightKeys) {
  testing::FakeClock clock;
  WorkQueue queue(clock);
  queue.add("ns/a");
  ASSERT_EQ(queue.get(), "ns/a");
  std::atomic<bool> drained{false};
  std::thread stopper([&] {
    queue.shutdown_with_drain();
    drained = true;
  });
  while (!queue.shutting_down())
    std::this_thread::yield();
  EXPECT_FALSE(drained) << "a key is still being processed";
  queue.done("ns/a");
  stopper.join();
  EXPECT_TRUE(drained);
}

}  // namespace
}  // namespace trainctl::kube::cache
