#pragma once

#include <chrono>

namespace trainctl::kube {

/// The seam between time-dependent logic (token refresh, rate limits, backoff) and real time.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Wall-clock time, for comparing against timestamps the server or a plugin gives.
  virtual std::chrono::system_clock::time_point now() const = 0;
  /// Monotonic time, for intervals.
  virtual std::chrono::steady_clock::time_point monotonic() const = 0;
  virtual void sleep_for(std::chrono::nanoseconds d) = 0;
};

/// The process-wide real clock.
Clock& real_clock();

}  // namespace trainctl::kube
