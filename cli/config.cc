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

struct ViewOptions {
  bool minify = false;
  bool raw = false;
  bool resolved = false;
  std::string output = "yaml";

  void Run(const GlobalFlags& flags) const {
    const OutputFormat format = parse_output_format(output);
    if (format != OutputFormat::Yaml && format != OutputFormat::Json) {
      throw Error(ErrorKind::Usage, "config view prints yaml or json");
    }
    if (resolved) {
      print_document(std::cout, resolved_view(flags.rest_config()), format);
      return;
    }
    const auto env = kube::ConfigEnvironment::from_process();
    const kube::Kubeconfig config = kube::load_kubeconfig(flags.overrides, env);
    const std::string yaml = kube::render_kubeconfig(
        config, {.minify = minify, .context = flags.overrides.context, .raw = raw});
    if (format == OutputFormat::Json) {
      print_document(std::cout, yaml_to_json(YAML::Load(yaml)), format);
    } else {
      std::cout << yaml;
    }
  }
};

void print_current_context(const GlobalFlags& flags) {
  const auto config =
      kube::load_kubeconfig(flags.overrides, kube::ConfigEnvironment::from_process());
  if (config.current_context.empty())
    throw Error(ErrorKind::Config, "current-context is not set");
  std::cout << config.current_context << '\n';
}

void print_contexts(const GlobalFlags& flags) {
  const auto config =
      kube::load_kubeconfig(flags.overrides, kube::ConfigEnvironment::from_process());
  const std::string current =
      flags.overrides.context.empty() ? config.current_context : flags.overrides.context;
  Table table{{"CURRENT", "NAME", "CLUSTER", "AUTHINFO", "NAMESPACE", "FILE"}, {}};
  for (const auto& [name, ctx] : config.contexts) {
    table.rows.push_back({name == current ? "*" : "", name, ctx.value.cluster, ctx.value.user,
                          ctx.value.namespace_, ctx.file.string()});
  }
  print_table(std::cout, table);
}

}  // namespace

void add_config_command(CLI::App& app, const GlobalFlags& flags) {
  auto* config = app.add_subcommand("config", "Show and switch kubeconfig contexts");
  config->require_subcommand(1);

  auto view = std::make_shared<ViewOptions>();
  auto* view_cmd = config->add_subcommand("view", "Print the merged kubeconfig, secrets redacted");
  view_cmd->add_flag("--minify", view->minify, "Only the current context and what it uses");
  view_cmd->add_flag("--raw", view->raw, "Show tokens, passwords and certificate data");
  view_cmd->add_flag("--resolved", view->resolved,
                     "Show the connection trainctl will use after flags and in-cluster config");
  view_cmd->add_option("-o,--output", view->output, "yaml (default) or json")
      ->check(one_of({"yaml", "json"}));
  view_cmd->callback([view, &flags] { view->Run(flags); });

  config->add_subcommand("current-context", "Print the current context")->callback([&flags] {
    print_current_context(flags);
  });
  config->add_subcommand("get-contexts", "List contexts and the file defining each")
      ->callback([&flags] { print_contexts(flags); });

  auto name = std::make_shared<std::string>();
  auto* use = config->add_subcommand("use-context", "Set the current context");
  use->add_option("NAME", *name, "Context name")
      ->required()
      ->check(completes(ValueSource::Contexts));
  use->callback([name, &flags] {
    const auto config =
        kube::load_kubeconfig(flags.overrides, kube::ConfigEnvironment::from_process());
    const auto file = kube::use_context(config, *name);
    std::cout << fmt::format("Switched to context \"{}\" (in {}).\n", *name, file.string());
  });
}

}  // namespace trainctl::cli
