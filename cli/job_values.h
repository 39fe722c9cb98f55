#pragma once

// The flags `submit KIND` and `render KIND` share, and how they become template values.

#include <CLI/CLI.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/job.h"
#include "render/templates.h"

namespace trainctl::cli {

/// What a word before `--` in the command line of a job kind is told (JobFlags::require_separator,
/// and the parse error of words on both sides of `--`).
std::string misplaced_command_word(std::string_view word);

/// Everything a user can say about a job on the command line, before it becomes render values.
/// Options are kept with their CLI11 handles so "not given" differs from "given as 0".
struct JobFlags {
  api::JobKind kind = api::JobKind::TFJob;

  std::string name;
  std::string image;
  int workers = 0;
  int ps = 0;
  int chief = 0;
  int evaluator = 0;
  std::string nproc_per_node;
  int slots_per_worker = 0;
  std::string mpi_implementation;
  int gpus = 0;
  std::string cpu;
  std::string memory;
  /// `<role>.<key>` -> value for --worker-image, --ps-cpu, ... (image, cpu, memory, gpus).
  std::map<std::string, std::string> role_overrides;
  std::vector<std::string> env;
  std::vector<std::string> labels;
  std::vector<std::string> annotations;
  std::vector<std::string> volumes;
  std::vector<std::string> node_selectors;
  std::vector<std::string> tolerations;
  std::string queue;
  std::string priority_class;
  int min_available = 0;
  std::string restart_policy;
  int backoff_limit = 0;
  int active_deadline = 0;
  int ttl = 0;
  std::string clean_pod_policy;
  bool host_network = false;
  std::vector<std::string> image_pull_secrets;
  std::string working_dir;
  std::vector<std::string> command;

  std::filesystem::path template_file;
  std::vector<std::filesystem::path> values_files;
  std::vector<std::string> sets;
  std::vector<std::string> set_strings;

  /// Handles of the options whose value counts only when given (numbers and flags).
  std::map<std::string, const CLI::Option*> given;

  /// The values the flags give, as the template schema spells them (see render/render.h); only
  /// what was given appears. Throws Error(Usage) naming the flag for a malformed K=V, toleration
  /// or volume, and for a value the built-in template's schema (render/value_schema.h) rejects.
  nlohmann::json flag_values() const;
  /// The render context: `.trainctl.yaml` < user config < TRAINCTL_* < --values < flags < --set <
  /// --set-string. `namespace_` (from -n) is used when non-empty. With a built-in template each
  /// layer is checked against its schema first (Error(Usage) naming the file, variable or --set
  /// and the key); a template of the user's own takes any value.
  nlohmann::json values(const std::string& namespace_) const;

  bool was_given(const std::string& option) const;

  /// Throws Error(Usage) when a positional word came before `--` (CLI11 gives the words before
  /// and after it as one list, those after last): the command goes after `--` alone, so that
  /// `submit tfjob mnist --image x`, which kubectl's `create job NAME` would read as a name,
  /// does not run `mnist` as the job's command.
  void require_separator(std::size_t words_after_separator) const;
  /// Whether the template rendered is the one shipped for the kind (not --template, nor one in
  /// $TRAINCTL_TEMPLATE_PATH or the user's template directory).
  bool uses_builtin_template() const;
};

/// A typical `submit`/`render` command line of the kind after the verb, for the Examples
/// sections: "pytorchjob --name bert --image reg/pt:1 ... -- python train.py", with
/// `more_flags` before the `--` (after it, they would be the job's command).
std::string job_example(api::JobKind kind, std::string_view more_flags = "");

/// Registers the job flags on a `submit KIND` or `render KIND` subcommand; the kind-specific
/// ones (--ps, --nproc-per-node, --slots-per-worker, ...) only for their kind, and the trailing
/// `-- COMMAND...`.
void add_job_flags(CLI::App& cmd, JobFlags& flags);

/// The template shipped for a kind: "tfjob", "pytorchjob", "mpijob".
std::string template_name(api::JobKind kind);

/// A rendered, validated job ready to print or send.
struct RenderedJob {
  nlohmann::json object;
  std::string template_name;
};

/// Renders the kind's template (or --template FILE) with `values`, parses it as
/// "<template> (rendered)", replaces a missing name with `metadata.generateName: <kind>-`,
/// validates it (Error(Validation) listing every problem) and records the trainctl.io
/// annotations.
RenderedJob render_job(const JobFlags& flags, const nlohmann::json& values);

/// Where templates are looked up for this binary: `explicit_file` when set,
/// $TRAINCTL_TEMPLATE_PATH, the user dir, the install dir and (for a build-tree binary) the
/// source tree.
render::TemplateSearchPath template_search(const std::filesystem::path& explicit_file = {});

/// Records on the job what made it: `trainctl.io/template` (when non-empty),
/// `trainctl.io/spec-hash` and `trainctl.io/version`.
void annotate_job(nlohmann::json& object, const std::string& template_name);

/// sha256 (hex) of `spec` serialised canonically (sorted keys, no spaces).
std::string spec_hash(const nlohmann::json& spec);

}  // namespace trainctl::cli
