#!/usr/bin/env bash
# The main job, live: sets up the venv, then `berth demo` builds the upstream binaries that are
# missing, starts a local etcd + kube-apiserver, a plugin server (berth serve) and the scheduler
# (berth shim), creates nodes and pods, and prints where each pod went or why it could not.
# Everything keeps running for kubectl afterwards; `./hack/demo.sh --down` stops it, and
# `./hack/demo.sh --once` stops it right after printing. Other flags: `./hack/demo.sh --help`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./hack/setup-venv.sh
exec "${BERTH_VENV:-$root/.venv}/bin/berth" demo "$@"
