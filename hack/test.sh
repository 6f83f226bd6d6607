#!/usr/bin/env bash
# The project's test command (README.md; .ci/run calls it). On a fresh
# machine it installs everything it needs: the Python venv, the upstream
# control-plane binaries built from Go modules (cached), the Go example
# client. Then: generated-code check, ruff, mypy --strict, and pytest over
# unit, contract and integration tests.
#
#   hack/test.sh                 everything
#   hack/test.sh -k resync       extra arguments go to pytest
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="${BERTH_VENV:-$root/.venv}"
step() { echo; echo "=== [test] $* ==="; }

step "1/6 Python environment"
./hack/setup-venv.sh

step "2/6 generated protobuf code matches protos/; buf lint and breaking"
./hack/gen-protos.sh --check
# Go: gen/go (protoc-gen-go/-grpc built from the Go module proxy at pinned versions).
./hack/gen-go.sh --check
# buf from npm (hack/tools); breaking against the newest protos/releases/ image.
./hack/buf.sh check

step "3/6 ruff (lint and format)"
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .

step "4/6 mypy --strict, layering (import-linter), no copied code (pylint duplicate-code)"
"$venv/bin/mypy"
"$venv/bin/lint-imports"
"$venv/bin/pylint" --score=n server shim plugins framework berth

step "5/6 upstream kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd, helm (built from Go modules, cached)"
./hack/build-k8s.sh

step "6/6 pytest: unit, contract, integration"
# tests/contract/test_out_of_tree.py pip-installs examples/out-of-tree-plugin into the venv for
# its module and uninstalls it afterwards: nothing needs it preinstalled.
"$venv/bin/python" -m pytest -p no:cacheprovider "$@"
