#pragma once

// Prometheus metrics of the controller in the text exposition format (version 0.0.4).
// prometheus-cpp, which DESIGN.md names, is not packaged in Debian 12; the controller needs three
// metric types with labels and one text rendering, which this small registry provides.

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace trainctl::controller {

/// Label values in the order of the family's label names.
using LabelValues = std::vector<std::string>;

class MetricsRegistry {
 public:
  /// Families are declared once, before use; using an undeclared family throws std::logic_error.
  void declare_counter(std::string name, std::string help, std::vector<std::string> labels = {});
  void declare_gauge(std::string name, std::string help, std::vector<std::string> labels = {});
  /// Cumulative histogram with the given upper bounds (seconds), plus +Inf.
  void declare_histogram(std::string name, std::string help, std::vector<double> buckets,
                         std::vector<std::string> labels = {});

  /// Counters and gauges.
  void increment(const std::string& name, const LabelValues& labels = {}, double by = 1);
  /// Gauges.
  void set(const std::string& name, const LabelValues& labels, double value);
  void observe(const std::string& name, const LabelValues& labels, double value);

  /// The value of one counter or gauge series (0 when never touched), for tests and logs.
  double value(const std::string& name, const LabelValues& labels = {}) const;
  /// A quantile estimated from the buckets as Prometheus' histogram_quantile does.
  double histogram_quantile(const std::string& name, const LabelValues& labels, double q) const;

  /// Every family, sorted by name, in the text exposition format.
  std::string render() const;

 private:
  enum class Type { Counter, Gauge, Histogram };
  struct Series {
    double value = 0;                    // counter/gauge; histogram sum
    std::uint64_t count = 0;             // histogram
    std::vector<std::uint64_t> buckets;  // histogram, non-cumulative per bucket
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<std::string> labels;
    std::vector<double> bounds;
    std::map<LabelValues, Series> series;
  };
  Family& family(const std::string& name, const LabelValues& labels, bool histogram);
  void declare(std::string name, Family family);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

/// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> exponential_buckets(double start, double factor, int count);

}  // namespace trainctl::controller
