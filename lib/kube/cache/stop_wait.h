#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace trainctl::kube::cache {

/// Sleeps for `d` of real time unless `stop` is requested first; returns false when it was.
inline bool sleep_unless_stopped(std::stop_token stop, std::chrono::nanoseconds d) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace trainctl::kube::cache
