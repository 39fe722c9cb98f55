// trainctl config view | current-context | get-contexts | use-context: what kubeconfig trainctl
// resolved, and from which file. Secrets are redacted unless --raw.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <iostream>

#include "commands.h"
#include "docs.h"
#include "error.h"
#include "printer.h"
#include "yaml_json.h"

namespace trainctl::cli {
namespace {

std::string auth_method(const kube::AuthConfig& auth) {
  std::vector<std::string> methods;
  if (!auth.client_cert_pem.empty())
    methods.emplace_back("client certificate");
  if (!auth.token.empty())
    methods.emplace_back("bearer token");
  if (!auth.token_file.empty())
    methods.push_back("token file " + auth.token_file);
  if (!auth.username.empty())
    methods.emplace_back("basic auth");
  if (auth.exec)
    methods.push_back("exec plugin " + auth.exec->command);
  if (methods.empty())
    return "none";
  std::string out = methods[0];
  for (size_t i = 1; i < methods.size(); ++i)
    out += ", " + methods[i];
  return out;
}

/// The connection trainctl will use, with no secret in it.
nlohmann::json resolved_view(const kube::RestConfig& c) {
  nlohmann::json doc = {
      {"source", c.source},          {"context", c.context_name},
      {"cluster", c.cluster_name},   {"user", c.user_name},
      {"server", c.server},          {"namespace", c.default_namespace},
      {"auth", auth_method(c.auth)}, {"insecureSkipTLSVerify", c.tls.insecure_skip_verify}};
  if (!c.tls.server_name.empty())
    doc["tlsServerName"] = c.tls.server_name;
  if (!c.proxy_url.empty())
    doc["proxyURL"] = c.proxy_url;
  if (!c.auth.impersonate_user.empty())
    doc["impersonate"] = c.auth.impersonate_user;
  return doc;
}

/// The kubeconfig files as loaded, before flags pick a context and the namespace.
kube::Kubeconfig load(const kube::ConfigOverrides& overrides) {
  return kube::load_kubeconfig(overrides, kube::ConfigEnvironment::from_process());
}

struct ViewOptions {
  bool minify = false;
  bool raw = false;
  bool resolved = false;
  std::string output = "yaml";

  Connection connection;
  kube::ConfigOverrides overrides;
  OutputFormat format = OutputFormat::Yaml;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    overrides = flags.overrides;
    format = parse_output_format(output);
  }

  void Validate() const {
    if (format != OutputFormat::Yaml && format != OutputFormat::Json)
      throw Error(ErrorKind::Usage, "config view prints yaml or json");
  }

  void Run() {
    if (resolved) {
      print_document(std::cout, resolved_view(connection.config()), format);
      return;
    }
    const std::string yaml = kube::render_kubeconfig(
        load(overrides), {.minify = minify, .context = overrides.context, .raw = raw});
    if (format == OutputFormat::Json) {
      print_document(std::cout, yaml_to_json(YAML::Load(yaml)), format);
    } else {
      std::cout << yaml;
    }
  }
};

struct CurrentContextOptions {
  kube::ConfigOverrides overrides;

  void Complete(const GlobalFlags& flags) { overrides = flags.overrides; }

  void Run() const {
    const auto config = load(overrides);
    if (config.current_context.empty())
      throw Error(ErrorKind::Config, "current-context is not set");
    std::cout << config.current_context << '\n';
  }
};

struct GetContextsOptions {
  kube::ConfigOverrides overrides;

  void Complete(const GlobalFlags& flags) { overrides = flags.overrides; }

  void Run() const {
    const auto config = load(overrides);
    const std::string current =
        overrides.context.empty() ? config.current_context : overrides.context;
    Table table{{"CURRENT", "NAME", "CLUSTER", "AUTHINFO", "NAMESPACE", "FILE"}, {}};
    for (const auto& [name, ctx] : config.contexts) {
      table.rows.push_back({name == current ? "*" : "", name, ctx.value.cluster, ctx.value.user,
                            ctx.value.namespace_, ctx.file.string()});
    }
    print_table(std::cout, table);
  }
};

struct UseContextOptions {
  std::string name;
  kube::ConfigOverrides overrides;

  void Complete(const GlobalFlags& flags) { overrides = flags.overrides; }

  void Run() const {
    const auto file = kube::use_context(load(overrides), name);
    std::cout << fmt::format("Switched to context \"{}\" (in {}).\n", name, file.string());
  }
};

}  // namespace

void add_config_command(CLI::App& app, const GlobalFlags& flags) {
  auto* config = app.add_subcommand("config", "Show and switch kubeconfig contexts");
  config->require_subcommand(1);

  auto view = std::make_shared<ViewOptions>();
  auto* cmd = config->add_subcommand("view", "Print the merged kubeconfig, secrets redacted");
  cmd->add_flag("--minify", view->minify, "Only the current context and what it uses");
  cmd->add_flag("--raw", view->raw, "Show tokens, passwords and certificate data");
  cmd->add_flag("--resolved", view->resolved,
                "Show the connection trainctl will use after flags and in-cluster config");
  cmd->add_option("-o,--output", view->output, "yaml (default) or json")
      ->check(one_of({"yaml", "json"}));
  add_examples(*cmd,
               R"(# The merged kubeconfig, secrets redacted; only what the current context uses
trainctl config view --minify
# The connection trainctl will use after flags, KUBECONFIG and in-cluster config
trainctl config view --resolved -n team-a)");
  run_verb(*cmd, view, flags);

  cmd = config->add_subcommand("current-context", "Print the current context");
  add_examples(*cmd, "trainctl config current-context");
  run_verb(*cmd, std::make_shared<CurrentContextOptions>(), flags);

  cmd = config->add_subcommand("get-contexts", "List contexts and the file defining each");
  add_examples(*cmd, "trainctl config get-contexts --kubeconfig ~/.kube/config:other.yaml");
  run_verb(*cmd, std::make_shared<GetContextsOptions>(), flags);

  auto use = std::make_shared<UseContextOptions>();
  cmd = config->add_subcommand("use-context", "Set the current context");
  cmd->add_option("NAME", use->name, "Context name")
      ->required()
      ->check(completes(ValueSource::Contexts));
  add_examples(*cmd, "trainctl config use-context trainctl-sandbox");
  run_verb(*cmd, use, flags);
}

}  // namespace trainctl::cli
