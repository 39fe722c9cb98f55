#include "kube/kubeconfig.h"

#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "duration.h"
#include "error.h"
#include "text.h"

namespace trainctl::kube {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(std::string message) {
  throw Error(ErrorKind::Config, std::move(message));
}

template <typename... Args>
[[noreturn]] void failf(fmt::format_string<Args...> format, Args&&... args) {
  fail(fmt::format(format, std::forward<Args>(args)...));
}

constexpr std::string_view kExecV1 = "client.authentication.k8s.io/v1";
constexpr std::string_view kExecV1Beta1 = "client.authentication.k8s.io/v1beta1";

// ---------------------------------------------------------------------------------------------
// Small helpers

/// Reads a whole file; on failure returns nullopt and sets `why` to the system's reason.
std::optional<std::string> read_file(const fs::path& path, std::string& why) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    why = "is a directory";
    return std::nullopt;
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = std::strerror(errno != 0 ? errno : ENOENT);
    return std::nullopt;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    why = "read error";
    return std::nullopt;
  }
  return buffer.str();
}

/// Reads a certificate, key or CA file, or fails naming the file and what named it.
std::string read_named_file(const std::string& path, std::string_view field,
                            const std::string& named_by) {
  std::string why;
  auto data = read_file(path, why);
  if (!data)
    failf("cannot read {} {} named by {}: {}", field, path, named_by, why);
  return *data;
}

fs::path absolute_normal(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  return (ec ? p : abs).lexically_normal();
}

/// A path from a kubeconfig, made absolute against the directory of the file it appears in.
std::string resolve_against(const std::string& value, const fs::path& base_dir) {
  if (value.empty())
    return value;
  fs::path p(value);
  if (p.is_absolute())
    return value;
  return (base_dir / p).lexically_normal().string();
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty())
      out += sep;
    out += item;
  }
  return out;
}

template <typename T>
std::string names_of(const std::map<std::string, Sourced<T>>& entries) {
  if (entries.empty())
    return "none are defined";
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries)
    names.push_back(fmt::format("\"{}\"", name));
  return join(names, ", ");
}

std::string where(const fs::path& file, int line) {
  return line > 0 ? fmt::format("{}:{}", file.string(), line) : file.string();
}

bool is_dns1123_label(std::string_view s) {
  if (s.empty() || s.size() > 63)
    return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(s.front()) || !alnum(s.back()))
    return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return alnum(c) || c == '-'; });
}

// ---------------------------------------------------------------------------------------------
// Parsing one kubeconfig file

/// A YAML node together with its field path and line, for error messages.
struct Loc {
  YAML::Node node;
  std::string path;
  int line = 0;
};

