// trainctl controller: the in-cluster operator. Only flags are parsed here: the manager
// (lib/controller/manager.h) runs the informers, leader election, the /metrics, /healthz and
// /readyz endpoints, and the reconcilers (lib/controller/controller.h).
#include "controller/controller.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <iostream>

#include "commands.h"
#include "controller/manager.h"
#include "docs.h"
#include "duration.h"
#include "error.h"
#include "jemalloc_preload.h"
#include "kube/cache/leader_election.h"
#include "log.h"
#include "text.h"

namespace trainctl::cli {
namespace {

using controller::GangScheduler;

GangScheduler parse_gang_scheduler(std::string_view name) {
  if (name == "builtin")
    return GangScheduler::Builtin;
  if (name == "volcano")
    return GangScheduler::Volcano;
  if (name == "scheduler-plugins")
    return GangScheduler::SchedulerPlugins;
  if (name == "none")
    return GangScheduler::None;
  throw Error(ErrorKind::Usage, "--gang-scheduler: \"" + std::string(name) +
                                    "\" is not one of builtin, volcano, scheduler-plugins, none");
}

controller::NativeSidecars parse_native_sidecars(std::string_view name) {
  if (name == "auto")
    return controller::NativeSidecars::Auto;
  if (name == "on")
    return controller::NativeSidecars::On;
  if (name == "off")
    return controller::NativeSidecars::Off;
  throw Error(ErrorKind::Usage,
              "--istio-native-sidecars: \"" + std::string(name) + "\" is not one of auto, on, off");
}

/// ":8080" or "127.0.0.1:8080" -> host and port (port 0: any free port); "0" disables the
/// endpoint.
std::optional<controller::BindAddress> parse_bind_address(const std::string& flag,
                                                          const std::string& value) {
  if (value == "0" || value.empty())
    return std::nullopt;
  const auto colon = value.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      port = std::stoi(value.substr(colon + 1), &used);
      if (used != value.size() - colon - 1)
        port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port < 0 || port > 65535)
    throw Error(ErrorKind::Usage, flag + ": \"" + value + "\" is not HOST:PORT, :PORT or 0");
  const std::string host = value.substr(0, colon);
  return controller::BindAddress{host.empty() ? std::string("0.0.0.0") : host, port};
}

/// The identity a replica holds the lease under: the pod name (hostname) plus a random suffix,
/// as client-go does, so a restarted container never mistakes the old holder for itself.
std::string default_identity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "_" + random_suffix(8);
}

/// The controller's client-side limits unless --kube-api-qps/--kube-api-burst say otherwise. A
/// controller materialising many jobs writes as fast as the API server accepts (one kube-apiserver
/// 1.26 took about 500 pod creates/s here), and the server protects itself with API Priority
/// and Fairness (429 + Retry-After, which the client honours); controller-runtime dropped its
/// client-side default for that reason (kubernetes-sigs/controller-runtime#3119). A finite bucket
/// still stops a runaway loop from flooding the server: 500/s is that server's rate, 25 times the
/// Training Operator's qps 20; the burst is two seconds of it, as client-go's defaults (5/10) are.
constexpr double kControllerQps = 500;
constexpr int kControllerBurst = 1000;

struct ControllerCommand {
  // A reconcile that creates a job's objects mostly waits on the server (a GET of the job, then
  // slow-start batches 1, 2, 4, ...), so a worker keeps about 2.5 requests in flight; 16 keep
  // a real kube-apiserver as busy as a raw client's 8 connections (4 reached 0.64 of its rate).
  int workers = 16;
  bool leader_elect = false;
  std::string leader_elect_namespace = "trainctl-system";
  std::string leader_elect_id = "trainctl-controller";
  std::string lease_duration = "15s", renew_deadline = "10s", retry_period = "2s";
  std::string metrics_address = ":8080";
  std::string health_address = ":8081";
  std::string gang_scheduler = "builtin";
  std::string gang_scheduler_name;  // "" = PlanOptions' default
  std::string cluster_domain;
  std::string istio_native_sidecars = "auto";
  bool pytorch_init_container = false;
  std::string pytorch_init_container_image = "alpine:3.10";
  int pytorch_init_container_max_tries = 100;
  std::string log_format = "text";
  std::string admission_order = "backfill";
  std::string preemption = "never";
  std::string schedule_timeout = "300s";

  // Complete: the manager's and the reconcilers' options from the flags.
  controller::ManagerOptions manager_options;
  controller::ControllerOptions controller_options;
  GlobalFlags flags;  // the command's own, with the controller's client-side limits filled in
  Connection connection;
  int verbosity = 0;

