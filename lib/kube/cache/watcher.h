#pragma once

// An Informer on a thread of its own, for a command that follows a few objects until it has seen
// what it waits for (trainctl wait, logs -f, submit --wait, list -w): the same LIST, WATCH,
// resume, and relist after 410 Gone as the controller's caches, without a second hand-written
// loop. Unlike a controller, a command gives up on errors it cannot wait out: every error of the
// first LIST, and afterwards those `is_fatal` picks; start() and rethrow() throw it.

#include <exception>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>

#include "error.h"
#include "kube/cache/informer.h"

namespace trainctl::kube::cache {

class Watcher {
 public:
  /// Which errors after the first LIST end the watcher; the informer retries the others (410
  /// Gone always relists).
  using ErrorFilter = std::function<bool(const Error&)>;

  Watcher(Client& client, InformerOptions options, EventHandlers handlers, ErrorFilter is_fatal);
  ~Watcher();  // stop()
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  /// Runs the informer and returns once its first LIST has been delivered to the handlers;
  /// throws the error that stopped it first.
  void start();
  /// Stops the informer and joins its thread. Idempotent.
  void stop();
  /// Requested once the watcher stopped on an error (or stop() began): wake waiters with it.
  std::stop_token stopped() const { return thread_.get_stop_token(); }
  /// Throws the error that ended the watcher, if one did.
  void rethrow() const;

  const Informer& informer() const { return informer_; }

 private:
  void failed(const Error& e);

  Informer informer_;
  ErrorFilter is_fatal_;
  mutable std::mutex mu_;
  std::exception_ptr error_;
  std::jthread thread_;
};

}  // namespace trainctl::kube::cache
