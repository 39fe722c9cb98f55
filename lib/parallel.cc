#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>

namespace trainctl::detail {

/// The tasks of one for_each_bounded or WorkerPool::for_each: each worker takes the next index
/// until none is left.
struct TaskBatch {
  TaskBatch(std::size_t count, const std::function<void(std::size_t)>& task)
      : count(count), task(task), failures(count) {}

  /// Runs tasks until every one has been started.
  void work() {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        task(i);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    }
  }

  /// Once every task has ended: rethrows the failure of the lowest index.
  void rethrow_first_failure() const {
    for (const auto& failure : failures) {
      if (failure)
        std::rethrow_exception(failure);
    }
  }

  const std::size_t count;
  const std::function<void(std::size_t)>& task;
  std::vector<std::exception_ptr> failures;
  std::atomic<std::size_t> next{0};
  /// Pool threads inside work(), under the pool's mutex; `released` when the last one leaves.
  std::size_t helping = 0;
  std::condition_variable released;
};

}  // namespace trainctl::detail

namespace trainctl {
using detail::TaskBatch;

void for_each_bounded(std::size_t count, std::size_t in_flight,
                      const std::function<void(std::size_t)>& task) {
  TaskBatch batch(count, task);
  {
    std::vector<std::jthread> threads;
    const std::size_t workers = std::min(count, std::max<std::size_t>(in_flight, 1));
    for (std::size_t t = 1; t < workers; ++t)
      threads.emplace_back([&] { batch.work(); });
    batch.work();  // the calling thread is one of the workers
  }
  batch.rethrow_first_failure();
}

WorkerPool::WorkerPool(std::size_t threads) : max_threads_(threads) {}

// threads_, the last member, goes first: each thread is asked to stop and joined.
WorkerPool::~WorkerPool() = default;

std::size_t WorkerPool::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

void WorkerPool::for_each(std::size_t count, const std::function<void(std::size_t)>& task) {
  if (count == 0)
    return;
  TaskBatch batch(count, task);
  const std::size_t helpers = std::min(count - 1, max_threads_);
  if (helpers > 0) {
    {
      std::lock_guard lock(mu_);
      queue_.insert(queue_.end(), helpers, &batch);
      while (idle_ < queue_.size() && threads_.size() < max_threads_) {
        ++idle_;
        threads_.emplace_back([this](std::stop_token stop) { serve(stop); });
      }
    }
    for (std::size_t i = 0; i < helpers; ++i)
      work_.notify_one();
  }
  batch.work();
  if (helpers > 0) {
    // Every task has started: no other thread may take the batch now, and those that did are
    // waited for (then each is idle again, ready for this caller's next batch).
    std::unique_lock lock(mu_);
    std::erase(queue_, &batch);
    batch.released.wait(lock, [&] { return batch.helping == 0; });
  }
  batch.rethrow_first_failure();
}

void WorkerPool::serve(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (work_.wait(lock, stop, [&] { return !queue_.empty(); })) {
    TaskBatch* batch = queue_.front();
    queue_.pop_front();
    --idle_;
    ++batch->helping;
    lock.unlock();
    batch->work();
    lock.lock();
    ++idle_;
    if (--batch->helping == 0)
      batch->released.notify_one();  // under the lock: the caller cannot return before this
  }
}

}  // namespace trainctl