int line_of(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

/// Reads typed fields out of one file's YAML, failing with file, line and field path.
class FileReader {
 public:
  explicit FileReader(fs::path file) : file_(std::move(file)), base_dir_(file_.parent_path()) {}

  const fs::path& file() const { return file_; }

  [[noreturn]] void fail_at(const Loc& at, std::string_view what) const {
    failf("{}:{}: {}: {}", file_.string(), at.line, at.path, what);
  }

  /// The value under `key`, or nullopt when it is missing or null.
  std::optional<Loc> field(const Loc& map, std::string_view key) const {
    // Walk the pairs rather than index: the key's line is where a person looks for the field.
    for (const auto& kv : map.node) {
      if (!kv.first.IsScalar() || kv.first.Scalar() != key)
        continue;
      if (!kv.second.IsDefined() || kv.second.IsNull())
        return std::nullopt;
      std::string path = map.path.empty() ? std::string(key) : map.path + "." + std::string(key);
      return Loc{kv.second, std::move(path), line_of(kv.first, map.line)};
    }
    return std::nullopt;
  }

  std::optional<Loc> mapping(const Loc& map, std::string_view key) const {
    auto f = field(map, key);
    if (f && !f->node.IsMap())
      fail_at(*f, "expected a mapping");
    return f;
  }

  std::optional<Loc> sequence(const Loc& map, std::string_view key) const {
    auto f = field(map, key);
    if (f && !f->node.IsSequence())
      fail_at(*f, "expected a list");
    return f;
  }

  std::string string(const Loc& map, std::string_view key) const {
    auto f = field(map, key);
    if (!f)
      return "";
    if (!f->node.IsScalar())
      fail_at(*f, "expected a string");
    return f->node.Scalar();
  }

  bool boolean(const Loc& map, std::string_view key) const {
    auto f = field(map, key);
    if (!f)
      return false;
    bool value = false;
    if (!f->node.IsScalar() || !YAML::convert<bool>::decode(f->node, value)) {
      fail_at(*f, "expected true or false");
    }
    return value;
  }

  std::vector<std::string> strings(const Loc& map, std::string_view key) const {
    std::vector<std::string> out;
    auto list = sequence(map, key);
    if (!list)
      return out;
    for (std::size_t i = 0; i < list->node.size(); ++i) {
      Loc item{list->node[i], fmt::format("{}[{}]", list->path, i), 0};
      item.line = line_of(item.node, list->line);
      if (!item.node.IsScalar())
        fail_at(item, "expected a string");
      out.push_back(item.node.Scalar());
    }
    return out;
  }

  /// A base64 field such as certificate-authority-data, decoded.
  std::string data(const Loc& map, std::string_view key) const {
    const std::string encoded = string(map, key);
    if (encoded.empty())
      return "";
    auto decoded = base64_decode(encoded);
    if (!decoded)
      fail_at(*field(map, key), "invalid base64 data");
    return *decoded;
  }

  /// A file path field, resolved against this file's directory.
  std::string path(const Loc& map, std::string_view key) const {
    return resolve_against(string(map, key), base_dir_);
  }

  KubeconfigCluster cluster(const Loc& body) const {
    KubeconfigCluster c;
    c.server = string(body, "server");
    c.certificate_authority = path(body, "certificate-authority");
    c.certificate_authority_data = data(body, "certificate-authority-data");
    c.insecure_skip_tls_verify = boolean(body, "insecure-skip-tls-verify");
    c.tls_server_name = string(body, "tls-server-name");
    c.proxy_url = string(body, "proxy-url");
    return c;
  }

  KubeconfigUser user(const Loc& body) const {
    KubeconfigUser u;
    u.client_certificate = path(body, "client-certificate");
    u.client_certificate_data = data(body, "client-certificate-data");
    u.client_key = path(body, "client-key");
    u.client_key_data = data(body, "client-key-data");
    u.token = string(body, "token");
    u.token_file = path(body, "tokenFile");
    u.username = string(body, "username");
    u.password = string(body, "password");
    u.impersonate = string(body, "as");
    u.impersonate_groups = strings(body, "as-groups");
    if (auto exec = mapping(body, "exec"))
      u.exec = exec_config(*exec);
    if (auto provider = mapping(body, "auth-provider")) {
      KubeconfigAuthProvider p;
      p.name = string(*provider, "name");
      if (auto config = mapping(*provider, "config")) {
        for (const auto& kv : config->node) {
          const std::string key = kv.first.Scalar();
          p.config[key] = string(*config, key);
        }
      }
      u.auth_provider = std::move(p);
    }
    return u;
  }

  ExecPluginConfig exec_config(const Loc& body) const {
    ExecPluginConfig e;
    e.api_version = string(body, "apiVersion");
    e.command = string(body, "command");
    // Only a command with a '/' is a path; a bare name is looked up in $PATH when run.
    if (e.command.find('/') != std::string::npos)
      e.command = resolve_against(e.command, base_dir_);
    e.args = strings(body, "args");
    if (auto env = sequence(body, "env")) {
      for (std::size_t i = 0; i < env->node.size(); ++i) {
        Loc item{env->node[i], fmt::format("{}[{}]", env->path, i), 0};
        item.line = line_of(item.node, env->line);
        if (!item.node.IsMap())
          fail_at(item, "expected a mapping with name and value");
        e.env.emplace_back(string(item, "name"), string(item, "value"));
      }
    }
    e.interactive_mode = string(body, "interactiveMode");  // empty: defaulted at resolution
    e.provide_cluster_info = boolean(body, "provideClusterInfo");
    e.install_hint = string(body, "installHint");
    return e;
  }

  KubeconfigContext context(const Loc& body) const {
    KubeconfigContext c;
    c.cluster = string(body, "cluster");
    c.user = string(body, "user");
    c.namespace_ = string(body, "namespace");
    return c;
  }

  /// Reads a `clusters`, `users` or `contexts` list of {name, <body_key>} items.
  template <typename T, typename ParseBody>
  void named_list(const Loc& root, std::string_view list_key, std::string_view body_key,
                  std::map<std::string, Sourced<T>>& out, ParseBody parse_body) const {
    auto list = sequence(root, list_key);
    if (!list)
      return;
    for (std::size_t i = 0; i < list->node.size(); ++i) {
      Loc item{list->node[i], fmt::format("{}[{}]", list_key, i), 0};
      item.line = line_of(item.node, list->line);
      if (!item.node.IsMap())
        fail_at(item, fmt::format("expected a mapping with name and {}", body_key));
      std::string name = string(item, "name");
      if (name.empty())
        fail_at(Loc{item.node, item.path + ".name", item.line}, "a name is required");
      if (out.count(name) != 0) {
        fail_at(Loc{item.node, item.path + ".name", item.line},
                fmt::format("duplicate name \"{}\" in {}", name, list_key));
      }
      T value{};
      if (auto body = mapping(item, body_key))
        value = parse_body(*body);
      out.emplace(std::move(name), Sourced<T>{std::move(value), file_, item.line});
    }
  }

 private:
  fs::path file_;
  fs::path base_dir_;
};

/// Parses one existing kubeconfig file into a single-file Kubeconfig.
Kubeconfig parse_file(const fs::path& file) {
  std::string why;
  auto text = read_file(file, why);
  if (!text)
    failf("cannot read kubeconfig {}: {}", file.string(), why);

  Kubeconfig config;
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::ParserException& e) {
    failf("{}:{}:{}: invalid YAML: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (!root.IsDefined() || root.IsNull())
    return config;  // an empty file is an empty config
  Loc top{root, "", line_of(root, 1)};
  if (!root.IsMap()) {
    failf("{}:{}: expected a kubeconfig (a mapping with clusters, users and contexts)",
          file.string(), top.line);
  }
  FileReader reader(file);
  try {
    config.current_context = reader.string(top, "current-context");
    reader.named_list(top, "clusters", "cluster", config.clusters,
                      [&](const Loc& body) { return reader.cluster(body); });
    reader.named_list(top, "users", "user", config.users,
                      [&](const Loc& body) { return reader.user(body); });
    reader.named_list(top, "contexts", "context", config.contexts,
                      [&](const Loc& body) { return reader.context(body); });
  } catch (const YAML::Exception& e) {
    failf("{}:{}: invalid kubeconfig: {}", file.string(), e.mark.line + 1, e.msg);
  }
  return config;
}

// ---------------------------------------------------------------------------------------------
// Resolution

/// A cluster and user on their way to a RestConfig, with what named each file for messages.
struct Candidate {
  KubeconfigCluster cluster;
  KubeconfigUser user;
  std::string cluster_label;  // `cluster "prod" (/home/a/.kube/config:4)`
  std::string user_label;
  std::string ca_named_by;
  std::string cert_named_by;
  std::string key_named_by;
  std::string token_file_named_by;
};

/// The flags that change the cluster and user, applied the way client-go's DirectClientConfig does.
void apply_overrides(Candidate& c, const ConfigOverrides& o) {
  KubeconfigCluster& cluster = c.cluster;
  if (!o.server.empty())
    cluster.server = o.server;
  // --certificate-authority or --insecure-skip-tls-verify=true replace the whole TLS trust setting.
  if (!o.certificate_authority.empty() || o.insecure_skip_tls_verify.value_or(false)) {
    cluster.insecure_skip_tls_verify = o.insecure_skip_tls_verify.value_or(false);
    cluster.certificate_authority = o.certificate_authority;
    cluster.certificate_authority_data.clear();
    c.ca_named_by = "--certificate-authority";
  } else if (o.insecure_skip_tls_verify.has_value()) {
    cluster.insecure_skip_tls_verify = false;
  }
  // A new --server invalidates the kubeconfig's tls-server-name unless one is given with it.
  if (!o.tls_server_name.empty() || !o.server.empty())
    cluster.tls_server_name = o.tls_server_name;

  KubeconfigUser& user = c.user;
  if (!o.token.empty()) {
    user.token = o.token;
    user.token_file.clear();
    user.username.clear();
    user.password.clear();
    user.exec.reset();
    user.auth_provider.reset();
  }
  if (!o.client_certificate.empty()) {
    user.client_certificate = o.client_certificate;
    user.client_certificate_data.clear();
    c.cert_named_by = "--client-certificate";
  }
  if (!o.client_key.empty()) {
    user.client_key = o.client_key;
    user.client_key_data.clear();
    c.key_named_by = "--client-key";
  }
}

std::string normalize_server(const std::string& server, const std::string& label) {
  std::string url = server;
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    url = "https://" + url;
  } else {
    const std::string scheme = url.substr(0, scheme_end);
    if (scheme != "https" && scheme != "http") {
      failf("{}: server \"{}\" must be an https:// or http:// URL", label, server);
    }
  }
  const std::size_t host_begin = url.find("://") + 3;
  if (host_begin >= url.size() || url[host_begin] == '/') {
    failf("{}: server \"{}\" has no host", label, server);
  }
  while (url.size() > host_begin && url.back() == '/')
    url.pop_back();
  return url;
}

void check_proxy_url(const std::string& proxy, const std::string& label) {
  if (proxy.empty())
    return;
  const auto scheme_end = proxy.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : proxy.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https" && scheme != "socks5") {
    failf("{}: invalid proxy-url \"{}\": unsupported scheme \"{}\", must be http, https, or socks5",
          label, proxy, scheme);
  }
  if (scheme_end + 3 >= proxy.size())
    failf("{}: invalid proxy-url \"{}\": no host", label, proxy);
}

