#include "clock.h"

#include <thread>

namespace trainctl::kube {
namespace {

class RealClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::now();
  }
  std::chrono::steady_clock::time_point monotonic() const override {
    return std::chrono::steady_clock::now();
  }
  void sleep_for(std::chrono::nanoseconds d) override { std::this_thread::sleep_for(d); }
};

}  // namespace

Clock& real_clock() {
  static RealClock clock;
  return clock;
}

}  // namespace trainctl::kube
