#!/usr/bin/env bash
# The demo on the embedded default: start a local sandbox cluster (emulated API server with four
# simulated GPU nodes), run the replicas of a small training job on it, follow them to the end and
# print their status, then tear everything down.
#
# Until `trainctl submit` and `trainctl controller` land, the job's replicas are created as plain
# pods with kubectl (installed by packaging/bootstrap-debian.sh), which also shows that a real
# kubectl talks to the sandbox unchanged.
set -euo pipefail
trainctl=$(realpath "${1:-$(command -v trainctl)}")
data=$(mktemp -d /tmp/trainctl-demo-XXXXXX)
cleanup() {
  "$trainctl" sandbox down --data-dir "$data" >/dev/null 2>&1 || true
  rm -rf "$data"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Start the sandbox"
"$trainctl" sandbox up --detach --port 0 --data-dir "$data"
export KUBECONFIG="$data/kubeconfig"
export HOME="$data"  # keep kubectl's discovery cache out of the user's home
"$trainctl" version
"$trainctl" config view --resolved

step "Nodes"
kubectl get nodes -o custom-columns='NAME:.metadata.name,CPU:.status.capacity.cpu,MEMORY:.status.capacity.memory,GPUS:.status.capacity.nvidia\.com/gpu'

step "Create a 1 master + 2 worker job's replicas"
for replica in master-0 worker-0 worker-1; do
  kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: mnist-${replica}
  labels:
    training.kubeflow.org/job-name: mnist
    training.kubeflow.org/replica-type: ${replica%-*}
    training.kubeflow.org/replica-index: "${replica##*-}"
  annotations:
    sandbox.trainctl.io/run-seconds: "4"
spec:
  restartPolicy: Never
  containers:
  - name: pytorch
    image: registry.example.com/mnist:1.0
    command: ["python", "train.py", "--epochs", "4"]
    resources:
      limits: {nvidia.com/gpu: "4", cpu: "8", memory: 32Gi}
YAML
done

step "Follow the master's log to the end"
for _ in $(seq 50); do
  phase=$(kubectl get pod mnist-master-0 -o jsonpath='{.status.phase}')
  [[ $phase == Running || $phase == Succeeded ]] && break
  sleep 0.2
done
kubectl logs -f mnist-master-0

step "Wait for every replica to finish"
for _ in $(seq 100); do
  done_count=$(kubectl get pods -l training.kubeflow.org/job-name=mnist \
    -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c -E 'Succeeded|Failed' || true)
  [[ $done_count -eq 3 ]] && break
  sleep 0.2
done

step "Status"
kubectl get pods -l training.kubeflow.org/job-name=mnist -o custom-columns='POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,IP:.status.podIP,EXIT:.status.containerStatuses[0].state.terminated.exitCode'
"$trainctl" sandbox status --data-dir "$data"
