#include "duration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainctl {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(DurationTest, ParsesGoDurationsAndBareSeconds) {
  EXPECT_EQ(parse_duration("0"), milliseconds(0));
  EXPECT_EQ(parse_duration("15"), milliseconds(15'000));
  EXPECT_EQ(parse_duration("15s"), milliseconds(15'000));
  EXPECT_EQ(parse_duration("2h"), milliseconds(7'200'000));
  EXPECT_EQ(parse_duration("1h30m"), milliseconds(5'400'000));
  EXPECT_EQ(parse_duration("1.5s"), milliseconds(1'500));
  EXPECT_EQ(parse_duration("500ms"), milliseconds(500));
  EXPECT_EQ(parse_duration("0s"), milliseconds(0));
  EXPECT_EQ(parse_duration("1m0.5s"), milliseconds(60'500));
  EXPECT_EQ(parse_duration("1500us"), milliseconds(1));
  EXPECT_EQ(parse_duration("1500\xC2\xB5s"), milliseconds(1));
  EXPECT_EQ(parse_duration("1ns"), milliseconds(1));  // never rounded down to "none"
}

TEST(DurationTest, RejectsWhatGoRejects) {
  for (const char* bad : {"", "abc", "-1s", "-5", "10x", "1.2.3s", "s", "30 s", ".s", "1d",
                          "9999999999999", "99999999999h"}) {
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
  }
}

TEST(DurationTest, FlagErrorsNameTheFlagAndKind) {
  try {
    parse_duration_flag("--since", "5 minutes");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_THAT(e.message(), HasSubstr("invalid --since \"5 minutes\""));
    EXPECT_THAT(e.message(), HasSubstr("30s"));
  }
  try {
    parse_duration_flag("--request-timeout", "x", ErrorKind::Config);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
  }
}

}  // namespace
}  // namespace trainctl