[[noreturn]] void fail_auth_provider(const std::string& label, const KubeconfigAuthProvider& p) {
  if (p.name == "gcp") {
    failf(
        "{} uses the \"gcp\" auth-provider, which was removed in kubectl 1.26; install "
        "gke-gcloud-auth-plugin and run `gcloud container clusters get-credentials` to switch "
        "it to the exec plugin (https://cloud.google.com/blog/products/containers-kubernetes/"
        "kubectl-auth-changes-in-gke)",
        label);
  }
  if (p.name == "azure") {
    failf(
        "{} uses the \"azure\" auth-provider, which was removed in kubectl 1.26; install "
        "kubelogin and run `kubelogin convert-kubeconfig` to switch it to the exec plugin "
        "(https://azure.github.io/kubelogin/)",
        label);
  }
  failf(
      "{} uses the \"{}\" auth-provider, which trainctl does not support (the in-tree "
      "auth-providers are deprecated; gcp and azure were removed in kubectl 1.26); switch it to "
      "an exec credential plugin such as kubelogin (https://github.com/int128/kubelogin)",
      label, p.name);
}

ExecPluginConfig validated_exec(ExecPluginConfig exec, const std::string& label) {
  if (exec.api_version.empty()) {
    failf("{}: exec.apiVersion is required ({} or {})", label, kExecV1, kExecV1Beta1);
  }
  if (exec.api_version == "client.authentication.k8s.io/v1alpha1") {
    failf(
        "{}: exec.apiVersion {} is no longer supported; use {} (ask the plugin's vendor for a "
        "newer version)",
        label, exec.api_version, kExecV1);
  }
  if (exec.api_version != kExecV1 && exec.api_version != kExecV1Beta1) {
    failf("{}: exec.apiVersion \"{}\" is not supported; use {} or {}", label, exec.api_version,
          kExecV1, kExecV1Beta1);
  }
  if (exec.command.empty())
    failf("{}: exec.command is required", label);
  for (const auto& [name, value] : exec.env) {
    if (name.empty())
      failf("{}: every exec.env entry needs a name", label);
  }
  if (exec.interactive_mode.empty()) {
    if (exec.api_version == kExecV1) {
      failf("{}: exec.interactiveMode is required with {} (Never, IfAvailable or Always)", label,
            kExecV1);
    }
    exec.interactive_mode = "IfAvailable";
  }
  const std::string& mode = exec.interactive_mode;
  if (mode != "Never" && mode != "IfAvailable" && mode != "Always") {
    failf("{}: exec.interactiveMode \"{}\" is not one of Never, IfAvailable, Always", label, mode);
  }
  return exec;
}

