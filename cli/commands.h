#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string_view>

#include "global_flags.h"

namespace trainctl::cli {

/// The one shape of a verb, as kubectl's cmd packages have it: the flags fill an Options struct,
/// and the verb's callback runs `Complete(flags)` (what the flags imply: defaults, parsed values,
/// the command's Connection), then `Validate()` (bad input and bad combinations, before any
/// request), then `Run()`. A verb with nothing to complete or validate leaves that step out.
template <typename Options>
void run_verb(CLI::App& cmd, std::shared_ptr<Options> opts, const GlobalFlags& flags) {
  cmd.callback([opts, &flags] {
    if constexpr (requires { opts->Complete(flags); })
      opts->Complete(flags);
    else if constexpr (requires { opts->Complete(); })
      opts->Complete();
    if constexpr (requires { opts->Validate(); })
      opts->Validate();
    opts->Run();
  });
}

/// Each verb registers itself on the app; the callback it installs runs the verb and may throw
/// trainctl::Error, which main() turns into a message and an exit code.
void add_version_command(CLI::App& app, const GlobalFlags& flags);
void add_config_command(CLI::App& app, const GlobalFlags& flags);
void add_sandbox_command(CLI::App& app, const GlobalFlags& flags);
void add_list_command(CLI::App& app, const GlobalFlags& flags);
void add_get_command(CLI::App& app, const GlobalFlags& flags);
void add_delete_command(CLI::App& app, const GlobalFlags& flags);  // delete, suspend, resume
/// submit and render: with a `kind` (`tfjob`), only that kind's subcommand gets its flags, the
/// other kinds only their names: a command line that enters `kind` cannot reach them, and the
/// flags of every kind were most of the cost of building the verb.
void add_submit_command(CLI::App& app, const GlobalFlags& flags, std::string_view kind = {});
void add_render_command(CLI::App& app, const GlobalFlags& flags, std::string_view kind = {});
void add_template_command(CLI::App& app, const GlobalFlags& flags);
void add_controller_command(CLI::App& app, const GlobalFlags& flags);
void add_logs_command(CLI::App& app, const GlobalFlags& flags);
void add_wait_command(CLI::App& app, const GlobalFlags& flags);
void add_why_command(CLI::App& app, const GlobalFlags& flags);
/// queue create, list, get, update, open, close, delete
void add_queue_command(CLI::App& app, const GlobalFlags& flags);
/// completion, and the hidden __complete and __docs, which walk the tree make_application builds.
void add_completion_command(CLI::App& app, const GlobalFlags& flags);
void add_install_command(CLI::App& app, const GlobalFlags& flags);  // install, uninstall
void add_top_command(CLI::App& app, const GlobalFlags& flags);      // top nodes, top queues

}  // namespace trainctl::cli
