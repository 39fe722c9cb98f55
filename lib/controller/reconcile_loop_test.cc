#include "controller/reconcile_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "controller/controller.h"

namespace trainctl::controller {
namespace {

// Reconciles one key with `reconcile` (given the call's number) until it returns true or `limit`
// passes; returns the calls made.
int calls_until_done(const std::function<bool(int)>& reconcile, std::chrono::seconds limit,
                     std::chrono::milliseconds max_backoff = std::chrono::seconds(1000)) {
  MetricsRegistry metrics;
  declare_controller_metrics(metrics);
  std::ostringstream log_text;
  Logger log(log_text, LogFormat::Text, 0);
  std::atomic<int> calls{0};
  std::atomic<bool> done{false};
  ReconcileLoop<std::string> loop({.name = "test",
                                   .workers = 1,
                                   .metric_kind = [](const std::string&) { return "Test"; },
                                   .reconcile =
                                       [&](const std::string&) {
                                         if (!reconcile(++calls))
                                           return;
                                         done = true;
                                       },
                                   .max_backoff = max_backoff},
                                  metrics, log);
  loop.add("key");
  std::jthread worker([&](std::stop_token stop) { loop.run(stop); });
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return calls;
}

// A key whose writes keep conflicting (its cache is behind, as the one admission key's is while
// it rewrites many PodGroups) is retried every kConflictRetry: 30 conflicts in a row take about
// 3 s. Under the exponential backoff of other errors the 30th retry would wait for the cap.
TEST(ReconcileLoopTest, ConflictsAreRetriedSoonWithoutGrowingTheBackoff) {
  const int calls = calls_until_done(
      [](int call) {
        if (call <= 30)
          throw Error(ErrorKind::Conflict, "the object has been modified");
        return true;
      },
      std::chrono::seconds(20));
  EXPECT_EQ(calls, 31);
}

// A reconcile that failed after some writes went through starts the next attempt where it
// stopped: it is retried soon and its earlier failures no longer count (here 30 in a row, after
// which plain failures back off from the start again).
TEST(ReconcileLoopTest, FailuresAfterProgressAreRetriedSoonAndClearTheBackoff) {
  const int calls = calls_until_done(
      [](int call) {
        if (call <= 30)
          throw FailedAfterProgress(Error(ErrorKind::ServerError, "an error on the server"));
        if (call <= 33)
          throw Error(ErrorKind::ServerError, "an error on the server");
        return true;
      },
      std::chrono::seconds(20));
  EXPECT_EQ(calls, 34);
}

TEST(ReconcileLoopTest, OtherErrorsBackOffExponentially) {
  // 5 ms doubling: the first 9 retries take 2.6 s together, the 10th alone waits 2.6 s more.
  const int calls = calls_until_done(
      [](int) -> bool { throw Error(ErrorKind::ServerError, "an error on the server"); },
      std::chrono::seconds(3));
  EXPECT_GT(calls, 5);
  EXPECT_LT(calls, 12);
}

// A loop with one key for all the work (admission) caps the backoff: a key failing every time
// is still retried every max_backoff.
TEST(ReconcileLoopTest, BackoffStopsGrowingAtMaxBackoff) {
  const int calls = calls_until_done(
      [](int) -> bool { throw Error(ErrorKind::ServerError, "an error on the server"); },
      std::chrono::seconds(3), std::chrono::milliseconds(100));
  EXPECT_GT(calls, 20);  // uncapped: about 10 (see above)
}

}  // namespace
}  // namespace trainctl::controller
