// Informer memory: resident memory of a process caching 10,000 training pods (the controller's
// target is <= 100 MB at 10,000 cached pods).
//
// The sandbox runs in a child process, forked before any thread exists, so that only the
// informer's memory is measured.
#include <fmt/format.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <span>
#include <string_view>
#include <thread>

#include "json_access.h"
#include "kube/cache/informer.h"
#include "kube/client.h"
#include "kube/kubeconfig.h"
#include "sandbox/sandbox.h"
#include "tests/support/temp_dir.h"

using namespace trainctl;
using nlohmann::json;

namespace {

constexpr int kPods = 10'000;

double rss_mib() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return static_cast<double>(resident * ::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

/// A worker pod as the controller creates it: training labels, an owner, env, resources, ports.
/// Its owner must exist (the sandbox's garbage collector deletes pods whose owner is gone): a
/// ConfigMap named like the job stands in for the PyTorchJob, `owner_uid` is its uid.
json training_pod(int i, const std::string& owner_uid) {
  const std::string job = fmt::format("job-{}", i / 8);
  const int index = i % 8;
  json env = json::array();
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"PYTHONUNBUFFERED", "1"},
                                                        {"MASTER_ADDR", job + "-master-0"},
                                                        {"MASTER_PORT", "23456"},
                                                        {"WORLD_SIZE", "8"},
                                                        {"RANK", std::to_string(index)},
                                                        {"PET_NNODES", "8"}}) {
    env.push_back({{"name", name}, {"value", value}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", fmt::format("{}-worker-{}", job, index)},
            {"namespace", "default"},
            {"labels",
             {{"training.kubeflow.org/operator-name", "pytorchjob-controller"},
              {"training.kubeflow.org/job-name", job},
              {"training.kubeflow.org/replica-type", "worker"},
              {"training.kubeflow.org/replica-index", std::to_string(index)}}},
            {"ownerReferences",
             {{{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"name", job},
               {"uid", owner_uid},
               {"controller", true},
               {"blockOwnerDeletion", true}}}}}},
          {"spec",
           {{"restartPolicy", "OnFailure"},
            {"containers",
             {{{"name", "pytorch"},
               {"image", "registry.example.com/team/bert-train:1.4.2"},
               {"command", {"torchrun", "train.py", "--epochs", "10"}},
               {"env", env},
               {"ports", {{{"name", "pytorchjob-port"}, {"containerPort", 23456}}}},
               {"resources",
                {{"limits", {{"cpu", "8"}, {"memory", "64Gi"}, {"nvidia.com/gpu", "1"}}},
                 {"requests", {{"cpu", "8"}, {"memory", "64Gi"}, {"nvidia.com/gpu", "1"}}}}}}}}}}};
}

/// Child: a sandbox holding kPods pending pods; reports readiness on `ready`, then serves until
/// the parent closes `done`.
[[noreturn]] void serve_sandbox(const std::filesystem::path& dir, int ready, int done) {
  sandbox::SandboxOptions options;
  options.data_dir = dir;
  options.port = 0;
  options.cluster.scheduler_names = {};  // nothing is bound: the pods stay as created
  sandbox::Sandbox sb(options);
  sb.start();
  kube::Client client(sb.admin_config());
  std::string owner_uid;
  for (int i = 0; i < kPods; ++i) {
    if (i % 8 == 0) {
      const json owner = client.create(kube::resources::configmaps(), "default",
                                       {{"apiVersion", "v1"},
                                        {"kind", "ConfigMap"},
                                        {"metadata", {{"name", fmt::format("job-{}", i / 8)}}}});
      owner_uid = owner["metadata"]["uid"];
    }
    client.create(kube::resources::pods(), "default", training_pod(i, owner_uid));
  }
  const char byte = 1;
  if (::write(ready, &byte, 1) != 1)
    std::_Exit(1);
  char ignored;
  while (::read(done, &ignored, 1) > 0) {
  }
  std::_Exit(0);
}

