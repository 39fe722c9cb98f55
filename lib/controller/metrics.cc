#include "controller/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace trainctl::controller {
namespace {

std::string escape_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// `{a="x",b="y"}` with an optional extra label (histogram `le`); "" when there are none.
std::string label_text(const std::vector<std::string>& names, const LabelValues& values,
                       const std::string& extra_name = {}, const std::string& extra_value = {}) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < names.size(); ++i)
    parts.push_back(fmt::format("{}=\"{}\"", names[i], escape_label(values[i])));
  if (!extra_name.empty())
    parts.push_back(fmt::format("{}=\"{}\"", extra_name, extra_value));
  return parts.empty() ? "" : "{" + fmt::format("{}", fmt::join(parts, ",")) + "}";
}

}  // namespace

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> result;
  for (double b = start; static_cast<int>(result.size()) < count; b *= factor)
    result.push_back(b);
  return result;
}

void MetricsRegistry::declare(std::string name, Family family) {
  std::lock_guard lock(mutex_);
  families_.insert_or_assign(std::move(name), std::move(family));
}

void MetricsRegistry::declare_counter(std::string name, std::string help,
                                      std::vector<std::string> labels) {
  declare(std::move(name), Family{Type::Counter, std::move(help), std::move(labels), {}, {}});
}

void MetricsRegistry::declare_gauge(std::string name, std::string help,
                                    std::vector<std::string> labels) {
  declare(std::move(name), Family{Type::Gauge, std::move(help), std::move(labels), {}, {}});
}

void MetricsRegistry::declare_histogram(std::string name, std::string help,
                                        std::vector<double> buckets,
                                        std::vector<std::string> labels) {
  std::sort(buckets.begin(), buckets.end());
  declare(std::move(name),
          Family{Type::Histogram, std::move(help), std::move(labels), std::move(buckets), {}});
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const LabelValues& labels,
                                                 bool histogram) {
  const auto it = families_.find(name);
  if (it == families_.end() || (it->second.type == Type::Histogram) != histogram ||
      it->second.labels.size() != labels.size())
    throw std::logic_error("metric " + name + " used with the wrong type or labels");
  return it->second;
}

void MetricsRegistry::increment(const std::string& name, const LabelValues& labels, double by) {
  std::lock_guard lock(mutex_);
  family(name, labels, false).series[labels].value += by;
}

void MetricsRegistry::set(const std::string& name, const LabelValues& labels, double value) {
  std::lock_guard lock(mutex_);
  family(name, labels, false).series[labels].value = value;
}

void MetricsRegistry::observe(const std::string& name, const LabelValues& labels, double value) {
  std::lock_guard lock(mutex_);
  Family& f = family(name, labels, true);
  Series& s = f.series[labels];
  s.buckets.resize(f.bounds.size() + 1);
  const auto bucket = std::lower_bound(f.bounds.begin(), f.bounds.end(), value) - f.bounds.begin();
  ++s.buckets[static_cast<std::size_t>(bucket)];
  ++s.count;
  s.value += value;
}

double MetricsRegistry::value(const std::string& name, const LabelValues& labels) const {
  std::lock_guard lock(mutex_);
  const auto it = families_.find(name);
  if (it == families_.end())
    return 0;
  const auto series = it->second.series.find(labels);
  return series == it->second.series.end() ? 0 : series->second.value;
}

double MetricsRegistry::histogram_quantile(const std::string& name, const LabelValues& labels,
                                           double q) const {
  std::lock_guard lock(mutex_);
  const auto it = families_.find(name);
  if (it == families_.end() || it->second.type != Type::Histogram)
    return 0;
  const auto series = it->second.series.find(labels);
  if (series == it->second.series.end() || series->second.count == 0)
    return 0;
  // As Prometheus' histogram_quantile: linear interpolation inside the bucket holding the rank.
  const auto& bounds = it->second.bounds;
  const double rank = q * static_cast<double>(series->second.count);
  double seen = 0;
  for (std::size_t i = 0; i < series->second.buckets.size(); ++i) {
    const double in_bucket = static_cast<double>(series->second.buckets[i]);
    if (seen + in_bucket >= rank && in_bucket > 0) {
      if (i == bounds.size())
        return bounds.empty() ? 0 : bounds.back();
      const double lower = i == 0 ? 0 : bounds[i - 1];
      return lower + (bounds[i] - lower) * ((rank - seen) / in_bucket);
    }
    seen += in_bucket;
  }
  return bounds.empty() ? 0 : bounds.back();
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::Counter ? "counter"
                       : f.type == Type::Gauge ? "gauge"
                                               : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::Histogram) {
        out += fmt::format("{}{} {}\n", name, label_text(f.labels, labels), format_value(s.value));
        continue;
      }
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i <= f.bounds.size(); ++i) {
        cumulative += i < s.buckets.size() ? s.buckets[i] : 0;
        const std::string le = i < f.bounds.size() ? format_value(f.bounds[i]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, label_text(f.labels, labels, "le", le),
                           cumulative);
      }
      out +=
          fmt::format("{}_sum{} {}\n", name, label_text(f.labels, labels), format_value(s.value));
      out += fmt::format("{}_count{} {}\n", name, label_text(f.labels, labels), s.count);
    }
  }
  return out;
}

}  // namespace trainctl::controller
