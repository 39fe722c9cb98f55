#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>

#include "error.h"
#include "sandbox/store.h"

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

/// The message of the Error(Config) that `f` throws (a kubeconfig or credential problem).
inline std::string config_error(const std::function<void()>& f) {
  const Error e = expect_error(f);
  EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
  return e.message();
}

/// The message of the Error(Unauthorized) that `f` throws (an exec credential plugin that could
/// not give a credential).
inline std::string credential_error(const std::function<void()>& f) {
  const Error e = expect_error(f);
  EXPECT_EQ(e.kind(), ErrorKind::Unauthorized) << e.what();
  return e.message();
}

/// The same for the sandbox's ApiError, whose Status (reason, details, causes) tests inspect;
/// a plain Error is a failure too.
template <typename F>
sandbox::ApiError expect_api_error(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const sandbox::ApiError& e) {
    return e;
  } catch (const Error& e) {
    ADD_FAILURE() << "not an ApiError: " << e.what();
    return sandbox::ApiError(e.kind(), e.http_code(), "", e.message());
  }
  ADD_FAILURE() << "expected an ApiError";
  return sandbox::ApiError(ErrorKind::Protocol, 0, "", "<nothing thrown>");
}

}  // namespace trainctl::testing
