#pragma once

// Shell completion the way kubectl (cobra) does it: a static script per shell asks the binary,
// `trainctl __complete WORD... CURRENT`, which prints one candidate per line (`value` or
// `value<TAB>description`) and a last line `:<directive>`.

#include <functional>
#include <string>
#include <vector>

#include "docs.h"

namespace trainctl::cli {

/// cobra's ShellCompDirective bits, which the scripts act on.
enum CompletionDirective : int {
  kCompleteDefault = 0,     // no candidates: the shell completes file names
  kCompleteError = 1,       // completion failed: offer nothing
  kCompleteNoSpace = 2,     // no space after the candidate (`--output=` and friends)
  kCompleteNoFileComp = 4,  // never fall back to file names
};

struct CompletionCandidate {
  std::string value;
  std::string description;
};

/// What `__complete` prints.
struct Completion {
  std::vector<CompletionCandidate> candidates;
  int directive = kCompleteDefault;
};

/// Looks up dynamic values. `global_args` are the root command's flags as typed on the command
/// line (e.g. {"--context", "prod", "-n", "team-a"}) so lookups honour them; `arguments` are the
/// innermost command's arguments typed so far (the job whose replicas --replica takes). Returns
/// nothing rather than throwing when the cluster cannot be reached.
using ValueLookup = std::function<std::vector<std::string>(
    ValueSource source, const std::vector<std::string>& global_args,
    const std::vector<std::string>& arguments)>;

/// Completes the last of `words` (the words after the program name; the last one is the word
/// under the cursor, possibly empty).
Completion complete(const CommandDoc& root, const std::vector<std::string>& words,
                    const ValueLookup& lookup);

/// The `__complete` output: candidates one per line, then `:<directive>`.
std::string format_completion(const Completion& completion);

enum class Shell { Bash, Zsh, Fish };

/// The script `trainctl completion SHELL` prints.
std::string completion_script(Shell shell);
/// Every script, by the file name it is installed under (trainctl.bash, _trainctl, trainctl.fish).
std::vector<std::pair<std::string, std::string>> completion_files();

}  // namespace trainctl::cli
