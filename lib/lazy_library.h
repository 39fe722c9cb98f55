#pragma once

// A shared library the binary does not list as needed but loads with dlopen on its first use,
// and forwarders: definitions of the library's functions, under their own names, that call the
// library's. A command that never calls one never loads the library (nor what it depends on).
// curl_loader.cc (libcurl) defines them; only the functions forwarded there may be called: the
// binary's link fails on any other.

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
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

  /// A function of the library a forwarder calls, found when the library is loaded. Constant
  /// initialised, so a forwarder works even when called by another file's static initialiser;
  /// until it is registered (add) it is found on its first call instead.
  class Symbol {
   public:
    constexpr Symbol(LazyLibrary& library, const char* name) : library_(library), name_(name) {}
    Symbol(const Symbol&) = delete;
    Symbol& operator=(const Symbol&) = delete;

    /// The library's definition, loading the library on the first call; the Error of resolve.
    template <typename Function>
    Function* get() {
      void* address = address_.load(std::memory_order_acquire);
      if (address == nullptr) {
        library_.handle();  // resolves every registered symbol, maybe this one
        address = address_.load(std::memory_order_acquire);
        if (address == nullptr) {
          address = reinterpret_cast<void*>(library_.resolve<void()>(name_));
          address_.store(address, std::memory_order_release);
        }
      }
      return reinterpret_cast<Function*>(address);
    }

   private:
    friend class LazyLibrary;
    LazyLibrary& library_;
    const char* name_;
    Symbol* next_ = nullptr;
    std::atomic<void*> address_{nullptr};
  };

  /// Has load() find `symbol` with the library; at static initialisation, before any thread.
  bool add(Symbol& symbol) {
    symbol.next_ = symbols_;
    symbols_ = &symbol;
    return true;
  }

  /// The library's definition of `name`; an Error (ErrorKind::Connection: every library loaded
  /// this way is one a connection needs) when the library or the symbol is missing.
  template <typename Function>
  Function* resolve(const char* name) {
    void* symbol = dlsym(handle(), name);
    if (symbol == nullptr)
      throw Error(ErrorKind::Connection, fmt::format("{} has no {}: {}", soname_, name, dlerror()));
    return reinterpret_cast<Function*>(symbol);
  }

  /// Loads the library now (once), with every forwarded function: a thread that loads another
  /// library meanwhile holds the dynamic loader's lock, which dlsym takes too, so a function
  /// first found then would wait the whole other load out. The same Error as resolve when the
  /// library cannot be loaded.
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
      // A missing one stays null: its first call reports it (resolve).
      for (Symbol* s = symbols_; s != nullptr; s = s->next_)
        s->address_.store(dlsym(handle_, s->name_), std::memory_order_release);
    });
    return handle_;
  }

  const char* soname_;
  const char* needed_for_;
  std::once_flag once_;
  void* handle_ = nullptr;
  Symbol* symbols_ = nullptr;
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
// library's header, as a call of the library's own `name`, found when the library is loaded (by
// the first call of any of its forwarders, or by load()).
#define TRAINCTL_FORWARD_SIG(name) ::trainctl::Signature<decltype(::name)>
#define TRAINCTL_FORWARD_ARG(name, i) TRAINCTL_FORWARD_SIG(name)::template arg<i>
#define TRAINCTL_FORWARD_SYMBOL(library, name)                                               \
  static constinit ::trainctl::LazyLibrary::Symbol trainctl_symbol_##name((library), #name); \
  [[maybe_unused]] static const bool trainctl_added_##name = (library).add(trainctl_symbol_##name);
#define TRAINCTL_FORWARD_BODY(library, name, count, ...)                               \
  ->TRAINCTL_FORWARD_SIG(name)::result {                                               \
    static_assert(TRAINCTL_FORWARD_SIG(name)::arity == count, #name " takes another"); \
    return trainctl_symbol_##name.get<decltype(::name)>()(__VA_ARGS__);                \
  }
#define TRAINCTL_FORWARD0(library, name) \
  TRAINCTL_FORWARD_SYMBOL(library, name) auto name() TRAINCTL_FORWARD_BODY(library, name, 0, )
#define TRAINCTL_FORWARD1(library, name) \
  TRAINCTL_FORWARD_SYMBOL(library, name) \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0) TRAINCTL_FORWARD_BODY(library, name, 1, a0)
#define TRAINCTL_FORWARD2(library, name)                                        \
  TRAINCTL_FORWARD_SYMBOL(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1) \
      TRAINCTL_FORWARD_BODY(library, name, 2, a0, a1)
#define TRAINCTL_FORWARD3(library, name)                                        \
  TRAINCTL_FORWARD_SYMBOL(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2) TRAINCTL_FORWARD_BODY(library, name, 3, a0, a1, a2)
#define TRAINCTL_FORWARD4(library, name)                                        \
  TRAINCTL_FORWARD_SYMBOL(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3) \
      TRAINCTL_FORWARD_BODY(library, name, 4, a0, a1, a2, a3)
#define TRAINCTL_FORWARD5(library, name)                                        \
  TRAINCTL_FORWARD_SYMBOL(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3, \
            TRAINCTL_FORWARD_ARG(name, 4) a4)                                   \
      TRAINCTL_FORWARD_BODY(library, name, 5, a0, a1, a2, a3, a4)
#define TRAINCTL_FORWARD6(library, name)                                        \
  TRAINCTL_FORWARD_SYMBOL(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3, \
            TRAINCTL_FORWARD_ARG(name, 4) a4, TRAINCTL_FORWARD_ARG(name, 5) a5) \
      TRAINCTL_FORWARD_BODY(library, name, 6, a0, a1, a2, a3, a4, a5)
#define TRAINCTL_FORWARD7(library, name)                                        \
  TRAINCTL_FORWARD_SYMBOL(library, name)                                        \
  auto name(TRAINCTL_FORWARD_ARG(name, 0) a0, TRAINCTL_FORWARD_ARG(name, 1) a1, \
            TRAINCTL_FORWARD_ARG(name, 2) a2, TRAINCTL_FORWARD_ARG(name, 3) a3, \
            TRAINCTL_FORWARD_ARG(name, 4) a4, TRAINCTL_FORWARD_ARG(name, 5) a5, \
            TRAINCTL_FORWARD_ARG(name, 6) a6)                                   \
      TRAINCTL_FORWARD_BODY(library, name, 7, a0, a1, a2, a3, a4, a5, a6)
