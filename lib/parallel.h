#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace trainctl {

namespace detail {
struct TaskBatch;
}

/// Runs `task(0)` … `task(count - 1)` with at most `in_flight` of them running at once (each on
/// its own thread, the calling thread waiting) and returns when all have ended. Tasks start in
/// index order. A task that throws does not stop the others; the exception of the lowest index
/// that threw is rethrown once all have ended. Callers that want every task's outcome catch in
/// the task.
void for_each_bounded(std::size_t count, std::size_t in_flight,
                      const std::function<void(std::size_t)>& task);

/// Threads kept to run the tasks of many small batches, so a caller that runs one batch after
/// another from several threads (the controller's slow-start writes) does not start and end a
/// thread per task (clone, exit, its stack unmapped, a malloc arena to warm up each time).
class WorkerPool {
 public:
  /// At most `threads` threads, started when a batch first finds too few idle ones and kept
  /// until the pool is destroyed (no batch may be running then).
  explicit WorkerPool(std::size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// As for_each_bounded, with the calling thread and the pool's idle threads as the workers:
  /// tasks start in index order, all run even when one throws, the exception of the lowest index
  /// is rethrown once all have ended. The calling thread runs tasks too, so a batch finishes even
  /// while every pool thread works on other callers' batches.
  void for_each(std::size_t count, const std::function<void(std::size_t)>& task);

  /// Threads started so far.
  std::size_t threads() const;

 private:
  void serve(std::stop_token stop);

  const std::size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable_any work_;
  /// One entry per pool thread a batch asks for, until its caller has started its last task.
  std::deque<detail::TaskBatch*> queue_;
  std::size_t idle_ = 0;  // threads waiting for work, or started and about to
  std::vector<std::jthread> threads_;
};

}  // namespace trainctl
