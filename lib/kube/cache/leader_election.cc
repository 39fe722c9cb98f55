#include "kube/cache/leader_election.h"

#include <fmt/format.h>

#include <ctime>
#include <random>
#include <thread>

#include "kube/cache/stop_wait.h"
#include "kube/resource.h"

namespace trainctl::kube::cache {

using nlohmann::json;

namespace {

/// client-go's JitterUntil factor: each wait is retry_period plus up to 1.2 times more.
constexpr double kJitterFactor = 1.2;

std::chrono::nanoseconds jittered(std::chrono::milliseconds period) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double factor = 1.0 + std::uniform_real_distribution<double>(0, kJitterFactor)(rng);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(period * factor);
}

int whole_seconds_at_least_one(std::chrono::milliseconds d) {
  const auto s = std::chrono::ceil<std::chrono::seconds>(d).count();
  return static_cast<int>(std::max<std::int64_t>(1, s));
}

}  // namespace

std::string format_micro_time(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::floor<std::chrono::seconds>(t);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
  const std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06}Z", buf, micros);
}

LeaderElector::Record LeaderElector::Record::from_lease(const json& lease) {
  const json spec = lease.value("spec", json::object());
  return {.holder = spec.value("holderIdentity", ""),
          .lease_duration_seconds = spec.value("leaseDurationSeconds", 0),
          .acquire_time = spec.value("acquireTime", ""),
          .renew_time = spec.value("renewTime", ""),
          .transitions = spec.value("leaseTransitions", 0)};
}

json LeaderElector::Record::to_spec() const {
  return {{"holderIdentity", holder},
          {"leaseDurationSeconds", lease_duration_seconds},
          {"acquireTime", acquire_time},
          {"renewTime", renew_time},
          {"leaseTransitions", transitions}};
}

LeaderElector::LeaderElector(Client& client, LeaderElectionConfig config, Clock& clock)
    : client_(client), config_(std::move(config)), clock_(clock) {
  if (config_.name.empty() || config_.identity.empty()) {
    throw Error(ErrorKind::Usage, "leader election needs a Lease name and an identity");
  }
  if (config_.lease_duration <= config_.renew_deadline ||
      config_.renew_deadline <= config_.retry_period) {
    throw Error(ErrorKind::Usage,
                fmt::format("leader election needs lease duration ({} ms) > renew deadline ({} ms) "
                            "> retry period ({} ms)",
                            config_.lease_duration.count(), config_.renew_deadline.count(),
                            config_.retry_period.count()));
  }
}

void LeaderElector::run(std::stop_token stop, LeaderCallbacks callbacks) {
  callbacks_ = std::move(callbacks);
  if (!acquire(stop))
    return;
  {
    std::lock_guard lock(mu_);
    leading_ = true;
  }
  std::jthread leader_work;
  if (callbacks_.on_started_leading)
    leader_work = std::jthread(callbacks_.on_started_leading);
  renew(stop);
  {
    std::lock_guard lock(mu_);
    leading_ = false;
  }
  if (leader_work.joinable()) {
    leader_work.request_stop();
    leader_work.join();
  }
  if (stop.stop_requested() && config_.release_on_cancel)
    release();
  if (callbacks_.on_stopped_leading)
    callbacks_.on_stopped_leading();
}

bool LeaderElector::acquire(std::stop_token stop) {
  while (!try_acquire_or_renew()) {
    if (!sleep_unless_stopped(stop, jittered(config_.retry_period)))
      return false;
  }
  return true;
}

void LeaderElector::renew(std::stop_token stop) {
  auto last_renewed = clock_.monotonic();
  while (sleep_unless_stopped(stop, config_.retry_period)) {
    if (try_acquire_or_renew()) {
      last_renewed = clock_.monotonic();
    } else if (clock_.monotonic() - last_renewed >= config_.renew_deadline) {
      return;  // lost: another replica may take the Lease over soon
    }
  }
}

bool LeaderElector::try_acquire_or_renew() {
  const std::string now = format_micro_time(clock_.now());
  Record mine{.holder = config_.identity,
              .lease_duration_seconds = whole_seconds_at_least_one(config_.lease_duration),
              .acquire_time = now,
              .renew_time = now};
  const Resource leases = resources::leases();
  json lease;
  try {
    lease = client_.get(leases, config_.namespace_, config_.name);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound) {
      report(e);
      return false;
    }
    lease = {{"apiVersion", leases.api_version()},
             {"kind", leases.kind},
             {"metadata", {{"name", config_.name}, {"namespace", config_.namespace_}}},
             {"spec", mine.to_spec()}};
    try {
      client_.create(leases, config_.namespace_, lease);
    } catch (const Error& create_error) {
      report(create_error);  // AlreadyExists: another replica created it first
      return false;
    }
    observe(mine);
    return true;
  }

  const Record old = Record::from_lease(lease);
  observe(old);
  if (!old.holder.empty() && old.holder != config_.identity && observed_lease_valid())
    return false;
  if (old.holder == config_.identity) {
    mine.acquire_time = old.acquire_time;
    mine.transitions = old.transitions;
  } else {
    mine.transitions = old.transitions + 1;
  }
  lease["spec"] = mine.to_spec();  // metadata.resourceVersion makes the update conditional
  try {
    client_.update(leases, config_.namespace_, lease);
  } catch (const Error& e) {
    report(e);  // Conflict: another replica wrote the Lease since we read it
    return false;
  }
  observe(mine);
  return true;
}

void LeaderElector::release() {
  const Resource leases = resources::leases();
  try {
    json lease = client_.get(leases, config_.namespace_, config_.name);
    const Record old = Record::from_lease(lease);
    if (old.holder != config_.identity)
      return;
    const std::string now = format_micro_time(clock_.now());
    const Record released{.holder = "",
                          .lease_duration_seconds = 1,
                          .acquire_time = now,
                          .renew_time = now,
                          .transitions = old.transitions};
    lease["spec"] = released.to_spec();
    client_.update(leases, config_.namespace_, lease);
    observe(released);
  } catch (const Error& e) {
    report(e);  // the Lease then expires after its duration
  }
}

void LeaderElector::observe(const Record& record) {
  bool new_holder = false;
  {
    std::lock_guard lock(mu_);
    if (record == observed_ && observed_time_ != std::chrono::steady_clock::time_point{})
      return;
    new_holder = record.holder != observed_.holder;
    observed_ = record;
    observed_time_ = clock_.monotonic();
  }
  if (new_holder && callbacks_.on_new_leader)
    callbacks_.on_new_leader(record.holder);
}

bool LeaderElector::observed_lease_valid() const {
  std::lock_guard lock(mu_);
  return clock_.monotonic() <
         observed_time_ + std::chrono::seconds(observed_.lease_duration_seconds);
}

void LeaderElector::report(const Error& error) const {
  if (callbacks_.on_error)
    callbacks_.on_error(error);
}

bool LeaderElector::is_leader() const {
  std::lock_guard lock(mu_);
  return leading_;
}

std::string LeaderElector::leader() const {
  std::lock_guard lock(mu_);
  return observed_.holder;
}

}  // namespace trainctl::kube::cache
