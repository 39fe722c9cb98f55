#!/usr/bin/env bash
# A CI job that trains and gates the pipeline on the outcome: submit a manifest, wait for it to
# finish (streaming the replicas' logs), keep a JSON report and every replica's final logs as
# build artifacts, and turn trainctl's exit code into what the pipeline should do:
#   0 the job Succeeded        -> pass
#   1 the job Failed           -> fail (the report and logs say why)
#   2 usage/validation error   -> fail fast: the manifest or the flags are wrong, nothing was sent
#   3 API error                -> the API server refused the request (the job already exists,
#                                 RBAC, an admission rule) or could not be reached; the message
#                                 says which. A cheap read (`trainctl list`) tells them apart:
#                                 retry later only when the cluster cannot be reached at all
#   4 timeout while waiting    -> fail, and delete the job so it stops using GPUs
# No prompts, and no colours or live progress line when stdout is not a terminal.
#
# Usage: examples/ci-pipeline.sh [MANIFEST] [ARTIFACT_DIR]
# Against the local sandbox:
#   trainctl sandbox up --detach && export KUBECONFIG=~/.local/state/trainctl/sandbox/kubeconfig
#   examples/ci-pipeline.sh examples/pytorch-ddp.yaml /tmp/ci-artifacts
set -uo pipefail

manifest=${1:-examples/pytorch-ddp.yaml}
artifacts=${2:-artifacts}
timeout=${TRAIN_TIMEOUT:-30m}
trainctl=${TRAINCTL:-trainctl}
mkdir -p "$artifacts"

# Validate offline first and learn the job's name (prints e.g. pytorchjob.kubeflow.org/bert-ddp).
job=$("$trainctl" submit -f "$manifest" --dry-run=client -o name) || exit $?
job=${job##*/}

# --if-exists replace: a re-run of the pipeline deletes the previous run's job and pods (waiting
# until they are gone, at most $timeout) and trains afresh, so run.json and the logs are this
# run's, never the old result.
"$trainctl" submit -f "$manifest" --if-exists replace \
  --wait --logs --timeout "$timeout" \
  --report "$artifacts/run.json" --save-logs "$artifacts/logs"
status=$?

case $status in
  0)
    echo "$job succeeded; report: $artifacts/run.json"
    ;;
  1)
    echo "$job failed; report: $artifacts/run.json, replica logs: $artifacts/logs" >&2
    ;;
  2)
    echo "the manifest or the flags are invalid (see above); nothing was submitted" >&2
    ;;
  3)
    if "$trainctl" list -o name >/dev/null 2>&1; then
      # The cluster answers and lets us in, yet refused this submission: e.g. AlreadyExists
      # because another run of this pipeline created the job meanwhile. A retry would not help.
      echo "the cluster refused the submission (see above); not retrying" >&2
    else
      echo "could not reach the cluster or was refused by it; retry the pipeline later" >&2
    fi
    ;;
  4)
    echo "no result after $timeout; deleting the job so it frees its GPUs" >&2
    "$trainctl" delete "$job" --ignore-not-found || true
    ;;
  *)
    echo "unexpected exit code $status from trainctl" >&2
    ;;
esac
exit "$status"
