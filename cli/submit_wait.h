#pragma once

// submit --wait: follows the jobs submit created until each has finished, with their logs, a
// progress line, each replica's final log saved before cleanup deletes the pods, and a report.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kube/client.h"

namespace trainctl::cli {

/// The flags of submit that follow the created jobs.
struct SubmitWaitFlags {
  bool wait = false;
  std::string timeout;  // empty: no limit
  bool logs = false;
  std::string report;
  std::string save_logs;
};

void add_submit_wait_flags(CLI::App& cmd, SubmitWaitFlags& flags);

/// Follows `jobs` (as the server returned them) until every one has finished, printing to stdout
/// or, when `to_stderr` (submit printed -o json/yaml/name), to stderr. Throws Error(JobOutcome)
/// when a job failed, Error(WaitTimeout) when --timeout passed first, Error(NotFound) when a job
/// was deleted meanwhile; API errors win over timeouts, timeouts over failures.
void wait_for_submitted(kube::Client& client, const SubmitWaitFlags& flags,
                        const std::vector<nlohmann::json>& jobs, bool to_stderr);

}  // namespace trainctl::cli