  void Complete(const GlobalFlags& global) {
    flags = global;
    flags.overrides.qps = flags.overrides.qps.value_or(kControllerQps);
    flags.overrides.burst = flags.overrides.burst.value_or(kControllerBurst);
    // A process that keeps its connections open gains nothing from a TLS session kept for the
    // next one; unless --cache-dir is given, it writes none (a pod's home may not be writable).
    flags.overrides.cache_dir = flags.overrides.cache_dir.value_or("");
    // HTTP/1.1 connections of its own, one per request in flight (rest_config.h): against
    // libcurl's HTTP/2 streams (pooled HTTP/1.1 handles on the sandbox), measured with
    // controller_bench in the same hour, the controller spent 25-45 % less CPU per object and
    // wrote 40 % faster on both the sandbox and kube-apiserver 1.26.
    flags.transport = kube::Transport::Direct;
    flags.pipeline_depth = 1;  // a request never waits behind another's answer (rest_config.h)
    connection = Connection(flags);
    verbosity = flags.verbosity;
    manager_options.namespace_ = flags.overrides.namespace_;
    manager_options.metrics = parse_bind_address("--metrics-bind-address", metrics_address);
    manager_options.health = parse_bind_address("--health-probe-bind-address", health_address);
    // Parsed with or without --leader-elect: a bad value is an error either way.
    const kube::cache::LeaderElectionConfig election{
        .namespace_ = leader_elect_namespace,
        .name = leader_elect_id,
        .identity = default_identity(),
        .lease_duration = parse_duration_flag("--leader-elect-lease-duration", lease_duration),
        .renew_deadline = parse_duration_flag("--leader-elect-renew-deadline", renew_deadline),
        .retry_period = parse_duration_flag("--leader-elect-retry-period", retry_period)};
    if (leader_elect)
      manager_options.leader_election = election;
    controller_options.workers = workers;
    controller_options.plan.gang_scheduler = parse_gang_scheduler(gang_scheduler);
    if (!gang_scheduler_name.empty())
      controller_options.plan.scheduler_plugins_scheduler_name = gang_scheduler_name;
    controller_options.plan.cluster_domain = cluster_domain;
    controller_options.admission.order = admission_order == "strict-fifo"
                                             ? controller::AdmissionOrder::StrictFifo
                                             : controller::AdmissionOrder::Backfill;
    controller_options.admission.preemption = preemption == "within-queue"
                                                  ? controller::Preemption::WithinQueue
                                                  : controller::Preemption::Never;
    controller_options.admission.schedule_timeout =
        std::chrono::duration_cast<std::chrono::seconds>(
            parse_duration_flag("--schedule-timeout", schedule_timeout));
    controller_options.plan.istio_native_sidecars = parse_native_sidecars(istio_native_sidecars);
    if (pytorch_init_container)
      controller_options.plan.pytorch_init_container = {
          .image = pytorch_init_container_image, .max_tries = pytorch_init_container_max_tries};
  }

  void Validate() const {
    if (workers < 1)
      throw Error(ErrorKind::Usage, "--workers: must be at least 1");
    if (pytorch_init_container_max_tries < 1)
      throw Error(ErrorKind::Usage, "--pytorch-init-container-max-tries: must be at least 1");
    if (controller_options.admission.schedule_timeout < std::chrono::seconds(1))
      throw Error(ErrorKind::Usage, "--schedule-timeout: must be at least 1s");
    if (!gang_scheduler_name.empty() &&
        controller_options.plan.gang_scheduler != GangScheduler::SchedulerPlugins)
      throw Error(ErrorKind::Usage,
                  "--gang-scheduler-name: only with --gang-scheduler scheduler-plugins (builtin "
                  "leaves schedulerName alone, volcano sets \"volcano\")");
  }

  void Run() {
    Logger log(std::cerr, parse_log_format(log_format), verbosity);
    run_on_jemalloc([&](const std::string& why) { log.warning(why); });
    std::stop_source stop;
    controller::SignalHandler signals(stop);  // before any thread starts: they inherit the mask
    controller::MetricsRegistry metrics;
    controller::declare_controller_metrics(metrics);
    controller::Manager manager(connection.client(), manager_options, metrics, log);
    controller::add_reconcilers(manager, controller_options);
    manager.run(stop.get_token());
  }
};

}  // namespace

