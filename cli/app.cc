#include "app.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "docs.h"
#include "error.h"
#include "job_values.h"
#include "run.h"
#include "text.h"

namespace trainctl::cli {
namespace {

/// kubectl verbs a kubectl user types whose trainctl spelling is too far off for an edit
/// distance to find, as cobra's SuggestFor lists them.
const std::map<std::string, std::string, std::less<>> kSuggestFor = {
    {"describe", "get"}, {"create", "submit"}, {"apply", "submit"}, {"run", "submit"}};

/// `trainctl queue create`: the command's name with its parents', as usage lines print it.
std::string command_path(const CLI::App& cmd) {
  const CLI::App* parent = cmd.get_parent();
  return parent == nullptr ? cmd.get_name() : command_path(*parent) + " " + cmd.get_name();
}

/// What `trainctl COMMAND --help` prints.
std::string help_text(const CLI::App& cmd) {
  return cmd.get_formatter()->make_help(&cmd, command_path(cmd), CLI::AppFormatMode::Normal);
}

std::vector<std::string> subcommand_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* sub : cmd.get_subcommands([](const CLI::App* s) {
         return !s->get_name().empty() && !s->get_name().starts_with("__");
       })) {
    names.push_back(sub->get_name());
    for (const auto& alias : sub->get_aliases())
      names.push_back(alias);
  }
  return names;
}

/// The subcommand `word` names (or an alias of it), nullptr when none.
CLI::App* find_subcommand(CLI::App& cmd, std::string_view word) {
  for (CLI::App* sub : cmd.get_subcommands([](CLI::App*) { return true; })) {
    const auto& aliases = sub->get_aliases();
    if (sub->get_name() == word || std::find(aliases.begin(), aliases.end(), word) != aliases.end())
      return sub;
  }
  return nullptr;
}

/// `; did you mean "x"?` when a candidate is close to `word`, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> guess;
  if (const auto it = kSuggestFor.find(word); it != kSuggestFor.end())
    guess = it->second;
  else
    guess = closest_match(word, candidates);
  return guess ? fmt::format("; did you mean {:?}?", *guess) : "";
}

Error unknown_command(const CLI::App& parent, std::string_view word) {
  return Error(ErrorKind::Usage, fmt::format("unknown command {:?}{}{}", word,
                                             parent.get_parent() == nullptr
                                                 ? ""
                                                 : fmt::format(" for {:?}", command_path(parent)),
                                             did_you_mean(word, subcommand_names(parent))));
}

/// The long flags `cmd` accepts, with its parents' (global flags fall through).
std::vector<std::string> flag_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* c = &cmd; c != nullptr; c = c->get_parent()) {
    for (const CLI::Option* opt : c->get_options()) {
      for (const auto& name : opt->get_lnames())
        names.push_back("--" + name);
    }
  }
  return names;
}

/// The innermost command the parser entered.
CLI::App& innermost(CLI::App& app) {
  CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty())
    cmd = cmd->get_subcommands().front();
  return *cmd;
}

/// What an option's value must be, for a value CLI11 could not convert to the option's type.
std::string expected_value(std::string_view type) {
  if (type == "INT")
    return "an integer";
  if (type == "UINT")
    return "a non-negative integer";
  if (type == "FLOAT")
    return "a number";
  return fmt::format("a {}", type);
}

/// CLI11's "Could not convert: --gpus = 1.5" as the CLI's other flag errors say it, naming the
/// flag and what it takes: `--gpus: "1.5" is not an integer`; nullopt for another error.
std::optional<std::string> conversion_message(CLI::App& cmd, const CLI::ParseError& e) {
  constexpr std::string_view kPrefix = "Could not convert: ";
  const std::string_view what = e.what();
  if (dynamic_cast<const CLI::ConversionError*>(&e) == nullptr || !what.starts_with(kPrefix))
    return std::nullopt;
  const std::string_view rest = what.substr(kPrefix.size());
  const std::size_t eq = rest.find(" = ");
  if (eq == std::string_view::npos)
    return std::nullopt;
  const std::string name(rest.substr(0, eq));
  for (CLI::App* c = &cmd; c != nullptr; c = c->get_parent()) {
    if (const CLI::Option* opt = c->get_option_no_throw(name)) {
      return fmt::format("{}: {:?} is not {}", name, rest.substr(eq + 3),
                         expected_value(base_type_name(*opt)));
    }
  }
  return std::nullopt;
}

