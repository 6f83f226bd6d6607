#!/usr/bin/env bash
# Builds the container image's Python environment (deploy/Dockerfile's /opt/berth) as a
# directory tree, without a container engine, and checks it the way the image runs:
#
#   1. the build context is what the Dockerfile's build stage COPYs (parsed from its
#      COPY lines), so a package the Dockerfile forgets to copy is missing here too;
#   2. a wheel of it (pip wheel, as the build stage), installed with its dependencies
#      into a fresh virtualenv without pip (python -m venv --without-pip; pip --python):
#      the dependencies from deploy/requirements.lock with --require-hashes, wheels only,
#      then the wheel alone, then the out-of-tree plugin wheels of the PLUGIN_WHEELS
#      directory (no index, no dependency resolution), and pip check that the lock and
#      those wheels hold all they need; with the Dockerfile's SOURCE_DATE_EPOCH, so the
#      tree's content is the same on every build (its digest: logs/tree-digest.txt);
#   3. no installer or build tool in the tree (pip, setuptools, wheel);
#   4. the tree made read-only, then, as the image's user (uid/gid 65532 when this runs
#      as root, through setpriv), with HOME=/nonexistent, PYTHONDONTWRITEBYTECODE=1 and
#      the working directory /: `berth --help`, `berth shim --help`,
#      `berth serve --list-plugins`, the packages import from the tree (not from this
#      checkout), and `berth serve` with deploy/base's configuration and mTLS
#      (certificates from the tree's `berth certs`) answers a gRPC health check
#      SERVING for berth.v1.SchedulingService over mTLS, then stops on SIGTERM;
#   5. the plugin SDK is typed as installed: the dev venv's mypy --strict, with the tree's
#      interpreter (--python-executable), passes on a file importing berth.framework and on
#      the src/ of a package the tree's `berth new-plugin` writes;
#   6. nothing in the tree was written while it ran (readOnlyRootFilesystem).
#
#   hack/image-tree.sh [OUT_DIR]      default OUT_DIR: build/image-tree
#   hack/image-tree.sh --build-only [OUT_DIR]   steps 1-3 only: build the tree, no run
#
# The tree is OUT_DIR/opt/berth. Runs offline when pip's cache holds the dependencies'
# wheels (it uses pip's cache; only PyPI otherwise). BERTH_IMAGE_PYTHON names the
# runtime interpreter (default: the system's python3.11, the image's Python line);
# BERTH_VENV the virtualenv whose pip and setuptools build the wheel (default .venv);
# BERTH_DOCKERFILE another Dockerfile to take the COPY lines from (the tests use it).
# BERTH_BUILD_ARG_<NAME> stands for `docker build --build-arg NAME=...` where the COPY lines
# or this script use the ARG: PLUGIN_WHEELS (a directory of plugin wheels; here it may also
# be an absolute path), SOURCE_DATE_EPOCH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
out=${1:-$root/build/image-tree}
venv=${BERTH_VENV:-$root/.venv}
dockerfile=${BERTH_DOCKERFILE:-$root/deploy/Dockerfile}
image_uid=65532
say() { echo "[image-tree] ${SECONDS}s: $*"; }
die() {
  echo "image-tree: $*" >&2
  exit 1
}

# -- the runtime interpreter: Python 3.11, like the image's base ------------------------
py=${BERTH_IMAGE_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /usr/bin/python3.11 ]; then
    py=/usr/bin/python3.11
  else
    py=$(command -v python3.11 || true)
  fi
fi
[ -n "$py" ] && [ -x "$py" ] || die "no python3.11 found; set BERTH_IMAGE_PYTHON to a Python 3.11 interpreter"
version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$version" = "3.11" ] || die "$py is Python $version; the image runs 3.11 (deploy/Dockerfile PYTHON_IMAGE)"
[ -x "$venv/bin/python" ] || die "no virtualenv at $venv; run hack/setup-venv.sh first"

mkdir -p "$out"
out=$(cd "$out" && pwd)
ctx=$out/context
tree=$out/opt/berth
wheels=$out/wheels
if [ -d "$tree" ]; then chmod -R u+w "$tree"; fi
rm -rf "$ctx" "$tree" "$wheels" "$out/etc" "$out/logs" "$out/sdk"
mkdir -p "$ctx" "$wheels" "$out/etc/berth" "$out/logs"

# -- the build arguments: each ARG's default, or BERTH_BUILD_ARG_<NAME> ---------------------
declare -A build_args=()
while read -r name value; do
  [ -n "$name" ] || continue
  override=BERTH_BUILD_ARG_$name
  build_args[$name]=${!override-$value}
