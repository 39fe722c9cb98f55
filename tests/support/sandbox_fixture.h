#pragma once

// An in-process sandbox (store, API server over HTTPS, simulated nodes) for tests that talk to
// it through the real client, as trainctl does to a real cluster.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "error.h"
#include "kube/client.h"
#include "kube/http.h"
#include "kube/rest_config.h"
#include "sandbox/sandbox.h"
#include "tests/support/temp_dir.h"
#include "yaml_json.h"

namespace trainctl::testing {

/// Kubelet timings that take a scripted pod from bound to finished in well under a second.
inline sandbox::KubeletTiming fast_kubelet_timing() {
  sandbox::KubeletTiming timing;
  timing.start_delay = std::chrono::milliseconds(50);
  timing.default_run_time = std::chrono::milliseconds(300);
  timing.restart_backoff = std::chrono::milliseconds(100);
  timing.max_restart_backoff = std::chrono::milliseconds(400);
  return timing;
}

/// Polls `done` every 10 ms until it holds or `timeout` passes; returns whether it held. Tests
/// wait with this, never with a fixed sleep.
template <typename Predicate>
bool wait_until(Predicate&& done, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (done())
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// A sandbox on an ephemeral 127.0.0.1 port with its data dir in a fresh temporary directory,
/// fast kubelet timings and an admin client. `customize` may change the options before start.
class LocalSandbox {
 public:
  using Customize = std::function<void(sandbox::SandboxOptions&)>;

  explicit LocalSandbox(const Customize& customize = {}) {
    sandbox::SandboxOptions options;
    options.data_dir = dir_.path() / "sandbox";
    options.port = 0;
    options.cluster.kubelet = fast_kubelet_timing();
    if (customize)
      customize(options);
    options_ = options;
    sandbox_ = std::make_unique<sandbox::Sandbox>(std::move(options));
    sandbox_->start();
    options_.port = sandbox_->port();
    client_ = std::make_unique<kube::Client>(sandbox_->admin_config());
  }

  /// Stops the sandbox, runs `while_down`, and starts a new one on the same port and data dir, as
  /// `trainctl sandbox down` and `up` do: the same certificates and kubeconfig, so clients keep
  /// working, but an empty store whose resourceVersions start again from 1 (as after an etcd
  /// restore), without the CRDs.
  void restart(const std::function<void()>& while_down = {}) {
    sandbox_.reset();
    if (while_down)
      while_down();
    sandbox_ = std::make_unique<sandbox::Sandbox>(options_);
    sandbox_->start();
  }

  sandbox::Sandbox& sandbox() { return *sandbox_; }
  /// Authenticates with the admin client certificate.
  kube::Client& client() { return *client_; }

  /// Trusts the sandbox's CA and presents `token` as a bearer token (no client certificate).
  kube::RestConfig token_config(const std::string& token) const {
    kube::RestConfig config = anonymous_config();
    config.auth.token = token;
    return config;
  }
  /// Trusts the sandbox's CA and presents no credentials at all.
  kube::RestConfig anonymous_config() const {
    kube::RestConfig config = sandbox_->admin_config();
    config.auth = {};
    return config;
  }

 private:
  TempDir dir_;                      // first: outlives the sandbox that writes into it
  sandbox::SandboxOptions options_;  // what restart() starts again, with the port fixed
  std::unique_ptr<sandbox::Sandbox> sandbox_;
  std::unique_ptr<kube::Client> client_;
};

/// Creates the Kubeflow, Volcano and scheduler-plugins CRDs shipped under packaging/crds (what
/// `trainctl install` will apply) where the cluster has none of that name (those it has are kept,
/// so a shared cluster keeps its CRDs) and waits until each is served.
inline void install_training_crds(kube::Client& client) {
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(TRAINCTL_SOURCE_DIR) / "packaging" / "crds")) {
    const nlohmann::json crd = yaml_to_json(YAML::LoadFile(entry.path().string()));
    try {
      client.create(kube::resources::custom_resource_definitions(), "", crd);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AlreadyExists)
        throw;
    }
  }
  for (const auto& r :
       {kube::resources::job(api::JobKind::TFJob), kube::resources::job(api::JobKind::PyTorchJob),
        kube::resources::job(api::JobKind::MPIJob), kube::resources::podgroups(),
        kube::resources::scheduler_plugins_podgroups(), kube::resources::queues()}) {
    // A real server serves a new CRD's resource a moment after the create.
    if (!wait_until([&] { return client.serves(r); }, std::chrono::seconds(30)))
      client.require_served(r);  // throws, naming the resource
  }
}

/// Plain HTTP requests to a sandbox with the admin certificate, for what kube::Client has no verb
/// for (raw discovery documents, unusual methods and content types, /sandbox/faults).
class RawSandboxHttp {
 public:
  explicit RawSandboxHttp(const kube::RestConfig& config)
      : transport_(config),
        creds_{.authorization = config.auth.token.empty() ? "" : "Bearer " + config.auth.token,
               .client_cert_pem = config.auth.client_cert_pem,
               .client_key_pem = config.auth.client_key_pem} {}

  kube::HttpResponse send(const std::string& method, const std::string& path,
                          const std::string& body = {},
                          const std::string& content_type = "application/json",
                          const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    kube::HttpRequest request;
    request.method = method;
    request.path = path;
    request.body = body;
    request.headers = headers;
    if (!body.empty())
      request.headers.emplace_back("Content-Type", content_type);
    request.timeout = std::chrono::seconds(10);
    return transport_.send(request, creds_);
  }

  /// GET `path` and parse the body as JSON (null when it is not JSON).
  nlohmann::json get_json(const std::string& path) {
    return nlohmann::json::parse(send("GET", path).body, nullptr, false);
  }

 private:
  kube::HttpTransport transport_;
  kube::RequestCredentials creds_;
};

/// GoogleTest fixture: a fresh LocalSandbox for each test.
class SandboxTest : public ::testing::Test {
 protected:
  sandbox::Sandbox& sandbox() { return local_.sandbox(); }
  kube::Client& client() { return local_.client(); }

  LocalSandbox local_;
};

/// A minimal valid pod: one container `main` running `image`, with `annotations` (e.g. the
/// sandbox's run-seconds and exit-code scripts).
inline nlohmann::json pod_manifest(const std::string& name,
                                   nlohmann::json annotations = nlohmann::json::object(),
                                   const std::string& image = "busybox:1.36") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"annotations", std::move(annotations)}}},
          {"spec",
           {{"containers",
             nlohmann::json::array(
                 {{{"name", "main"}, {"image", image}, {"command", {"python", "train.py"}}}})}}}};
}

}  // namespace trainctl::testing
