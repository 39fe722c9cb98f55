#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <string>

#include "tests/support/temp_dir.h"

namespace trainctl::testing {

/// How a command ended and what it printed on each stream.
struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
};

/// Runs `command` with /bin/sh; stdout and stderr are captured apart (stderr through a file).
inline CommandResult run_command(const std::string& command) {
  char err_path[] = "/tmp/trainctl-stderr-XXXXXX";
  const int fd = ::mkstemp(err_path);
  ::close(fd);
  FILE* pipe = ::popen((command + " 2>" + err_path).c_str(), "r");
  CommandResult result;
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe))
    result.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = TempDir::read(err_path);
  ::unlink(err_path);
  return result;
}

/// Runs `binary args` the way a user with nothing configured would: a clean environment (no
/// KUBECONFIG, no HOME, no TRAINCTL_* values), `input` on stdin, in `cwd` when given.
inline CommandResult run_clean(const std::string& binary, const std::string& args,
                               const std::string& input = "", const std::string& cwd = "") {
  TempDir io;
  const auto in = io.write("stdin", input);
  const std::string cd = cwd.empty() ? "" : "cd '" + cwd + "' && ";
  return run_command(cd + "env -i PATH=/usr/bin:/bin HOME=/nonexistent " + binary + " " + args +
                     " <" + in.string());
}

}  // namespace trainctl::testing
