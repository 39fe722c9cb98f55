#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kube/rest_config.h"
#include "sandbox/api_server.h"
#include "sandbox/cluster.h"
#include "sandbox/http_server.h"
#include "sandbox/job_controller.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

/// How to run a sandbox.
struct SandboxOptions {
  /// Holds ca.crt/ca.key, the serving and admin certificates, tokens.csv and kubeconfig; reused
  /// when present, so clients keep working across restarts.
  std::filesystem::path data_dir;
  std::string host = "127.0.0.1";
  int port = 16443;  // 0 = an ephemeral port
  ClusterOptions cluster;
  std::size_t watch_window = 100'000;
  Faults faults;
  std::function<void(std::string_view)> log;            // server-side problems; empty = dropped
  std::function<void(const RequestAttributes&)> audit;  // every resource request; empty = none
};

/// The context, cluster and user names the sandbox writes into kubeconfigs.
inline constexpr const char* kSandboxContext = "trainctl-sandbox";

/// A whole local cluster in one process: the object store, the Kubernetes API over HTTPS,
/// simulated nodes with a scheduler and kubelets, and a Job controller. `trainctl sandbox up` runs
/// one; tests start one per fixture on an ephemeral port.
class Sandbox {
 public:
  explicit Sandbox(SandboxOptions options);
  ~Sandbox();  // stop()
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  /// Creates (or loads) the certificates, serves, registers nodes, writes the kubeconfig.
  void start();
  void stop();

  int port() const;
  std::string server_url() const;
  /// The kubeconfig written under the data dir (context trainctl-sandbox, admin client cert).
  std::filesystem::path kubeconfig_path() const;
  /// A client config for the admin user (client certificate, system:masters).
  kube::RestConfig admin_config() const;
  /// A bearer token the server accepts (for in-cluster style clients and kubectl --token).
  const std::string& admin_token() const { return admin_token_; }

  Store& store() { return *store_; }
  ApiServer& api() { return *api_; }
  SimulatedCluster& cluster() { return *cluster_; }

 private:
  void load_or_create_credentials();
  void write_kubeconfig() const;

  SandboxOptions options_;
  std::string ca_pem_, ca_key_pem_, server_cert_pem_, server_key_pem_;
  std::string admin_cert_pem_, admin_key_pem_, admin_token_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<SimulatedCluster> cluster_;
  std::unique_ptr<JobController> jobs_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<HttpsServer> server_;
};

/// The kubeconfig YAML that reaches a sandbox with the admin certificate.
std::string sandbox_kubeconfig(const std::string& server_url, const std::string& ca_pem,
                               const std::string& client_cert_pem,
                               const std::string& client_key_pem);

/// Adds (or replaces) the trainctl-sandbox cluster, user and context in an existing kubeconfig
/// file (created when missing), keeping everything else in it.
void merge_sandbox_kubeconfig(const std::filesystem::path& target, const std::string& sandbox_yaml);

/// Removes the trainctl-sandbox cluster, user and context merge_sandbox_kubeconfig added to
/// `target`, keeping everything else; a current-context naming the sandbox becomes "". Returns
/// whether there was anything to remove.
bool remove_sandbox_kubeconfig(const std::filesystem::path& target);

}  // namespace trainctl::sandbox
