#pragma once

// What the benchmarks share: timing, a thread pool loop, and starting `trainctl controller` as
// its own process.

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

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

/// Starts `args` (args[0] is the program's path) with this process's environment and output.
inline pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error(fmt::format("cannot start {}", args[0]));
  return pid;
}

/// As spawn(), with the child's stdout and stderr appended to the file `log`.
inline pid_t spawn_logged(std::vector<std::string> args, const std::string& log) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int failed = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed != 0)
    throw std::runtime_error(fmt::format("cannot start {}", args[0]));
  return pid;
}

/// Sends `signal` to `pid` and reaps it; returns its exit status as waitpid reports it.
inline int stop(pid_t pid, int signal) {
  ::kill(pid, signal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace trainctl::bench