/// Turns a cluster + user (flags already applied) into the connection settings, validating the
/// combination as client-go does.
RestConfig build_rest_config(const Candidate& c) {
  RestConfig r;
  const KubeconfigCluster& cluster = c.cluster;
  if (cluster.server.empty()) {
    failf("{} has no server; set `server:` in the kubeconfig or pass --server", c.cluster_label);
  }
  r.server = normalize_server(cluster.server, c.cluster_label);
  if (!cluster.certificate_authority_data.empty()) {
    r.tls.ca_pem = cluster.certificate_authority_data;
  } else if (!cluster.certificate_authority.empty()) {
    r.tls.ca_pem =
        read_named_file(cluster.certificate_authority, "certificate-authority", c.ca_named_by);
  }
  r.tls.insecure_skip_verify = cluster.insecure_skip_tls_verify;
  if (r.tls.insecure_skip_verify && !r.tls.ca_pem.empty()) {
    // A flag replaces the kubeconfig's whole trust setting (apply_overrides): both come from the
    // flags or both from the kubeconfig.
    if (c.ca_named_by == "--certificate-authority")
      failf(
          "--insecure-skip-tls-verify cannot be combined with --certificate-authority; drop one "
          "of them");
    failf(
        "{}: insecure-skip-tls-verify cannot be combined with a certificate authority; remove "
        "one of them",
        c.cluster_label);
  }
  r.tls.server_name = cluster.tls_server_name;
  check_proxy_url(cluster.proxy_url, c.cluster_label);
  r.proxy_url = cluster.proxy_url;

  const KubeconfigUser& user = c.user;
  std::vector<std::string> methods;
  if (!user.token.empty() || !user.token_file.empty())
    methods.emplace_back("token");
  if (!user.username.empty() || !user.password.empty())
    methods.emplace_back("basicAuth");
  if (user.exec)
    methods.emplace_back("exec");
  if (user.auth_provider)
    methods.emplace_back("auth-provider");
  if (methods.size() > 1) {
    failf("{}: more than one authentication method found ({}); only one is allowed", c.user_label,
          join(methods, ", "));
  }
  if (user.auth_provider)
    fail_auth_provider(c.user_label, *user.auth_provider);

  const bool has_cert = !user.client_certificate.empty() || !user.client_certificate_data.empty();
  const bool has_key = !user.client_key.empty() || !user.client_key_data.empty();
  if (has_cert != has_key) {
    failf("{}: {} is set without {}; a client certificate needs both", c.user_label,
          has_cert ? "client-certificate" : "client-key",
          has_cert ? "client-key" : "client-certificate");
  }
  if (has_cert) {
    r.auth.client_cert_pem =
        !user.client_certificate_data.empty()
            ? user.client_certificate_data
            : read_named_file(user.client_certificate, "client-certificate", c.cert_named_by);
    r.auth.client_key_pem = !user.client_key_data.empty()
                                ? user.client_key_data
                                : read_named_file(user.client_key, "client-key", c.key_named_by);
  }
  if (!user.token.empty()) {
    r.auth.token = user.token;
  } else if (!user.token_file.empty()) {
    // Checked now for an early, clear error; the credential source re-reads it as it rotates.
    read_named_file(user.token_file, "tokenFile", c.token_file_named_by);
    r.auth.token_file = user.token_file;
  }
  r.auth.username = user.username;
  r.auth.password = user.password;
  if (user.exec)
    r.auth.exec = validated_exec(*user.exec, c.user_label);
  if (user.impersonate.empty() && !user.impersonate_groups.empty()) {
    failf("{}: as-groups needs `as` (a user to impersonate)", c.user_label);
  }
  r.auth.impersonate_user = user.impersonate;
  r.auth.impersonate_groups = user.impersonate_groups;
  return r;
}

/// Flags that do not depend on which cluster is used.
void apply_client_settings(RestConfig& r, const ConfigOverrides& o) {
  r.timeout = parse_request_timeout(o.request_timeout);
  if (o.qps) {
    if (!(*o.qps >= 0) || !std::isfinite(*o.qps))
      failf("invalid --kube-api-qps {}: must be >= 0", *o.qps);
    r.qps = *o.qps;
  }
  if (o.burst) {
    if (*o.burst < 0)
      failf("invalid --kube-api-burst {}: must be >= 0", *o.burst);
    r.burst = *o.burst;
  }
}

void set_namespace(RestConfig& r, const std::string& ns, const std::string& named_by) {
  if (ns.empty())
    return;
  if (!is_dns1123_label(ns)) {
    failf(
        "namespace \"{}\" ({}) is not a valid namespace name: use lower-case letters, digits "
        "and '-', starting and ending with a letter or digit, at most 63 characters",
        ns, named_by);
  }
  r.default_namespace = ns;
}

bool in_cluster_possible(const ConfigEnvironment& env) {
  if (env.get("KUBERNETES_SERVICE_HOST").empty() || env.get("KUBERNETES_SERVICE_PORT").empty()) {
    return false;
  }
  std::error_code ec;
  const auto status = fs::status(env.service_account_dir / "token", ec);
  return !ec && fs::exists(status) && !fs::is_directory(status);
}

RestConfig in_cluster_config(const ConfigOverrides& o, const ConfigEnvironment& env) {
  std::string host = env.get("KUBERNETES_SERVICE_HOST");
  if (host.find(':') != std::string::npos && host.front() != '[')
    host = "[" + host + "]";
  const fs::path sa = env.service_account_dir;

  Candidate c;
  c.cluster.server = fmt::format("https://{}:{}", host, env.get("KUBERNETES_SERVICE_PORT"));
  // Like client-go: a missing or unreadable CA bundle leaves the system trust store in charge.
  std::string why;
  if (auto ca = read_file(sa / "ca.crt", why))
    c.cluster.certificate_authority_data = *ca;
  c.user.token_file = (sa / "token").string();
  c.cluster_label = "the in-cluster config (KUBERNETES_SERVICE_HOST)";
  c.user_label = "the in-cluster service account";
  c.token_file_named_by = "the in-cluster config";
  apply_overrides(c, o);

  RestConfig r = build_rest_config(c);
  apply_client_settings(r, o);
  std::string ns = env.get("POD_NAMESPACE");
  std::string ns_source = "$POD_NAMESPACE";
  if (ns.empty()) {
    if (auto file = read_file(sa / "namespace", why))
      ns = std::string(trim(*file));
    ns_source = (sa / "namespace").string();
  }
  if (!o.namespace_.empty()) {
    ns = o.namespace_;
    ns_source = "--namespace";
  }
  set_namespace(r, ns, ns_source);
  r.source = "in-cluster";
  r.in_cluster = true;
  return r;
}

