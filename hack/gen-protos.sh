#!/usr/bin/env bash
# Generates the Python protobuf/gRPC code (and mypy stubs) for protos/ into
# berth/api/v1/, a package of its own that every layer (plugins, server, shim,
# CLI) may import without importing upward. With --check, generates into a temporary tree and fails when the
# committed files differ: CI runs this so generated code never drifts from
# the .proto files. The generator versions are pinned in pyproject.toml
# (grpcio-tools, mypy-protobuf).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${BERTH_VENV:-$root/.venv}"
check=0
[ "${1:-}" = "--check" ] && check=1

out="$root"
if [ $check = 1 ]; then
  out=$(mktemp -d)
fi
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
mkdir -p "$gen/berth/v1" "$out/berth/api/v1"
"$venv/bin/python" -m grpc_tools.protoc \
  -I "$root/protos" \
  --python_out="$gen" \
  --grpc_python_out="$gen" \
  --plugin=protoc-gen-mypy="$venv/bin/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$venv/bin/protoc-gen-mypy_grpc" \
  --mypy_out="$gen" \
  --mypy_grpc_out="$gen" \
  "$root"/protos/berth/v1/*.proto 2> >(grep -v "^Writing mypy to" >&2)

# protoc names Python modules after the .proto paths (berth/v1/...); the code
# lives in berth.api.v1, so its imports of sibling modules and the module name
# it registers are rewritten to that package. RPC paths and descriptors keep
# the proto package berth.v1.
for f in "$gen"/berth/v1/*_pb2*; do
  sed -e 's/^from berth\.v1 import /from berth.api.v1 import /' \
      -e "s/BuildTopDescriptorsAndMessages(DESCRIPTOR, 'berth\.v1\./BuildTopDescriptorsAndMessages(DESCRIPTOR, 'berth.api.v1./" \
      "$f" >"$out/berth/api/v1/$(basename "$f")"
done

# The client contract travels with the generated code, so an installed
# package carries it (berth.client loads it from there).
cp "$root/protos/service_config.json" "$out/berth/api/service_config.json"

if [ $check = 1 ]; then
  trap 'rm -rf "$gen" "$out"' EXIT
  status=0
  if ! cmp -s "$out/berth/api/service_config.json" "$root/berth/api/service_config.json"; then
    echo "gen-protos: berth/api/service_config.json differs from protos/service_config.json; run hack/gen-protos.sh and commit" >&2
    status=1
  fi
  for f in "$out"/berth/api/v1/*_pb2*; do
    rel=${f#"$out/"}
    if ! cmp -s "$f" "$root/$rel"; then
      echo "gen-protos: $rel is out of date with protos/; run hack/gen-protos.sh and commit" >&2
      status=1
    fi
  done
  for f in "$root"/berth/api/v1/*_pb2*; do
    rel=${f#"$root/"}
    [ -e "$out/$rel" ] || { echo "gen-protos: $rel has no .proto source; delete it" >&2; status=1; }
  done
  [ $status = 0 ] && echo "gen-protos: generated code matches protos/"
  exit $status
fi
touch "$root/berth/api/__init__.py" "$root/berth/api/v1/__init__.py"
echo "gen-protos: wrote berth/api/v1/ from protos/berth/v1/*.proto"
