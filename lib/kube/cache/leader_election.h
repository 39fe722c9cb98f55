#pragma once

// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection package: of
// all replicas running one controller, only the holder of the Lease acts.

#include <chrono>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>

#include "error.h"
#include "kube/client.h"
#include "kube/clock.h"

namespace trainctl::kube::cache {

/// Which Lease to hold, as whom, and how fast to act (client-go's defaults).
struct LeaderElectionConfig {
  std::string namespace_;
  std::string name;
  /// Unique per replica (e.g. the pod name plus a random suffix).
  std::string identity;
  /// How long others wait, after they last saw the Lease change, before taking it over.
  std::chrono::milliseconds lease_duration = std::chrono::seconds(15);
  /// How long the leader keeps trying to renew before it gives up leadership.
  std::chrono::milliseconds renew_deadline = std::chrono::seconds(10);
  /// How often to try to acquire or renew.
  std::chrono::milliseconds retry_period = std::chrono::seconds(2);
  /// On stop, clear holderIdentity so another replica takes over at once.
  bool release_on_cancel = true;
};

/// What the elector calls; each may be empty.
struct LeaderCallbacks {
  /// Runs on its own thread once leadership is acquired; its token is stopped when leadership
  /// ends, and it must then return promptly.
  std::function<void(std::stop_token)> on_started_leading;
  /// Called once leadership has ended (lost, or released on stop), after on_started_leading
  /// returned. Not called when this replica never led.
  std::function<void()> on_stopped_leading;
  /// Called with the holder's identity whenever it is seen to change ("" = nobody).
  std::function<void(const std::string&)> on_new_leader;
  /// An attempt that could not read or write the Lease (it is retried), for logs.
  std::function<void(const Error&)> on_error;
};

/// Acquires and renews one Lease. A Lease counts as expired when it has not changed for its
/// leaseDurationSeconds as measured by this replica's own clock, never by comparing the
/// server's timestamps with ours (clocks differ between machines).
class LeaderElector {
 public:
  LeaderElector(Client& client, LeaderElectionConfig config, Clock& clock = real_clock());

  /// Tries to acquire the Lease every retry_period until it succeeds, then leads (see
  /// LeaderCallbacks) and renews every retry_period. Returns when `stop` is requested (releasing
  /// the Lease when configured) or when leadership is lost: renewal failed for renew_deadline.
  /// A controller that lost leadership should exit rather than run again.
  void run(std::stop_token stop, LeaderCallbacks callbacks);

  bool is_leader() const;
  /// The holder last observed ("" when none or not yet known).
  std::string leader() const;

 private:
  /// The spec of the Lease as client-go's LeaderElectionRecord.
  struct Record {
    std::string holder;
    int lease_duration_seconds = 0;
    std::string acquire_time;
    std::string renew_time;
    int transitions = 0;

    static Record from_lease(const nlohmann::json& lease);
    nlohmann::json to_spec() const;
    bool operator==(const Record&) const = default;
  };

  /// One attempt: create the Lease, renew our hold on it, or take it over once expired.
  bool try_acquire_or_renew();
  /// Blocks until acquired (true) or stopped (false).
  bool acquire(std::stop_token stop);
  /// Renews until stopped or renewal failed for renew_deadline.
  void renew(std::stop_token stop);
  /// Clears holderIdentity if we still hold the Lease.
  void release();
  /// Records what we saw of the Lease, noting the local time when it changed.
  void observe(const Record& record);
  /// Whether the holder we observed still holds the Lease by our clock.
  bool observed_lease_valid() const;
  void report(const Error& error) const;

  Client& client_;
  LeaderElectionConfig config_;
  Clock& clock_;
  LeaderCallbacks callbacks_;
  mutable std::mutex mu_;
  Record observed_;
  std::chrono::steady_clock::time_point observed_time_;
  bool leading_ = false;
};

/// metav1.MicroTime as the API server writes it: "2024-01-01T00:00:00.000000Z".
std::string format_micro_time(std::chrono::system_clock::time_point t);

}  // namespace trainctl::kube::cache