RestConfig flags_only_config(const ConfigOverrides& o) {
  Candidate c;
  c.cluster_label = "--server";
  c.user_label = "the flags";
  apply_overrides(c, o);
  RestConfig r = build_rest_config(c);
  apply_client_settings(r, o);
  set_namespace(r, o.namespace_, "--namespace");
  r.source = "flags";
  return r;
}

std::string describe_files(const Kubeconfig& config) {
  std::vector<std::string> files;
  for (const auto& f : config.files)
    files.push_back(f.string());
  if (!files.empty())
    return join(files, ", ");
  std::vector<std::string> searched;
  for (const auto& f : config.searched)
    searched.push_back(f.string());
  return fmt::format("no kubeconfig file (searched: {})",
                     searched.empty() ? std::string("nothing") : join(searched, ", "));
}

std::string no_configuration_message(const ConfigEnvironment& env) {
  std::string message =
      "no configuration: set --kubeconfig, $KUBECONFIG or ~/.kube/config, or run inside a "
      "cluster (try `trainctl sandbox up`)";
  if (!env.get("KUBERNETES_SERVICE_HOST").empty()) {
    message += fmt::format(
        " ($KUBERNETES_SERVICE_HOST is set, but in-cluster config also needs "
        "$KUBERNETES_SERVICE_PORT and {})",
        (env.service_account_dir / "token").string());
  }
  return message;
}

// ---------------------------------------------------------------------------------------------
// Rendering

/// True when a plain YAML scalar with this text would read back as something other than a string.
bool needs_quotes(const std::string& s) {
  if (s.empty())
    return true;
  static const std::set<std::string> kSpecial = {
      "~",   "null", "Null", "NULL", "y",    "Y",     "yes",   "Yes",   "YES",  "n",   "N",  "no",
      "No",  "NO",   "true", "True", "TRUE", "false", "False", "FALSE", "on",   "On",  "ON", "off",
      "Off", "OFF",  ".inf", ".Inf", ".INF", "-.inf", "+.inf", ".nan",  ".NaN", ".NAN"};
  if (kSpecial.count(s) != 0)
    return true;
  // Numbers: decimal, float, hex, octal.
  const char* begin = s.c_str();
  char* end = nullptr;
  errno = 0;
  std::strtod(begin, &end);
  if (end != begin && *end == '\0')
    return true;
  return false;
}

void emit_scalar(YAML::Emitter& out, const std::string& value) {
  if (needs_quotes(value)) {
    out << YAML::DoubleQuoted << value;
  } else {
    out << value;
  }
}

void emit_field(YAML::Emitter& out, std::string_view key, const std::string& value) {
  if (value.empty())
    return;
  out << YAML::Key << std::string(key) << YAML::Value;
  emit_scalar(out, value);
}

/// True for names like API_TOKEN, AWS_SECRET_ACCESS_KEY, client-secret, DB_PASSWORD.
bool looks_secret(std::string_view name) {
  std::string upper;
  for (char ch : name)
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (std::string_view word : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE",
                                "APIKEY", "API_KEY", "ACCESS_KEY", "AUTH"}) {
    if (upper.find(word) != std::string::npos)
      return true;
  }
  // KEY as a whole word: API-KEY, KEY_FILE_DATA, but not KEYBOARD or MONKEY_ID.
  std::size_t pos = 0;
  while ((pos = upper.find("KEY", pos)) != std::string::npos) {
    const bool start = pos == 0 || !std::isalnum(static_cast<unsigned char>(upper[pos - 1]));
    const bool stop =
        pos + 3 == upper.size() || !std::isalnum(static_cast<unsigned char>(upper[pos + 3]));
    if (start && stop)
      return true;
    pos += 3;
  }
  return false;
}

constexpr std::string_view kRedacted = "REDACTED";
constexpr std::string_view kDataOmitted = "DATA+OMITTED";

std::string shown_data(const std::string& decoded, bool raw) {
  if (decoded.empty())
    return "";
  return raw ? base64_encode(decoded) : std::string(kDataOmitted);
}

std::string shown_secret(const std::string& value, bool raw) {
  if (value.empty())
    return "";
  return raw ? value : std::string(kRedacted);
}

void emit_cluster(YAML::Emitter& out, const KubeconfigCluster& c, bool raw) {
  out << YAML::BeginMap;
  emit_field(out, "certificate-authority", c.certificate_authority);
  emit_field(out, "certificate-authority-data", shown_data(c.certificate_authority_data, raw));
  if (c.insecure_skip_tls_verify) {
    out << YAML::Key << "insecure-skip-tls-verify" << YAML::Value << true;
  }
  emit_field(out, "proxy-url", c.proxy_url);
  emit_field(out, "server", c.server);
  emit_field(out, "tls-server-name", c.tls_server_name);
  out << YAML::EndMap;
}

