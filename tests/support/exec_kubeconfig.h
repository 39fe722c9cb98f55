#pragma once

// A kubeconfig whose user authenticates with an exec credential plugin, for tests of plugins.

#include <fmt/format.h>

#include <string>

namespace trainctl::testing {

/// The YAML of a kubeconfig whose one context "test" reaches `server` (trusting `ca_file` when
/// given) as a user whose credentials come from the exec plugin `plugin`.
inline std::string exec_plugin_kubeconfig(const std::string& server, const std::string& plugin,
                                          const std::string& ca_file = "") {
  const std::string ca =
      ca_file.empty() ? "" : fmt::format(", certificate-authority: \"{}\"", ca_file);
  return fmt::format(R"(apiVersion: v1
kind: Config
current-context: test
clusters:
- {{name: local, cluster: {{server: "{}"{}}}}}
users:
- name: tester
  user:
    exec: {{apiVersion: client.authentication.k8s.io/v1, command: "{}", interactiveMode: Never}}
contexts:
- {{name: test, context: {{cluster: local, user: tester}}}}
)",
                     server, ca, plugin);
}

}  // namespace trainctl::testing
