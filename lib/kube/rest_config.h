#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainctl::kube {

/// How to verify the server, resolved from a kubeconfig cluster entry and flags.
struct TlsConfig {
  /// PEM bundle of trusted CAs; empty means the system trust store.
  std::string ca_pem;
  bool insecure_skip_verify = false;
  /// Name to verify the serving certificate against, when it differs from the URL's host.
  std::string server_name;
  /// Where TLS sessions are kept for the next process to resume (tls_sessions.h); empty = not
  /// kept.
  std::string session_cache_dir;
};

/// A client.authentication.k8s.io exec credential plugin, as written in a kubeconfig user.
struct ExecPluginConfig {
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1
  std::string command;      // resolved against the kubeconfig's directory when relative with '/'
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string interactive_mode = "IfAvailable";  // Never | IfAvailable | Always
  bool provide_cluster_info = false;
  std::string install_hint;
};

/// How to authenticate, resolved from a kubeconfig user entry and flags; at most one method.
struct AuthConfig {
  std::string token;
  std::string token_file;  // re-read periodically; bound service-account tokens rotate
  std::string username;
  std::string password;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::optional<ExecPluginConfig> exec;
  std::string impersonate_user;
  std::vector<std::string> impersonate_groups;
};

/// How requests travel to the API server.
enum class Transport {
  /// libcurl: HTTP/2 streams of one connection when the server offers it: many requests in
  /// flight for a short while (`submit -f` of many jobs) need one TLS handshake, not one each.
  Multiplexed,
  /// HTTP/1.1 over TLS connections trainctl makes itself (direct_transport.h), one per request
  /// in flight unless they are pipelined (RestConfig::pipeline_depth), kept alive, without
  /// loading libcurl: for commands, which send a few requests and exit, and for the controller,
  /// whose requests cost it a quarter to a half less CPU this way than through libcurl. Through a
  /// proxy (proxy-url, or https_proxy/all_proxy in the
  /// environment) or over plain http://, requests go through libcurl all the same.
  Direct,
};

/// How many requests a command pipelines on one connection (RestConfig::pipeline_depth).
inline constexpr std::size_t kCommandPipelineDepth = 4;

/// Everything the client needs to reach one API server: the output of config resolution.
struct RestConfig {
  std::string server;  // https://host:port, possibly with a path prefix
  TlsConfig tls;
  AuthConfig auth;
  std::string proxy_url;  // http://, https:// or socks5://
  Transport transport = Transport::Multiplexed;
  /// Direct transport: how many requests may share one connection, pipelined (1 = none). Commands
  /// pipeline their few concurrent requests (kCommandPipelineDepth: one TLS handshake per
  /// command); the controller does not: a long-running process pays its handshakes once, and a
  /// request pipelined behind a long answer (an informer's first list) would wait for it, a lease
  /// renewal among them.
  std::size_t pipeline_depth = 1;
  /// The namespace verbs default to: flag, then context, then "default".
  std::string default_namespace = "default";
  std::chrono::milliseconds timeout{0};  // per request; 0 = no limit
  /// How long a TLS handshake may take, whatever the request's timeout: client-go's transport
  /// (and so kubectl) gives up after 10 s, so a server that accepts and never answers fails.
  std::chrono::milliseconds tls_handshake_timeout{10'000};
  /// Called with the text of every warning a response carries (`Warning: 299 - "unknown field
  /// \"spec.x\""`), as client-go's WarningHandler; from the request's thread. None by default.
  std::function<void(const std::string&)> on_warning;
  /// Client-side rate limit (0 = unlimited) and burst: kubectl's defaults since 1.27, so a
  /// `submit -f` of up to ~300 jobs is never held back on the client.
  double qps = 50;
  int burst = 300;
  /// kubectl's -v for requests, logged on stderr: from 6 each one's method, URL, status and
  /// latency; from 7 its headers, from 8 the response's, credentials masked; never bodies.
  int verbosity = 0;

  /// Where this came from, for `trainctl config view` and error messages.
  std::string context_name;
  std::string cluster_name;
  std::string user_name;
  std::string source;  // kubeconfig path(s), or "in-cluster"
  bool in_cluster = false;
};

}  // namespace trainctl::kube
