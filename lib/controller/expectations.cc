#include "controller/expectations.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <utility>

namespace trainctl::controller {
namespace {

constexpr std::string_view kJobVersion = "job@";

// The expectation that the job informer shows a write of the job that returned `version`.
std::string job_version_name(std::string_view version) {
  return fmt::format("{}{}", kJobVersion, version);
}

// Whether the cache showing `seen` shows the write that returned `written` too: the same version,
// or a later one. kube-apiserver's resourceVersions are etcd revisions, one counter for every
// object, so a later write of the job has a greater number; an informer that relisted (after a
// dropped watch, a 410) shows the newest version only and never the ones in between. Versions
// that are not numbers compare only equal.
bool shows(std::string_view seen, std::string_view written) {
  if (seen == written)
    return true;
  std::uint64_t a = 0, b = 0;
  const auto [end_a, error_a] = std::from_chars(seen.data(), seen.data() + seen.size(), a);
  const auto [end_b, error_b] = std::from_chars(written.data(), written.data() + written.size(), b);
  return error_a == std::errc() && end_a == seen.data() + seen.size() && error_b == std::errc() &&
         end_b == written.data() + written.size() && a >= b;
}

}  // namespace

void Expectations::expect(const std::string& key, const std::string& uid,
                          std::set<std::string> names, TimePoint deadline) {
  std::lock_guard lock(mutex_);
  if (names.empty()) {
    pending_.erase(key);
    return;
  }
  pending_[key] = Pending{uid, std::move(names), deadline};
}

void Expectations::expect_job_version(const std::string& key, const std::string& uid,
                                      const std::string& version, TimePoint deadline) {
  std::lock_guard lock(mutex_);
  const auto& seen = seen_job_versions_[key];
  if (std::any_of(seen.begin(), seen.end(),
                  [&](const std::string& v) { return shows(v, version); }))
    return;
  Pending& pending = pending_[key];
  if (pending.uid != uid)
    pending = Pending{.uid = uid};
  pending.names.insert(job_version_name(version));
  pending.deadline = std::max(pending.deadline, deadline);
}

void Expectations::observe_job_version(const std::string& key, const std::string& version) {
  std::lock_guard lock(mutex_);
  auto& seen = seen_job_versions_[key];
  seen.push_back(version);
  if (seen.size() > kRecentJobVersions)
    seen.pop_front();
  const auto it = pending_.find(key);
  if (it == pending_.end())
    return;
  std::erase_if(it->second.names, [&](const std::string& name) {
    return name.starts_with(kJobVersion) && shows(version, name.substr(kJobVersion.size()));
  });
  if (it->second.names.empty())
    pending_.erase(it);
}

void Expectations::drop(const std::string& key, const std::set<std::string>& names) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(key);
  if (it == pending_.end())
    return;
  for (const auto& name : names)
    it->second.names.erase(name);
  if (it->second.names.empty())
    pending_.erase(it);
}

void Expectations::forget(const std::string& key) {
  std::lock_guard lock(mutex_);
  pending_.erase(key);
  seen_job_versions_.erase(key);
  settled_.erase(key);
}

void Expectations::observe(const std::string& key, const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(key);
  if (it == pending_.end() || it->second.names.erase(name) == 0) {
    if (const auto reading = reading_.find(key); reading != reading_.end())
      ++reading->second;
    settled_.erase(key);
    return;
  }
  if (it->second.names.empty())
    pending_.erase(it);
}

Expectations::Reading::Reading(Expectations& owner, std::string key)
    : owner_(owner), key_(std::move(key)) {
  std::lock_guard lock(owner_.mutex_);
  owner_.reading_[key_] = 0;
}

Expectations::Reading::~Reading() {
  std::lock_guard lock(owner_.mutex_);
  owner_.reading_.erase(key_);
}

void Expectations::settle(const Reading& reading, const std::string& uid,
                          const std::string& job_version) {
  std::lock_guard lock(mutex_);
  if (reading_.at(reading.key_) == 0)
    settled_[reading.key_] = Settled{uid, job_version};
}

bool Expectations::settled(const std::string& key, const std::string& uid,
                           const std::string& job_version) {
  std::lock_guard lock(mutex_);
  const auto it = settled_.find(key);
  return it != settled_.end() && it->second.uid == uid && it->second.job_version == job_version &&
         !pending_.contains(key);
}

bool Expectations::satisfied(const std::string& key, const std::string& uid, TimePoint now) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(key);
  if (it == pending_.end())
    return true;
  if (it->second.uid == uid && now < it->second.deadline)
    return false;
  // Writes that never showed (or a predecessor's): what a settle() assumed of them is void.
  pending_.erase(it);
  settled_.erase(key);
  return true;
}

std::string Expectations::pending(const std::string& key) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(key);
  return it == pending_.end() ? std::string() : fmt::format("{}", fmt::join(it->second.names, ","));
}

}  // namespace trainctl::controller