/// What a parse error means in a user's terms: a mistyped flag or verb with a did-you-mean, a
/// missing verb shows the command's help (as kubectl does); returns the exit code.
/// `after_separator`: the arguments after the first "--".
int report_parse_error(CLI::App& app, const CLI::ParseError& e,
                       const std::vector<std::string>& after_separator) {
  if (e.get_exit_code() == 0)  // --help, --help-all
    return app.exit(e);
  CLI::App& cmd = innermost(app);
  std::vector<std::string> left;  // arguments no command took, outermost command's first
  for (CLI::App* c = &cmd; c != nullptr; c = c->get_parent()) {
    const auto rest = c->remaining();
    left.insert(left.begin(), rest.begin(), rest.end());
  }
  // Only an argument no command took is a typo; other errors (a flag's value refused) say so.
  const bool unparsed = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr ||
                        dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
  std::string message;
  // Words both before and after "--" in a verb whose positional is the job's command (`submit
  // tfjob mnist --image x -- python train.py`, as `kubectl create job NAME` takes a name): CLI11
  // took those before as the command and left those after over, a flag among them "unknown".
  const CLI::Option* command = cmd.get_option_no_throw("command");
  const bool left_after_separator =
      !left.empty() && std::all_of(left.begin(), left.end(), [&](const std::string& a) {
        return std::find(after_separator.begin(), after_separator.end(), a) !=
               after_separator.end();
      });
  if (unparsed && command != nullptr && command->count() > 0 && left_after_separator) {
    message = misplaced_command_word(command->results().front());
  } else if (const auto flag = std::find_if(
                 left.begin(), left.end(),
                 [](const std::string& a) { return a.size() > 1 && a[0] == '-' && a != "--"; });
             unparsed && flag != left.end()) {
    const std::string name = flag->substr(0, flag->find('='));
    message = fmt::format("unknown flag {:?} for {:?}{}", name, command_path(cmd),
                          name.starts_with("--") ? did_you_mean(name, flag_names(cmd)) : "");
  } else if (unparsed && !left.empty() && !subcommand_names(cmd).empty() &&
             find_subcommand(cmd, left.front()) == nullptr) {
    message = unknown_command(cmd, left.front()).message();
  } else if (left.empty() && cmd.get_require_subcommand_min() > 0 &&
             dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    std::cout << help_text(cmd);  // `trainctl`, `trainctl queue`: what there is to run
    return 0;
  } else if (auto conversion = conversion_message(cmd, e)) {
    message = std::move(*conversion);
  } else {
    message = e.what();
  }
  std::cerr << fmt::format("trainctl: {}\nSee '{} --help' for usage.\n", message,
                           command_path(cmd));
  return exit_code(ErrorKind::Usage);
}

/// `trainctl help [COMMAND...]`: the help of the app or of the command named, as cobra's.
void add_help_command(CLI::App& app, const GlobalFlags&) {
  auto words = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("help", "Help about any command, e.g. trainctl help queue create");
  cmd->add_option("command", *words, "The command, with its parents: queue create");
  cmd->callback([words] {
    const Application whole = make_application();
    CLI::App* target = whole.app.get();
    for (const auto& word : *words) {
      CLI::App* sub = find_subcommand(*target, word);
      if (sub == nullptr)
        throw unknown_command(*target, word);
      target = sub;
    }
    std::cout << help_text(*target);
  });
}

}  // namespace

/// A repeatable flag takes one value per occurrence (`--label a=b --label c=d`), as kubectl's
/// string-array flags do: CLI11 would otherwise let `--label a=b` swallow the words after it,
/// and lose a `--` that follows it, so `--label a=b -- sh -c true` failed on `-c`.
void one_value_per_flag(CLI::App& cmd) {
  for (CLI::Option* option : cmd.get_options()) {
    if (!option->get_lnames().empty() || !option->get_snames().empty())
      option->allow_extra_args(false);
  }
  for (CLI::App* sub : cmd.get_subcommands({}))
    one_value_per_flag(*sub);
}

namespace {

/// A verb's registration: the names it adds to the root, aliases included, and what adds them.
struct VerbRegistration {
  std::array<std::string_view, 3> names;
  void (*add)(CLI::App& app, const GlobalFlags& flags);
  /// For a command line that enters the subcommand named (submit and render: a job kind's).
  void (*add_for)(CLI::App& app, const GlobalFlags& flags, std::string_view subcommand) = nullptr;

  bool adds(std::string_view word) const {
    return !word.empty() && std::find(names.begin(), names.end(), word) != names.end();
  }

  /// Whether a name it adds begins with `typed` (what the cursor's word may complete to).
  bool may_complete(std::string_view typed) const {
    return std::any_of(names.begin(), names.end(), [typed](std::string_view name) {
      return !name.empty() && name.starts_with(typed);
    });
  }

  /// Adds its commands to `app`, narrowed to `subcommand` where it can be.
  void add_to(CLI::App& app, const GlobalFlags& flags, std::string_view subcommand) const {
    if (add_for != nullptr)
      add_for(app, flags, subcommand);
    else
      add(app, flags);
  }
};

/// Every verb, in the order `trainctl --help` lists them.
constexpr std::array<VerbRegistration, 18> kVerbs{{
    {{"version"}, add_version_command},
    {{"config"}, add_config_command},
    {{"sandbox"}, add_sandbox_command},
    {{"list", "ls"}, add_list_command},
    {{"get"}, add_get_command},
    {{"delete", "suspend", "resume"}, add_delete_command},
    {{"submit"},
     [](CLI::App& app, const GlobalFlags& flags) { add_submit_command(app, flags); },
     add_submit_command},
    {{"render"},
     [](CLI::App& app, const GlobalFlags& flags) { add_render_command(app, flags); },
     add_render_command},
    {{"template"}, add_template_command},
    {{"controller"}, add_controller_command},
    {{"logs"}, add_logs_command},
    {{"wait"}, add_wait_command},
    {{"why"}, add_why_command},
    {{"queue"}, add_queue_command},
    {{"top"}, add_top_command},
    {{"install", "uninstall"}, add_install_command},
    {{"completion", "__complete", "__docs"}, add_completion_command},
    {{"help"}, add_help_command},
}};

/// The root with the global flags and what `add` adds.
template <typename AddVerbs>
Application make_tree(const AddVerbs& add) {
  Application result{
      std::make_unique<CLI::App>("trainctl: submit and run distributed training jobs on Kubernetes",
                                 "trainctl"),
      std::make_unique<GlobalFlags>()};
  CLI::App& app = *result.app;
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the verb, as with kubectl
  add_global_flags(app, *result.flags);
  add(app, *result.flags);
  one_value_per_flag(app);
  return result;
}

}  // namespace

