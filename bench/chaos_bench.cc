// Chaos benchmark (issue 13): jobs of every kind and many sizes across three quota queues, while
// the sandbox injects faults (5 % 500s throughout; bursts of 429s with Retry-After; latency
// spikes; every watch dropped after 10 s; 410 Gone on every watch resume; bursts of 409s on
// updates) and the controller (`trainctl controller --gang-scheduler builtin`, its own process)
// is SIGKILLed and restarted at random moments. Read straight from the store every 100 ms:
//   - never two live pods for one replica (job, type, index);
//   - no queue's running pods ever request more CPU than its capability;
//   - no gang stays partly running with the rest unschedulable for more than 10 s.
// At the end: every job reached the terminal state its scripts decide (Succeeded, or Failed for
// the jobs whose chief exits 1), and no pod is left that its cleanPodPolicy removes (MPI
// launchers stay, as the MPI Operator keeps the launcher Job).
// The controller exiting by itself counts as a violation too (it is restarted, as a kubelet would).
// Prints the timings and every violation; exits 1 when an invariant broke or jobs did not finish
// within the limit (timings themselves never fail it). CI runs a short version (ctest -L chaos).
// Usage: chaos_bench [jobs=1000] [kills=5] [nodes=40] [limit_seconds=900] [seed=1]
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "api/job.h"
#include "api/quantity.h"
#include "api/status.h"
#include "api/well_known.h"
#include "bench/bench_support.h"
#include "error.h"
#include "json_access.h"
#include "kube/client.h"
#include "sandbox/sandbox.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"
#include "yaml_json.h"

using namespace trainctl;
using bench::Clock;
using bench::seconds_since;
using nlohmann::json;

