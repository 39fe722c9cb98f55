// Shell completion: what `__complete` answers, and the scripts that ask it.
#include "completer.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace trainctl::cli {
namespace {

/// Where the words before the cursor leave the command line.
struct Position {
  std::vector<const CommandDoc*> chain;  // root first, innermost command last
  std::vector<std::string> global_args;  // root flags and their values, as typed
  std::vector<std::string> arguments;    // arguments given to the innermost command
  const OptionDoc* pending = nullptr;    // a flag whose value is the word under the cursor
  bool after_separator = false;          // `--` seen: the rest is a command, not flags
};

/// The flag called `name` in scope, innermost command first, and whether it is the root's.
std::pair<const OptionDoc*, bool> find_flag(const std::vector<const CommandDoc*>& chain,
                                            const std::string& name) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (const OptionDoc* flag = (*it)->find_option(name))
      return {flag, *it == chain.front()};
  }
  return {nullptr, false};
}

Position walk(const CommandDoc& root, const std::vector<std::string>& words) {
  Position pos;
  pos.chain.push_back(&root);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (pos.after_separator) {
      pos.arguments.push_back(word);
      continue;
    }
    if (word == "--") {
      pos.after_separator = true;
      continue;
    }
    if (word.size() > 1 && word.front() == '-') {
      const std::size_t eq = word.find('=');
      const auto [flag, global] = find_flag(pos.chain, word.substr(0, eq));
      std::vector<std::string> typed{word};
      if (flag != nullptr && flag->takes_value() && !flag->value_optional &&
          eq == std::string::npos) {
        if (i + 1 == words.size()) {
          pos.pending = flag;  // its value is being typed: not yet a flag to honour
          continue;
        }
        typed.push_back(words[++i]);
      }
      if (global)
        pos.global_args.insert(pos.global_args.end(), typed.begin(), typed.end());
      continue;
    }
    const CommandDoc* sub = pos.chain.back()->find_subcommand(word);
    if (sub != nullptr && pos.arguments.empty()) {
      pos.chain.push_back(sub);
      continue;
    }
    pos.arguments.push_back(word);
  }
  return pos;
}

bool matches(std::string_view candidate, std::string_view prefix) {
  return candidate.starts_with(prefix);
}

/// The value of `flag`: its listed values, or a lookup; file names when it says neither.
/// `echo` goes before each candidate (`--output=` when the value is typed after an `=`).
Completion complete_value(const OptionDoc& flag, const std::string& typed, const std::string& echo,
                          const Position& pos, const ValueLookup& lookup) {
  std::vector<std::string> values = flag.values;
  if (values.empty() && flag.source)
    values = lookup(*flag.source, pos.global_args, pos.arguments);
  else if (values.empty())
    return {{}, kCompleteDefault};
  Completion result{{}, kCompleteNoFileComp};
  for (const auto& v : values) {
    if (matches(v, typed))
      result.candidates.push_back({echo + v, ""});
  }
  return result;
}

Completion complete_flags(const std::vector<const CommandDoc*>& chain, const std::string& typed) {
  Completion result{{}, kCompleteNoFileComp};
  std::set<std::string> seen;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const auto& o : (*it)->options) {
      for (const auto& name : o.names) {
        if (!o.positional && matches(name, typed) && seen.insert(name).second)
          result.candidates.push_back({name, o.description});
      }
    }
  }
  return result;
}

/// The positional argument that takes the `index`-th argument, if any.
const OptionDoc* positional_at(const CommandDoc& cmd, std::size_t index) {
  for (const auto& o : cmd.options) {
    if (!o.positional)
      continue;
    if (o.repeatable || index == 0)
      return &o;
    --index;
  }
  return nullptr;
}

Completion complete_arguments(const Position& pos, const std::string& typed,
                              const ValueLookup& lookup) {
  const CommandDoc& cmd = *pos.chain.back();
  Completion result{{}, kCompleteNoFileComp};
  if (pos.arguments.empty()) {
    for (const auto& sub : cmd.subcommands) {
      if (matches(sub.path.back(), typed))
        result.candidates.push_back({sub.path.back(), sub.description});
    }
  }
  const OptionDoc* arg = positional_at(cmd, pos.arguments.size());
  if (arg == nullptr || (pos.arguments.empty() && cmd.needs_subcommand))
    return result;
  const Completion values = complete_value(*arg, typed, "", pos, lookup);
  result.candidates.insert(result.candidates.end(), values.candidates.begin(),
                           values.candidates.end());
  if (result.candidates.empty())
    result.directive = values.directive;
  return result;
}

/// One line of `__complete` output: no tabs or newlines inside the fields.
std::string single_line(std::string text) {
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
  return text;
}

constexpr std::string_view kBashScript =
    R"script(# bash completion for trainctl                                -*- shell-script -*-
# Generated by `trainctl completion bash`. Install it as
# /usr/share/bash-completion/completions/trainctl, or: source <(trainctl completion bash)
# Candidates come from `trainctl __complete WORD...`: one per line, then `:<directive>`, where the
# directive's bits are 1 error, 2 no space after the word, 4 no file-name completion.

