#pragma once

#include <CLI/CLI.hpp>
#include <memory>

#include "global_flags.h"

namespace trainctl::cli {

/// The whole command tree: main() parses with it, and the man-page and completion generators walk
/// it, so every verb and flag is defined once.
struct Application {
  std::unique_ptr<CLI::App> app;
  std::unique_ptr<GlobalFlags> flags;
};

Application make_application();

}  // namespace trainctl::cli
