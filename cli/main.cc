// trainctl: distributed training jobs on Kubernetes.
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.h"
#include "error.h"
#include "global_flags.h"

int main(int argc, char** argv) {
  using namespace trainctl;
  CLI::App app{"trainctl: submit and run distributed training jobs on Kubernetes", "trainctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the verb, as with kubectl
  cli::GlobalFlags flags;
  cli::add_global_flags(app, flags);
  cli::add_version_command(app, flags);
  cli::add_config_command(app, flags);
  cli::add_sandbox_command(app, flags);
  cli::add_list_command(app, flags);
  cli::add_get_command(app, flags);
  cli::add_delete_command(app, flags);
  cli::add_submit_command(app, flags);
  cli::add_render_command(app, flags);
  cli::add_template_command(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : exit_code(ErrorKind::Usage);
  } catch (const Error& e) {
    std::cerr << "trainctl: " << e.what() << '\n';
    return exit_code(e.kind());
  }
  return 0;
}
