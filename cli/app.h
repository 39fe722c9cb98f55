#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "global_flags.h"

namespace trainctl::cli {

/// A command tree: main() parses with it, and help, the man-page and completion generators walk
/// it, so every verb and flag is defined once.
struct Application {
  std::unique_ptr<CLI::App> app;
  std::unique_ptr<GlobalFlags> flags;
};

/// Every verb; `subcommand`, as for make_verb_application below, narrows the verbs whose
/// subcommands cannot reach each other (kNoSubcommand: none of their subcommands' flags, for
/// completing the verb word, where only the verbs are listed).
Application make_application(std::string_view subcommand = {});
/// A word no subcommand is named.
inline constexpr std::string_view kNoSubcommand = " ";
/// The root with only the verb `verb` (the commands of the registration that adds it, e.g.
/// delete, suspend and resume), or nothing for a word that is no verb. A command line whose first
/// word is `verb` parses as with every verb: once the root has entered its one verb, CLI11 no
/// longer matches the others. Building one verb instead of every verb is most of the start-up of
/// a command that sends no request. `subcommand`, the word after the verb, narrows it further
/// where the verb's subcommands cannot reach each other (submit and render build the flags of
/// that job kind only); any word, or none, is fine.
std::optional<Application> make_verb_application(std::string_view verb,
                                                 std::string_view subcommand = {});

/// The commands `__complete` needs for `words` (the words after `trainctl`, the last under the
/// cursor), completing as the whole tree does: once the cursor is past the verb, that verb's
/// alone, with the subcommand the next word names (none while the cursor is on that word: only
/// the subcommands' names are listed there; all of them past a flag, which may come before the
/// subcommand's name); on the verb word, the verbs it may begin (every verb for a flag) without
/// the flags of their subcommands (only the verbs are listed). Each TAB builds it.
Application completion_tree(const std::vector<std::string>& words);

}  // namespace trainctl::cli
