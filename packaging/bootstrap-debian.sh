#!/usr/bin/env bash
# Installs the Debian packages trainctl needs to build, test and run its demo. Idempotent: it
# asks apt only for what is missing, and runs `apt-get update` at most once.
set -euo pipefail

packages=(
  build-essential cmake ninja-build lld pkg-config python3 git clang-format
  libcli11-dev libcurl4-openssl-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev libfmt-dev
  libjemalloc-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libkainjow-mustache-dev
  nghttp2-server
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A real kubectl checks the sandbox; any kubectl will do, Debian's is the fallback.
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
echo "bootstrap: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y --no-install-recommends "${missing[@]}"
