#pragma once

#include <chrono>
#include <mutex>

#include "kube/clock.h"

namespace trainctl::testing {

/// A clock that only moves when told to; sleeping advances it instantly.
class FakeClock final : public kube::Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    std::lock_guard lock(mu_);
    return wall_;
  }
  std::chrono::steady_clock::time_point monotonic() const override {
    std::lock_guard lock(mu_);
    return mono_;
  }
  void sleep_for(std::chrono::nanoseconds d) override {
    advance(d);
    std::lock_guard lock(mu_);
    slept_ += d;
  }
  void advance(std::chrono::nanoseconds d) {
    std::lock_guard lock(mu_);
    wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
    mono_ += d;
  }
  void set_wall(std::chrono::system_clock::time_point t) {
    std::lock_guard lock(mu_);
    wall_ = t;
  }
  std::chrono::nanoseconds total_slept() const {
    std::lock_guard lock(mu_);
    return slept_;
  }

 private:
  mutable std::mutex mu_;
  std::chrono::system_clock::time_point wall_ =
      std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000));
  std::chrono::steady_clock::time_point mono_ =
      std::chrono::steady_clock::time_point(std::chrono::hours(1));
  std::chrono::nanoseconds slept_{0};
};

}  // namespace trainctl::testing