done < <(awk '/^ARG [A-Za-z_]+=/ { split($2, kv, "="); print kv[1], substr($2, length(kv[1]) + 2) }' "$dockerfile")
# expand_args TEXT: TEXT with ${NAME} and $NAME replaced by the build argument's value.
expand_args() {
  local text=$1 name
  for name in "${!build_args[@]}"; do
    text=${text//\$\{$name\}/${build_args[$name]}}
    text=${text//\$$name/${build_args[$name]}}
  done
  printf '%s' "$text"
}
[ -n "${build_args[SOURCE_DATE_EPOCH]:-}" ] || die "$dockerfile declares no ARG SOURCE_DATE_EPOCH=<default>"
export SOURCE_DATE_EPOCH=${build_args[SOURCE_DATE_EPOCH]}

# -- 1. the build context, from the build stage's COPY lines ------------------------------
# The build stage runs from "FROM ... AS build" to the next FROM; COPY <src>... <dest>,
# relative to WORKDIR (a directory source's contents go into <dest>, as docker does).
copies=$(awk '
  /^FROM / { stage = (tolower($0) ~ / as build$/) ? 1 : 0; next }
  stage && /^COPY / {
    if ($0 ~ /--/) { print "FLAGS " $0; next }
    $1 = ""; print substr($0, 2)
  }' "$dockerfile")
[ -n "$copies" ] || die "no COPY lines in the build stage of $dockerfile"
while read -r line; do
  case $line in FLAGS*) die "unsupported COPY with flags in the build stage: ${line#FLAGS }" ;; esac
  read -r -a words <<<"$(expand_args "$line")"
  n=${#words[@]}
  ((n >= 2)) || die "COPY needs a source and a destination: COPY $line"
  dest=${words[n - 1]}
  for ((i = 0; i < n - 1; i++)); do
    src=${words[i]}
    # A relative source is in the build context (the repository); an absolute one can only
    # come from a BERTH_BUILD_ARG_ (docker would need it inside the context).
    [[ $src == /* ]] || src=$root/$src
    [ -e "$src" ] || die "the Dockerfile copies $src, which does not exist"
    if [ -d "$src" ]; then
      mkdir -p "$ctx/$dest"
      cp -a "$src/." "$ctx/$dest/"
    elif [[ $dest == */ ]]; then
      mkdir -p "$ctx/$dest"
      cp -a "$src" "$ctx/$dest"
    else
      mkdir -p "$(dirname "$ctx/$dest")"
      cp -a "$src" "$ctx/$dest"
    fi
  done
done <<<"$copies"
# deploy/Dockerfile.dockerignore leaves out bytecode caches.
find "$ctx" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
say "build context: $(find "$ctx" -type f | wc -l) files from the Dockerfile's COPY lines"

# -- 2. the wheel, and the virtualenv it is installed into --------------------------------
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# --no-build-isolation: the dev virtualenv's setuptools builds it (no download); the
# Dockerfile installs deploy/build-requirements.lock's instead.
"$venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$wheels" "$ctx" \
  || die "pip wheel failed on the build context"
wheel=$(find "$wheels" -name 'berth_scheduler-*.whl' | head -n 1)
[ -n "$wheel" ] || die "pip wheel made no berth wheel in $wheels"
# The wheel is the product alone: one top-level package, berth, without the dev tools
# (local cluster, demo, bench) or tests.
"$venv/bin/python" - "$wheel" <<'PY' || die "the wheel carries more than the product"
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
top = sorted({n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")})
bad = [n for n in names if re.search(r"(^|/)(tests?|dev|localcluster)/|(^|/)(test_[^/]*|conftest|testutil|bench[^/]*|demo)\.py$", n)]
if top != ["berth"]:
    sys.exit(f"top-level packages in the wheel: {top}; expected only berth")
if bad:
    sys.exit("the wheel carries dev tools or tests:\n  " + "\n  ".join(bad))
print(f"[image-tree] wheel: {len(names)} files, one top-level package (berth), no tests or dev tools")
PY
[ -f "$ctx/requirements.lock" ] || die "the build stage copies no requirements.lock"
"$py" -m venv --without-pip "$tree" || die "could not create a virtualenv with $py"
"$venv/bin/python" -m pip --python "$tree/bin/python" install --quiet \
  --require-hashes --only-binary=:all: --no-deps -r "$ctx/requirements.lock" \
  || die "installing deploy/requirements.lock (hashes required) into $tree failed"
"$venv/bin/python" -m pip --python "$tree/bin/python" install --quiet --no-deps "$wheel" \
  || die "installing $wheel into $tree failed"
# The out-of-tree plugins, as the build stage installs them: every wheel the PLUGIN_WHEELS
# COPY put in plugin-wheels/, from there alone.
plugin_wheels=()
if [ -d "$ctx/plugin-wheels" ]; then
  mapfile -t plugin_wheels < <(find "$ctx/plugin-wheels" -maxdepth 1 -name '*.whl' | sort)
fi
if ((${#plugin_wheels[@]} > 0)); then
  "$venv/bin/python" -m pip --python "$tree/bin/python" install --quiet --no-index --no-deps \
    "${plugin_wheels[@]}" || die "installing the plugin wheels of ${build_args[PLUGIN_WHEELS]:-plugin-wheels} into $tree failed"
  names=""
  for w in "${plugin_wheels[@]}"; do names+=" ${w##*/}"; done
  say "installed ${#plugin_wheels[@]} plugin wheels:$names"
fi
"$venv/bin/python" -m pip --python "$tree/bin/python" check >"$out/logs/pip-check.txt" 2>&1 \
  || die "a dependency is missing from the image (deploy/requirements.lock, run hack/lock.sh; or a plugin's, whose wheel belongs in the PLUGIN_WHEELS directory):"$'\n'"$(cat "$out/logs/pip-check.txt")"
say "installed $(basename "$wheel") and its dependencies into $tree ($(du -sh "$tree" | cut -f1))"
# The tree's content (paths, types, modes, link targets, file hashes): the same on every build
# of the same sources, lock files and plugin wheels.
(cd "$tree" && find . -printf '%P %y %m %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum) \
  >"$out/logs/tree-content.txt"
sha256sum <"$out/logs/tree-content.txt" | cut -d' ' -f1 >"$out/logs/tree-digest.txt"
say "tree digest $(cat "$out/logs/tree-digest.txt") (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"

# -- 3. no installer or build tools ----------------------------------------------------------
site=$("$tree/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
for tool in pip setuptools wheel _distutils_hack; do
  [ ! -e "$site/$tool" ] || die "$tool is in the runtime tree ($site/$tool); the image must not carry it"
done
for exe in pip pip3 wheel; do
  [ ! -e "$tree/bin/$exe" ] || die "$tree/bin/$exe exists; the image must not carry an installer"
done
if [ "$build_only" = 1 ]; then
  say "OK (--build-only): $tree"
  exit 0
fi

# -- 4. run it as the image does ---------------------------------------------------------------
cp "$root/deploy/base/scheduler-config.yaml" "$out/etc/berth/scheduler-config.yaml"
# The Secrets' files, as the base mounts them (readable by the image's user here).
PYTHONDONTWRITEBYTECODE=1 "$tree/bin/berth" certs --out-dir "$out/etc/berth/tls" >/dev/null 2>"$out/logs/certs.txt" \
  || die "berth certs failed: $(cat "$out/logs/certs.txt")"
chmod -R a+rX,a-w "$tree" "$out/etc"
find "$tree" -printf '%p %s %T@\n' | sort >"$out/logs/before.txt"

as_image_user=()
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null || die "running as root needs setpriv (util-linux) to drop to uid $image_uid"
  as_image_user=(setpriv --reuid="$image_uid" --regid="$image_uid" --clear-groups)
fi
image_env=(env -i PATH="$tree/bin:/usr/bin:/bin" HOME=/nonexistent LANG=C.UTF-8
  PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 "${as_image_user[@]}")
run() { (cd / && exec "${image_env[@]}" "$@"); }
run test -x "$tree/bin/berth" \
  || die "uid $(if [ ${#as_image_user[@]} -gt 0 ]; then echo $image_uid; else id -u; fi) cannot run $tree/bin/berth: $out and its parent directories must be readable by all"
say "running as uid $(run id -u), read-only tree, HOME=/nonexistent, cwd /"

expect() { # expect WHAT TEXT FILE
  grep -q -- "$2" "$3" || die "$1: output has no '$2':"$'\n'"$(tail -n 30 "$3")"
}
run berth --help >"$out/logs/help.txt" 2>&1 || die "berth --help failed: $(cat "$out/logs/help.txt")"
expect "berth --help" "serve" "$out/logs/help.txt"
expect "berth --help" "shim" "$out/logs/help.txt"
run berth shim --help >"$out/logs/shim-help.txt" 2>&1 || die "berth shim --help failed: $(cat "$out/logs/shim-help.txt")"
expect "berth shim --help" "--leader-elect" "$out/logs/shim-help.txt"
run berth --version >"$out/logs/version.txt" 2>&1 || die "berth --version failed: $(cat "$out/logs/version.txt")"
expect "berth --version" "^berth [0-9]" "$out/logs/version.txt"
# The dev tools are not in the image: their commands say where to find them.
if run berth demo >"$out/logs/demo.txt" 2>&1; then die "berth demo ran from the image tree; berth.dev must not ship"; fi
expect "berth demo" "not part of the installed package" "$out/logs/demo.txt"
run berth serve --list-plugins >"$out/logs/plugins.txt" 2>&1 \
  || die "berth serve --list-plugins failed: $(cat "$out/logs/plugins.txt")"
for plugin in AvoidNodePlugin GPUPriorityPlugin SameLabelSpread DefaultBinder; do
  expect "berth serve --list-plugins" "$plugin" "$out/logs/plugins.txt"
done
run python -c '
import sys
import importlib.util
import berth, berth.api, berth.framework, berth.plugins, berth.server, berth.shim
for m in (berth, berth.api, berth.framework, berth.plugins, berth.server, berth.shim):
    if not m.__file__.startswith(sys.argv[1]):
        sys.exit(f"{m.__name__} imported from {m.__file__}, not from the tree {sys.argv[1]}")
# The dev tools and the tests stay in the checkout.
for name in ("berth.dev", "tests", "server", "shim", "plugins", "framework"):
    if importlib.util.find_spec(name) is not None:
        sys.exit(f"{name} is importable from the image tree; it must not ship")
' "$tree/" || die "the packages do not import from the tree"

# berth serve, as the plugin server Deployment runs it (mTLS; port 0: any free port).
serve_log=$out/logs/serve.txt
tls=$out/etc/berth/tls
# exec all the way down, so $! is berth serve itself and gets the SIGTERM.
(cd / && exec "${image_env[@]}" berth serve --config "$out/etc/berth/scheduler-config.yaml" \
  --listen 127.0.0.1:0 --grace 2 --tls-cert "$tls/server.crt" --tls-key "$tls/server.key" \
  --tls-client-ca "$tls/ca.crt") >"$serve_log" 2>&1 &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/^berth serve: listening on port \([0-9][0-9]*\)$/\1/p' "$serve_log")
  [ -n "$port" ] && break
  kill -0 "$serve_pid" 2>/dev/null || die "berth serve exited: $(cat "$serve_log")"
  sleep 0.1
done
[ -n "$port" ] || die "berth serve did not listen within 30s: $(cat "$serve_log")"
status=$(run python -c '
import sys
from pathlib import Path
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
tls = Path(sys.argv[2])
creds = grpc.ssl_channel_credentials(
    (tls / "ca.crt").read_bytes(), (tls / "client.key").read_bytes(), (tls / "client.crt").read_bytes()
)
with grpc.secure_channel(sys.argv[1], creds) as channel:
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="berth.v1.SchedulingService"), timeout=10
    )
print(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
' "127.0.0.1:$port" "$tls") || die "gRPC health check of berth serve over mTLS failed"
[ "$status" = SERVING ] || die "berth serve health: $status, want SERVING"
kill -TERM "$serve_pid"
code=0
wait "$serve_pid" || code=$?
trap - EXIT
[ "$code" = 0 ] || die "berth serve exited $code on SIGTERM: $(tail -n 20 "$serve_log")"
say "berth serve on 127.0.0.1:$port: health SERVING over mTLS, stopped cleanly on SIGTERM"

# -- 5. the plugin SDK, typed, against the installed wheel -----------------------------------------
# The dev venv's mypy with the tree's interpreter: it sees berth as the wheel installed it
# (py.typed), not the checkout. A file importing berth.framework, and a package the tree's
# `berth new-plugin` writes (its src/: the tree has no pytest for its tests), pass --strict.
sdk=$out/sdk
mkdir -p "$sdk"
chmod 1777 "$sdk" # the image user writes the new package here
[ -f "$site/berth/py.typed" ] || die "the wheel ships no berth/py.typed: mypy would see the SDK untyped"
printf 'import berth.framework\n\nplugin: type[berth.framework.Plugin] = berth.framework.FilterPlugin\n' >"$sdk/uses_sdk.py"
run berth new-plugin PreferZone --dir "$sdk/prefer-zone" >"$out/logs/new-plugin.txt" 2>&1 \
  || die "berth new-plugin failed: $(cat "$out/logs/new-plugin.txt")"
for target in "$sdk/uses_sdk.py" "$sdk/prefer-zone/src"; do
  (cd "$sdk" && "$venv/bin/mypy" --strict --no-incremental --python-executable "$tree/bin/python" \
    --config-file /dev/null "$target") >"$out/logs/mypy-sdk.txt" 2>&1 \
    || die "mypy --strict against the installed wheel failed on $target:"$'\n'"$(cat "$out/logs/mypy-sdk.txt")"
done
say "mypy --strict against the installed wheel: import berth.framework and a berth new-plugin package pass"

# -- 6. nothing written into the tree -----------------------------------------------------------
find "$tree" -printf '%p %s %T@\n' | sort >"$out/logs/after.txt"
if ! diff -q "$out/logs/before.txt" "$out/logs/after.txt" >/dev/null; then
  die "files in the tree changed while it ran (a read-only root filesystem would refuse):"$'\n'"$(diff "$out/logs/before.txt" "$out/logs/after.txt" | head -n 20)"
fi
say "OK: $tree (no pip/setuptools/wheel; ran read-only as uid $(run id -u))"
