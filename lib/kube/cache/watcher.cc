#include "kube/cache/watcher.h"

namespace trainctl::kube::cache {

namespace {

InformerOptions with_error_hook(InformerOptions options, std::function<void(const Error&)> hook) {
  options.on_error = std::move(hook);
  return options;
}

}  // namespace

Watcher::Watcher(Client& client, InformerOptions options, EventHandlers handlers,
                 ErrorFilter is_fatal)
    : informer_(client, with_error_hook(std::move(options), [this](const Error& e) { failed(e); })),
      is_fatal_(std::move(is_fatal)) {
  informer_.add_handlers(std::move(handlers));
}

Watcher::~Watcher() {
  stop();
}

void Watcher::failed(const Error& e) {
  if (e.kind() == ErrorKind::Gone || (informer_.has_synced() && !is_fatal_(e)))
    return;
  {
    std::lock_guard lock(mu_);
    if (!error_)
      error_ = std::make_exception_ptr(e);
  }
  thread_.request_stop();  // from the informer's own thread: its run() returns
}

void Watcher::start() {
  thread_ = std::jthread([this](std::stop_token stop) { informer_.run(stop); });
  informer_.wait_for_sync(thread_.get_stop_token());
  rethrow();
}

void Watcher::stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void Watcher::rethrow() const {
  std::exception_ptr error;
  {
    std::lock_guard lock(mu_);
    error = error_;
  }
  if (error)
    std::rethrow_exception(error);
}

}  // namespace trainctl::kube::cache