namespace {

constexpr int kQueues = 3;
const int kQueueCpus[kQueues] = {48, 24, 12};  // capability of queue-0..2, in CPUs

/// One submitted job and what its scripts make of it.
struct JobCase {
  api::JobKind kind;
  std::string name;
  std::string clean_pod_policy;
  bool fails;  // the chief (or master, or launcher) exits 1
};

json container(const std::string& name) {
  return {{"name", name},
          {"image", "train:1"},
          {"resources", {{"requests", {{"cpu", "1"}}}, {"limits", {{"cpu", "1"}}}}}};
}

json replica(int replicas, const std::string& container_name, const std::string& run_seconds,
             int exit_code) {
  json annotations = {{"sandbox.trainctl.io/run-seconds", run_seconds}};
  if (exit_code != 0)
    annotations["sandbox.trainctl.io/exit-code"] = std::to_string(exit_code);
  return {{"replicas", replicas},
          {"restartPolicy", "ExitCode"},
          {"template",
           {{"metadata", {{"annotations", annotations}}},
            {"spec", {{"containers", json::array({container(container_name)})}}}}}};
}

/// The manifest of `c`, with `workers` workers, in `queue`.
json manifest(const JobCase& c, int workers, int queue) {
  const int exit_code = c.fails ? 1 : 0;
  json spec = {{"runPolicy",
                {{"cleanPodPolicy", c.clean_pod_policy},
                 {"backoffLimit", 3},
                 {"schedulingPolicy", {{"queue", fmt::format("queue-{}", queue)}}}}}};
  switch (c.kind) {
    case api::JobKind::TFJob:
      spec["tfReplicaSpecs"] = {{"Chief", replica(1, "tensorflow", "1", exit_code)},
                                {"Worker", replica(workers, "tensorflow", "1", 0)}};
      break;
    case api::JobKind::PyTorchJob:
      spec["pytorchReplicaSpecs"] = {{"Master", replica(1, "pytorch", "1", exit_code)},
                                     {"Worker", replica(workers, "pytorch", "forever", 0)}};
      break;
    case api::JobKind::MPIJob:
      spec["mpiReplicaSpecs"] = {{"Launcher", replica(1, "launcher", "1", exit_code)},
                                 {"Worker", replica(workers, "worker", "forever", 0)}};
      spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never";
      spec["runPolicy"]["backoffLimit"] = 0;
      break;
  }
  const auto& info = api::job_kind_info(c.kind);
  return {{"apiVersion", std::string(info.api_version)},
          {"kind", std::string(info.name)},
          {"metadata", {{"name", c.name}, {"namespace", "default"}}},
          {"spec", spec}};
}

/// Creates through the faulty API: retried until it exists.
void create_until_done(kube::Client& client, const kube::Resource& resource, const json& object) {
  while (true) {
    try {
      client.create(resource, namespace_of(object), object);
      return;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::AlreadyExists)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

/// The faults of the moment `t` seconds into the run (a fixed, repeating schedule).
sandbox::Faults faults_at(double t) {
  sandbox::Faults f;
  f.error_rate = 0.05;
  f.drop_watches_after = std::chrono::seconds(10);
  f.gone_on_watch_resume = true;
  const int second = static_cast<int>(t);
  if (second % 10 == 3)
    f.throttle_rate = 0.5;  // a 429 burst
  if (second % 7 == 5)
    f.latency = std::chrono::milliseconds(300);  // a latency spike
  f.conflict_on_update = second % 15 == 9;
  return f;
}

/// What the invariant checker has seen; violations are kept (first 20 printed).
class Invariants {
 public:
  void violation(std::string what) {
    std::lock_guard lock(mu_);
    ++violations_;
    if (examples_.size() < 20)
      examples_.push_back(std::move(what));
  }
  int violations() const {
    std::lock_guard lock(mu_);
    return violations_;
  }
  std::vector<std::string> examples() const {
    std::lock_guard lock(mu_);
    return examples_;
  }

  /// One sample of the store.
  void check(sandbox::Store& store, double now) {
    std::map<std::string, std::string> queue_of_group;  // "ns/podgroup" -> queue
    for (const auto& g : store.list("podgroups.scheduling.volcano.sh", {}).items)
      queue_of_group[namespace_of(g) + "/" + name_of(g)] =
          object_member(g, "spec").value("queue", "");
    std::map<std::string, int> replicas;              // "job type index" -> live pods
    std::map<std::string, std::int64_t> cpu;          // queue -> milli-CPU of running pods
    std::map<std::string, std::pair<int, int>> gang;  // job -> {running, unschedulable}
    for (const auto& pod : store.list("pods", {}).items) {
      const std::string job = label_of(pod, api::labels::job_name);
      const std::string phase = object_member(pod, "status").value("phase", "");
      if (job.empty() || is_deleting(pod) || phase == "Succeeded" || phase == "Failed")
        continue;
      const std::string role =
          label_of(pod, api::labels::replica_type) + label_of(pod, api::labels::job_role);
      const std::string index = label_of(pod, api::labels::replica_index);
      if (++replicas[job + " " + role + " " + index] > 1 && !index.empty())
        violation(fmt::format("{:.1f}s: two live pods for {} {} {}", now, job, role, index));
      const std::string group =
          namespace_of(pod) + "/" + annotation_of(pod, api::annotations::group_name);
      if (phase == "Running") {
        ++gang[job].first;
        for (const auto& c : object_member(pod, "spec").value("containers", json::array()))
          cpu[queue_of_group[group]] += api::parse_quantity_milli(
              object_member(object_member(c, "resources"), "requests").value("cpu", "0"));
      } else if (!condition_true(object_member(pod, "status"), "PodScheduled") &&
                 object_member(pod, "status").contains("conditions")) {
        ++gang[job].second;
      }
    }
    for (int q = 0; q < kQueues; ++q) {
      const std::int64_t used = cpu[fmt::format("queue-{}", q)];
      if (used > kQueueCpus[q] * 1000)
        violation(fmt::format("{:.1f}s: queue-{} runs {} mCPU, capability {}", now, q, used,
                              kQueueCpus[q] * 1000));
    }
    for (const auto& [job, counts] : gang) {
      if (counts.first == 0 || counts.second == 0) {
        partial_since_.erase(job);
        continue;
      }
      const double since = partial_since_.emplace(job, now).first->second;
      if (now - since > 10 && reported_partial_.insert(job).second)
        violation(fmt::format("{:.1f}s: {} partly running, {} pods unschedulable for {:.0f} s", now,
                              job, counts.second, now - since));
    }
  }

 private:
  mutable std::mutex mu_;
  int violations_ = 0;
  std::vector<std::string> examples_;
  std::map<std::string, double> partial_since_;
  std::set<std::string> reported_partial_;
};

/// The end state: each job's status as its scripts decide, and cleanPodPolicy applied.
void check_end(sandbox::Store& store, const std::vector<JobCase>& cases, Invariants& inv) {
  for (const JobCase& c : cases) {
    const std::string plural(api::job_kind_info(c.kind).plural);
    const json job = store.get(plural + ".kubeflow.org", "default", c.name);
    const std::string status = api::job_status(job);
    const std::string expected = c.fails ? "Failed" : "Succeeded";
    const auto pods = store.list("pods", {}).items;
    if (status != expected) {
      std::map<std::string, int> phases;
      for (const auto& pod : pods) {
        if (label_of(pod, api::labels::job_name) == c.name)
          ++phases[object_member(pod, "status").value("phase", "?")];
      }
      inv.violation(fmt::format("{} {} ended {}, expected {}; its pods by phase: {}; status {}",
                                plural, c.name, status, expected, json(phases).dump(),
                                object_member(job, "status").dump()));
    }
    for (const auto& pod : pods) {
      // The MPI Operator keeps the launcher Job, and its pod, whatever the cleanPodPolicy.
      if (label_of(pod, api::labels::job_name) != c.name || is_deleting(pod) ||
          label_of(pod, api::labels::job_role) == "launcher")
        continue;
      const std::string phase = object_member(pod, "status").value("phase", "");
      const bool finished = phase == "Succeeded" || phase == "Failed";
      if (c.clean_pod_policy == "All" || (c.clean_pod_policy == "Running" && !finished))
        inv.violation(fmt::format("{} {}: pod {} ({}) left under cleanPodPolicy {}", plural, c.name,
                                  name_of(pod), phase, c.clean_pod_policy));
    }
  }
}

bool all_finished(sandbox::Store& store, const std::vector<JobCase>& cases) {
  for (const JobCase& c : cases) {
    const std::string plural(api::job_kind_info(c.kind).plural);
    try {
      const std::string status =
          api::job_status(store.get(plural + ".kubeflow.org", "default", c.name));
      if (status != "Succeeded" && status != "Failed")
        return false;
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run killed by a timeout keeps what it printed
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int kills = argc > 2 ? std::atoi(argv[2]) : 5;
  const int nodes = argc > 3 ? std::atoi(argv[3]) : 40;
  const double limit = argc > 4 ? std::atof(argv[4]) : 900;
  std::mt19937 rng(argc > 5 ? std::atoi(argv[5]) : 1);

  trainctl::testing::TempDir dir;
  sandbox::SandboxOptions options;
  options.data_dir = dir.path() / "sandbox";
  options.port = 0;
  options.cluster.nodes = nodes;
  options.cluster.node_cpu = "8";
  options.cluster.kubelet.start_delay = std::chrono::milliseconds(100);
  sandbox::Sandbox sb(options);
  sb.start();
  kube::RestConfig admin = sb.admin_config();
  admin.qps = 0;
  kube::Client client(admin);
  trainctl::testing::install_training_crds(client);
  for (int q = 0; q < kQueues; ++q)
    client.create(
        kube::resources::queues(), "",
        {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
         {"kind", "Queue"},
         {"metadata", {{"name", fmt::format("queue-{}", q)}}},
         {"spec", {{"weight", 1}, {"capability", {{"cpu", std::to_string(kQueueCpus[q])}}}}}});
  fmt::print(
      "chaos_bench: {} jobs, {} controller kills, {} nodes x 8 CPUs, queues of {}/{}/{} "
      "CPUs\n",
      jobs, kills, nodes, kQueueCpus[0], kQueueCpus[1], kQueueCpus[2]);

  const std::vector<std::string> controller_args = {TRAINCTL_BINARY,
                                                    "controller",
                                                    "--kubeconfig",
                                                    sb.kubeconfig_path().string(),
                                                    "--gang-scheduler",
                                                    "builtin",
                                                    "--workers",
                                                    "4",
                                                    "--metrics-bind-address",
                                                    "0",
                                                    "--health-probe-bind-address",
                                                    "0",
                                                    "--log-format",
                                                    "json",
                                                    "-v",
                                                    "0"};
  pid_t controller = bench::spawn(controller_args);

  const auto t0 = Clock::now();
  std::atomic<bool> done{false};
  Invariants invariants;
  std::jthread faults([&](std::stop_token stop) {
    while (!stop.stop_requested() && !done) {
      sb.api().set_faults(faults_at(seconds_since(t0)));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    sb.api().set_faults({});
  });
  std::jthread checker([&](std::stop_token stop) {
    while (!stop.stop_requested() && !done) {
      invariants.check(sb.store(), seconds_since(t0));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  // Jobs: kinds in turn, 1-8 workers, 1 in 10 fails, cleanPodPolicy of each kind.
  std::vector<JobCase> cases;
  const char* policies[] = {"None", "Running", "All"};
  for (int i = 0; i < jobs; ++i) {
    const auto kind = static_cast<api::JobKind>(i % 3);
    cases.push_back({kind, fmt::format("chaos-{}", i), policies[rng() % 3], rng() % 10 == 0});
  }
  std::vector<int> workers, queues;
  for (int i = 0; i < jobs; ++i) {
    workers.push_back(1 + static_cast<int>(rng() % 8));
    queues.push_back(static_cast<int>(rng() % kQueues));
  }
  // Kill moments: spread over the first part of the run, while jobs are still coming and going.
  std::vector<double> kill_at;
  const double spread = std::max(10.0, jobs * 0.05);
  for (int k = 0; k < kills; ++k)
    kill_at.push_back(std::uniform_real_distribution<double>(2, spread)(rng));
  std::sort(kill_at.begin(), kill_at.end());

  std::jthread submitter([&] {
    bench::parallel_for(jobs, 4, [&](int i) {
      create_until_done(client, kube::resources::job(cases[i].kind),
                        manifest(cases[i], workers[i], queues[i]));
    });
  });
  std::size_t next_kill = 0;
  double finished_at = 0;
  while (seconds_since(t0) < limit) {
    if (next_kill < kill_at.size() && seconds_since(t0) >= kill_at[next_kill]) {
      bench::stop(controller, SIGKILL);
      fmt::print("{:.1f}s: controller killed ({} of {}), restarted\n", seconds_since(t0),
                 next_kill + 1, kills);
      controller = bench::spawn(controller_args);
      ++next_kill;
    }
    // The controller must not die of the faults; if it does, the kubelet would restart it.
    if (int exited = 0; ::waitpid(controller, &exited, WNOHANG) == controller) {
      invariants.violation(fmt::format("{:.1f}s: the controller exited by itself (status {})",
                                       seconds_since(t0), exited));
      controller = bench::spawn(controller_args);
    }
    if (next_kill == kill_at.size() && all_finished(sb.store(), cases)) {
      finished_at = seconds_since(t0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  submitter.join();
  done = true;
  faults = {};
  checker = {};
  // Cleanup runs on the controller's next passes: give it up to 30 s without faults.
  for (const auto end_by = Clock::now() + std::chrono::seconds(30);;) {
    Invariants end;
    check_end(sb.store(), cases, end);
    if (end.violations() == 0 || Clock::now() >= end_by) {
      for (auto& v : end.examples())
        invariants.violation(std::move(v));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const int status = bench::stop(controller, SIGTERM);

  if (finished_at > 0)
    fmt::print("all {} jobs finished after {:.1f} s with {} kills\n", jobs, finished_at, kills);
  else
    fmt::print("jobs still running after the {:.0f} s limit\n", limit);
  fmt::print("invariant violations: {}\n", invariants.violations());
  for (const auto& v : invariants.examples())
    fmt::print("  {}\n", v);
  fmt::print("controller exit status after SIGTERM: {}\n",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return finished_at > 0 && invariants.violations() == 0 ? 0 : 1;
}
