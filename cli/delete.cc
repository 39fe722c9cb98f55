// trainctl delete | suspend | resume: remove jobs, or stop and restart them in place
// (spec.runPolicy.suspend, which the Kubeflow operators honour by deleting and recreating pods).
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <vector>

#include "api/status.h"
#include "commands.h"
#include "docs.h"
#include "duration.h"
#include "error.h"
#include "job_lookup.h"
#include "job_target.h"
#include "job_watch.h"
#include "json_access.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

struct DeleteOptions {
  JobTarget target;
  std::string selector;
  bool all = false;
  bool ignore_not_found = false;
  bool wait = false;
  std::string timeout = "5m";

  Connection connection;
  std::chrono::seconds wait_timeout{0};

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    target.Complete(connection);
    wait_timeout =
        std::chrono::ceil<std::chrono::seconds>(parse_duration_flag("--timeout", timeout));
  }

  void Validate() const {
    const int ways = (target.jobs().empty() ? 0 : 1) + (selector.empty() ? 0 : 1) + (all ? 1 : 0);
    if (ways != 1) {
      throw Error(ErrorKind::Usage,
                  "delete needs exactly one of: job names, -l/--selector SELECTOR, or --all");
    }
  }

  void Run() {
    kube::Client& client = connection.client();
    std::vector<std::string> missing;
    std::vector<FoundJob> targets =
        target.jobs().empty() ? select(client) : target.find_all(client, missing);
    std::vector<FoundJob> deleted;
    for (auto& job : targets) {
      if (remove(client, job))
        deleted.push_back(std::move(job));
      else
        missing.push_back(fmt::format("{} {:?} not found", api::kind_resource_name(job.kind),
                                      name_of(job.object)));
    }
    if (wait) {
      for (const auto& job : deleted)
        wait_until_gone(client, job);
    }
    if (!missing.empty() && !ignore_not_found) {
      throw Error(ErrorKind::NotFound, fmt::format("{}", fmt::join(missing, "; ")), 404);
    }
  }

  std::vector<FoundJob> select(kube::Client& client) const {
    std::vector<FoundJob> jobs =
        list_jobs(client, target.namespace_(), selector, target.kind_flag());
    if (jobs.empty())
      std::cerr << fmt::format("No jobs found in {} namespace.", target.namespace_()) << '\n';
    return jobs;
  }

  /// Foreground propagation: the job stays (Terminating) until the garbage collector has removed
  /// its pods and services. Pod names are deterministic (<job>-worker-0), so a job resubmitted
  /// under the same name must not exist while the old pods still do — with Background it could
  /// adopt pods that are shutting down. It also makes --wait mean "pods gone", not just the
  /// job object. Returns false when the job was already gone.
  bool remove(kube::Client& client, const FoundJob& job) const {
    try {
      client.remove(kube::resources::job(job.kind), target.namespace_(), name_of(job.object),
                    {.propagation_policy = "Foreground"});
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      return false;
    }
    std::cout << fmt::format("{} \"{}\" deleted", api::kind_resource_name(job.kind),
                             name_of(job.object))
              << '\n';
    return true;
  }

  void wait_until_gone(kube::Client& client, const FoundJob& job) const {
    const auto deadline = std::chrono::steady_clock::now() + wait_timeout;
    if (!wait_until_deleted(client, kube::resources::job(job.kind), target.namespace_(),
                            name_of(job.object), uid_of(job.object), deadline)) {
      throw Error(ErrorKind::WaitTimeout,
                  fmt::format("timed out after {} waiting for {} \"{}\" to be deleted",
                              api::human_duration(wait_timeout), api::kind_resource_name(job.kind),
                              name_of(job.object)));
    }
  }
};

/// suspend and resume: one merge patch of spec.runPolicy.suspend.
struct SuspendOptions {
  JobTarget target;
  bool suspend = true;

  Connection connection;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    target.Complete(connection);
  }

  void Validate() const {
    if (target.jobs().empty())
      throw Error(ErrorKind::Usage, fmt::format("{} needs a job name", verb()));
  }

  void Run() {
    kube::Client& client = connection.client();
    const json patch = {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}};
    std::vector<FoundJob> jobs;
    for (const auto& ref : target.jobs())
      jobs.push_back(target.find(client, ref));
    if (suspend)
      refuse_finished(jobs);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const JobRef& ref = target.jobs()[i];
      const FoundJob& job = jobs[i];
      client.patch(kube::resources::job(job.kind), target.namespace_(), ref.name,
                   kube::PatchType::Merge, patch);
      std::cout << fmt::format("{}/{} {}", api::kind_resource_name(job.kind), ref.name,
                               suspend ? "suspended" : "resumed")
                << '\n';
    }
  }

  std::string_view verb() const { return suspend ? "suspend" : "resume"; }

  /// A finished job has no pods to stop and is never run again: suspending it would only write a
  /// field nothing acts on, so suspend refuses (exit 2) before writing to any job.
  static void refuse_finished(const std::vector<FoundJob>& jobs) {
    for (const auto& job : jobs) {
      if (job_finished(job.object)) {
        throw Error(ErrorKind::Usage,
                    fmt::format("{} {:?} has finished ({}): a finished job cannot be suspended",
                                api::kind_resource_name(job.kind), name_of(job.object),
                                api::job_status(job.object)));
      }
    }
  }
};

void add_suspend_command(CLI::App& app, const GlobalFlags& flags, bool suspend) {
  auto opts = std::make_shared<SuspendOptions>();
  opts->suspend = suspend;
  auto* cmd = app.add_subcommand(
      std::string(opts->verb()),
      suspend ? "Suspend jobs: their pods are deleted, the jobs kept (spec.runPolicy.suspend)"
              : "Resume suspended jobs: their pods are created again");
  opts->target.add_to(*cmd, JobTarget::Args::OneOrMore);
  add_examples(*cmd, fmt::format(R"(# {0} a job, or several
trainctl {1} mnist
trainctl {1} pytorchjob/bert tfjob/mnist)",
                                 suspend ? "Suspend" : "Resume", opts->verb()));
  run_verb(*cmd, opts, flags);
}

}  // namespace

void add_delete_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<DeleteOptions>();
  auto* cmd = app.add_subcommand("delete", "Delete jobs by name, by label selector, or all");
  add_examples(*cmd, R"(# Delete a job and wait until its pods are gone
trainctl delete mnist --wait --timeout 2m
# By TYPE/NAME, by label, or every job of the namespace
trainctl delete pytorchjob/bert
trainctl delete -l team=a
trainctl delete --all)");
  opts->target.add_to(*cmd, JobTarget::Args::AnyNumber,
                      "Only this kind: tfjob, pytorchjob, mpijob");
  cmd->add_option("-l,--selector", opts->selector, "Delete the jobs matching this label selector");
  cmd->add_flag("--all", opts->all, "Delete every job in the namespace");
  cmd->add_flag("--ignore-not-found", opts->ignore_not_found,
                "Succeed when a named job does not exist");
  cmd->add_flag("--wait", opts->wait, "Wait until the jobs and their pods are gone");
  cmd->add_option("--timeout", opts->timeout, "How long --wait waits (e.g. 90s, 5m, 2h)")
      ->type_name("DURATION")
      ->capture_default_str();
  run_verb(*cmd, opts, flags);
  add_suspend_command(app, flags, true);
  add_suspend_command(app, flags, false);
}

}  // namespace trainctl::cli