void add_controller_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<ControllerCommand>();
  auto* cmd = app.add_subcommand(
      "controller",
      "Run the in-cluster operator: reconcile TFJobs, PyTorchJobs and MPIJobs into pods and "
      "services, admit gangs against queue quotas and stop Istio sidecars when training ends. "
      "Watches one namespace with -n, else all namespaces. Its client-side limits default to "
      "--kube-api-qps 500 --kube-api-burst 1000 (0 = unlimited).");
  cmd->add_option("--workers", opts->workers, "Jobs reconciled concurrently")
      ->capture_default_str();
  cmd->add_flag("--leader-elect", opts->leader_elect,
                "Run as one of several replicas: only the holder of a coordination.k8s.io Lease "
                "reconciles");
  cmd->add_option("--leader-elect-namespace", opts->leader_elect_namespace,
                  "Namespace of the leader Lease")
      ->capture_default_str();
  cmd->add_option("--leader-elect-id", opts->leader_elect_id, "Name of the leader Lease")
      ->capture_default_str();
  cmd->add_option(
         "--leader-elect-lease-duration", opts->lease_duration,
         "How long a lease stays valid without renewal (15s, 1m; a plain number is seconds)")
      ->capture_default_str();
  cmd->add_option("--leader-elect-renew-deadline", opts->renew_deadline,
                  "How long the leader keeps trying to renew before it gives up")
      ->capture_default_str();
  cmd->add_option("--leader-elect-retry-period", opts->retry_period,
                  "How long to wait between attempts to acquire or renew the lease")
      ->capture_default_str();
  cmd->add_option("--metrics-bind-address", opts->metrics_address,
                  "Where /metrics (Prometheus) listens: :PORT, HOST:PORT, or 0 to disable")
      ->capture_default_str();
  cmd->add_option("--health-probe-bind-address", opts->health_address,
                  "Where /healthz and /readyz listen: :PORT, HOST:PORT, or 0 to disable")
      ->capture_default_str();
  cmd->add_option("--gang-scheduler", opts->gang_scheduler,
                  "Gang scheduling: builtin (trainctl admits Volcano PodGroups against Volcano "
                  "Queues), volcano (Volcano admits the PodGroups; pods, for the volcano "
                  "scheduler, are created once their group is Inqueue), scheduler-plugins "
                  "(scheduling.x-k8s.io PodGroups; pods, labelled with their group, go to the "
                  "coscheduling scheduler at once), none")
      ->check(CLI::IsMember({"builtin", "volcano", "scheduler-plugins", "none"}))
      ->capture_default_str();
  cmd->add_option("--gang-scheduler-name", opts->gang_scheduler_name,
                  "With --gang-scheduler scheduler-plugins: the schedulerName of pods whose "
                  "template names none (default scheduler-plugins-scheduler)");
  cmd->add_option("--admission-order", opts->admission_order,
                  "Builtin admission: backfill (smaller gangs may start where they do not delay "
                  "the waiting head of line) or strict-fifo (nothing starts behind it)")
      ->check(CLI::IsMember({"backfill", "strict-fifo"}))
      ->capture_default_str();
  cmd->add_option("--preemption", opts->preemption,
                  "Builtin admission: never, or within-queue (a pending gang of higher priority "
                  "evicts whole gangs of lower priority of its queue, and of other reclaimable "
                  "queues over their deserved share)")
      ->check(CLI::IsMember({"never", "within-queue"}))
      ->capture_default_str();
  cmd->add_option("--schedule-timeout", opts->schedule_timeout,
                  "Builtin admission: how long an admitted gang may take to have all its pods "
                  "bound before it is taken back and requeued (a job's "
                  "schedulingPolicy.scheduleTimeoutSeconds overrides it)")
      ->capture_default_str();
  cmd->add_option("--cluster-domain", opts->cluster_domain,
                  "Cluster DNS domain appended to service names in TF_CONFIG and hostfiles "
                  "(e.g. cluster.local); empty = <svc>.<ns>.svc");
  cmd->add_option("--istio-native-sidecars", opts->istio_native_sidecars,
                  "Istio proxies of the pods it creates in injected namespaces: auto (as the "
                  "mesh decides), on (native sidecars, sidecar.istio.io/nativeSidecar: \"true\"), "
                  "off (regular containers, which it asks to quit when training ends)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--pytorch-init-container", opts->pytorch_init_container,
                "Give PyTorchJob workers of a job with a Master the Training Operator's "
                "init-pytorch init container, which waits until the master's name resolves");
  cmd->add_option("--pytorch-init-container-image", opts->pytorch_init_container_image,
                  "Image of the init-pytorch container (it runs sh and nslookup)")
      ->capture_default_str();
  cmd->add_option("--pytorch-init-container-max-tries", opts->pytorch_init_container_max_tries,
                  "How many times init-pytorch looks the master up, 2 s apart")
      ->capture_default_str();
  cmd->add_option("--log-format", opts->log_format, "Log format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_examples(
      *cmd,
      R"(# Against the current kubeconfig context, every namespace (as the packaged Deployment runs)
trainctl controller
# One namespace, jobs admitted by Volcano's own scheduler, two replicas sharing a Lease
trainctl controller -n team-a --gang-scheduler volcano --leader-elect
# Next to a local sandbox, metrics on a free port
trainctl controller --kubeconfig ~/.local/state/trainctl/sandbox/kubeconfig --metrics-bind-address 127.0.0.1:0)");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
