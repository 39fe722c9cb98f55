#pragma once

// A sandbox for the benchmarks that run training jobs on it.

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
