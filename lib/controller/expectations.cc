#include "controller/expectations.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainctl::controller {
namespace {

// The expectation that the job informer shows a write of the job that returned `version`.
std::string job_version_name(std::string_view version) {
  return fmt::format("job@{}", version);
}

}  // namespace

void Expectations::expect(const std::string& key, std::set<std::string> names, TimePoint deadline) {
  std::lock_guard lock(mutex_);
  if (names.empty()) {
    pending_.erase(key);
    return;
  }
  pending_[key] = Pending{std::move(names), deadline};
}

void Expectations::expect_job_version(const std::string& key, const std::string& version,
                                      TimePoint deadline) {
  std::lock_guard lock(mutex_);
  const auto& seen = seen_job_versions_[key];
  if (std::find(seen.begin(), seen.end(), version) != seen.end())
    return;
  Pending& pending = pending_[key];
  pending.names.insert(job_version_name(version));
  pending.deadline = std::max(pending.deadline, deadline);
}

void Expectations::observe_job_version(const std::string& key, const std::string& version) {
  {
    std::lock_guard lock(mutex_);
    auto& seen = seen_job_versions_[key];
    seen.push_back(version);
    if (seen.size() > kRecentJobVersions)
      seen.pop_front();
  }
  observe(key, job_version_name(version));
}

void Expectations::forget(const std::string& key) {
  std::lock_guard lock(mutex_);
  pending_.erase(key);
  seen_job_versions_.erase(key);
}

void Expectations::observe(const std::string& key, const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(key);
  if (it == pending_.end())
    return;
  it->second.names.erase(name);
  if (it->second.names.empty())
    pending_.erase(it);
}

bool Expectations::satisfied(const std::string& key, TimePoint now) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(key);
  if (it == pending_.end())
    return true;
  if (now < it->second.deadline)
    return false;
  pending_.erase(it);
  return true;
}

}  // namespace trainctl::controller
