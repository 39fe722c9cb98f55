// Chaos benchmark (issue 13): jobs of every kind and many sizes across three quota queues, while
// the sandbox injects faults (5 % 500s throughout; bursts of 429s with Retry-After; latency
// spikes; every watch dropped after 10 s; 410 Gone on every watch resume for one second in 30 (a
// compaction); bursts of 409s on updates) and the controller (`trainctl controller --gang-scheduler
// builtin`, its own process) is SIGKILLed and restarted at random moments. Read straight from the
// store every 100 ms:
//   - never two live pods for one replica (job, type, index);
//   - no queue's running pods ever request more CPU than its capability;
//   - no gang stays partly running with the rest unschedulable for more than 10 s.
// At the end: every job reached the terminal state its scripts decide (Succeeded, or Failed for
// the jobs whose chief exits 1), and no pod is left that its cleanPodPolicy removes (MPI
// launchers stay, as the MPI Operator keeps the launcher Job).
// The controller exiting by itself counts as a violation too (it is restarted, as a kubelet would).
// One job in four runs an istio-proxy sidecar in every pod (namespace labelled istio-injection):
// no proxy is ever asked to quit twice, and at the end every such pod whose training containers
// finished has a proxy that was asked, exactly once, and exited.
// With replicas > 1 the controllers run with --leader-elect (lease 8 s, renew deadline 6 s, retry
// 1 s), each under its own bearer token, and every kill is of the leader. From the API server's
// audit: one writer at a time (a replica that was replaced never writes again; leases aside). From
// the Lease: the time from each kill to the new holder. Its bound is client-go's: a standby counts
// the lease duration from when it saw the last renewal (at most one jittered retry period, up to
// 2.2 x retry, after it was made), then tries once per jittered retry period; one more period is
// allowed for a try lost to an injected fault: lease + 3 x 2.2 x retry = 14.6 s.
// Prints the timings and every violation; exits 1 when an invariant broke or jobs did not finish
// within the limit (timings themselves never fail it). CI runs a short version (ctest -L chaos).
// Usage: chaos_bench [jobs=1000] [kills=5] [nodes=40] [limit_seconds=900] [seed=1] [replicas=1]
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "api/job.h"
#include "api/quantity.h"
#include "api/status.h"
#include "api/well_known.h"
#include "bench/bench_support.h"
#include "bench/training_sandbox.h"
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
  bool fails;   // the chief (or master, or launcher) exits 1
  bool meshed;  // every pod runs an istio-proxy sidecar
};

json container(const std::string& name) {
  return {{"name", name},
          {"image", "train:1"},
          {"resources", {{"requests", {{"cpu", "1"}}}, {"limits", {{"cpu", "1"}}}}}};
}