Application make_application(std::string_view subcommand) {
  return make_tree([subcommand](CLI::App& app, const GlobalFlags& flags) {
    for (const VerbRegistration& verb : kVerbs)
      verb.add_to(app, flags, subcommand);
  });
}

std::optional<Application> make_verb_application(std::string_view verb,
                                                 std::string_view subcommand) {
  const auto it = std::find_if(kVerbs.begin(), kVerbs.end(),
                               [verb](const VerbRegistration& r) { return r.adds(verb); });
  if (it == kVerbs.end())
    return std::nullopt;
  return make_tree([it, subcommand](CLI::App& app, const GlobalFlags& flags) {
    it->add_to(app, flags, subcommand);
  });
}

Application completion_tree(const std::vector<std::string>& words) {
  if (words.size() > 1) {
    // A flag between the verb and the cursor may be one before the subcommand's name (with
    // its value): every subcommand is built then.
    const bool flag_first = std::any_of(words.begin() + 1, words.end() - 1,
                                        [](const std::string& w) { return w.starts_with('-'); });
    if (std::optional<Application> verb =
            make_verb_application(words[0], flag_first ? "" : words[1]))
      return std::move(*verb);
    return make_application();  // global flags first: the verb is further on
  }
  // On the verb word: the verbs it may begin (all of them for a flag, where the global flags are
  // listed too). "su" builds suspend and submit, not the 18 verbs (~1.5 ms of each TAB).
  const std::string typed = words.empty() ? std::string() : words[0];
  return make_tree([&typed](CLI::App& app, const GlobalFlags& flags) {
    for (const VerbRegistration& verb : kVerbs) {
      if (typed.starts_with('-') || verb.may_complete(typed))
        verb.add_to(app, flags, kNoSubcommand);
    }
  });
}

namespace {

/// Parses `args` (last first, as CLI11 takes them) with `app` and runs the verb; returns the exit
/// code. A parse error is left to the caller.
int parse_and_run(CLI::App& app, std::vector<std::string> args) {
  try {
    app.parse(args);
  } catch (const CLI::ParseError&) {
    throw;
  } catch (const Error& e) {
    std::cerr << "trainctl: " << e.what() << '\n';
    return exit_code(e.kind());
  } catch (const nlohmann::json::type_error& e) {
    // 316 is a string that is not UTF-8, which only the user's input can hold: what the server
    // sends was checked when it was parsed.
    std::cerr << "trainctl: " << e.what() << '\n';
    return exit_code(e.id == 316 ? ErrorKind::Validation : ErrorKind::Protocol);
  } catch (const std::exception& e) {
    // A bug, not the user's doing: still a message and an exit code scripts know, never an abort.
    std::cerr << "trainctl: " << e.what() << '\n';
    return exit_code(ErrorKind::Protocol);
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  // kubectl's `-v=6`: CLI11 would read "=6" as the short option's value.
  std::vector<std::string> args;
  std::vector<std::string> after_separator;  // for submit and render, and report_parse_error
  if (const auto separator =
          std::find(argv + std::min(argc, 1), argv + argc, std::string_view("--"));
      separator != argv + argc)
    after_separator.assign(separator + 1, argv + argc);
  for (int i = argc - 1; i > 0; --i) {  // CLI11 takes the arguments last first
    const std::string_view arg = argv[i];
    args.push_back(arg.starts_with("-v=") ? fmt::format("--v={}", arg.substr(3))
                                          : std::string(arg));
  }
  // Most commands name their verb first: only that verb's commands and flags are built. A parse
  // error goes to the whole tree, which reports it (did-you-mean, help) as it always did; CLI11
  // fails before it runs any callback.
  if (std::optional<Application> verb =
          make_verb_application(argc > 1 ? argv[1] : "", argc > 2 ? argv[2] : "")) {
    verb->flags->words_after_separator = after_separator.size();
    try {
      return parse_and_run(*verb->app, args);
    } catch (const CLI::ParseError&) {
    }
  }
  Application application = make_application();
  application.flags->words_after_separator = after_separator.size();
  try {
    return parse_and_run(*application.app, std::move(args));
  } catch (const CLI::ParseError& e) {
    return report_parse_error(*application.app, e, after_separator);
  }
}

}  // namespace trainctl::cli
