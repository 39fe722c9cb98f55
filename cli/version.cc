// trainctl version: the client's version, and the server's when it can be reached.
#include "trainctl/version.h"

#include <fmt/format.h>

#include <iostream>
#include <optional>

#include "commands.h"
#include "docs.h"
#include "error.h"
#include "printer.h"

namespace trainctl::cli {
namespace {

struct VersionOptions : ConnectedOutput {
  bool client_only = false;

  void Validate() const {
    if (format == OutputFormat::Wide || format == OutputFormat::Name)
      throw Error(ErrorKind::Usage, "version prints -o json or yaml");
  }

  void Run() {
    nlohmann::json doc = {{"clientVersion", {{"gitVersion", fmt::format("v{}", kVersion)}}}};
    std::optional<Error> server_problem;
    if (!client_only) {
      try {
        doc["serverVersion"] = connection.client().server_version();
      } catch (const Error& e) {
        server_problem = e;
      }
    }
    if (format == OutputFormat::Json || format == OutputFormat::Yaml) {
      print_document(std::cout, doc, format);
    } else {
      std::cout << "Client Version: v" << kVersion << '\n';
      if (doc.contains("serverVersion")) {
        std::cout << "Server Version: " << doc["serverVersion"].value("gitVersion", "unknown")
                  << '\n';
      }
    }
    // The client's version is out; the server's absence is still an API or connection error
    // (exit 3), as kubectl's version exits non-zero.
    if (server_problem)
      throw Error(server_problem->kind(),
                  "server version unavailable: " + std::string(server_problem->message()));
  }
};

}  // namespace

void add_version_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<VersionOptions>();
  auto* cmd = app.add_subcommand("version", "Print the client and server versions");
  cmd->add_flag("--client", opts->client_only, "Print only the client version");
  cmd->add_option("-o,--output", opts->output, "Output format: json or yaml")
      ->check(one_of({"json", "yaml"}));
  add_examples(*cmd, R"(# The client's and the server's version
trainctl version
trainctl version --client -o json)");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
