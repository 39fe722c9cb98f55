// Submit benchmarks, each a process run as a user starts it (fork/exec of the built binary):
//  1. `trainctl submit tfjob ... --dry-run=client -o yaml` and `trainctl render tfjob ...` wall
//     time, N=50, median and p90 (target <= 10 ms), against `/bin/true` (the reference: what any
//     process start costs on this machine).
//  2. Against an in-process sandbox with the training CRDs: `trainctl submit -f job.yaml` +
//     `trainctl get JOB` against `kubectl create -f job.yaml` + `kubectl get tfjob JOB` (the
//     reference), same manifest, same sandbox, N=20 pairs each; median of the pair and the ratio
//     (target >= 10x).
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using namespace trainctl;
using Clock = std::chrono::steady_clock;

namespace {

/// Runs `argv` with stdout and stderr to /dev/null and the environment `env`; returns the wall
/// time in milliseconds. Throws when the command does not exit 0.
double run_ms(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> args, envp;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto t0 = Clock::now();
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw std::runtime_error(fmt::format("cannot start {}", argv[0]));
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command;
    for (const auto& a : argv)
      command += a + " ";
    throw std::runtime_error(fmt::format("`{}` failed (status {})", command, status));
  }
  return ms;
}

/// Median and 90th percentile of a sample, in its unit.
struct Spread {
  double median;
  double p90;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)]};
}

Spread time_runs(int n, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  run_ms(argv, env);  // warm the page cache
  std::vector<double> samples;
  for (int i = 0; i < n; ++i)
    samples.push_back(run_ms(argv, env));
  return spread(samples);
}

std::vector<std::string> split(const std::string& words) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < words.size()) {
    const size_t end = std::min(words.find(' ', pos), words.size());
    if (end > pos)
      out.push_back(words.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::string tfjob_manifest(const std::string& name) {
  return fmt::format(R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: {}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 4
      template:
        spec:
          containers:
          - name: tensorflow
            image: reg/tf:2.15
            command: ["python", "train.py"]
            resources:
              limits: {{cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}}
)",
                     name);
}

}  // namespace

int main() {
  trainctl::testing::TempDir dir;
  // A clean environment: no KUBECONFIG, no TRAINCTL_* values, kubectl's cache under `dir`.
  const std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=" + dir.path().string()};
  const std::string job_flags =
      "tfjob --name bench --image reg/tf:2.15 --workers 4 --ps 1 --gpus 1 --cpu 4 --memory 16Gi";

  // 1. Offline: process wall time.
  const int runs = 50;
  const Spread baseline = time_runs(runs, {"/bin/true"}, env);
  const Spread dry_run =
      time_runs(runs,
                split(fmt::format("{} submit {} --dry-run=client -o yaml -- python train.py",
                                  TRAINCTL_BINARY, job_flags)),
                env);
  const Spread render = time_runs(
      runs, split(fmt::format("{} render {} -- python train.py", TRAINCTL_BINARY, job_flags)), env);
  fmt::print("Offline, wall time per process (N={}, median / p90)\n", runs);
  fmt::print("  /bin/true (reference)               {:6.2f} / {:6.2f} ms\n", baseline.median,
             baseline.p90);
  fmt::print(
      "  trainctl submit --dry-run=client    {:6.2f} / {:6.2f} ms   {:.1f}x of /bin/true "
      "(target <= 10 ms)\n",
      dry_run.median, dry_run.p90, dry_run.median / baseline.median);
  fmt::print("  trainctl render                     {:6.2f} / {:6.2f} ms   {:.1f}x of /bin/true\n",
             render.median, render.p90, render.median / baseline.median);

  // 2. Against the sandbox: submit + get, trainctl against kubectl.
  trainctl::testing::LocalSandbox local;
  trainctl::testing::install_training_crds(local.client());
  const std::string kubeconfig = local.sandbox().kubeconfig_path().string();
  const int pairs = 20;
  auto pair_ms = [&](const std::string& name, bool kubectl) {
    const std::string file = dir.write(name + ".yaml", tfjob_manifest(name)).string();
    if (kubectl) {
      return run_ms({"kubectl", "--kubeconfig", kubeconfig, "create", "-f", file}, env) +
             run_ms({"kubectl", "--kubeconfig", kubeconfig, "get", "tfjob", name}, env);
    }
    return run_ms({TRAINCTL_BINARY, "--kubeconfig", kubeconfig, "submit", "-f", file}, env) +
           run_ms({TRAINCTL_BINARY, "--kubeconfig", kubeconfig, "get", name}, env);
  };
  // One warm-up pair each: kubectl fills its discovery cache as it would on a user's machine.
  pair_ms("warm-kubectl", true);
  pair_ms("warm-trainctl", false);
  std::vector<double> kubectl_ms, trainctl_ms;
  for (int i = 0; i < pairs; ++i) {
    kubectl_ms.push_back(pair_ms(fmt::format("kubectl-{}", i), true));
    trainctl_ms.push_back(pair_ms(fmt::format("trainctl-{}", i), false));
  }
  const Spread kubectl = spread(kubectl_ms);
  const Spread trainctl = spread(trainctl_ms);
  fmt::print("Sandbox, create + get of one TFJob (N={} pairs, median / p90 of the pair)\n", pairs);
  fmt::print("  kubectl create -f + kubectl get (reference)  {:7.1f} / {:7.1f} ms\n",
             kubectl.median, kubectl.p90);
  fmt::print(
      "  trainctl submit -f + trainctl get            {:7.1f} / {:7.1f} ms   "
      "{:.1f}x faster (target >= 10x)\n",
      trainctl.median, trainctl.p90, kubectl.median / trainctl.median);
  return 0;
}
