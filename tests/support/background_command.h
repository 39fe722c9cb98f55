#pragma once

// A process left running while a test talks to it (kubectl get -w, trainctl controller), with its
// stdout and stderr collected.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trainctl::testing {

/// A command whose stdout and stderr are collected until it ends; stop() sends SIGTERM.
class BackgroundCommand {
 public:
  explicit BackgroundCommand(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2 failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] {
      std::array<char, 4096> buf;
      ssize_t n = 0;
      while ((n = ::read(fd_, buf.data(), buf.size())) > 0) {
        std::lock_guard lock(mu_);
        out_.append(buf.data(), static_cast<size_t>(n));
      }
    });
  }
  ~BackgroundCommand() { stop(); }
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;

  /// Waits at most `limit` for `text` to appear in the output.
  bool wait_for(const std::string& text, std::chrono::milliseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (output().find(text) != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return output().find(text) != std::string::npos;
  }

  std::string output() const {
    std::lock_guard lock(mu_);
    return out_;
  }

  /// Sends `signal` and waits for the process to end; returns its wait status (-1 when it had
  /// already been reaped).
  int stop(int signal = SIGTERM) {
    if (pid_ <= 0)
      return -1;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    reader_.join();
    ::close(fd_);
    return status;
  }

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::thread reader_;
  mutable std::mutex mu_;
  std::string out_;
};

}  // namespace trainctl::testing
