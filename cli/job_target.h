#pragma once

// The jobs a verb acts on, named as kubectl names objects: NAME with an optional --kind, or
// TYPE/NAME, where TYPE is a job kind in any case, singular or plural, with or without its API
// group: `pytorchjob/x`, `pytorchjobs/x`, `PyTorchJob/x`, `pytorchjob.kubeflow.org/x` (what
// `-o name` prints). Shared by get, delete, suspend, resume, wait and logs.

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/job.h"
#include "global_flags.h"
#include "job_lookup.h"

namespace trainctl::cli {

/// One job argument: its name and, from TYPE/ or --kind, its kind.
struct JobRef {
  std::string name;
  std::optional<api::JobKind> kind;
};

/// The job kind a TYPE of TYPE/NAME names ("tfjob", "TFJob", "tfjobs", "tfjob.kubeflow.org"),
/// or nullopt when it names none.
std::optional<api::JobKind> kind_from_type(std::string_view type);

/// Parses NAME or TYPE/NAME; `kind_flag` is --kind. Throws Error(Usage) when TYPE is not a job
/// kind, when --kind names another kind than TYPE, or when NAME is empty.
JobRef parse_job_ref(std::string_view arg, std::optional<api::JobKind> kind_flag);

/// The job arguments and --kind of a verb, and the namespace it works in.
class JobTarget {
 public:
  /// How many job arguments the verb takes.
  enum class Args { One, OneOrMore, AnyNumber };

  /// Registers the positional argument (`job`, or `jobs` for several) and --kind on `cmd`;
  /// `kind_help` replaces --kind's description when not empty.
  void add_to(CLI::App& cmd, Args args, std::string kind_help = "");

  /// Parses --kind and every argument (Usage errors as parse_job_ref) and takes the namespace.
  void Complete(Connection& connection);

  const std::string& namespace_() const { return ns_; }
  /// --kind, when given.
  std::optional<api::JobKind> kind_flag() const { return kind_; }
  const std::vector<JobRef>& jobs() const { return jobs_; }
  /// The one job of an Args::One verb.
  const JobRef& job() const { return jobs_.at(0); }

  /// A command to suggest to the user, `trainctl <verb_and_args>`, with `-n NAMESPACE` when -n
  /// was given or the namespace is not "default", so it acts on the same job when pasted.
  std::string suggest(std::string_view verb_and_args) const;

  /// The job `ref` names, of any kind unless it has one (find_job's errors).
  FoundJob find(kube::Client& client, const JobRef& ref) const;
  /// Every job the arguments name, resolved before the verb acts on any (so an ambiguous name
  /// changes nothing); the message of each one not found goes to `missing`, for the verb to
  /// report after acting on the others, as kubectl does.
  std::vector<FoundJob> find_all(kube::Client& client, std::vector<std::string>& missing) const;

 private:
  std::vector<std::string> args_;
  std::string kind_text_;
  std::optional<api::JobKind> kind_;
  std::vector<JobRef> jobs_;
  std::string ns_;
  bool ns_given_ = false;
};

}  // namespace trainctl::cli
