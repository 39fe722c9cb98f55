#pragma once

// The API server of the portable integration tests (ctest label `real`): the cluster that
// TRAINCTL_TEST_KUBECONFIG names, else an in-process sandbox. The same checks run against the
// sandbox in CI and against a real cluster by hand:
//   TRAINCTL_TEST_KUBECONFIG=$HOME/.kube/config ctest --test-dir build -L real

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "error.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "kube/resource.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl::testing {

/// The kubeconfig TRAINCTL_TEST_KUBECONFIG names; empty when the tests run on a sandbox.
inline std::string test_kubeconfig() {
  const char* path = std::getenv("TRAINCTL_TEST_KUBECONFIG");
  return path == nullptr ? "" : path;
}

/// How long a test waits for what a real cluster's controllers do on their own: settle a new
/// namespace (its ServiceAccount and root CA), collect garbage. Within seconds, but the machine
/// may be busy; tests wait on conditions with this deadline, never with fixed sleeps.
inline constexpr std::chrono::seconds kSettleTimeout{30};

/// The ConfigMap kube-controller-manager's root-ca-cert-publisher puts in every namespace.
inline constexpr std::string_view kRootCaConfigMap = "kube-root-ca.crt";

/// Whether `r`'s object `name` exists in `ns` (a 404 is "no"; other errors are thrown).
inline bool exists(kube::Client& client, const kube::Resource& r, std::string_view ns,
                   std::string_view name) {
  try {
    client.get(r, ns, name);
    return true;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    return false;
  }
}

/// GoogleTest fixture for checks that hold on any API server. Each test talks to the cluster
/// TRAINCTL_TEST_KUBECONFIG names (its current context) or, without it, to a fresh LocalSandbox,
/// in a namespace of its own (`trainctl-test-` and 6 random characters). At teardown the
/// namespaces and the cluster-scoped objects registered with delete_at_teardown() are deleted,
/// without waiting for them to go.
class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string kubeconfig = test_kubeconfig();
    if (kubeconfig.empty()) {
      sandbox_ = std::make_unique<LocalSandbox>();
      config_ = sandbox_->sandbox().admin_config();
    } else {
      config_ = kube::resolve_rest_config(kube::ConfigOverrides{.kubeconfig = kubeconfig},
                                          kube::ConfigEnvironment::from_process());
      client_ = std::make_unique<kube::Client>(config_);
    }
    ns_ = create_namespace();
  }

  void TearDown() override {
    for (auto it = cleanup_.rbegin(); it != cleanup_.rend(); ++it) {
      try {
        client().remove(it->first, "", it->second);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::NotFound)
          ADD_FAILURE() << "deleting " << it->first.plural << " " << it->second << ": " << e.what();
      }
    }
  }

  kube::Client& client() { return sandbox_ ? sandbox_->client() : *client_; }
  /// Where and as whom client() connects (for raw requests).
  const kube::RestConfig& config() const { return config_; }
  /// The test's namespace.
  const std::string& ns() const { return ns_; }
  bool on_sandbox() const { return sandbox_ != nullptr; }

  /// Deletes the cluster-scoped object `name` at teardown (the last registered first).
  void delete_at_teardown(const kube::Resource& r, std::string name) {
    cleanup_.emplace_back(r, std::move(name));
  }

  /// Creates a fresh namespace, deleted at teardown, and waits until the cluster's controllers
  /// have settled it: its default ServiceAccount exists (pods need it), and on a cluster that
  /// publishes kube-root-ca.crt into namespaces (kube-controller-manager does) so does that
  /// ConfigMap, so that no later ADDED event of theirs reaches the test's lists and watches.
  std::string create_namespace() {
    static constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::random_device random;
    std::string name = "trainctl-test-";
    for (int i = 0; i < 6; ++i)
      name +=
          kAlphabet[std::uniform_int_distribution<std::size_t>(0, kAlphabet.size() - 1)(random)];
    client().create(kube::resources::namespaces(), "",
                    {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}});
    delete_at_teardown(kube::resources::namespaces(), name);
    const kube::Resource service_accounts{"", "v1", "serviceaccounts", true, "ServiceAccount"};
    const bool publishes_root_ca =
        exists(client(), kube::resources::configmaps(), "default", kRootCaConfigMap);
    EXPECT_TRUE(wait_until(
        [&] {
          return exists(client(), service_accounts, name, "default") &&
                 (!publishes_root_ca ||
                  exists(client(), kube::resources::configmaps(), name, kRootCaConfigMap));
        },
        kSettleTimeout))
        << "namespace " << name << " was not settled within " << kSettleTimeout.count() << " s";
    return name;
  }

 private:
  std::unique_ptr<LocalSandbox> sandbox_;  // without TRAINCTL_TEST_KUBECONFIG
  std::unique_ptr<kube::Client> client_;   // with it
  kube::RestConfig config_;
  std::string ns_;
  std::vector<std::pair<kube::Resource, std::string>> cleanup_;
};

}  // namespace trainctl::testing
