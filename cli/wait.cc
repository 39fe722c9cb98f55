// trainctl wait JOB --for=created|running|succeeded|failed|finished|deleted (or kubectl's
// condition=Succeeded, condition=Failed, delete): blocks on a WATCH of
// the job until the condition holds, the job ends so that it never will, or --timeout passes.
// The wait follows the job it found (its uid): one deleted and created again under the same name
// is another job, so its status never satisfies the wait (--for=deleted is met instead).
//
// Exit codes (DESIGN.md): 0 the condition holds; 1 the job ended otherwise (Failed while waiting
// for succeeded or finished, Succeeded while waiting for failed, finished while waiting for
// running); 3 API errors and a job that does not exist (except for created, and deleted, which
// then prints nothing, as kubectl); 4 timeout.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iostream>

#include "api/status.h"
#include "commands.h"
#include "docs.h"
#include "duration.h"
#include "error.h"
#include "job_lookup.h"
#include "job_target.h"
#include "job_watch.h"
#include "json_access.h"
#include "printer.h"
#include "text.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

enum class WaitFor { Created, Running, Succeeded, Failed, Finished, Deleted };

constexpr std::array<std::pair<std::string_view, WaitFor>, 6> kConditions = {{
    {"created", WaitFor::Created},
    {"running", WaitFor::Running},
    {"succeeded", WaitFor::Succeeded},
    {"failed", WaitFor::Failed},
    {"finished", WaitFor::Finished},
    {"deleted", WaitFor::Deleted},
}};

/// kubectl's spellings of --for as the names above: `condition=Succeeded` (any case, `=true`
/// optional) and `delete`; anything else as given, for Validate to judge.
std::string wait_condition_name(std::string_view for_flag) {
  std::string lower = to_lower(for_flag);
  if (lower == "delete")
    return "deleted";
  if (!lower.starts_with("condition="))
    return lower;
  lower.erase(0, std::string_view("condition=").size());
  if (lower.ends_with("=true"))
    lower.erase(lower.size() - std::string_view("=true").size());
  return lower == "created" || lower == "running" || lower == "succeeded" || lower == "failed"
             ? lower
             : std::string(for_flag);
}

/// What one observation of the job means for the wait.
enum class Verdict { Waiting, Met, Unreachable };

/// Judges one observation; `why` says what happened when the condition became unreachable.
Verdict judge(WaitFor target, const json* job, std::string& why) {
  if (target == WaitFor::Created)
    return job != nullptr ? Verdict::Met : Verdict::Waiting;
  if (target == WaitFor::Deleted)
    return job == nullptr ? Verdict::Met : Verdict::Waiting;
  if (job == nullptr) {
    why = "was deleted";
    return Verdict::Unreachable;
  }
  const std::string status = api::job_status(*job);
  const std::string message = api::status_detail(*job);
  const std::string detail = message.empty() ? status : fmt::format("{}: {}", status, message);
  switch (target) {
    case WaitFor::Running:
      if (status == "Running")
        return Verdict::Met;
      why = fmt::format("finished ({}) and will not be Running", detail);
      return job_finished(*job) ? Verdict::Unreachable : Verdict::Waiting;
    case WaitFor::Succeeded:
      why = fmt::format("failed ({}), it will not succeed", detail);
      return status == "Succeeded" ? Verdict::Met
             : status == "Failed"  ? Verdict::Unreachable
                                   : Verdict::Waiting;
    case WaitFor::Failed:
      why = fmt::format("succeeded ({}), it did not fail", detail);
      return status == "Failed"      ? Verdict::Met
             : status == "Succeeded" ? Verdict::Unreachable
                                     : Verdict::Waiting;
    case WaitFor::Finished:
      why = fmt::format("finished but failed ({})", detail);
      return status == "Succeeded" ? Verdict::Met
             : status == "Failed"  ? Verdict::Unreachable
                                   : Verdict::Waiting;
    default:
      return Verdict::Waiting;
  }
}

struct WaitOptions {
  JobTarget job_target;
  std::string for_flag;
  std::string timeout = "30s";
  std::string output;

