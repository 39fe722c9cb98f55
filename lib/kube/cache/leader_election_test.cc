#include "kube/cache/leader_election.h"

#include <gtest/gtest.h>

namespace trainctl::kube::cache {
namespace {

TEST(MicroTimeTest, FormatsUtcWithSixFractionDigits) {
  using namespace std::chrono;
  const system_clock::time_point t =
      sys_days{year{2024} / 1 / 2} + hours(3) + minutes(4) + seconds(5) + microseconds(6);
  EXPECT_EQ(format_micro_time(t), "2024-01-02T03:04:05.000006Z");
  EXPECT_EQ(format_micro_time(sys_days{year{2024} / 1 / 1}), "2024-01-01T00:00:00.000000Z");
}

}  // namespace
}  // namespace trainctl::kube::cache
