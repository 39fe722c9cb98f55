#include "global_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "docs.h"

namespace trainctl::cli {

namespace {

constexpr const char* kConnectionGroup = "Connection (as kubectl)";

/// Ends every verb's --help with the connection flags it takes too: CLI11 lists them only in the
/// root's help, since they are defined there.
class VerbHelpFormatter : public CLI::Formatter {
 public:
  std::string make_footer(const CLI::App* app) const override {
    std::string footer = CLI::Formatter::make_footer(app);
    if (app->get_parent() == nullptr)
      return footer;
    while (footer.ends_with('\n'))
      footer.pop_back();
    const CLI::App* root = app;
    while (root->get_parent() != nullptr)
      root = root->get_parent();
    std::vector<std::string> names;
    for (const CLI::Option* o : root->get_options()) {
      if (o->get_group() == kConnectionGroup)
        names.push_back(o->get_name(false, true));
    }
    return fmt::format("{}{}Connection flags (as kubectl; see trainctl --help): {}\n", footer,
                       footer.empty() ? "" : "\n\n", fmt::join(names, ", "));
  }
};

}  // namespace

void add_global_flags(CLI::App& app, GlobalFlags& flags) {
  app.formatter(std::make_shared<VerbHelpFormatter>());  // before the verbs, which inherit it
  auto& o = flags.overrides;
  const char* group = kConnectionGroup;
  app.add_option("--kubeconfig", o.kubeconfig, "Path to the kubeconfig file to use")->group(group);
  app.add_option("--context", o.context, "The kubeconfig context to use")
      ->group(group)
      ->check(completes(ValueSource::Contexts));
  app.add_option("--cluster", o.cluster, "The kubeconfig cluster to use")->group(group);
  app.add_option("--user", o.user, "The kubeconfig user to use")->group(group);
  app.add_option("-n,--namespace", o.namespace_, "The namespace to work in")
      ->group(group)
      ->check(completes(ValueSource::Namespaces));
  app.add_option("-s,--server", o.server, "The address and port of the API server")->group(group);
  app.add_option("--token", o.token, "Bearer token for authentication")->group(group);
  app.add_option("--certificate-authority", o.certificate_authority,
                 "Path to a CA certificate file")
      ->group(group);
  app.add_option("--client-certificate", o.client_certificate, "Path to a client certificate")
      ->group(group);
  app.add_option("--client-key", o.client_key, "Path to a client key")->group(group);
  app.add_option("--insecure-skip-tls-verify", o.insecure_skip_tls_verify,
                 "Do not verify the server's certificate (insecure)")
      ->group(group)
      ->expected(0, 1)
      ->default_str("true");
  app.add_option("--tls-server-name", o.tls_server_name,
                 "Server name to verify the certificate against")
      ->group(group);
  app.add_option("--request-timeout", o.request_timeout,
                 "Per-request timeout, e.g. 30s or 1m (0 = none)")
      ->type_name("DURATION")
      ->group(group);
  app.add_option("--kube-api-qps", o.qps, "Client-side requests per second (0 = unlimited)")
      ->group(group);
  app.add_option("--kube-api-burst", o.burst, "Client-side burst of requests")->group(group);
  app.add_option("--cache-dir", o.cache_dir,
                 "Cache directory, as kubectl's (default $KUBECACHEDIR or ~/.kube/cache): "
                 "trainctl keeps TLS sessions there so the next command resumes one; \"\" keeps "
                 "none")
      ->group(group)
      ->expected(0, 1);
  app.add_option("-v,--v,--verbose", flags.verbosity,
                 "Log level, as kubectl's -v: 6 logs each API request (method, URL, status, "
                 "latency), 7 its headers, 8 the response's (credentials masked)")
      ->check(CLI::Range(0, 99));
}

kube::RestConfig GlobalFlags::rest_config() const {
  const kube::ConfigEnvironment env = kube::ConfigEnvironment::from_process();
  kube::RestConfig config = kube::resolve_rest_config(overrides, env);
  config.verbosity = verbosity;
  config.transport = transport;
  config.pipeline_depth = pipeline_depth;
  config.tls.session_cache_dir = kube::tls_session_cache_dir(overrides, env);
  return config;
}

namespace {

/// kubectl's warning printer: each distinct warning a server sends, once, on stderr.
std::function<void(const std::string&)> print_each_warning_once() {
  struct Seen {
    std::mutex mu;
    std::set<std::string> texts;
  };
  auto seen = std::make_shared<Seen>();
  return [seen](const std::string& text) {
    const std::lock_guard lock(seen->mu);
    if (seen->texts.insert(text).second)
      std::cerr << "Warning: " << text << '\n';
  };
}

}  // namespace

const kube::RestConfig& Connection::config() {
  if (!config_) {
    config_ = flags_->rest_config();
    config_->on_warning = print_each_warning_once();
    if (multiplexed_)
      config_->transport = kube::Transport::Multiplexed;
    if (config_->tls.insecure_skip_verify)
      std::cerr << "trainctl: warning: insecure-skip-tls-verify is set: the server's certificate "
                   "is not checked, so anyone on the way can read and change this connection\n";
  }
  return *config_;
}

void Connection::multiplex() {
  multiplexed_ = true;
  if (config_)
    config_->transport = kube::Transport::Multiplexed;
}

kube::Client& Connection::client() {
  if (!client_)
    client_ = std::make_unique<kube::Client>(config());
  return *client_;
}

void ConnectedOutput::Complete(const GlobalFlags& flags) {
  connection = Connection(flags);
  format = parse_output_format(output);
}

}  // namespace trainctl::cli
