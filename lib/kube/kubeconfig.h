#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rest_config.h"

namespace trainctl::kube {

/// What kubectl's global connection flags say; an empty string or unset optional means "not given".
struct ConfigOverrides {
  std::string kubeconfig;             // --kubeconfig: the only file loaded, and it must exist
  std::string context;                // --context
  std::string cluster;                // --cluster: replaces the context's cluster
  std::string user;                   // --user: replaces the context's user
  std::string namespace_;             // -n/--namespace
  std::string server;                 // --server
  std::string token;                  // --token: replaces every other way the user authenticates
  std::string certificate_authority;  // --certificate-authority (relative to the working dir)
  std::string client_certificate;     // --client-certificate
  std::string client_key;             // --client-key
  std::string tls_server_name;        // --tls-server-name
  std::optional<bool> insecure_skip_tls_verify;
  std::string request_timeout;  // "0", "30s", "1m", "500ms"; a bare integer means seconds
  std::optional<double> qps;
  std::optional<int> burst;
  std::optional<std::string> cache_dir;  // --cache-dir; "" keeps nothing
};

/// The parts of the process environment that config resolution reads; tests build their own.
struct ConfigEnvironment {
  /// KUBECONFIG, HOME, KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT, POD_NAMESPACE,
  /// KUBECACHEDIR.
  std::map<std::string, std::string> env;
  std::filesystem::path service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";

  /// The variable's value, empty when unset.
  std::string get(const std::string& name) const;
  /// The real environment (HOME falls back to the password database when unset).
  static ConfigEnvironment from_process();
};

/// A kubeconfig `clusters[].cluster` entry; paths are already resolved against its file's
/// directory.
struct KubeconfigCluster {
  std::string server;
  std::string certificate_authority;       // a path
  std::string certificate_authority_data;  // PEM, base64-decoded
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;
  std::string proxy_url;
};

/// A kubeconfig `users[].user.auth-provider`: kept only to explain that it is no longer supported.
struct KubeconfigAuthProvider {
  std::string name;
  std::map<std::string, std::string> config;
};

/// A kubeconfig `users[].user` entry; paths are already resolved against its file's directory.
struct KubeconfigUser {
  std::string client_certificate;       // a path
  std::string client_certificate_data;  // PEM, base64-decoded
  std::string client_key;               // a path
  std::string client_key_data;          // PEM, base64-decoded
  std::string token;
  std::string token_file;
  std::string username;
  std::string password;
  std::string impersonate;                      // as
  std::vector<std::string> impersonate_groups;  // as-groups
  /// As written: `interactive_mode` is empty when the file leaves it out (resolution defaults it).
  std::optional<ExecPluginConfig> exec;
  std::optional<KubeconfigAuthProvider> auth_provider;
};

/// A kubeconfig `contexts[].context` entry.
struct KubeconfigContext {
  std::string cluster;
  std::string user;
  std::string namespace_;
};

/// A named entry of the merged kubeconfig together with where it was defined.
template <typename T>
struct Sourced {
  T value;
  std::filesystem::path file;
  int line = 0;  // 1-based line of the entry's `name:` list item; 0 when unknown
};

/// Several kubeconfig files merged as client-go merges them: the first file to define a named
/// cluster, user or context wins that entry whole, and the first non-empty current-context wins.
struct Kubeconfig {
  std::map<std::string, Sourced<KubeconfigCluster>> clusters;
  std::map<std::string, Sourced<KubeconfigUser>> users;
  std::map<std::string, Sourced<KubeconfigContext>> contexts;
  std::string current_context;
  std::filesystem::path current_context_file;  // the file whose current-context won
  /// Files actually loaded, in precedence order.
  std::vector<std::filesystem::path> files;
  /// Every file that was looked for, in precedence order (loaded or missing).
  std::vector<std::filesystem::path> searched;

  /// True when nothing was loaded that could describe a connection.
  bool empty() const;
};

/// Where kubeconfig files are looked for: --kubeconfig alone; else $KUBECONFIG split on ':' (empty
/// entries dropped, duplicates once); else $HOME/.kube/config.
std::vector<std::filesystem::path> kubeconfig_search_paths(const ConfigOverrides& overrides,
                                                           const ConfigEnvironment& env);

/// Loads and merges the files that exist among `paths`, in order; missing files are skipped.
/// Throws Error(Config) for unreadable files, bad YAML, wrong types and bad base64, naming the
/// file, line and field (`/home/a/.kube/config:12: users[0].user.token: expected a string`).
Kubeconfig load_kubeconfigs(const std::vector<std::filesystem::path>& paths);

/// Loads the kubeconfig the flags and environment select; --kubeconfig must exist.
Kubeconfig load_kubeconfig(const ConfigOverrides& overrides, const ConfigEnvironment& env);

/// Resolves everything the client needs, as kubectl does: kubeconfig files and flags, or the
/// in-cluster service account when no kubeconfig was found. Throws Error(Config).
RestConfig resolve_rest_config(const ConfigOverrides& overrides, const ConfigEnvironment& env);

/// The same, starting from an already loaded kubeconfig.
RestConfig resolve_rest_config(const Kubeconfig& config, const ConfigOverrides& overrides,
                               const ConfigEnvironment& env);

/// Where TLS sessions are kept between commands (tls_sessions.h): trainctl/tls-sessions in
/// kubectl's cache directory (--cache-dir, else $KUBECACHEDIR, else $HOME/.kube/cache); empty
/// when --cache-dir is "" or there is no home.
std::string tls_session_cache_dir(const ConfigOverrides& overrides, const ConfigEnvironment& env);

/// Parses --request-timeout with parse_duration (duration.h); "" is no limit. Throws
/// Error(Config).
std::chrono::milliseconds parse_request_timeout(std::string_view value);

/// How `render_kubeconfig` prints, as `kubectl config view` flags do.
struct KubeconfigViewOptions {
  /// Only the selected context and the cluster and user it names.
  bool minify = false;
  /// The context to keep when minifying; empty means the current context.
  std::string context;
  /// Show tokens, passwords and certificate data instead of REDACTED / DATA+OMITTED.
  bool raw = false;
};

/// The merged kubeconfig as YAML, like `kubectl config view`: entries sorted by name, resolved
/// paths, and secrets redacted unless `raw` (token, password, secret-looking exec env values and
/// auth-provider settings become REDACTED; certificate and key data become DATA+OMITTED).
std::string render_kubeconfig(const Kubeconfig& config, const KubeconfigViewOptions& options = {});

/// The file `use-context` writes: the first loaded file that sets current-context, else the first
/// loaded file, else the first file searched.
std::filesystem::path current_context_target(const Kubeconfig& config);

/// Rewrites the top-level current-context of `file`, keeping the rest of the document (comments
/// included) as it was; creates a minimal kubeconfig when the file does not exist.
void set_current_context(const std::filesystem::path& file, const std::string& name);

/// `use-context`: checks that `name` is a known context, writes it to current_context_target()
/// and returns that file.
std::filesystem::path use_context(const Kubeconfig& config, const std::string& name);

}  // namespace trainctl::kube
