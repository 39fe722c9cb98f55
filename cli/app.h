#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string_view>

#include "global_flags.h"

namespace trainctl::cli {

/// The whole command tree: main() parses with it, and the man-page and completion generators walk
/// it, so every verb and flag is defined once.
struct Application {
  std::unique_ptr<CLI::App> app;
  std::unique_ptr<GlobalFlags> flags;
};

Application make_application();
/// The root with only the verb `verb` (the commands of the registration that adds it), or nothing
/// for a word that is no verb and for the verbs that walk the whole tree (help, __complete,
/// __docs). For a command line whose first word is `verb`, it parses as the whole tree does.
std::optional<Application> make_verb_application(std::string_view verb);

}  // namespace trainctl::cli