void emit_exec(YAML::Emitter& out, const ExecPluginConfig& e, bool raw) {
  out << YAML::BeginMap;
  emit_field(out, "apiVersion", e.api_version);
  if (!e.args.empty()) {
    out << YAML::Key << "args" << YAML::Value << YAML::BeginSeq;
    for (const auto& arg : e.args)
      emit_scalar(out, arg);
    out << YAML::EndSeq;
  }
  emit_field(out, "command", e.command);
  if (!e.env.empty()) {
    out << YAML::Key << "env" << YAML::Value << YAML::BeginSeq;
    for (const auto& [name, value] : e.env) {
      out << YAML::BeginMap;
      emit_field(out, "name", name);
      out << YAML::Key << "value" << YAML::Value;
      emit_scalar(out,
                  !raw && looks_secret(name) && !value.empty() ? std::string(kRedacted) : value);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  emit_field(out, "installHint", e.install_hint);
  emit_field(out, "interactiveMode", e.interactive_mode);
  if (e.provide_cluster_info)
    out << YAML::Key << "provideClusterInfo" << YAML::Value << true;
  out << YAML::EndMap;
}

void emit_user(YAML::Emitter& out, const KubeconfigUser& u, bool raw) {
  out << YAML::BeginMap;
  emit_field(out, "as", u.impersonate);
  if (!u.impersonate_groups.empty()) {
    out << YAML::Key << "as-groups" << YAML::Value << YAML::BeginSeq;
    for (const auto& group : u.impersonate_groups)
      emit_scalar(out, group);
    out << YAML::EndSeq;
  }
  if (u.auth_provider) {
    out << YAML::Key << "auth-provider" << YAML::Value << YAML::BeginMap;
    if (!u.auth_provider->config.empty()) {
      out << YAML::Key << "config" << YAML::Value << YAML::BeginMap;
      for (const auto& [key, value] : u.auth_provider->config) {
        out << YAML::Key << key << YAML::Value;
        emit_scalar(out,
                    !raw && looks_secret(key) && !value.empty() ? std::string(kRedacted) : value);
      }
      out << YAML::EndMap;
    }
    emit_field(out, "name", u.auth_provider->name);
    out << YAML::EndMap;
  }
  emit_field(out, "client-certificate", u.client_certificate);
  emit_field(out, "client-certificate-data", shown_data(u.client_certificate_data, raw));
  emit_field(out, "client-key", u.client_key);
  emit_field(out, "client-key-data", shown_data(u.client_key_data, raw));
  if (u.exec) {
    out << YAML::Key << "exec" << YAML::Value;
    emit_exec(out, *u.exec, raw);
  }
  emit_field(out, "password", shown_secret(u.password, raw));
  emit_field(out, "token", shown_secret(u.token, raw));
  emit_field(out, "tokenFile", u.token_file);
  emit_field(out, "username", u.username);
  out << YAML::EndMap;
}

void emit_context(YAML::Emitter& out, const KubeconfigContext& c) {
  out << YAML::BeginMap;
  emit_field(out, "cluster", c.cluster);
  emit_field(out, "namespace", c.namespace_);
  emit_field(out, "user", c.user);
  out << YAML::EndMap;
}

// ---------------------------------------------------------------------------------------------
// Writing current-context

std::string yaml_scalar_text(const std::string& value) {
  YAML::Emitter out;
  emit_scalar(out, value);
  return out.c_str();
}

/// Replaces or appends the top-level `current-context:` line; nullopt when the document is not a
/// plain block mapping this simple edit can handle.
std::optional<std::string> edit_current_context_line(const std::string& text,
                                                     const std::string& name) {
  const std::string replacement = "current-context: " + yaml_scalar_text(name);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  bool replaced = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string& line = lines[i];
    if (line.rfind("current-context", 0) != 0)
      continue;
    std::size_t pos = std::string_view("current-context").size();
    while (pos < line.size() && line[pos] == ' ')
      ++pos;
    if (pos >= line.size() || line[pos] != ':')
      continue;
    const std::string value(trim(std::string_view(line).substr(pos + 1)));
    const bool continues = i + 1 < lines.size() && !lines[i + 1].empty() &&
                           (lines[i + 1][0] == ' ' || lines[i + 1][0] == '\t');
    if (continues || (!value.empty() && (value[0] == '|' || value[0] == '>'))) {
      return std::nullopt;
    }
    const bool crlf = !line.empty() && line.back() == '\r';
    line = replacement + (crlf ? "\r" : "");
    replaced = true;
    break;
  }
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    out += '\n';
  }
  if (!replaced) {
    const std::string first(trim(text));
    if (!first.empty() && (first[0] == '{' || first.rfind("---", 0) == 0))
      return std::nullopt;
    out += replacement + "\n";
  }
  return out;
}

