#include "kube/rate_limiter.h"

#include <gtest/gtest.h>

#include "tests/support/fake_clock.h"

namespace trainctl::kube {
namespace {

using std::chrono::milliseconds;

TEST(RateLimiterTest, BurstGoesAtOnceThenQps) {
  testing::FakeClock clock;
  RateLimiter limiter(10, 3, clock);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(limiter.reserve().count(), 0) << i;
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.reserve()), milliseconds(100));
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.reserve()), milliseconds(200));
}

TEST(RateLimiterTest, TokensRefillWithTimeUpToBurst) {
  testing::FakeClock clock;
  RateLimiter limiter(2, 2, clock);
  limiter.acquire();
  limiter.acquire();
  clock.advance(std::chrono::seconds(10));  // refills to burst, not to 20
  EXPECT_EQ(limiter.reserve().count(), 0);
  EXPECT_EQ(limiter.reserve().count(), 0);
  EXPECT_GT(limiter.reserve().count(), 0);
}

TEST(RateLimiterTest, AcquireSleepsOnTheClock) {
  testing::FakeClock clock;
  RateLimiter limiter(5, 1, clock);
  for (int i = 0; i < 11; ++i)
    limiter.acquire();
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(clock.total_slept()), milliseconds(2000));
}

TEST(RateLimiterTest, ZeroQpsIsUnlimited) {
  testing::FakeClock clock;
  RateLimiter limiter(0, 1, clock);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(limiter.reserve().count(), 0);
}

TEST(BackoffTest, GrowsExponentiallyWithBoundedJitter) {
  for (int attempt = 0; attempt < 6; ++attempt) {
    const auto d = backoff_delay(attempt, milliseconds(100), milliseconds(2000));
    const long long base = std::min(100LL << attempt, 2000LL);
    EXPECT_GE(d.count(), base) << attempt;
    EXPECT_LE(d.count(), base * 3 / 2) << attempt;
  }
}

}  // namespace
}  // namespace trainctl::kube
