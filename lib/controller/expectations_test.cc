#include "controller/expectations.h"

#include <gtest/gtest.h>

namespace trainctl::controller {
namespace {

using namespace std::chrono_literals;

const Expectations::TimePoint kNow{std::chrono::seconds(1000)};

TEST(ExpectationsTest, CreatedNamesAreAwaitedUntilSeenOrTheDeadline) {
  Expectations e;
  e.expect("tf/a", {"pods/a-worker-0", "pods/a-worker-1"}, kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", kNow));
  e.observe("tf/a", "pods/a-worker-0");
  EXPECT_FALSE(e.satisfied("tf/a", kNow));
  EXPECT_EQ(e.pending("tf/a"), "pods/a-worker-1");
  e.observe("tf/a", "pods/a-worker-1");
  EXPECT_TRUE(e.satisfied("tf/a", kNow));

  // Writes that failed or were never sent are not waited for.
  e.expect("tf/a", {"pods/a-worker-2", "pods/a-worker-3"}, kNow + 30s);
  e.drop("tf/a", {"pods/a-worker-2", "pods/a-worker-3"});
  EXPECT_TRUE(e.satisfied("tf/a", kNow));

  e.expect("tf/a", {"pods/a-worker-2"}, kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", kNow + 29s));
  EXPECT_TRUE(e.satisfied("tf/a", kNow + 30s)) << "an event lost with a dropped watch lapses";
  EXPECT_TRUE(e.satisfied("tf/a", kNow)) << "and is dropped once lapsed";
}

TEST(ExpectationsTest, AJobWriteIsShownByItsVersionOrAnEarlierDeliveredOne) {
  Expectations e;
  e.expect_job_version("tf/a", "120", kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", kNow));
  e.observe_job_version("tf/a", "119");
  EXPECT_FALSE(e.satisfied("tf/a", kNow)) << "an older version is not the write";
  e.observe_job_version("tf/a", "120");
  EXPECT_TRUE(e.satisfied("tf/a", kNow));

  // The event arrived before the write returned.
  e.observe_job_version("tf/a", "130");
  e.expect_job_version("tf/a", "130", kNow + 30s);
  EXPECT_TRUE(e.satisfied("tf/a", kNow));
}

// An informer that relisted after a dropped watch shows the newest version only: a later version
// shows the write too, or the next reconcile would wait out the whole deadline (found by
// chaos_bench: queued jobs waited 30 s at a time after watch drops).
TEST(ExpectationsTest, ALaterVersionShowsTheWriteAsAfterARelist) {
  Expectations e;
  e.expect_job_version("tf/a", "120", kNow + 30s);
  e.observe_job_version("tf/a", "125");
  EXPECT_TRUE(e.satisfied("tf/a", kNow));

  e.observe_job_version("tf/b", "200");
  e.expect_job_version("tf/b", "180", kNow + 30s);
  EXPECT_TRUE(e.satisfied("tf/b", kNow)) << "already shown by a later delivered version";

  // Versions that are not numbers compare only equal.
  e.expect_job_version("tf/c", "v2", kNow + 30s);
  e.observe_job_version("tf/c", "v3");
  EXPECT_FALSE(e.satisfied("tf/c", kNow));
  e.observe_job_version("tf/c", "v2");
  EXPECT_TRUE(e.satisfied("tf/c", kNow));
}

TEST(ExpectationsTest, ForgetDropsEverythingAboutAJob) {
  Expectations e;
  e.expect("tf/a", {"pods/a-0"}, kNow + 30s);
  e.observe_job_version("tf/a", "300");
  e.forget("tf/a");
  EXPECT_TRUE(e.satisfied("tf/a", kNow));
  e.expect_job_version("tf/a", "250", kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", kNow)) << "the versions seen before were forgotten too";
}

}  // namespace
}  // namespace trainctl::controller
