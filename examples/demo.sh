#!/usr/bin/env bash
# The demo on the embedded default. Until the sandbox and controller land it shows the client:
# the version, and the configuration trainctl resolved (or why there is none).
set -euo pipefail
trainctl=${1:-trainctl}
"$trainctl" version --client
"$trainctl" config view 2>&1 || true
