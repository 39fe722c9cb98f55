#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "printer.h"

namespace trainctl::cli {

/// The flags every verb takes: kubectl's connection flags plus output and verbosity.
struct GlobalFlags {
  kube::ConfigOverrides overrides;
  int verbosity = 0;
  /// Not a flag: a command sends a few requests and exits, so it spares itself libcurl; the
  /// controller, which keeps many requests in flight for as long as it runs, multiplexes them.
  kube::Transport transport = kube::Transport::Direct;
  /// Not a flag: requests pipelined on one connection (rest_config.h); the controller sets 1.
  std::size_t pipeline_depth = kube::kCommandPipelineDepth;
  /// Not a flag: how many words follow `--` on the command line (run() counts them): submit and
  /// render take those as the job's command, and refuse a positional word before them.
  std::size_t words_after_separator = 0;

  /// Resolves the kubeconfig, environment and flags into a rest config. Verbs resolve it once,
  /// through their Connection.
  kube::RestConfig rest_config() const;
};

/// One command's connection, as kubectl's cmdutil.Factory hands one to a command: the kubeconfig,
/// environment and flags resolved once (on first use) and one client made from that, shared by
/// every step of the command, so an exec credential plugin runs once per command. Verbs that work
/// offline (render, submit --dry-run=client) never use it, so they need no kubeconfig.
class Connection {
 public:
  Connection() = default;
  explicit Connection(const GlobalFlags& flags) : flags_(&flags) {}

  const kube::RestConfig& config();
  kube::Client& client();
  /// Makes the command's requests travel multiplexed (libcurl: HTTP/2 streams of one connection)
  /// instead of over connections of their own: for a command about to keep many requests in
  /// flight at once. Before the command's first request.
  void multiplex();
  /// The namespace the command works in: -n, else the context's, else "default".
  const std::string& namespace_() { return config().default_namespace; }
  /// Whether -n/--namespace was given (suggested commands then repeat it).
  bool namespace_given() const {
    return flags_ != nullptr && !flags_->overrides.namespace_.empty();
  }

 private:
  const GlobalFlags* flags_ = nullptr;
  std::optional<kube::RestConfig> config_;
  bool multiplexed_ = false;
  std::unique_ptr<kube::Client> client_;
};

/// What most verbs complete the same way: their Connection and their `-o` format. A verb's
/// Options derive from it and register `output` as their -o option.
struct ConnectedOutput {
  std::string output;  // -o as given
  Connection connection;
  OutputFormat format = OutputFormat::Table;

  void Complete(const GlobalFlags& flags);
};

/// Registers the global flags on the top-level app; subcommands inherit them.
void add_global_flags(CLI::App& app, GlobalFlags& flags);

}  // namespace trainctl::cli
