#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string_view>

#include "global_flags.h"

namespace trainctl::cli {

/// A command tree: main() parses with it, and help, the man-page and completion generators walk
/// it, so every verb and flag is defined once.
struct Application {
  std::unique_ptr<CLI::App> app;
  std::unique_ptr<GlobalFlags> flags;
};

/// Every verb.
Application make_application();
/// The root with only the verb `verb` (the commands of the registration that adds it, e.g.
/// delete, suspend and resume), or nothing for a word that is no verb. A command line whose first
/// word is `verb` parses as with every verb: once the root has entered its one verb, CLI11 no
/// longer matches the others. Building one verb instead of every verb is most of the start-up of
/// a command that sends no request. `subcommand`, the word after the verb, narrows it further
/// where the verb's subcommands cannot reach each other (submit and render build the flags of
/// that job kind only); any word, or none, is fine.
std::optional<Application> make_verb_application(std::string_view verb,
                                                 std::string_view subcommand = {});

}  // namespace trainctl::cli
