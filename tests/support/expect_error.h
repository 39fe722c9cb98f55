#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "error.h"

namespace trainctl::testing {

/// Runs `f`, which must throw trainctl::Error, and returns that error for further assertions;
/// records a test failure when it does not throw.
template <typename F>
Error expect_error(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a trainctl::Error";
  return Error(ErrorKind::Protocol, "<no error was thrown>");
}

}  // namespace trainctl::testing
