#pragma once

// The command tree as data, for the generators that must never drift from it: man pages here,
// shell completion in completer.h. Verbs annotate options with the values they take (one_of,
// completes); everything else (names, descriptions, groups, defaults) is read from CLI11.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainctl::cli {

/// Where the shell finds the values of an option or positional argument at completion time.
enum class ValueSource {
  Jobs,        // TFJobs, PyTorchJobs and MPIJobs of the namespace
  Queues,      // Volcano queues (cluster-scoped)
  Namespaces,  // namespaces of the cluster
  Contexts,    // kubeconfig contexts (offline)
  Templates,   // job templates on the search path (offline)
  Replicas,    // replicas of the job that is the command's first argument (worker-1, ...)
};

/// Annotates an option with the only values it takes: they show in --help and the man page and
/// the shell completes them. It does not validate; the verb rejects other values itself.
CLI::Validator one_of(const std::vector<std::string>& values);
/// Annotates an option or positional argument whose values the shell looks up from `source`.
CLI::Validator completes(ValueSource source);
/// Gives a verb an Examples section, as kubectl has one per command: in --help (after the
/// footer) and as EXAMPLES in its man page. `examples` is lines of `# what it does` followed by
/// the command.
void add_examples(CLI::App& cmd, std::string_view examples);

/// The type CLI11 shows for an option's value ("TEXT", "INT", "DURATION"), without the
/// descriptions validators append to it.
std::string base_type_name(const CLI::Option& opt);

/// A flag, option or positional argument as the generators see it.
struct OptionDoc {
  std::vector<std::string> names;  // "-o", "--output"; a positional has its one name
  std::string value_name;          // "TEXT", "INT", ...; empty when it takes no value
  bool value_optional = false;     // `--dry-run[=TEXT]`: the value may be left out
  std::string bare_value;          // what a value-optional option means when given bare
  std::string description;
  std::string default_value;
  std::vector<std::string> values;  // from one_of
  std::optional<ValueSource> source;
  std::string group;
  bool positional = false;
  bool required = false;
  bool repeatable = false;

  bool takes_value() const { return !value_name.empty(); }
};

/// A command (the root or a verb, at any depth) with what it takes and its visible subcommands.
struct CommandDoc {
  std::vector<std::string> path;  // {"trainctl", "submit", "tfjob"}
  std::string description;
  std::string footer;  // longer text, when the verb gave one
  std::vector<std::string> aliases;
  std::vector<OptionDoc> options;  // in definition order
  std::vector<CommandDoc> subcommands;
  bool needs_subcommand = false;

  /// "trainctl-submit-tfjob", the man page's name.
  std::string page_name() const;
  /// "trainctl submit tfjob".
  std::string command_line() const;
  const OptionDoc* find_option(const std::string& name) const;
  const CommandDoc* find_subcommand(const std::string& name_or_alias) const;
};

/// Reads the command tree; hidden commands and options (empty group) are left out. Commands more
/// than `levels` below `app` have only their names, description and footer.
CommandDoc describe(CLI::App& app, std::size_t levels = SIZE_MAX);

/// Every man page (section 1), by file name: `trainctl.1` and `trainctl-<verb>[-<subverb>].1`.
std::map<std::string, std::string> man_pages(const CommandDoc& root);

}  // namespace trainctl::cli
