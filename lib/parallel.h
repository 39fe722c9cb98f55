#pragma once

#include <cstddef>
#include <functional>

namespace trainctl {

/// Runs `task(0)` … `task(count - 1)` with at most `in_flight` of them running at once (each on
/// its own thread, the calling thread waiting) and returns when all have ended. Tasks start in
/// index order. A task that throws does not stop the others; the exception of the lowest index
/// that threw is rethrown once all have ended. Callers that want every task's outcome catch in
/// the task.
void for_each_bounded(std::size_t count, std::size_t in_flight,
                      const std::function<void(std::size_t)>& task);

}  // namespace trainctl
