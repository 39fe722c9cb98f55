#pragma once

// The template definitions of work_queue.h; include that header, not this one.

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace trainctl::kube::cache {

template <class Key>
WorkQueueOf<Key>::WorkQueueOf(Clock& clock, WorkQueueOptions options)
    : clock_(clock), options_(options), bucket_(options.qps, options.burst, clock) {}

template <class Key>
void WorkQueueOf<Key>::add(const Key& key) {
  std::lock_guard lock(mu_);
  add_locked(key);
}

template <class Key>
void WorkQueueOf<Key>::add_locked(const Key& key) {
  if (shutting_down_ || dirty_.contains(key))
    return;
  dirty_.insert(key);
  if (processing_.contains(key))
    return;  // done() queues it again
  queue_.push_back(key);
  ready_cv_.notify_one();
}

template <class Key>
void WorkQueueOf<Key>::add_after(const Key& key, std::chrono::nanoseconds delay) {
  std::lock_guard lock(mu_);
  if (shutting_down_)
    return;
  if (delay <= std::chrono::nanoseconds::zero()) {
    add_locked(key);
    return;
  }
  const TimePoint when = clock_.monotonic() + delay;
  if (auto it = waiting_.find(key); it != waiting_.end()) {
    if (it->second <= when)
      return;
    due_.erase({it->second, key});
    it->second = when;
  } else {
    waiting_.emplace(key, when);
  }
  due_.emplace(when, key);
  if (due_.begin()->first == when) {
    ++earlier_due_;
    ready_cv_.notify_all();  // a sleeping get() has to wake earlier
  }
}

template <class Key>
std::chrono::nanoseconds WorkQueueOf<Key>::item_backoff_locked(const Key& key) {
  const int exponent = failures_[key]++;
  // 2^exponent overflows long before the cap is reached; compare in floating point.
  const double delay = static_cast<double>(options_.base_delay.count()) *
                       std::pow(2.0, static_cast<double>(std::min(exponent, 1023)));
  if (delay >= static_cast<double>(options_.max_delay.count()))
    return options_.max_delay;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(delay));
}

template <class Key>
void WorkQueueOf<Key>::add_rate_limited(const Key& key) {
  std::chrono::nanoseconds delay;
  {
    std::lock_guard lock(mu_);
    delay = item_backoff_locked(key);
  }
  add_after(key, std::max(delay, bucket_.reserve()));
}

template <class Key>
void WorkQueueOf<Key>::forget(const Key& key) {
  std::lock_guard lock(mu_);
  failures_.erase(key);
}

template <class Key>
int WorkQueueOf<Key>::num_requeues(const Key& key) const {
  std::lock_guard lock(mu_);
  const auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

template <class Key>
void WorkQueueOf<Key>::promote_due_locked() {
  const TimePoint now = clock_.monotonic();
  while (!due_.empty() && due_.begin()->first <= now) {
    const Key key = due_.begin()->second;
    due_.erase(due_.begin());
    waiting_.erase(key);
    add_locked(key);
  }
}

template <class Key>
std::optional<Key> WorkQueueOf<Key>::get(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (true) {
    promote_due_locked();
    if (stop.stop_requested())
      return std::nullopt;
    if (!queue_.empty())
      break;
    if (shutting_down_)
      return std::nullopt;
    const std::uint64_t known = earlier_due_;
    const auto woken = [&] { return !queue_.empty() || shutting_down_ || earlier_due_ != known; };
    if (due_.empty())
      ready_cv_.wait(lock, stop, woken);
    else
      ready_cv_.wait_for(lock, stop, due_.begin()->first - clock_.monotonic(), woken);
  }
  Key key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

template <class Key>
void WorkQueueOf<Key>::done(const Key& key) {
  std::lock_guard lock(mu_);
  processing_.erase(key);
  if (dirty_.contains(key)) {
    queue_.push_back(key);
    ready_cv_.notify_one();
  }
  if (queue_.empty() && processing_.empty())
    drained_cv_.notify_all();
}

template <class Key>
std::size_t WorkQueueOf<Key>::len() {
  std::lock_guard lock(mu_);
  promote_due_locked();
  return queue_.size();
}

template <class Key>
void WorkQueueOf<Key>::shutdown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  waiting_.clear();
  due_.clear();
  ready_cv_.notify_all();
}

template <class Key>
void WorkQueueOf<Key>::shutdown_with_drain() {
  shutdown();
  std::unique_lock lock(mu_);
  drained_cv_.wait(lock, [&] { return queue_.empty() && processing_.empty(); });
}

template <class Key>
bool WorkQueueOf<Key>::shutting_down() const {
  std::lock_guard lock(mu_);
  return shutting_down_;
}

}  // namespace trainctl::kube::cache