json replica(int replicas, const std::string& container_name, const std::string& run_seconds,
             int exit_code, bool meshed) {
  json annotations = {{"sandbox.trainctl.io/run-seconds", run_seconds}};
  if (exit_code != 0)
    annotations["sandbox.trainctl.io/exit-code"] = std::to_string(exit_code);
  json containers = json::array({container(container_name)});
  if (meshed)
    containers.push_back({{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}});
  return {{"replicas", replicas},
          {"restartPolicy", "ExitCode"},
          {"template",
           {{"metadata", {{"annotations", annotations}}}, {"spec", {{"containers", containers}}}}}};
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
      spec["tfReplicaSpecs"] = {{"Chief", replica(1, "tensorflow", "1", exit_code, c.meshed)},
                                {"Worker", replica(workers, "tensorflow", "1", 0, c.meshed)}};
      break;
    case api::JobKind::PyTorchJob:
      spec["pytorchReplicaSpecs"] = {
          {"Master", replica(1, "pytorch", "1", exit_code, c.meshed)},
          {"Worker", replica(workers, "pytorch", "forever", 0, c.meshed)}};
      break;
    case api::JobKind::MPIJob:
      spec["mpiReplicaSpecs"] = {{"Launcher", replica(1, "launcher", "1", exit_code, c.meshed)},
                                 {"Worker", replica(workers, "worker", "forever", 0, c.meshed)}};
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
  const int second = static_cast<int>(t);
  // A compaction: for one second in 30 every watch resumed from a resourceVersion gets 410 and
  // its informer relists. (Every second would answer 410 to the first watch after each list too,
  // which a real server never does: informers would back off to their cap and poll.)
  f.gone_on_watch_resume = second % 30 == 17;
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

/// The jobs that took longest from creation to completion, slowest first: "name Ns".
std::string slowest_jobs(sandbox::Store& store, const std::vector<JobCase>& cases, int count) {
  std::vector<std::pair<std::int64_t, std::string>> took;
  for (const JobCase& c : cases) {
    const json job = store.get(std::string(api::job_kind_info(c.kind).plural) + ".kubeflow.org",
                               "default", c.name);
    const auto created =
        api::parse_timestamp(object_member(job, "metadata").value("creationTimestamp", ""));
    const auto completed =
        api::parse_timestamp(object_member(job, "status").value("completionTime", ""));
    if (created && completed)
      took.emplace_back(
          std::chrono::duration_cast<std::chrono::seconds>(*completed - *created).count(), c.name);
  }
  std::sort(took.rbegin(), took.rend());
  std::string out;
  for (int i = 0; i < count && i < static_cast<int>(took.size()); ++i)
    out += fmt::format("{}{} {}s", i ? ", " : "", took[i].second, took[i].first);
  return out;
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

/// Who writes through the API, from the server's audit: replicas write one at a time, and a replica
/// that was replaced never writes again. Lease writes are the election itself and do not count.
class Writers {
 public:
  explicit Writers(Invariants& invariants) : invariants_(invariants) {}

  void record(const sandbox::RequestAttributes& r, double now) {
    static const std::set<std::string> writes = {"create", "update", "patch", "delete",
                                                 "deletecollection"};
    if (!r.user.starts_with("replica-") || !writes.contains(r.verb))
      return;
    std::lock_guard lock(mu_);
    if (r.resource == "leases")
      return;  // standbys write it too, trying to take it
    if (r.user == current_)
      return;
    if (replaced_.contains(r.user)) {
      invariants_.violation(fmt::format("{:.1f}s: {} wrote ({} {}) after {} took over", now, r.user,
                                        r.verb, r.resource, current_));
      return;
    }
    if (!current_.empty())
      replaced_.insert(current_);
    current_ = r.user;
    ++handovers_;
  }

  /// The replica that wrote the Lease last: the leader, as far as anyone can tell from outside.
  int handovers() const {
    std::lock_guard lock(mu_);
    return handovers_;
  }

 private:
  Invariants& invariants_;
  mutable std::mutex mu_;
  std::string current_;
  std::set<std::string> replaced_;
  int handovers_ = 0;
};

/// The controller replicas, each its own process under its own bearer token ("replica-N", a new
/// N for every start, so the audit tells a restarted replica from the one it replaces).
class Replicas {
 public:
  static constexpr int kMaxStarts = 64;

  /// Writes tokens.csv into the sandbox's data dir (before the sandbox starts): the admin's, then
  /// one per start, all in system:masters.
  static void write_tokens(const std::filesystem::path& data_dir) {
    std::filesystem::create_directories(data_dir);
    std::ofstream tokens(data_dir / "tokens.csv");
    tokens << "chaos-admin-token,trainctl-admin,trainctl-admin,\"system:masters\"\n";
    for (int n = 0; n < kMaxStarts; ++n)
      tokens << fmt::format("replica-token-{0},replica-{0},replica-uid-{0},\"system:masters\"\n",
                            n);
  }

  Replicas(const sandbox::Sandbox& sb, std::filesystem::path dir, std::vector<std::string> args)
      : server_(sb.server_url()), dir_(std::move(dir)), args_(std::move(args)) {}

  ~Replicas() {
    for (const auto& [user, pid] : pids_)
      bench::stop(pid, SIGKILL);
  }

  /// Starts one more replica; returns its user name.
  std::string start() {
    if (next_ == kMaxStarts)
      throw std::runtime_error("chaos_bench: too many controller starts");
    const std::string user = fmt::format("replica-{}", next_);
    const auto kubeconfig = dir_ / (user + ".kubeconfig");
    std::ofstream(kubeconfig) << fmt::format(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: sandbox\n  cluster:\n"
        "    server: {}\n    certificate-authority: {}\nusers:\n- name: {}\n  user:\n"
        "    token: replica-token-{}\ncontexts:\n- name: sandbox\n  context:\n"
        "    cluster: sandbox\n    user: {}\ncurrent-context: sandbox\n",
        server_, (dir_ / "sandbox" / "ca.crt").string(), user, next_, user);
    std::vector<std::string> args = args_;
    args.insert(args.begin() + 2, {"--kubeconfig", kubeconfig.string()});
    pids_[user] = bench::spawn_logged(args, (dir_ / (user + ".log")).string());
    ++next_;
    return user;
  }

  /// The live replica that holds the Lease under `identity` (its log says it became leader as
  /// that); "" when none does. A standby's Lease writes (tries to take it) make the last writer
  /// no guide: a kill of a standby would wait for a takeover that never comes.
  std::string holding(const std::string& identity) const {
    if (identity.empty())
      return "";
    const std::string became = fmt::format("\"became leader\",\"identity\":\"{}\"", identity);
    for (const auto& [user, pid] : pids_) {
      std::ifstream log(dir_ / (user + ".log"));
      for (std::string line; std::getline(log, line);) {
        if (line.find(became) != std::string::npos)
          return user;
      }
    }
    return "";
  }

  /// SIGKILLs `user`'s replica and starts another in its place.
  void kill_and_replace(const std::string& user) {
    bench::stop(pids_.at(user), SIGKILL);
    pids_.erase(user);
    start();
  }

  /// Replicas that exited by themselves (each is started again, as a kubelet would).
  std::vector<std::string> reap_exited() {
    std::vector<std::string> exited;
    for (const auto& [user, pid] : pids_) {
      if (int status = 0; ::waitpid(pid, &status, WNOHANG) == pid)
        exited.push_back(user);
    }
    for (const auto& user : exited) {
      pids_.erase(user);
      start();
    }
    return exited;
  }

  std::string any() const { return pids_.begin()->first; }

  /// SIGTERMs every replica; returns the exit statuses.
  std::vector<int> stop_all() {
    std::vector<int> statuses;
    for (const auto& [user, pid] : pids_)
      statuses.push_back(bench::stop(pid, SIGTERM));
    pids_.clear();
    return statuses;
  }

 private:
  std::string server_;
  std::filesystem::path dir_;
  std::vector<std::string> args_;
  std::map<std::string, pid_t> pids_;
  int next_ = 0;
};

/// The leader Lease's holder, or "" while there is none.
std::string lease_holder(sandbox::Store& store) {
  try {
    return object_member(
               store.get("leases.coordination.k8s.io", "trainctl-system", "trainctl-controller"),
               "spec")
        .value("holderIdentity", "");
  } catch (const Error&) {
    return "";
  }
}

/// Istio proxies: none asked to quit twice; every meshed pod left whose training containers all
/// ended had its proxy asked once, and that proxy exited. Returns the number of quits asked.
int check_proxies(sandbox::Sandbox& sb, const std::vector<JobCase>& cases, Invariants& inv) {
  std::map<std::string, int> quits;  // pod -> successful quit execs
  for (const auto& record : sb.cluster().exec_history()) {
    if (record.container == "istio-proxy" && record.exit_code == 0 && record.failure.empty())
      ++quits[record.pod];
  }
  std::set<std::string> meshed_jobs;
  for (const JobCase& c : cases) {
    if (c.meshed)
      meshed_jobs.insert(c.name);
  }
  int asked = 0;
  for (const auto& [pod, n] : quits) {
    asked += n;
    if (n > 1)
      inv.violation(fmt::format("pod {}: its istio-proxy was asked to quit {} times", pod, n));
  }
  for (const auto& pod : sb.store().list("pods", {}).items) {
    if (!meshed_jobs.contains(label_of(pod, api::labels::job_name)) || is_deleting(pod))
      continue;
    int training = 0, training_ended = 0;
    bool proxy_running = false;
    for (const auto& s : object_member(pod, "status").value("containerStatuses", json::array())) {
      const bool terminated = object_member(s, "state").contains("terminated");
      if (string_member(s, "name") == "istio-proxy") {
        proxy_running = !terminated;
      } else {
        ++training;
        training_ended += terminated ? 1 : 0;
      }
    }
    if (training == 0 || training_ended < training)
      continue;
    if (proxy_running || quits[name_of(pod)] != 1)
      inv.violation(fmt::format("pod {}: training ended, proxy {}, asked to quit {} times",
                                name_of(pod), proxy_running ? "running" : "exited",
                                quits[name_of(pod)]));
  }
  return asked;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run killed by a timeout keeps what it printed
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int kills = argc > 2 ? std::atoi(argv[2]) : 5;
  const int nodes = argc > 3 ? std::atoi(argv[3]) : 40;
  const double limit = argc > 4 ? std::atof(argv[4]) : 900;
  std::mt19937 rng(argc > 5 ? std::atoi(argv[5]) : 1);
  const int replica_count = std::max(1, argc > 6 ? std::atoi(argv[6]) : 1);
  constexpr double kLeaseSeconds = 8, kRetrySeconds = 1;

  trainctl::testing::TempDir dir;
  Invariants invariants;
  Writers writers(invariants);
  const auto t0 = Clock::now();
  sandbox::SandboxOptions options;
  options.data_dir = dir.path() / "sandbox";
  options.port = 0;
  options.cluster.nodes = nodes;
  options.cluster.node_cpu = "8";
  options.cluster.kubelet.start_delay = std::chrono::milliseconds(100);
  options.audit = [&](const sandbox::RequestAttributes& r) {
    writers.record(r, seconds_since(t0));
  };
  Replicas::write_tokens(options.data_dir);
  bench::TrainingSandbox training(options);
  sandbox::Sandbox& sb = training.sandbox;
  kube::Client& client = training.client;
  for (int q = 0; q < kQueues; ++q)
    client.create(
        kube::resources::queues(), "",
        {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
         {"kind", "Queue"},
         {"metadata", {{"name", fmt::format("queue-{}", q)}}},
         {"spec", {{"weight", 1}, {"capability", {{"cpu", std::to_string(kQueueCpus[q])}}}}}});
  create_until_done(
      client, kube::resources::namespaces(),
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "trainctl-system"}}}});
  client.patch(kube::resources::namespaces(), "", "default", kube::PatchType::Merge,
               {{"metadata", {{"labels", {{"istio-injection", "enabled"}}}}}});
  fmt::print(
      "chaos_bench: {} jobs, {} controller kills, {} replica(s), {} nodes x 8 CPUs, queues of "
      "{}/{}/{} CPUs\n",
      jobs, kills, replica_count, nodes, kQueueCpus[0], kQueueCpus[1], kQueueCpus[2]);

  std::vector<std::string> controller_args = {TRAINCTL_BINARY,
                                              "controller",
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
  if (replica_count > 1)
    controller_args.insert(
        controller_args.end(),
        {"--leader-elect", "--leader-elect-lease-duration", fmt::format("{}s", kLeaseSeconds),
         "--leader-elect-renew-deadline", "6s", "--leader-elect-retry-period",
         fmt::format("{}s", kRetrySeconds)});
  Replicas replicas(sb, dir.path(), controller_args);
  for (int r = 0; r < replica_count; ++r)
    replicas.start();

  std::atomic<bool> done{false};
  std::jthread faults([&](std::stop_token stop) {
    while (!stop.stop_requested() && !done) {
      sb.api().set_faults(faults_at(seconds_since(t0)));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    sb.api().set_faults({});
  });
  // Takeovers: the moment of each kill of a leader, until the Lease names another holder.
  std::mutex takeover_mu;
  std::optional<std::pair<double, std::string>> killed_leader;  // {when, its lease identity}
  std::vector<double> takeovers;
  std::jthread checker([&](std::stop_token stop) {
    while (!stop.stop_requested() && !done) {
      const double now = seconds_since(t0);
      invariants.check(sb.store(), now);
      if (std::lock_guard lock(takeover_mu); killed_leader) {
        const std::string holder = lease_holder(sb.store());
        if (!holder.empty() && holder != killed_leader->second) {
          takeovers.push_back(now - killed_leader->first);
          killed_leader.reset();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  // Jobs: kinds in turn, 1-8 workers, 1 in 10 fails, 1 in 4 meshed, cleanPodPolicy of each kind.
  std::vector<JobCase> cases;
  const char* policies[] = {"None", "Running", "All"};
  for (int i = 0; i < jobs; ++i) {
    const auto kind = static_cast<api::JobKind>(i % 3);
    std::string policy = policies[rng() % 3];
    // PyTorch and MPI workers run until stopped: under None they would keep their CPUs after
    // their job ended (until a user deletes it), and a long run would fill the cluster with them.
    if (policy == "None" && kind != api::JobKind::TFJob)
      policy = "Running";
    cases.push_back({kind, fmt::format("chaos-{}", i), policy, rng() % 10 == 0, rng() % 4 == 0});
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
    // Each kill waits for the takeover after the previous one: a leader must exist to be killed.
    const std::string holder = replica_count == 1 ? "" : lease_holder(sb.store());
    const std::string leader = replica_count == 1 ? replicas.any() : replicas.holding(holder);
    const auto taking_over = [&] {
      std::lock_guard lock(takeover_mu);
      return killed_leader.has_value();
    };
    if (next_kill < kill_at.size() && seconds_since(t0) >= kill_at[next_kill] && !leader.empty() &&
        !taking_over()) {
      {
        std::lock_guard lock(takeover_mu);
        if (replica_count > 1)
          killed_leader.emplace(seconds_since(t0), holder);
      }
      replicas.kill_and_replace(leader);
      fmt::print("{:.1f}s: controller {} killed ({} of {}), restarted\n", seconds_since(t0), leader,
                 next_kill + 1, kills);
      ++next_kill;
    }
    // The controller must not die of the faults; if it does, the kubelet would restart it.
    for (const auto& user : replicas.reap_exited())
      invariants.violation(
          fmt::format("{:.1f}s: controller {} exited by itself", seconds_since(t0), user));
    // The run ends once every job has, and the last kill's takeover has been seen.
    if (next_kill == kill_at.size() && !taking_over() && all_finished(sb.store(), cases)) {
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
  int proxy_quits = 0;
  for (const auto end_by = Clock::now() + std::chrono::seconds(30);;) {
    Invariants end;
    check_end(sb.store(), cases, end);
    proxy_quits = check_proxies(sb, cases, end);
    if (end.violations() == 0 || Clock::now() >= end_by) {
      for (auto& v : end.examples())
        invariants.violation(std::move(v));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const std::vector<int> statuses = replicas.stop_all();

  if (finished_at > 0)
    fmt::print("all {} jobs finished after {:.1f} s with {} kills; slowest: {}\n", jobs,
               finished_at, kills, slowest_jobs(sb.store(), cases, 3));
  else
    fmt::print("jobs still running after the {:.0f} s limit\n", limit);
  fmt::print("istio proxies asked to quit: {} (meshed jobs: {})\n", proxy_quits,
             std::count_if(cases.begin(), cases.end(), [](const JobCase& c) { return c.meshed; }));
  if (replica_count > 1) {
    fmt::print("writers: {} handovers; takeovers after a leader kill (s):", writers.handovers());
    for (const double t : takeovers)
      fmt::print(" {:.1f}", t);
    const double worst =
        takeovers.empty() ? 0 : *std::max_element(takeovers.begin(), takeovers.end());
    const double bound = kLeaseSeconds + 3 * 2.2 * kRetrySeconds;
    fmt::print(" (max {:.1f}, bound {:.1f})\n", worst, bound);
    if (worst > bound)
      invariants.violation(
          fmt::format("a takeover took {:.1f} s, over the bound of {:.1f} s for "
                      "a lease of {:.0f} s",
                      worst, bound, kLeaseSeconds));
    if (takeovers.size() != next_kill)
      invariants.violation(
          fmt::format("{} leader kills, {} takeovers seen", next_kill, takeovers.size()));
  }
  fmt::print("invariant violations: {}\n", invariants.violations());
  for (const auto& v : invariants.examples())
    fmt::print("  {}\n", v);
  for (const int status : statuses)
    fmt::print("controller exit status after SIGTERM: {}\n",
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return finished_at > 0 && invariants.violations() == 0 ? 0 : 1;
}
