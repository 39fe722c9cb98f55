#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "sandbox/store.h"

namespace trainctl::sandbox {

/// The part of kube-controller-manager's Job controller the sandbox needs (an MPIJob's launcher
/// is a batch/v1 Job): pods from the template up to parallelism and completions, pod names
/// `<job>-<5 random chars>` with the job-name and controller-uid labels and a controlling owner
/// reference, failed pods replaced until backoffLimit (default 6), status counts and the
/// Complete / Failed (BackoffLimitExceeded) / Suspended conditions, remaining pods deleted once
/// the job has finished. Not simulated: indexed completion, pod failure policy, TTL, deadlines.
class JobController {
 public:
  explicit JobController(Store& store);
  ~JobController();  // stop()

  /// One pass over every job, against a fresh read of the store.
  void step();
  /// Runs passes on a thread whenever jobs or pods change. Once.
  void start();
  void stop();

 private:
  void reconcile(const nlohmann::json& job, const std::vector<nlohmann::json>& pods);
  void run();

  Store& store_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace trainctl::sandbox
