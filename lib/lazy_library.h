#pragma once

// A shared library the binary does not list as needed but loads with dlopen on its first use,
// and forwarders: definitions of the library's functions, under their own names, that call the
// library's. A command that never calls one never loads the library (nor what it depends on).
// curl_loader.cc (libcurl) and openssl_loader.cc (libssl, libcrypto) define them; only the
// functions forwarded there may be called: the binary's link fails on any other.

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <tuple>

#include "error.h"

namespace trainctl {

class LazyLibrary {
 public:
  /// `soname` is what dlopen looks for; `needed_for` ends the message of a failure to load it.
  constexpr LazyLibrary(const char* soname, const char* needed_for)
      : soname_(soname), needed_for_(needed_for) {}

  /// The library's definition of `name`; an Error (ErrorKind::Connection: every library loaded
  /// this way is one a connection needs) when the library or the symbol is missing.
  template <typename Function>
  Function* resolve(const char* name) {
    void* symbol = dlsym(handle(), name);
    if (symbol == nullptr)
      throw Error(ErrorKind::Connection, fmt::format("{} has no {}: {}", soname_, name, dlerror()));
    return reinterpret_cast<Function*>(symbol);
  }

  /// Loads the library now (once); the same Error as resolve when it cannot be loaded.
  void load() { handle(); }

 private:
  void* handle() {
    std::call_once(once_, [this] {
      // RTLD_LAZY: the libraries it brings that were not linked BIND_NOW (Kerberos, librtmp,
      // nghttp2 under libcurl) resolve their functions on first call, most of them never
      // (dlopen of libcurl 4.7 -> 4.2 ms).
      handle_ = dlopen(soname_, RTLD_LAZY | RTLD_LOCAL);
      if (handle_ == nullptr) {
        throw Error(ErrorKind::Connection,
                    fmt::format("cannot load {}, which {}: {}", soname_, needed_for_, dlerror()));
      }
    });
    return handle_;
  }

  const char* soname_;
  const char* needed_for_;
  std::once_flag once_;
  void* handle_ = nullptr;
};

/// The parts of a function type, for forwarders.
template <typename Function>
struct Signature;
template <typename Result, typename... Args>
struct Signature<Result(Args...)> {
  using result = Result;
  template <std::size_t I>
  using arg = std::tuple_element_t<I, std::tuple<Args...>>;
  static constexpr std::size_t arity = sizeof...(Args);
};

}  // namespace trainctl

// TRAINCTL_FORWARD<N>(library, name): defines `name`, a function of N parameters declared by the
// library's header, as a call of the library's own `name`, resolved on the first call.
#define TRAINCTL_FORWARD_SIG(name) ::trainctl::Signature<decltype(::name)>
#define TRAINCTL_FORWARD_ARG(name, i) TRAINCTL_FORWARD_SIG(name)::template arg<i>
#define TRAINCTL_FORWARD_BODY(library, name, count, ...)                               \
  ->TRAINCTL_FORWARD_SIG(name)::result {                                               \
    static_assert(TRAINCTL_FORWARD_SIG(name)::arity == count, #name " takes another"); \
    static auto* real = (library).resolve<decltype(::name)>(#name);                    \
    return real(__VA_ARGS__);                                                          \
  }
#define TRAINCTL_FORWARD0(library, name) auto name() TRAINCTL_FORWARD_BODY(library, name, 0, )
#define TRAINCTL_FORWARD1(library, name) \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0) TRAINCTL_FORWARD_BODY(library, name, 1, a0)
#define TRAINCTL_FORWARD2(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1) \
      TRAINCTL_FORWARD_BODY(library, name, 2, a0, a1)
#define TRAINCTL_FORWARD3(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2) TRAINCTL_FORWARD_BODY(library, name, 3, a0, a1, a2)
#define TRAINCTL_FORWARD4(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3) \
      TRAINCTL_FORWARD_BODY(library, name, 4, a0, a1, a2, a3)
#define TRAINCTL_FORWARD5(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3, \
            TRAINCTL_FORWARD_ARG(name, 4) a4)                                   \
      TRAINCTL_FORWARD_BODY(library, name, 5, a0, a1, a2, a3, a4)
#define TRAINCTL_FORWARD6(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3, \
            TRAINCTL_FORWARD_ARG(name, 4) a4, TRAINCTL_FORWARD_ARG(name, 5) a5) \
      TRAINCTL_FORWARD_BODY(library, name, 6, a0, a1, a2, a3, a4, a5)
#define TRAINCTL_FORWARD7(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3, \
            TRAINCTL_FORWARD_ARG(name, 4) a4, TRAINCTL_FORWARD_ARG(name, 5) a5, \
            TRAINCTL_FORWARD_ARG(name, 6) a6)                                   \
      TRAINCTL_FORWARD_BODY(library, name, 7, a0, a1, a2, a3, a4, a5, a6)