void write_file_atomically(const fs::path& file, const std::string& content) {
  fs::path target = file;
  std::error_code ec;
  if (fs::is_symlink(file, ec))
    target = fs::canonical(file, ec);
  if (ec)
    failf("cannot resolve {}: {}", file.string(), ec.message());

  mode_t mode = 0600;
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0)
    mode = st.st_mode & 07777;

  std::string tmp = target.string() + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    failf("cannot write {}: {}", target.string(), std::strerror(errno));
  bool ok = ::fchmod(fd, mode) == 0;
  std::size_t written = 0;
  while (ok && written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  ok = ::fsync(fd) == 0 && ok;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = ok ? errno : saved;
    ::unlink(tmp.c_str());
    failf("cannot write {}: {}", target.string(), std::strerror(err));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

std::string ConfigEnvironment::get(const std::string& name) const {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

ConfigEnvironment ConfigEnvironment::from_process() {
  ConfigEnvironment result;
  for (const char* name : {"KUBECONFIG", "HOME", "KUBERNETES_SERVICE_HOST",
                           "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "KUBECACHEDIR"}) {
    if (const char* value = std::getenv(name))
      result.env[name] = value;
  }
  if (result.get("HOME").empty()) {
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::vector<char> buffer(16384);
    if (::getpwuid_r(::getuid(), &pw, buffer.data(), buffer.size(), &found) == 0 && found &&
        found->pw_dir) {
      result.env["HOME"] = found->pw_dir;
    }
  }
  return result;
}

bool Kubeconfig::empty() const {
  return clusters.empty() && users.empty() && contexts.empty() && current_context.empty();
}

std::vector<fs::path> kubeconfig_search_paths(const ConfigOverrides& overrides,
                                              const ConfigEnvironment& env) {
  if (!overrides.kubeconfig.empty())
    return {absolute_normal(overrides.kubeconfig)};
  std::vector<fs::path> paths;
  const std::string list = env.get("KUBECONFIG");
  if (!list.empty()) {
    std::set<fs::path> seen;
    std::size_t start = 0;
    while (start <= list.size()) {
      std::size_t end = list.find(':', start);
      if (end == std::string::npos)
        end = list.size();
      const std::string entry = list.substr(start, end - start);
      start = end + 1;
      if (entry.empty())
        continue;
      fs::path p = absolute_normal(entry);
      if (seen.insert(p).second)
        paths.push_back(std::move(p));
    }
    return paths;
  }
  const std::string home = env.get("HOME");
  if (!home.empty())
    paths.push_back(absolute_normal(fs::path(home) / ".kube" / "config"));
  return paths;
}

Kubeconfig load_kubeconfigs(const std::vector<fs::path>& paths) {
  Kubeconfig merged;
  std::set<fs::path> seen;
  for (const auto& given : paths) {
    const fs::path file = absolute_normal(given);
    if (!seen.insert(file).second)
      continue;
    merged.searched.push_back(file);
    std::error_code ec;
    if (!fs::exists(file, ec))
      continue;
    Kubeconfig one = parse_file(file);
    merged.files.push_back(file);
    // First file to define a name wins that entry whole; map::insert keeps the existing one.
    merged.clusters.insert(one.clusters.begin(), one.clusters.end());
    merged.users.insert(one.users.begin(), one.users.end());
    merged.contexts.insert(one.contexts.begin(), one.contexts.end());
    if (merged.current_context.empty() && !one.current_context.empty()) {
      merged.current_context = one.current_context;
      merged.current_context_file = file;
    }
  }
  return merged;
}

Kubeconfig load_kubeconfig(const ConfigOverrides& overrides, const ConfigEnvironment& env) {
  if (!overrides.kubeconfig.empty()) {
    std::error_code ec;
    if (!fs::exists(overrides.kubeconfig, ec)) {
      failf("kubeconfig {} (from --kubeconfig) does not exist", overrides.kubeconfig);
    }
  }
  return load_kubeconfigs(kubeconfig_search_paths(overrides, env));
}

std::string tls_session_cache_dir(const ConfigOverrides& overrides, const ConfigEnvironment& env) {
  std::string cache;
  if (overrides.cache_dir)
    cache = *overrides.cache_dir;  // "" keeps nothing
  else if (!env.get("KUBECACHEDIR").empty())
    cache = env.get("KUBECACHEDIR");
  else if (!env.get("HOME").empty())
    cache = env.get("HOME") + "/.kube/cache";
  return cache.empty() ? "" : cache + "/trainctl/tls-sessions";
}

RestConfig resolve_rest_config(const ConfigOverrides& overrides, const ConfigEnvironment& env) {
  return resolve_rest_config(load_kubeconfig(overrides, env), overrides, env);
}

RestConfig resolve_rest_config(const Kubeconfig& config, const ConfigOverrides& o,
                               const ConfigEnvironment& env) {
  parse_request_timeout(o.request_timeout);  // fail on a bad flag before anything else
  const bool names_entries = !o.context.empty() || !o.cluster.empty() || !o.user.empty();
  if (config.empty() && !names_entries) {
    if (in_cluster_possible(env))
      return in_cluster_config(o, env);
    if (!o.server.empty())
      return flags_only_config(o);
    fail(no_configuration_message(env));
  }

  const std::string context_name = o.context.empty() ? config.current_context : o.context;
  if (context_name.empty() && o.cluster.empty() && o.server.empty()) {
    // client-go treats a kubeconfig without a selected context as empty: in-cluster may apply.
    if (in_cluster_possible(env))
      return in_cluster_config(o, env);
    failf(
        "no current context is set in {}; pass --context or run `trainctl config use-context "
        "NAME` (contexts: {})",
        describe_files(config), names_of(config.contexts));
  }

  const Sourced<KubeconfigContext>* context = nullptr;
  std::string context_label;
  if (!context_name.empty()) {
    auto it = config.contexts.find(context_name);
    if (it == config.contexts.end()) {
      failf("context \"{}\"{} not found in {}; available contexts: {}", context_name,
            o.context.empty() ? " (the current-context)" : " (from --context)",
            describe_files(config), names_of(config.contexts));
    }
    context = &it->second;
    context_label =
        fmt::format("context \"{}\" ({})", context_name, where(context->file, context->line));
  }

  Candidate c;
  std::string cluster_name = o.cluster;
  std::string cluster_named_by = "--cluster";
  if (cluster_name.empty() && context) {
    cluster_name = context->value.cluster;
    cluster_named_by = context_label;
  }
  const Sourced<KubeconfigCluster>* cluster = nullptr;
  if (!cluster_name.empty()) {
    auto it = config.clusters.find(cluster_name);
    if (it == config.clusters.end()) {
      failf("cluster \"{}\" (named by {}) not found in {}; available clusters: {}", cluster_name,
            cluster_named_by, describe_files(config), names_of(config.clusters));
    }
    cluster = &it->second;
    c.cluster = cluster->value;
    c.cluster_label =
        fmt::format("cluster \"{}\" ({})", cluster_name, where(cluster->file, cluster->line));
  } else if (o.server.empty()) {
    failf("{} names no cluster; set its `cluster:` or pass --cluster or --server", context_label);
  } else {
    c.cluster_label = "--server";
  }

  std::string user_name = o.user;
  std::string user_named_by = "--user";
  if (user_name.empty() && context) {
    user_name = context->value.user;
    user_named_by = context_label;
  }
  const Sourced<KubeconfigUser>* user = nullptr;
  if (!user_name.empty()) {
    auto it = config.users.find(user_name);
    if (it == config.users.end()) {
      failf("user \"{}\" (named by {}) not found in {}; available users: {}", user_name,
            user_named_by, describe_files(config), names_of(config.users));
    }
    user = &it->second;
    c.user = user->value;
    c.user_label = fmt::format("user \"{}\" ({})", user_name, where(user->file, user->line));
  } else {
    c.user_label = "the anonymous user";
  }
  c.ca_named_by = c.cluster_label;
  c.cert_named_by = c.key_named_by = c.token_file_named_by = c.user_label;
  apply_overrides(c, o);

  RestConfig r = build_rest_config(c);
  apply_client_settings(r, o);
  if (!o.namespace_.empty()) {
    set_namespace(r, o.namespace_, "--namespace");
  } else if (context) {
    set_namespace(r, context->value.namespace_, context_label);
  }
  r.context_name = context_name;
  r.cluster_name = cluster_name;
  r.user_name = user_name;
  std::vector<std::string> sources;
  for (const fs::path* file : {context ? &context->file : nullptr,
                               cluster ? &cluster->file : nullptr, user ? &user->file : nullptr}) {
    if (file && std::find(sources.begin(), sources.end(), file->string()) == sources.end()) {
      sources.push_back(file->string());
    }
  }
  r.source = sources.empty() ? "flags" : join(sources, ":");
  return r;
}

std::chrono::milliseconds parse_request_timeout(std::string_view value) {
  if (value.empty())
    return std::chrono::milliseconds(0);
  return parse_duration_flag("--request-timeout", value, ErrorKind::Config);
}

std::string render_kubeconfig(const Kubeconfig& config, const KubeconfigViewOptions& options) {
  std::map<std::string, const KubeconfigCluster*> clusters;
  std::map<std::string, const KubeconfigUser*> users;
  std::map<std::string, const KubeconfigContext*> contexts;
  std::string current = config.current_context;
  if (options.minify) {
    const std::string name = options.context.empty() ? config.current_context : options.context;
    if (name.empty())
      fail("current-context must exist in order to minify");
    auto it = config.contexts.find(name);
    if (it == config.contexts.end()) {
      failf("cannot minify: context \"{}\" not found; available contexts: {}", name,
            names_of(config.contexts));
    }
    current = name;
    contexts[name] = &it->second.value;
    if (auto c = config.clusters.find(it->second.value.cluster); c != config.clusters.end()) {
      clusters[c->first] = &c->second.value;
    }
    if (auto u = config.users.find(it->second.value.user); u != config.users.end()) {
      users[u->first] = &u->second.value;
    }
  } else {
    for (const auto& [name, entry] : config.clusters)
      clusters[name] = &entry.value;
    for (const auto& [name, entry] : config.users)
      users[name] = &entry.value;
    for (const auto& [name, entry] : config.contexts)
      contexts[name] = &entry.value;
  }

  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << "v1";
  out << YAML::Key << "clusters" << YAML::Value << YAML::BeginSeq;
  for (const auto& [name, cluster] : clusters) {
    out << YAML::BeginMap << YAML::Key << "cluster" << YAML::Value;
    emit_cluster(out, *cluster, options.raw);
    out << YAML::Key << "name" << YAML::Value;
    emit_scalar(out, name);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "contexts" << YAML::Value << YAML::BeginSeq;
  for (const auto& [name, context] : contexts) {
    out << YAML::BeginMap << YAML::Key << "context" << YAML::Value;
    emit_context(out, *context);
    out << YAML::Key << "name" << YAML::Value;
    emit_scalar(out, name);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "current-context" << YAML::Value;
  emit_scalar(out, current);
  out << YAML::Key << "kind" << YAML::Value << "Config";
  out << YAML::Key << "preferences" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::EndMap;
  out << YAML::Key << "users" << YAML::Value << YAML::BeginSeq;
  for (const auto& [name, user] : users) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value;
    emit_scalar(out, name);
    out << YAML::Key << "user" << YAML::Value;
    emit_user(out, *user, options.raw);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

fs::path current_context_target(const Kubeconfig& config) {
  if (!config.current_context_file.empty())
    return config.current_context_file;
  if (!config.files.empty())
    return config.files.front();
  if (!config.searched.empty())
    return config.searched.front();
  fail("no kubeconfig file to write: set --kubeconfig, $KUBECONFIG or $HOME");
}

void set_current_context(const fs::path& file, const std::string& name) {
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (!file.parent_path().empty())
      fs::create_directories(file.parent_path(), ec);
    write_file_atomically(file, fmt::format("apiVersion: v1\nkind: Config\ncurrent-context: {}\n"
                                            "preferences: {{}}\n",
                                            yaml_scalar_text(name)));
    return;
  }
  std::string why;
  auto text = read_file(file, why);
  if (!text)
    failf("cannot read kubeconfig {}: {}", file.string(), why);

  auto reads_back = [&](const std::string& candidate) {
    try {
      YAML::Node root = YAML::Load(candidate);
      return root.IsMap() && root["current-context"] &&
             root["current-context"].as<std::string>() == name;
    } catch (const YAML::Exception&) {
      return false;
    }
  };
  std::optional<std::string> edited = edit_current_context_line(*text, name);
  if (!edited || !reads_back(*edited)) {
    // Not a plain block mapping (JSON, flow style, multi-line value): rewrite the document.
    YAML::Node root;
    try {
      root = YAML::Load(*text);
    } catch (const YAML::ParserException& e) {
      failf("{}:{}:{}: invalid YAML: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg);
    }
    if (root.IsNull())
      root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap())
      failf("{}: expected a kubeconfig mapping", file.string());
    root["current-context"] = name;
    YAML::Emitter out;
    out << root;
    edited = std::string(out.c_str()) + "\n";
  }
  write_file_atomically(file, *edited);
}

fs::path use_context(const Kubeconfig& config, const std::string& name) {
  if (config.contexts.count(name) == 0) {
    failf("no context exists with the name \"{}\" in {}; available contexts: {}", name,
          describe_files(config), names_of(config.contexts));
  }
  fs::path target = current_context_target(config);
  set_current_context(target, name);
  return target;
}

}  // namespace trainctl::kube
