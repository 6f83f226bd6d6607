#!/usr/bin/env bash
# How long `berth shim` (plugins in-process; spawn to /readyz 200 against a local cluster with
# 100 nodes and 1500 pending pods) and `berth serve` (spawn to "listening") take to start, and
# the imports that cost most: medians of 5 spawns each. Flags: `./hack/startup-time.sh --help`
# (berth/dev/startup.py). Run it on a quiet machine; the figures print the load average.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec "${BERTH_VENV:-$root/.venv}/bin/python" -m berth.dev.startup "$@"
