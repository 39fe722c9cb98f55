#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "kube/client.h"
#include "kube/kubeconfig.h"

namespace trainctl::cli {

/// The flags every verb takes: kubectl's connection flags plus output and verbosity.
struct GlobalFlags {
  kube::ConfigOverrides overrides;
  int verbosity = 0;

  /// Resolves the kubeconfig, environment and flags into a rest config.
  kube::RestConfig rest_config() const;
  /// A client for the resolved config.
  std::unique_ptr<kube::Client> client() const;
};

/// Registers the global flags on the top-level app; subcommands inherit them.
void add_global_flags(CLI::App& app, GlobalFlags& flags);

}  // namespace trainctl::cli