__trainctl_complete() {
    local cur words cword
    COMPREPLY=()
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion -n =: || return
    else
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
        cur=${COMP_WORDS[COMP_CWORD]}
    fi

    local out
    out=$("${words[0]}" __complete -- "${words[@]:1:cword-1}" "$cur" 2>/dev/null) || return

    local line directive=0
    local -a candidates=()
    while IFS='' read -r line; do
        case $line in
            :*) directive=${line#:} ;;
            ?*) candidates+=("${line%%$'\t'*}") ;;
        esac
    done <<<"$out"

    (( directive & 1 )) && return
    (( directive & 2 )) && compopt -o nospace 2>/dev/null
    if (( ${#candidates[@]} == 0 )); then
        if (( (directive & 4) == 0 )); then
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        fi
        return
    fi
    # The shell replaces only what follows the last `=` or `:` (COMP_WORDBREAKS).
    local cut=${cur%"${cur##*[=:]}"}
    if [[ -n $cut && $COMP_WORDBREAKS == *[=:]* ]]; then
        candidates=("${candidates[@]#"$cut"}")
    fi
    COMPREPLY=("${candidates[@]}")
}

complete -F __trainctl_complete trainctl
)script";

constexpr std::string_view kZshScript = R"script(#compdef trainctl
# zsh completion for trainctl. Generated by `trainctl completion zsh`. Install it as _trainctl in
# a directory of $fpath, or: source <(trainctl completion zsh)
# Candidates come from `trainctl __complete WORD...`: one per line, then `:<directive>`, where the
# directive's bits are 1 error, 2 no space after the word, 4 no file-name completion.

_trainctl() {
  local out line directive=0 name
  local -a candidates
  out=$("${words[1]}" __complete -- "${(@)words[2,CURRENT-1]}" "${words[CURRENT]}" 2>/dev/null) || return 1
  for line in "${(@f)out}"; do
    case $line in
      :*) directive=${line#:} ;;
      ?*)
        name=${line%%$'\t'*}
        name=${name//:/\\:}
        if [[ $line == *$'\t'* ]]; then
          candidates+=("$name:${line#*$'\t'}")
        else
          candidates+=("$name")
        fi
        ;;
    esac
  done

  (( directive & 1 )) && return 1
  if (( ${#candidates} > 0 )); then
    if (( directive & 2 )); then
      _describe -t values 'trainctl' candidates -S ''
    else
      _describe -t values 'trainctl' candidates
    fi
    return
  fi
  (( directive & 4 )) && return 1
  _files
}

if [[ $funcstack[1] == _trainctl ]]; then
  _trainctl "$@"
else
  compdef _trainctl trainctl
fi
)script";

constexpr std::string_view kFishScript =
    R"script(# fish completion for trainctl. Generated by `trainctl completion fish`. Install it as
# ~/.config/fish/completions/trainctl.fish, or: trainctl completion fish | source
# Candidates come from `trainctl __complete WORD...`: one per line, then `:<directive>`, where the
# directive's bits are 1 error, 2 no space after the word, 4 no file-name completion.

function __trainctl_prepare_completions
    set -g __trainctl_candidates
    set -l args (commandline -opc)
    set -l program $args[1]
    set -e args[1]
    set -l out (command $program __complete -- $args (commandline -ct) 2>/dev/null)
    or return 0
    set -l directive (string replace -r '^:' '' -- $out[-1])
    set -e out[-1]
    if test (math "bitand($directive, 1)") -ne 0
        return 0
    end
    if test (count $out) -eq 0; and test (math "bitand($directive, 4)") -eq 0
        return 1 # no rule applies: fish completes file names
    end
    set -g __trainctl_candidates $out
    return 0
end

complete -c trainctl -e
complete -c trainctl -n __trainctl_prepare_completions -f -a '$__trainctl_candidates'
)script";

}  // namespace

Completion complete(const CommandDoc& root, const std::vector<std::string>& words,
                    const ValueLookup& lookup) {
  const std::string typed = words.empty() ? "" : words.back();
  const Position pos =
      walk(root, words.empty() ? words : std::vector(words.begin(), words.end() - 1));
  if (pos.pending != nullptr)
    return complete_value(*pos.pending, typed, "", pos, lookup);
  if (pos.after_separator)
    return {{}, kCompleteDefault};
  if (typed.starts_with("--") && typed.find('=') != std::string::npos) {
    const std::string name = typed.substr(0, typed.find('='));
    const auto [flag, global] = find_flag(pos.chain, name);
    if (flag == nullptr || !flag->takes_value())
      return {{}, kCompleteNoFileComp};
    return complete_value(*flag, typed.substr(name.size() + 1), name + "=", pos, lookup);
  }
  if (typed.starts_with("-"))
    return complete_flags(pos.chain, typed);
  return complete_arguments(pos, typed, lookup);
}

std::string format_completion(const Completion& completion) {
  std::string out;
  for (const auto& c : completion.candidates) {
    out += single_line(c.value);
    if (!c.description.empty())
      out += '\t' + single_line(c.description);
    out += '\n';
  }
  return out + fmt::format(":{}\n", completion.directive);
}

std::string completion_script(Shell shell) {
  switch (shell) {
    case Shell::Bash:
      return std::string(kBashScript);
    case Shell::Zsh:
      return std::string(kZshScript);
    case Shell::Fish:
      return std::string(kFishScript);
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> completion_files() {
  return {{"trainctl.bash", completion_script(Shell::Bash)},
          {"_trainctl", completion_script(Shell::Zsh)},
          {"trainctl.fish", completion_script(Shell::Fish)}};
}

}  // namespace trainctl::cli
