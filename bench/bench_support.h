#pragma once

// What the benchmarks share: wall-clock seconds and a plain thread pool loop.

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace trainctl::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Runs `fn(i)` for i in [0, n) on `threads` threads; returns when all are done.
template <typename F>
void parallel_for(int n, int threads, F fn) {
  std::atomic<int> next{0};
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++)
        fn(i);
    });
}

}  // namespace trainctl::bench
