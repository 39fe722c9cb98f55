#include "controller/metrics.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace trainctl::controller {
namespace {

TEST(Metrics, CountersAndGaugesRenderInTheTextFormat) {
  MetricsRegistry m;
  m.declare_counter("trainctl_reconcile_total", "Reconciles.", {"kind", "result"});
  m.declare_gauge("trainctl_leader", "Leader.");
  m.increment("trainctl_reconcile_total", {"TFJob", "success"});
  m.increment("trainctl_reconcile_total", {"TFJob", "success"}, 2);
  m.set("trainctl_leader", {}, 1);
  EXPECT_EQ(m.value("trainctl_reconcile_total", {"TFJob", "success"}), 3);
  EXPECT_EQ(m.render(),
            "# HELP trainctl_leader Leader.\n"
            "# TYPE trainctl_leader gauge\n"
            "trainctl_leader 1\n"
            "# HELP trainctl_reconcile_total Reconciles.\n"
            "# TYPE trainctl_reconcile_total counter\n"
            "trainctl_reconcile_total{kind=\"TFJob\",result=\"success\"} 3\n");
}

TEST(Metrics, LabelValuesAreEscaped) {
  MetricsRegistry m;
  m.declare_counter("c", "C.", {"l"});
  m.increment("c", {"a\"b\\c\nd"});
  EXPECT_NE(m.render().find("c{l=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos);
}

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  MetricsRegistry m;
  m.declare_histogram("d", "D.", {0.1, 1}, {"kind"});
  m.observe("d", {"x"}, 0.05);
  m.observe("d", {"x"}, 0.5);
  m.observe("d", {"x"}, 5);
  const std::string text = m.render();
  EXPECT_NE(text.find("d_bucket{kind=\"x\",le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("d_bucket{kind=\"x\",le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("d_bucket{kind=\"x\",le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("d_sum{kind=\"x\"} 5.55\n"), std::string::npos) << text;
  EXPECT_NE(text.find("d_count{kind=\"x\"} 3\n"), std::string::npos) << text;
}

TEST(Metrics, HistogramQuantileInterpolatesWithinTheBucket) {
  MetricsRegistry m;
  m.declare_histogram("d", "D.", {1, 2, 4});
  for (int i = 0; i < 10; ++i)
    m.observe("d", {}, 1.5);  // all in (1, 2]
  EXPECT_DOUBLE_EQ(m.histogram_quantile("d", {}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(m.histogram_quantile("d", {}, 1.0), 2);
  EXPECT_EQ(m.histogram_quantile("d", {"missing"}, 0.5), 0);
}

TEST(Metrics, MisusedFamiliesThrow) {
  MetricsRegistry m;
  m.declare_counter("c", "C.", {"l"});
  EXPECT_THROW(m.increment("c"), std::logic_error);          // wrong label count
  EXPECT_THROW(m.observe("c", {"x"}, 1), std::logic_error);  // not a histogram
  EXPECT_THROW(m.increment("undeclared"), std::logic_error);
}

TEST(Metrics, ExponentialBuckets) {
  EXPECT_EQ(exponential_buckets(0.5, 2, 4), (std::vector<double>{0.5, 1, 2, 4}));
}

}  // namespace
}  // namespace trainctl::controller
