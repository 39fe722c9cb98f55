#include "kube/rate_limiter.h"

#include <algorithm>
#include <random>

namespace trainctl::kube {

RateLimiter::RateLimiter(double qps, int burst, Clock& clock)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      tokens_(burst_),
      last_(clock.monotonic()) {}

std::chrono::nanoseconds RateLimiter::reserve() {
  if (qps_ <= 0)
    return std::chrono::nanoseconds(0);
  std::lock_guard lock(mu_);
  const auto now = clock_.monotonic();
  const std::chrono::duration<double> elapsed = now - last_;
  last_ = now;
  tokens_ = std::min(burst_, tokens_ + elapsed.count() * qps_);
  tokens_ -= 1;  // may go negative: the debt is paid by waiting
  if (tokens_ >= 0)
    return std::chrono::nanoseconds(0);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(-tokens_ / qps_));
}

void RateLimiter::acquire() {
  const auto wait = reserve();
  if (wait.count() > 0)
    clock_.sleep_for(wait);
}

std::chrono::milliseconds backoff_delay(int attempt, std::chrono::milliseconds base,
                                        std::chrono::milliseconds cap) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double exp =
      static_cast<double>(base.count()) * static_cast<double>(1ULL << std::min(attempt, 30));
  const double capped = std::min(exp, static_cast<double>(cap.count()));
  std::uniform_real_distribution<double> jitter(0.0, 0.5);
  return std::chrono::milliseconds(static_cast<long long>(capped * (1.0 + jitter(rng))));
}

}  // namespace trainctl::kube
