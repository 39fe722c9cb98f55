#pragma once

// client-go's "expectations": the names of objects a reconcile wrote and the cache has not shown
// yet, per job, so a stale cache does not make the next reconcile repeat the writes. And whether
// a job is settled: its last reconcile found nothing more to do once its writes show, and nothing
// else changed since, so the reconciles its own writes' events cause need not plan.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace trainctl::controller {

/// Thread-safe; keys are the reconcilers' job keys printed as strings. What is expected belongs to
/// one job object, named by its uid: a job deleted and created again under the same name must not
/// wait for the writes of its predecessor (a reconcile in flight while the job is deleted records
/// them after the deletion's forget()).
class Expectations {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  /// Expects the cache to show `names` ("<plural>/<name>", created or deleted) for the job `uid`
  /// before `deadline`; an empty set clears the key's expectations.
  void expect(const std::string& key, const std::string& uid, std::set<std::string> names,
              TimePoint deadline);
  /// The job was written and the server returned `version`: expect the cache to show it (or a
  /// later version: a relisted informer skips the ones in between), unless the informer already
  /// did. Its event may arrive before the write returns, and so may a later one (a user's edit
  /// right after our status write): every recent version counts, not just the newest, or the
  /// reconcile would wait for an event already delivered until the deadline.
  void expect_job_version(const std::string& key, const std::string& uid,
                          const std::string& version, TimePoint deadline);
  /// Stops expecting `names` for `key` (writes that were never sent, or failed).
  void drop(const std::string& key, const std::set<std::string>& names);
  /// The job informer delivered `version` of the job.
  void observe_job_version(const std::string& key, const std::string& version);
  /// The job is gone: drop everything about it.
  void forget(const std::string& key);
  /// The cache showed `name` (created) or lost it (deleted), or changed it: unless that is a
  /// write the key expects, it is a change of the job's objects no reconcile made (counted).
  void observe(const std::string& key, const std::string& name);
  /// A reconcile of one key, from before it reads the caches to its end: observe() counts the
  /// changes of the key's objects meanwhile (the work queue hands a key to one worker at a time).
  class Reading {
   public:
    Reading(Expectations& owner, std::string key);
    ~Reading();
    Reading(const Reading&) = delete;
    Reading& operator=(const Reading&) = delete;

   private:
    friend class Expectations;
    Expectations& owner_;
    std::string key_;
  };
  /// Starts a Reading of `key`.
  [[nodiscard]] Reading start_reading(const std::string& key) { return Reading(*this, key); }
  /// The reconcile `reading` of the job `uid`, leaving the job at `job_version`, found that
  /// planning on the state its writes produce gives nothing to do: until the job or its objects
  /// change otherwise, reconciling again would plan nothing. Ignored when a change was counted
  /// during the reading (the reconcile may not have seen it).
  void settle(const Reading& reading, const std::string& uid, const std::string& job_version);
  /// Whether reconciling the job `uid`, now at `job_version`, would plan nothing: settle() said
  /// so for that version, every write it expected showed, and no other change was counted.
  bool settled(const std::string& key, const std::string& uid, const std::string& job_version);
  /// Whether nothing is pending for the job `uid` under `key`, or its deadline passed (then it is
  /// dropped, as is what a job of another uid waited for).
  bool satisfied(const std::string& key, const std::string& uid, TimePoint now);
  /// What `key` still waits for, comma-separated (for logs).
  std::string pending(const std::string& key);

 private:
  struct Pending {
    std::string uid;
    std::set<std::string> names;
    TimePoint deadline;
  };
  std::mutex mutex_;
  std::map<std::string, Pending> pending_;
  /// Job versions the informer delivered, newest last, per job: more than a reconcile's writes
  /// plus the edits that can land while they are in flight.
  static constexpr std::size_t kRecentJobVersions = 16;
  std::map<std::string, std::deque<std::string>> seen_job_versions_;
  /// Changes counted per key being read (only those: nothing is kept for a key at rest).
  std::map<std::string, std::uint64_t> reading_;
  struct Settled {
    std::string uid;
    std::string job_version;
  };
  std::map<std::string, Settled> settled_;
};

}  // namespace trainctl::controller