  Connection connection;
  std::string job;
  std::string namespace_;
  std::optional<api::JobKind> kind;
  WaitFor target = WaitFor::Finished;
  std::string condition;                              // for messages: "succeeded"
  std::optional<std::chrono::milliseconds> wait_for;  // nullopt: no limit
  std::optional<OutputFormat> format;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    job_target.Complete(connection);
    job = job_target.job().name;
    kind = job_target.job().kind;
    namespace_ = job_target.namespace_();
    if (!timeout.starts_with('-'))  // negative: wait as long as it takes
      wait_for = parse_duration_flag("--timeout", timeout);
    if (!output.empty())
      format = parse_output_format(output);
    condition = wait_condition_name(for_flag);
  }

  void Validate() {
    const auto it = std::find_if(kConditions.begin(), kConditions.end(),
                                 [&](const auto& c) { return c.first == condition; });
    if (it == kConditions.end()) {
      throw Error(ErrorKind::Usage,
                  fmt::format("--for: {:?} is not one of created, running, succeeded, failed, "
                              "finished, deleted, condition=Succeeded, condition=Failed, "
                              "condition=Running, condition=Created, delete",
                              for_flag));
    }
    target = it->second;
    if (format && *format != OutputFormat::Name && *format != OutputFormat::Json)
      throw Error(ErrorKind::Usage, "wait prints -o name or json");
  }

  void Run() {
    kube::Client& client = connection.client();
    std::optional<api::JobKind> found_kind = kind;
    std::string uid;  // the job waited for; "" when it does not exist yet (--for=created)
    try {
      const FoundJob found = find_job(client, namespace_, job, kind);
      found_kind = found.kind;
      uid = uid_of(found.object);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      // As `kubectl wait --for=delete` of an object that does not exist: nothing to wait for,
      // exit 0, and nothing printed, since no job was seen to go.
      if (target == WaitFor::Deleted)
        return;
      if (target != WaitFor::Created && !kind)
        throw;
      if (target != WaitFor::Created) {  // kubectl's wording
        const kube::Resource r = kube::resources::job(*kind);
        throw Error(ErrorKind::NotFound,
                    fmt::format("{}.{} {:?} not found", r.plural, r.group, job), 404);
      }
      if (!kind) {
        throw Error(ErrorKind::Usage,
                    fmt::format("wait --for=created: job {:?} does not exist yet, so give its "
                                "--kind (tfjob, pytorchjob or mpijob)",
                                job));
      }
    }
    const kube::Resource resource = kube::resources::job(*found_kind);
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (wait_for)
      deadline = std::chrono::steady_clock::now() + *wait_for;
    Verdict verdict = Verdict::Waiting;
    std::string why;
    json last;
    const bool settled = watch_job(client, resource, namespace_, job, deadline, [&](const json* j) {
      // A job of the same name with another uid was created after the one waited for was
      // deleted: for this wait that one is gone, and the new one's status is not its.
      if (j != nullptr && target != WaitFor::Created && !uid.empty() && uid_of(*j) != uid) {
        last = json();
        verdict = judge(target, nullptr, why);
        if (verdict == Verdict::Unreachable)
          why = fmt::format("was deleted and created again (uid {}, not {})", uid_of(*j), uid);
        return verdict == Verdict::Waiting;
      }
      last = j != nullptr ? *j : json();
      verdict = judge(target, j, why);
      return verdict == Verdict::Waiting;
    });
    const std::string name = fmt::format("{}/{}", api::kind_resource_name(*found_kind), job);
    if (!settled) {
      throw Error(ErrorKind::WaitTimeout,
                  fmt::format("timed out after {} waiting for {} to be {}",
                              api::human_duration(std::chrono::ceil<std::chrono::seconds>(
                                  wait_for.value_or(std::chrono::milliseconds(0)))),
                              name, condition));
    }
    if (verdict == Verdict::Unreachable) {
      if (last.is_null())
        throw Error(ErrorKind::NotFound, fmt::format("{} {}", name, why), 404);
      throw Error(ErrorKind::JobOutcome, fmt::format("{} {}", name, why));
    }
    print(found_kind, last.is_null() ? nullptr : &last);
  }

  void print(std::optional<api::JobKind> k, const json* object) const {
    const std::string resource = k ? api::kind_resource_name(*k) : "job";
    if (!format) {
      std::cout << fmt::format("{}/{} condition met\n", resource, job);
      return;
    }
    if (*format == OutputFormat::Name)
      std::cout << fmt::format("{}/{}\n", resource, job);
    else if (object != nullptr)
      print_document(std::cout, *object, *format);
  }
};

}  // namespace

void add_wait_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<WaitOptions>();
  auto* cmd = app.add_subcommand(
      "wait",
      "Wait until a job is created, running, succeeded, failed, finished or deleted; exit 0 when "
      "it is, 1 when the job ended otherwise, 4 on timeout");
  cmd->footer(
      "The wait follows the job it found, by uid: if that job is deleted and another is created "
      "under the same name, --for=deleted is met and any other condition ends with exit 3, never "
      "with the new job's status. --for=deleted of a job that does not exist prints nothing and "
      "exits 0, as kubectl wait --for=delete does.");
  opts->job_target.add_to(*cmd, JobTarget::Args::One,
                          "Only look for this kind: tfjob, pytorchjob, mpijob (needed with "
                          "--for=created when the job does not exist yet, unless given as "
                          "TYPE/NAME)");
  cmd->add_option("--for", opts->for_flag,
                  "The condition: created, running, succeeded, failed, finished (succeeded exits "
                  "0, failed exits 1) or deleted; kubectl's condition=Succeeded, "
                  "condition=Failed and delete work too")
      ->required()
      ->check(one_of({"created", "running", "succeeded", "failed", "finished", "deleted",
                      "condition=Succeeded", "condition=Failed", "delete"}));
  cmd->add_option("--timeout", opts->timeout,
                  "How long to wait, e.g. 90s, 10m, 2h; 0 checks once, a negative value waits "
                  "without limit")
      ->type_name("DURATION")
      ->default_str("30s");
  add_examples(*cmd, R"(# Wait up to an hour for a job to succeed (exit 1 if it fails, 4 on timeout)
trainctl wait mnist --for=succeeded --timeout 1h
# kubectl's spellings
trainctl wait pytorchjob/bert --for=condition=Succeeded
trainctl wait tfjob/mnist --for=delete --timeout 2m
# A job that does not exist yet
trainctl wait tfjob/later --for=created)");
  cmd->add_option("-o,--output", opts->output, "name or json instead of the `condition met` line");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
