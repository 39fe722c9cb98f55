// trainctl: distributed training jobs on Kubernetes.
#include <iostream>

#include "app.h"
#include "error.h"

int main(int argc, char** argv) {
  using namespace trainctl;
  cli::Application application = cli::make_application();
  CLI::App& app = *application.app;
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
