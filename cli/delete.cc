// trainctl delete | suspend | resume: remove jobs, or stop and restart them in place
// (spec.runPolicy.suspend, which the Kubeflow operators honour by deleting and recreating pods).
#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "api/status.h"
#include "commands.h"
#include "controller/objects.h"
#include "docs.h"
#include "error.h"
#include "job_follow.h"
#include "job_lookup.h"
#include "json_access.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

struct DeleteOptions {
  std::vector<std::string> names;
  std::string selector;
  bool all = false;
  std::string kind_flag;
  bool ignore_not_found = false;
  bool wait = false;
  std::string timeout = "5m";

  std::string namespace_;
  std::optional<api::JobKind> kind;
  std::chrono::seconds wait_timeout{0};

  void Complete(const GlobalFlags& flags) {
    namespace_ = flags.rest_config().default_namespace;
    if (!kind_flag.empty())
      kind = parse_kind_flag(kind_flag);
    wait_timeout = std::chrono::ceil<std::chrono::seconds>(parse_duration("--timeout", timeout));
  }

  void Validate() const {
    const int ways = (names.empty() ? 0 : 1) + (selector.empty() ? 0 : 1) + (all ? 1 : 0);
    if (ways != 1) {
      throw Error(ErrorKind::Usage,
                  "delete needs exactly one of: job names, -l/--selector SELECTOR, or --all");
    }
  }

  void Run(const GlobalFlags& flags) const {
    auto client = flags.client();
    std::vector<std::string> missing;
    std::vector<FoundJob> targets = names.empty() ? select(*client) : lookup(*client, missing);
    std::vector<FoundJob> deleted;
    for (auto& job : targets) {
      if (remove(*client, job))
        deleted.push_back(std::move(job));
      else
        missing.push_back(fmt::format("{} {:?} not found", api::kind_resource_name(job.kind),
                                      name_of(job.object)));
    }
    if (wait) {
      for (const auto& job : deleted)
        wait_until_gone(*client, job);
    }
    if (!missing.empty() && !ignore_not_found) {
      throw Error(ErrorKind::NotFound, fmt::format("{}", fmt::join(missing, "; ")), 404);
    }
  }

  std::vector<FoundJob> select(kube::Client& client) const {
    std::vector<FoundJob> jobs = list_jobs(client, namespace_, selector, kind);
    if (jobs.empty())
      std::cerr << fmt::format("No jobs found in {} namespace.", namespace_) << '\n';
    return jobs;
  }

  /// Resolves every name before deleting any, so an ambiguous name deletes nothing; a missing
  /// one is reported (in `missing`) after the others are deleted, as kubectl does.
  std::vector<FoundJob> lookup(kube::Client& client, std::vector<std::string>& missing) const {
    std::vector<FoundJob> jobs;
    for (const auto& name : names) {
      try {
        jobs.push_back(find_job(client, namespace_, name, kind));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::NotFound)
          throw;
        missing.push_back(e.message());
      }
    }
    return jobs;
  }

  /// Foreground propagation: the job stays (Terminating) until the garbage collector has removed
  /// its pods and services. Pod names are deterministic (<job>-worker-0), so a job resubmitted
  /// under the same name must not exist while the old pods still do — with Background it could
  /// adopt pods that are shutting down. It also makes --wait mean "pods gone", not just the
  /// job object. Returns false when the job was already gone.
  bool remove(kube::Client& client, const FoundJob& job) const {
    try {
      client.remove(kube::resources::job(job.kind), namespace_, name_of(job.object),
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
    if (!wait_until_deleted(client, kube::resources::job(job.kind), namespace_, name_of(job.object),
                            uid_of(job.object), deadline)) {
      throw Error(ErrorKind::WaitTimeout,
                  fmt::format("timed out after {} waiting for {} \"{}\" to be deleted",
                              api::human_duration(wait_timeout), api::kind_resource_name(job.kind),
                              name_of(job.object)));
    }
  }
};

/// suspend and resume: one merge patch of spec.runPolicy.suspend.
struct SuspendOptions {
  std::vector<std::string> names;
  std::string kind_flag;
  bool suspend = true;

  std::string namespace_;
  std::optional<api::JobKind> kind;

  void Complete(const GlobalFlags& flags) {
    namespace_ = flags.rest_config().default_namespace;
    if (!kind_flag.empty())
      kind = parse_kind_flag(kind_flag);
  }

  void Validate() const {
    if (names.empty())
      throw Error(ErrorKind::Usage, fmt::format("{} needs a job name", verb()));
  }

  void Run(const GlobalFlags& flags) const {
    auto client = flags.client();
    const json patch = {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}};
    for (const auto& name : names) {
      const FoundJob job = find_job(*client, namespace_, name, kind);
      client->patch(kube::resources::job(job.kind), namespace_, name, kube::PatchType::Merge,
                    patch);
      std::cout << fmt::format("{}/{} {}", api::kind_resource_name(job.kind), name,
                               suspend ? "suspended" : "resumed")
                << '\n';
    }
  }

  std::string_view verb() const { return suspend ? "suspend" : "resume"; }
};

void add_suspend_command(CLI::App& app, const GlobalFlags& flags, bool suspend) {
  auto opts = std::make_shared<SuspendOptions>();
  opts->suspend = suspend;
  auto* cmd = app.add_subcommand(
      std::string(opts->verb()),
      suspend ? "Suspend jobs: their pods are deleted, the jobs kept (spec.runPolicy.suspend)"
              : "Resume suspended jobs: their pods are created again");
  cmd->add_option("jobs", opts->names, "Job names")
      ->required()
      ->check(completes(ValueSource::Jobs));
  cmd->add_option("--kind", opts->kind_flag, "Only look for this kind: tfjob, pytorchjob, mpijob")
      ->check(one_of({"tfjob", "pytorchjob", "mpijob"}));
  cmd->callback([opts, &flags] {
    opts->Complete(flags);
    opts->Validate();
    opts->Run(flags);
  });
}

}  // namespace

void add_delete_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<DeleteOptions>();
  auto* cmd = app.add_subcommand("delete", "Delete jobs by name, by label selector, or all");
  cmd->add_option("jobs", opts->names, "Job names")->check(completes(ValueSource::Jobs));
  cmd->add_option("-l,--selector", opts->selector, "Delete the jobs matching this label selector");
  cmd->add_flag("--all", opts->all, "Delete every job in the namespace");
  cmd->add_option("--kind", opts->kind_flag, "Only this kind: tfjob, pytorchjob, mpijob")
      ->check(one_of({"tfjob", "pytorchjob", "mpijob"}));
  cmd->add_flag("--ignore-not-found", opts->ignore_not_found,
                "Succeed when a named job does not exist");
  cmd->add_flag("--wait", opts->wait, "Wait until the jobs and their pods are gone");
  cmd->add_option("--timeout", opts->timeout, "How long --wait waits (e.g. 90s, 5m, 2h)")
      ->capture_default_str();
  cmd->callback([opts, &flags] {
    opts->Complete(flags);
    opts->Validate();
    opts->Run(flags);
  });
  add_suspend_command(app, flags, true);
  add_suspend_command(app, flags, false);
}

}  // namespace trainctl::cli
