#!/usr/bin/env bash
# The demo on the embedded default: start a local sandbox cluster (an emulated Kubernetes API
# server with four simulated GPU nodes), install the Kubeflow and Volcano CRDs into it, run
# `trainctl controller` against it, submit a real multi-replica PyTorchJob (1 master + 2 workers),
# follow all replicas' logs to completion, print the job's status, and tear everything down.
set -euo pipefail
trainctl=$(realpath "${1:-$(command -v trainctl)}")
data=$(mktemp -d /tmp/trainctl-demo-XXXXXX)
controller_pid=
cleanup() {
  [[ -n $controller_pid ]] && kill "$controller_pid" 2>/dev/null && wait "$controller_pid" || true
  "$trainctl" sandbox down --data-dir "$data" >/dev/null 2>&1 || true
  rm -rf "$data"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Start the sandbox"
"$trainctl" sandbox up --detach --port 0 --data-dir "$data"
export KUBECONFIG="$data/kubeconfig"
"$trainctl" version

step "Install the CRDs (TFJob, PyTorchJob, MPIJob, PodGroup, Queue)"
"$trainctl" install --crds-only

step "Run the controller"
"$trainctl" controller --metrics-bind-address 0 --health-probe-bind-address 0 \
  >"$data/controller.log" 2>&1 &
controller_pid=$!

step "Submit a PyTorchJob: 1 master + 2 workers, 4 GPUs each; follow its logs to the end"
status=0
"$trainctl" submit pytorchjob --name mnist --workers 3 --gpus 4 --cpu 8 --memory 32Gi \
  --image registry.example.com/mnist:1.0 --annotation sandbox.trainctl.io/run-seconds=4 \
  --wait --logs --timeout 2m -- python train.py --epochs 4 || status=$?

step "Status"
"$trainctl" get mnist
"$trainctl" list
echo "submit --wait exit code: $status (0 = Succeeded)"
exit "$status"
