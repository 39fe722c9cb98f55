#pragma once

// Every label, annotation and finalizer key trainctl reads or writes, in one place: grep here to
// find who owns a key, then grep the constant to find every reader and writer.

#include <string_view>

namespace trainctl::api {

/// Labels the Kubeflow Training Operator and the MPI Operator put on a job's objects; kept
/// byte for byte so existing selectors, dashboards and tools keep working.
namespace labels {
inline constexpr std::string_view operator_name = "training.kubeflow.org/operator-name";
inline constexpr std::string_view job_name = "training.kubeflow.org/job-name";
inline constexpr std::string_view replica_type = "training.kubeflow.org/replica-type";
inline constexpr std::string_view replica_index = "training.kubeflow.org/replica-index";
/// The MPI Operator's role label (`launcher`, `worker`); its pods have no replica-type.
inline constexpr std::string_view job_role = "training.kubeflow.org/job-role";
/// scheduler-plugins' coscheduling: the PodGroup a pod belongs to.
inline constexpr std::string_view pod_group = "scheduling.x-k8s.io/pod-group";
/// The namespace name label the API server puts on every namespace (Kubernetes 1.21+).
inline constexpr std::string_view namespace_name = "kubernetes.io/metadata.name";
/// Istio's, on namespaces: `istio-injection=enabled|disabled`, or the revision whose injector
/// handles the namespace's pods (`istio.io/rev=<rev>`).
inline constexpr std::string_view istio_injection = "istio-injection";
inline constexpr std::string_view istio_revision = "istio.io/rev";
/// trainctl's own, on namespaces: `enabled` asks the controller to stop the Istio proxies of
/// every pod there (plain batch Jobs, pipeline steps), not only of its jobs' pods.
inline constexpr std::string_view proxy_terminator = "trainctl.io/proxy-terminator";
}  // namespace labels

namespace annotations {
/// Volcano's: the PodGroup a pod belongs to, and the task (replica type) it plays in it.
inline constexpr std::string_view group_name = "scheduling.k8s.io/group-name";
inline constexpr std::string_view volcano_task_spec = "volcano.sh/task-spec";
/// KubeDL's: `host` runs the job's pods in the host network.
inline constexpr std::string_view kubedl_network_mode = "kubedl.io/network-mode";
/// kubectl's: the container `kubectl logs` and `exec` pick when none is named.
inline constexpr std::string_view default_container = "kubectl.kubernetes.io/default-container";
/// Istio's: the pod's proxy configuration (YAML or JSON), and the injection opt-in/out.
inline constexpr std::string_view istio_proxy_config = "proxy.istio.io/config";
/// (`sidecar.istio.io/inject` is read as a pod label first, then as this annotation, as Istio
/// does.)
inline constexpr std::string_view istio_inject = "sidecar.istio.io/inject";
/// Istio's: "true" injects istio-proxy as a native sidecar (an init container with
/// restartPolicy Always), "false" as a regular container.
inline constexpr std::string_view istio_native_sidecar = "sidecar.istio.io/nativeSidecar";

/// trainctl's own, on jobs it renders: the template, a hash of the spec, the CLI version.
inline constexpr std::string_view template_name = "trainctl.io/template";
inline constexpr std::string_view spec_hash = "trainctl.io/spec-hash";
inline constexpr std::string_view version = "trainctl.io/version";
/// trainctl's own, on jobs: the pods the controller deleted to run them again (ExitCode retryable
/// exits, failed OnFailure/Always pods), so backoffLimit holds across reconciles and controller
/// restarts. Container restarts by the kubelet are counted from the pods themselves.
inline constexpr std::string_view restarts = "trainctl.io/restarts";
/// trainctl's own, on pods: the controller asked the pod's proxy sidecar to quit, so a
/// restarted controller does not ask twice.
inline constexpr std::string_view sidecar_stop_requested = "trainctl.io/sidecar-stop-requested";

/// trainctl's own, on PodGroups its builtin admission decides: where the admitted gang's pods
/// were placed ({node: {resource: quantity}}, JSON), until they are bound; when it was admitted
/// (RFC 3339), for the schedule timeout; how often it timed out, and the time before which a
/// timed-out gang is not admitted again (exponential back-off).
inline constexpr std::string_view node_reservations = "trainctl.io/node-reservations";
inline constexpr std::string_view admitted_at = "trainctl.io/admitted-at";
inline constexpr std::string_view schedule_timeouts = "trainctl.io/schedule-timeouts";
inline constexpr std::string_view requeue_at = "trainctl.io/requeue-at";
/// Who evicted a gang that waits again (`default/urgent (priority 1000 over 10)`), until it is
/// admitted again: its Unschedulable condition keeps reason Preempted meanwhile.
inline constexpr std::string_view preempted_by = "trainctl.io/preempted-by";

/// The sandbox's simulated container behaviour: seconds to run, the exit code, and seconds it
/// runs on after SIGTERM (`forever`: ignores it), per pod or per container (`<key>.<container>`).
inline constexpr std::string_view sandbox_run_seconds = "sandbox.trainctl.io/run-seconds";
inline constexpr std::string_view sandbox_exit_code = "sandbox.trainctl.io/exit-code";
inline constexpr std::string_view sandbox_sigterm_seconds = "sandbox.trainctl.io/sigterm-seconds";
/// The sandbox's simulated images: commands (space-separated) the container's image lacks, per
/// pod or per container (`<key>.<container>`), e.g. `pilot-agent` or `sh curl` (distroless).
inline constexpr std::string_view sandbox_absent_commands = "sandbox.trainctl.io/absent-commands";
}  // namespace annotations

namespace finalizers {
/// batch/v1 Job's pod tracking finalizer (Kubernetes 1.26+); the same key annotates Jobs whose
/// pods are tracked by it.
inline constexpr std::string_view job_tracking = "batch.kubernetes.io/job-tracking";
}  // namespace finalizers

}  // namespace trainctl::api
