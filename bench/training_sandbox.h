#pragma once

// A sandbox for the benchmarks that run training jobs on it.

#include <chrono>
#include <filesystem>

#include "kube/client.h"
#include "sandbox/sandbox.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl::bench {

/// A started sandbox and an admin client of it without a client-side rate limit, once the
/// training CRDs (Kubeflow jobs, Volcano PodGroups and Queues) are served.
struct TrainingSandbox {
  explicit TrainingSandbox(const sandbox::SandboxOptions& options)
      : sandbox(options), client(started_admin(sandbox)) {
    trainctl::testing::install_training_crds(client);
  }

  /// A sandbox on an ephemeral port keeping its files in `data_dir`: `nodes` nodes of
  /// `node_gpus` GPUs each, whose kubelets start containers after 100 ms.
  static sandbox::SandboxOptions gpu_nodes(const std::filesystem::path& data_dir, int nodes,
                                           int node_gpus) {
    sandbox::SandboxOptions options;
    options.data_dir = data_dir;
    options.port = 0;
    options.cluster.nodes = nodes;
    options.cluster.node_gpus = node_gpus;
    options.cluster.kubelet.start_delay = std::chrono::milliseconds(100);
    return options;
  }

  sandbox::Sandbox sandbox;
  kube::Client client;

 private:
  static kube::RestConfig started_admin(sandbox::Sandbox& sb) {
    sb.start();
    kube::RestConfig config = sb.admin_config();
    config.qps = 0;
    return config;
  }
};

}  // namespace trainctl::bench
