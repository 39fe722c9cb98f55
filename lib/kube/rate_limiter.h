#pragma once

#include <chrono>
#include <mutex>

#include "kube/clock.h"

namespace trainctl::kube {

/// A token bucket shared by every request of one client (client-go's --kube-api-qps/burst):
/// `burst` requests go at once, then `qps` per second. qps <= 0 means unlimited.
class RateLimiter {
 public:
  RateLimiter(double qps, int burst, Clock& clock = real_clock());

  /// Takes one token, sleeping on the clock until one is available.
  void acquire();
  /// Takes one token and returns how long the caller must wait before using it.
  std::chrono::nanoseconds reserve();

 private:
  double qps_;
  double burst_;
  Clock& clock_;
  std::mutex mu_;
  double tokens_;
  std::chrono::steady_clock::time_point last_;
};

/// Delay before retry number `attempt` (0-based): exponential from `base`, capped at `cap`,
/// with up to +50% random jitter so many clients do not retry in lockstep.
std::chrono::milliseconds backoff_delay(int attempt, std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap);

}  // namespace trainctl::kube
