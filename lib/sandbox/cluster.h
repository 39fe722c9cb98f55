#pragma once

// The sandbox's simulated nodes: Node objects, a scheduler and a kubelet that act directly on
// the Store, as the real ones act on the API server.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kube/clock.h"
#include "sandbox/container_script.h"

namespace trainctl::sandbox {

class Store;

/// Simulated nodes a cluster may have: one /24 pod range each in 10.244.0.0/14.
inline constexpr int kMaxNodes = 1024;

/// The shape of the simulated cluster.
struct ClusterOptions {
  int nodes = 4;  // at most kMaxNodes; node N owns a /24 of 10.244.0.0/14
  std::string node_cpu = "32";
  std::string node_memory = "256Gi";
  int node_gpus = 8;  // nvidia.com/gpu; 0 leaves the resource off the nodes
  std::string node_ephemeral_storage = "1Ti";
  int pods_per_node = 110;  // at most 253, one pod IP each
  std::string node_name_prefix = "sandbox-node-";
  std::string instance_type = "sandbox-standard";  // node.kubernetes.io/instance-type
  /// Extra labels and taints ({key, value, effect}) for every node, set when it is registered.
  std::map<std::string, std::string> node_labels;
  std::vector<nlohmann::json> node_taints;
  /// Pods whose spec.schedulerName is one of these are bound by the simulated scheduler; an
  /// empty schedulerName means "default-scheduler". With "volcano" it also plays Volcano's
  /// scheduler: pods of `schedulerName: volcano` with a scheduling.k8s.io/group-name annotation
  /// are bound only once their PodGroup is Inqueue (or later), and only as a whole gang
  /// (minMember bound or none).
  std::set<std::string> scheduler_names = {"default-scheduler"};
  KubeletTiming kubelet;
  /// How often nodes renew the Ready condition's lastHeartbeatTime; zero = never.
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(60)};
  std::string kubelet_version = "v1.30.0";
  /// Unexpected errors of the background loop (a write the store refused, say). Empty = dropped.
  std::function<void(std::string_view)> error_log;
};

/// Which of a container's log lines to return, and how.
struct LogOptions {
  bool previous = false;    // the run before the current one (after a restart)
  bool timestamps = false;  // prefix each line with its RFC 3339 time and a space
  std::optional<std::int64_t> tail_lines;
  std::optional<TimePoint> since_time;
};

/// A piece of a container's log, and where to continue reading it (for `logs -f`).
struct LogChunk {
  std::vector<std::string> lines;  // without newlines
  LogCursor next;
  /// The run these lines belong to is still running: more lines will come.
  bool running = false;
};

/// One pods/exec a kubelet ran, as an audit log records it.
struct ExecRecord {
  std::string namespace_;
  std::string pod;
  std::string container;
  std::vector<std::string> argv;
  int exit_code = 0;
  std::string failure;  // ExecResult::failure
  TimePoint at;
};

/// How many ExecRecords a cluster keeps (the oldest are dropped).
inline constexpr std::size_t kMaxExecHistory = 100'000;

/// Nodes, a scheduler and a kubelet, simulated over a Store. All behaviour is a function of the
/// store's objects and the clock: `step()` runs one deterministic pass (tests drive it with a
/// fake clock); `start()` runs passes on a thread whenever pods change or a timed change (a
/// container start, exit or restart) falls due.
///
/// Scheduler: binds pending pods (no spec.nodeName, a handled schedulerName, no
/// schedulingGates, not terminating) in priority then creation order to the node with the most
/// free cpu/memory/GPU after placement (ties by name) among those where requests fit
/// allocatable minus the requests of unfinished pods bound there, nodeSelector and required
/// node affinity match, and every NoSchedule/NoExecute taint is tolerated. A pod that fits
/// nowhere gets PodScheduled=False/Unschedulable with the real scheduler's message and is
/// retried on every pass. Kubelet: see SimulatedPod; pods on nodes it did not register are
/// left alone, as are pods that were already finished when it first saw them.
class SimulatedCluster {
 public:
  SimulatedCluster(Store& store, ClusterOptions options, kube::Clock& clock = kube::real_clock());
  ~SimulatedCluster();  // stop()
  SimulatedCluster(const SimulatedCluster&) = delete;
  SimulatedCluster& operator=(const SimulatedCluster&) = delete;

  /// Registers the nodes (one pass) and starts the background loop. Once.
  void start();
  /// Stops and joins the loop. Idempotent.
  void stop();

  /// One pass at the clock's time over a fresh read of the store: registers missing nodes,
  /// renews heartbeats, advances running pods, binds pending ones and starts those bound.
  /// Returns when the next timed change is due (time_point::max() when none is).
  TimePoint step();

  /// The names of the nodes this cluster simulates, in order.
  std::vector<std::string> node_names() const;

  /// Runs `argv` in a running container (`container` may be empty for a one-container pod),
  /// as pods/exec would; see run_exec_command for the commands known. Istio's quit command
  /// ends the pod's istio-proxy at once. Throws Error(NotFound) for a missing pod and
  /// Error(BadRequest) with the API server's wording when the container cannot be exec'd into.
  ExecResult exec(const std::string& ns, const std::string& pod, const std::string& container,
                  const std::vector<std::string>& argv);
  /// The execs run so far (at most kMaxExecHistory, oldest first), for tests and benchmarks that
  /// check what a controller exec'd, as an audit log would show it.
  std::vector<ExecRecord> exec_history() const;
  /// Ends the pod's running istio-proxy container with exit code 0, as its quit endpoint does.
  /// Throws like exec() when there is none running.
  void quit_istio_proxy(const std::string& ns, const std::string& pod);

  /// Whether the container's current run is still going (a log follower reads on while it is).
  /// Throws like read_logs for a missing pod or an unknown container.
  bool container_running(const std::string& ns, const std::string& pod,
                         const std::string& container);

  /// A container's log as pods/log returns it: lines joined, each ending in "\n".
  std::string logs(const std::string& ns, const std::string& pod, const std::string& container,
                   const LogOptions& options = {});
  /// The lines after `from` (all retained ones by default) and whether more will come; a
  /// follower calls it again with `next` until `running` is false. Throws Error(NotFound) for a
  /// missing pod and Error(BadRequest) for an unknown container, one not started yet, or a
  /// previous run that does not exist.
  LogChunk read_logs(const std::string& ns, const std::string& pod, const std::string& container,
                     const LogOptions& options = {}, LogCursor from = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainctl::sandbox