/// Caches every pod in an informer (with the owner index) and prints the memory it took.
void measure(const std::filesystem::path& kubeconfig) {
  kube::Client client(kube::resolve_rest_config(kube::load_kubeconfigs({kubeconfig}), {}, {}));
  client.server_version();  // TLS and libcurl initialised before the baseline
  const double before = rss_mib();
  kube::cache::Informer informer(client, {.resource = kube::resources::pods()});
  informer.add_index(std::string(kube::cache::by_controller_uid),
                     kube::cache::controller_uid_index());
  const auto t0 = std::chrono::steady_clock::now();
  std::jthread runner([&](std::stop_token stop) { informer.run(stop); });
  informer.wait_for_sync({});
  const double sync_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double peak = rss_mib();
  ::malloc_trim(0);  // hand back what the LIST's transient buffers used
  const double after = rss_mib();
  const std::size_t json_bytes = informer.list().front().dump().size();
  fmt::print(
      "informer: {} pods ({} B of JSON each), synced in {:.2f} s; RSS {:.1f} MiB before, "
      "{:.1f} MiB at sync, {:.1f} MiB after malloc_trim = {:.2f} KiB per cached pod\n",
      informer.size(), json_bytes, sync_s, before, peak, after,
      (after - before) * 1024.0 / static_cast<double>(informer.size()));

  // What a list costs a caller that reads every object on every pass (decoding each), against
  // one that keeps what it read per resourceVersion and is handed unchanged objects as their
  // metadata alone (admission lists nodes so: Informer::list with a DecodeFilter).
  const auto list_ms = [&](const std::function<std::vector<json>()>& list) {
    std::vector<double> runs;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const std::size_t listed = list().size();
      runs.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      if (listed != informer.size())
        std::abort();
    }
    std::sort(runs.begin(), runs.end());
    return runs[2];
  };
  const double decoded = list_ms([&] { return informer.list(); });
  const double unchanged =
      list_ms([&] { return informer.list([](const auto&, const auto&) { return false; }); });
  fmt::print(
      "listing them (median of 5): every object decoded {:.1f} ms, every object unchanged "
      "(metadata alone) {:.1f} ms (ratio {:.2f})\n",
      decoded, unchanged, unchanged / decoded);

  // What every job reconcile reads: its pods by owner, whole, or as the job reconciler asks for
  // them (metadata and status: no planner reads a pod's spec).
  std::vector<std::string> owners;
  for (const json& pod : informer.list()) {
    const std::string uid = controller_uid(pod);
    if (owners.empty() || owners.back() != uid)
      owners.push_back(uid);
  }
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  constexpr std::array<std::string_view, 4> members = {"apiVersion", "kind", "metadata", "status"};
  const auto by_owner_ms = [&](std::span<const std::string_view> keep) {
    return list_ms([&] {
      std::vector<json> all;
      for (const auto& uid : owners)
        for (json& pod : informer.by_index(kube::cache::by_controller_uid, uid, keep))
          all.push_back(std::move(pod));
      return all;
    });
  };
  const double whole = by_owner_ms({});
  const double projected = by_owner_ms(members);
  fmt::print(
      "every job's pods by owner ({} jobs, median of 5): whole {:.1f} ms, metadata and status "
      "only {:.1f} ms (ratio {:.2f})\n",
      owners.size(), whole, projected, projected / whole);
}

}  // namespace

int main() {
  testing::TempDir dir;
  int ready[2], done[2];
  if (::pipe(ready) != 0 || ::pipe(done) != 0)
    return 1;
  const pid_t server = ::fork();
  if (server == 0) {
    ::close(ready[0]);
    ::close(done[1]);
    serve_sandbox(dir.path(), ready[1], done[0]);
  }
  ::close(ready[1]);
  ::close(done[0]);
  char byte;
  if (::read(ready[0], &byte, 1) != 1) {
    fmt::print(stderr, "the sandbox did not start\n");
    return 1;
  }
  measure(dir.path() / "kubeconfig");
  ::close(done[1]);
  ::waitpid(server, nullptr, 0);
  return 0;
}
