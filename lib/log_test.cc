#include "log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/support/expect_error.h"

namespace trainctl {
namespace {

TEST(Logger, TextLinesCarryTimeLevelMessageAndQuotedFields) {
  std::ostringstream out;
  Logger log(out, LogFormat::Text, 0);
  log.info("reconciled", {{"job", "default/x"}, {"note", "two words"}});
  EXPECT_TRUE(std::regex_match(
      out.str(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info reconciled )"
                            R"(job=default/x note="two words"\n)")))
      << out.str();
}

TEST(Logger, JsonLinesAreOneObjectEach) {
  std::ostringstream out;
  Logger log(out, LogFormat::Json, 0);
  log.error("failed", {{"key", "TFJob:default/x"}});
  log.warning("lost the API server");  // warnings show at any verbosity
  std::istringstream lines(out.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const auto entry = nlohmann::json::parse(line);
  EXPECT_EQ(entry["level"], "error");
  EXPECT_EQ(entry["msg"], "failed");
  EXPECT_EQ(entry["key"], "TFJob:default/x");
  EXPECT_TRUE(entry.contains("ts"));
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(nlohmann::json::parse(line)["level"], "warning");
}

TEST(Logger, DebugNeedsVerbosity) {
  std::ostringstream out;
  Logger log(out, LogFormat::Text, 1);
  log.debug(1, "shown");
  log.debug(2, "hidden");
  EXPECT_NE(out.str().find("shown"), std::string::npos);
  EXPECT_EQ(out.str().find("hidden"), std::string::npos);
}

TEST(Logger, ParseLogFormat) {
  EXPECT_EQ(parse_log_format("json"), LogFormat::Json);
  EXPECT_EQ(parse_log_format("text"), LogFormat::Text);
  const Error e = testing::expect_error([] { parse_log_format("xml"); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_STREQ(e.what(), "--log-format: \"xml\" is not one of text, json");
}

}  // namespace
}  // namespace trainctl
