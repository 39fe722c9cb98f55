#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace trainctl {

void for_each_bounded(std::size_t count, std::size_t in_flight,
                      const std::function<void(std::size_t)>& task) {
  std::vector<std::exception_ptr> failures(count);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        task(i);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    const std::size_t workers = std::min(count, std::max<std::size_t>(in_flight, 1));
    for (std::size_t t = 1; t < workers; ++t)
      threads.emplace_back(work);
    work();  // the calling thread is one of the workers
  }
  for (const auto& failure : failures) {
    if (failure)
      std::rethrow_exception(failure);
  }
}

}  // namespace trainctl
