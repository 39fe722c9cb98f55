#include "controller/expectations.h"

#include <gtest/gtest.h>

namespace trainctl::controller {
namespace {

using namespace std::chrono_literals;

const Expectations::TimePoint kNow{std::chrono::seconds(1000)};

TEST(ExpectationsTest, CreatedNamesAreAwaitedUntilSeenOrTheDeadline) {
  Expectations e;
  e.expect("tf/a", "uid-a", {"pods/a-worker-0", "pods/a-worker-1"}, kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", "uid-a", kNow));
  e.observe("tf/a", "pods/a-worker-0");
  EXPECT_FALSE(e.satisfied("tf/a", "uid-a", kNow));
  EXPECT_EQ(e.pending("tf/a"), "pods/a-worker-1");
  e.observe("tf/a", "pods/a-worker-1");
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));

  // Writes that failed or were never sent are not waited for.
  e.expect("tf/a", "uid-a", {"pods/a-worker-2", "pods/a-worker-3"}, kNow + 30s);
  e.drop("tf/a", {"pods/a-worker-2", "pods/a-worker-3"});
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));

  e.expect("tf/a", "uid-a", {"pods/a-worker-2"}, kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", "uid-a", kNow + 29s));
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow + 30s))
      << "an event lost with a dropped watch lapses";
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow)) << "and is dropped once lapsed";
}

TEST(ExpectationsTest, AJobWriteIsShownByItsVersionOrAnEarlierDeliveredOne) {
  Expectations e;
  e.expect_job_version("tf/a", "uid-a", "120", kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", "uid-a", kNow));
  e.observe_job_version("tf/a", "119");
  EXPECT_FALSE(e.satisfied("tf/a", "uid-a", kNow)) << "an older version is not the write";
  e.observe_job_version("tf/a", "120");
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));

  // The event arrived before the write returned.
  e.observe_job_version("tf/a", "130");
  e.expect_job_version("tf/a", "uid-a", "130", kNow + 30s);
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));
}

// An informer that relisted after a dropped watch shows the newest version only: a later version
// shows the write too, or the next reconcile would wait out the whole deadline (found by
// chaos_bench: queued jobs waited 30 s at a time after watch drops).
TEST(ExpectationsTest, ALaterVersionShowsTheWriteAsAfterARelist) {
  Expectations e;
  e.expect_job_version("tf/a", "uid-a", "120", kNow + 30s);
  e.observe_job_version("tf/a", "125");
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));

  e.observe_job_version("tf/b", "200");
  e.expect_job_version("tf/b", "uid-b", "180", kNow + 30s);
  EXPECT_TRUE(e.satisfied("tf/b", "uid-b", kNow)) << "already shown by a later delivered version";

  // Versions that are not numbers compare only equal.
  e.expect_job_version("tf/c", "uid-c", "v2", kNow + 30s);
  e.observe_job_version("tf/c", "v3");
  EXPECT_FALSE(e.satisfied("tf/c", "uid-c", kNow));
  e.observe_job_version("tf/c", "v2");
  EXPECT_TRUE(e.satisfied("tf/c", "uid-c", kNow));
}

TEST(ExpectationsTest, ForgetDropsEverythingAboutAJob) {
  Expectations e;
  e.expect("tf/a", "uid-a", {"pods/a-0"}, kNow + 30s);
  e.observe_job_version("tf/a", "300");
  e.forget("tf/a");
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));
  e.expect_job_version("tf/a", "uid-a", "250", kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", "uid-a", kNow)) << "the versions seen before were forgotten too";
}

// A job deleted and created again under its name must not wait for its predecessor's writes: a
// reconcile in flight during the deletion records them after the deletion forgot the key, and the
// new job would wait the whole deadline for pods of the old one.
TEST(ExpectationsTest, AJobCreatedAgainUnderItsNameDoesNotWaitForItsPredecessor) {
  Expectations e;
  e.forget("tf/a");
  e.expect("tf/a", "old", {"pods/a-worker-0"}, kNow + 30s);
  EXPECT_FALSE(e.satisfied("tf/a", "old", kNow));
  EXPECT_TRUE(e.satisfied("tf/a", "new", kNow));
  EXPECT_TRUE(e.satisfied("tf/a", "old", kNow)) << "dropped once a job of another uid asked";

  e.expect("tf/a", "old", {"pods/a-worker-0"}, kNow + 30s);
  e.expect_job_version("tf/a", "new", "400", kNow + 30s);
  EXPECT_EQ(e.pending("tf/a"), "job@400") << "the new job's write replaces the old job's";
  EXPECT_FALSE(e.satisfied("tf/a", "new", kNow));
}

// A reconcile that settles (nothing more to do once its writes show) makes the next one skip
// planning while only those writes show up: its expected creates and deletes, and the job at the
// version it wrote. Any other change of the job or its objects unsettles it.
TEST(ExpectationsTest, AJobSettlesUntilSomethingButItsOwnWritesChanges) {
  Expectations e;
  {
    const Expectations::Reading reading = e.start_reading("tf/a");
    e.expect("tf/a", "uid-a", {"pods/a-worker-0", "services/a-worker-0"}, kNow + 30s);
    e.settle(reading, "uid-a", "200");
  }
  EXPECT_FALSE(e.settled("tf/a", "uid-a", "200")) << "its writes have not all shown";
  e.observe("tf/a", "pods/a-worker-0");
  e.observe("tf/a", "services/a-worker-0");
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow));
  EXPECT_TRUE(e.settled("tf/a", "uid-a", "200")) << "the echoes of its own writes are no change";
  EXPECT_FALSE(e.settled("tf/a", "uid-a", "201")) << "the job changed since";
  EXPECT_FALSE(e.settled("tf/a", "uid-b", "200")) << "another job under the name";

  e.observe("tf/a", "pods/a-worker-0");  // modified: scheduled, say
  EXPECT_FALSE(e.settled("tf/a", "uid-a", "200"));

  // A change counted while a reconcile read: it may not have seen it, so it does not settle.
  {
    const Expectations::Reading reading = e.start_reading("tf/a");
    e.observe("tf/a", "pods/a-worker-1");
    e.observe("tf/b", "pods/b-worker-0");  // another job's: counted for it alone
    e.settle(reading, "uid-a", "200");
  }
  EXPECT_FALSE(e.settled("tf/a", "uid-a", "200"));
  {
    const Expectations::Reading reading = e.start_reading("tf/a");
    e.observe("tf/b", "pods/b-worker-0");
    e.settle(reading, "uid-a", "200");
  }
  EXPECT_TRUE(e.settled("tf/a", "uid-a", "200"));

  // Writes that lapsed without showing void the settle; forget() drops it with the rest.
  {
    const Expectations::Reading reading = e.start_reading("tf/a");
    e.expect("tf/a", "uid-a", {"pods/a-worker-2"}, kNow + 30s);
    e.settle(reading, "uid-a", "300");
  }
  EXPECT_TRUE(e.satisfied("tf/a", "uid-a", kNow + 30s));
  EXPECT_FALSE(e.settled("tf/a", "uid-a", "300"));
  {
    const Expectations::Reading reading = e.start_reading("tf/a");
    e.settle(reading, "uid-a", "300");
  }
  EXPECT_TRUE(e.settled("tf/a", "uid-a", "300"));
  e.forget("tf/a");
  EXPECT_FALSE(e.settled("tf/a", "uid-a", "300"));
}

}  // namespace
}  // namespace trainctl::controller
