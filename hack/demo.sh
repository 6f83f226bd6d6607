#!/usr/bin/env bash
# The main job on an example cluster shipped in the repo: sets up the venv,
# starts a plugin server, and asks it where examples/cluster/pod.yaml would
# be scheduled on examples/cluster/cluster.yaml, printing every node's filter
# result and every plugin's score.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
./hack/setup-venv.sh
exec "${BERTH_VENV:-$root/.venv}/bin/berth" place \
  --cluster examples/cluster/cluster.yaml --pod examples/cluster/pod.yaml "$@"
