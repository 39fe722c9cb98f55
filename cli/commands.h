#pragma once

#include <CLI/CLI.hpp>

#include "global_flags.h"

namespace trainctl::cli {

/// Each verb registers itself on the app; the callback it installs runs the verb and may throw
/// trainctl::Error, which main() turns into a message and an exit code.
void add_version_command(CLI::App& app, const GlobalFlags& flags);
void add_config_command(CLI::App& app, const GlobalFlags& flags);
void add_sandbox_command(CLI::App& app, const GlobalFlags& flags);
void add_list_command(CLI::App& app, const GlobalFlags& flags);
void add_get_command(CLI::App& app, const GlobalFlags& flags);
void add_delete_command(CLI::App& app, const GlobalFlags& flags);  // delete, suspend, resume
void add_submit_command(CLI::App& app, const GlobalFlags& flags);
void add_render_command(CLI::App& app, const GlobalFlags& flags);
void add_template_command(CLI::App& app, const GlobalFlags& flags);
void add_controller_command(CLI::App& app, const GlobalFlags& flags);
void add_logs_command(CLI::App& app, const GlobalFlags& flags);
void add_wait_command(CLI::App& app, const GlobalFlags& flags);
void add_why_command(CLI::App& app, const GlobalFlags& flags);
/// queue create, list, get, update, open, close, delete
void add_queue_command(CLI::App& app, const GlobalFlags& flags);
/// completion, and the hidden __complete and __docs, which walk the whole tree of `app`.
void add_completion_command(CLI::App& app, const GlobalFlags& flags);
void add_install_command(CLI::App& app, const GlobalFlags& flags);  // install, uninstall

}  // namespace trainctl::cli
