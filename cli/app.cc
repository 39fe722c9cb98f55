#include "app.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "error.h"
#include "run.h"

namespace trainctl::cli {

Application make_application() {
  Application result{
      std::make_unique<CLI::App>("trainctl: submit and run distributed training jobs on Kubernetes",
                                 "trainctl"),
      std::make_unique<GlobalFlags>()};
  CLI::App& app = *result.app;
  GlobalFlags& flags = *result.flags;
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the verb, as with kubectl
  add_global_flags(app, flags);
  add_version_command(app, flags);
  add_config_command(app, flags);
  add_sandbox_command(app, flags);
  add_list_command(app, flags);
  add_get_command(app, flags);
  add_delete_command(app, flags);
  add_submit_command(app, flags);
  add_render_command(app, flags);
  add_template_command(app, flags);
  add_controller_command(app, flags);
  add_logs_command(app, flags);
  add_wait_command(app, flags);
  add_why_command(app, flags);
  add_queue_command(app, flags);
  add_install_command(app, flags);
  add_completion_command(app, flags);
  return result;
}

int run(int argc, char** argv) {
  Application application = make_application();
  CLI::App& app = *application.app;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : exit_code(ErrorKind::Usage);
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

}  // namespace trainctl::cli
