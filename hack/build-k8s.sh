#!/usr/bin/env bash
# Build the upstream binaries Berth's integration tests and benchmarks run against:
# kube-apiserver, kube-scheduler, kube-controller-manager and kubectl from k8s.io/kubernetes,
# etcd from go.etcd.io/etcd/server/v3 (a wrapper around etcdmain), and helm from
# helm.sh/helm/<major> (cmd/helm; it renders and lints deploy/chart/berth in the tests).
# kube-controller-manager runs the controllers a cluster has (ResourceClaim templates, PV
# binding, ReplicaSets) in the local control plane. Everything comes from the Go module
# proxy; nothing is downloaded as a release binary and nothing is written into the repository.
#
#   hack/build-k8s.sh                 build what is missing, print the bin dir on the last line
#   hack/build-k8s.sh --print-bin-dir print where the binaries go and exit (builds nothing)
#   hack/build-k8s.sh --force         rebuild even if cached binaries look right
#
# Versions are pinned in hack/k8s-versions.env (override with K8S_VERSION / ETCD_VERSION /
# HELM_VERSION). Output: ${BERTH_CACHE:-$HOME/.cache/berth}/k8s/<K8S_VERSION>/bin/{kube-apiserver,
# kube-scheduler,kube-controller-manager,kubectl,etcd,helm}. A cached binary is reused when it
# reports the pinned version. The generated Go workspaces live next to it
# (…/k8s/<K8S_VERSION>/src, …/etcd-src, …/helm-src).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=k8s-versions.env
PINNED_K8S="$(sed -n 's/^K8S_VERSION=//p' "$HACK_DIR/k8s-versions.env")"
PINNED_ETCD="$(sed -n 's/^ETCD_VERSION=//p' "$HACK_DIR/k8s-versions.env")"
PINNED_HELM="$(sed -n 's/^HELM_VERSION=//p' "$HACK_DIR/k8s-versions.env")"
K8S_VERSION="${K8S_VERSION:-$PINNED_K8S}"
ETCD_VERSION="${ETCD_VERSION:-$PINNED_ETCD}"
HELM_VERSION="${HELM_VERSION:-$PINNED_HELM}"
# helm's module path carries its major version (helm.sh/helm/v3, helm.sh/helm/v4).
HELM_MODULE="helm.sh/helm/${HELM_VERSION%%.*}"
CACHE_ROOT="${BERTH_CACHE:-$HOME/.cache/berth}"
MIN_FREE_GB="${BERTH_BUILD_MIN_FREE_GB:-6}"
HEARTBEAT_SECONDS="${BERTH_BUILD_HEARTBEAT:-30}"

FORCE=0
PRINT_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --print-bin-dir) PRINT_ONLY=1 ;;
    -h | --help)
      sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "build-k8s: unknown argument '$arg' (try --help)" >&2
      exit 2
      ;;
  esac
done

VERSION_DIR="$CACHE_ROOT/k8s/$K8S_VERSION"
BIN_DIR="$VERSION_DIR/bin"
LOG_DIR="$VERSION_DIR/logs"
if [[ $PRINT_ONLY == 1 ]]; then
  echo "$BIN_DIR"
  exit 0
fi

TOTAL_STEPS=8
STEP=0
STEP_NAME=""
CHILD_PID=""
START_ALL=$SECONDS

say() { echo "[build-k8s $STEP/$TOTAL_STEPS] $*"; }
step() {
  STEP=$((STEP + 1))
  STEP_NAME="$1"
  say "$1"
}
fail() {
  # fail REASON [HINT...]: say which step failed and why, then exit non-zero.
  echo "[build-k8s $STEP/$TOTAL_STEPS] FAILED: $STEP_NAME" >&2
  echo "  reason: $1" >&2
  shift
  for hint in "$@"; do echo "  next:   $hint" >&2; done
  exit 1
}
on_signal() {
  if [[ -n $CHILD_PID ]]; then kill "$CHILD_PID" 2>/dev/null || true; fi
  echo "[build-k8s $STEP/$TOTAL_STEPS] interrupted during: $STEP_NAME" >&2
  exit 130
}
trap on_signal INT TERM

# diagnose LOG: turn a Go tool failure into the cause a person can act on.
diagnose() {
  local log="$1"
  local goproxy
  goproxy="$(go env GOPROXY 2>/dev/null || echo '?')"
  if grep -qiE 'no space left on device|disk quota exceeded' "$log"; then
    fail "out of disk space (see $log)" \
      "free space under $CACHE_ROOT, $(go env GOMODCACHE) and $(go env GOCACHE), then re-run"
  elif grep -qiE 'dial tcp|no such host|connection refused|i/o timeout|TLS handshake timeout|proxyconnect|network is unreachable|server misbehaving' "$log"; then
    fail "Go module proxy unreachable (GOPROXY=$goproxy): $(grep -m1 -iE 'dial tcp|no such host|connection refused|i/o timeout|TLS handshake|proxyconnect|unreachable|misbehaving' "$log")" \
      "check network access to the proxy, or set GOPROXY to a reachable mirror, then re-run"
  elif grep -qE 'requires go >=|go: updates to go.mod needed|toolchain' "$log"; then
    fail "Go toolchain mismatch: $(grep -m1 -E 'requires go|toolchain' "$log")" \
      "install Go >= $GO_REQUIRED, or allow a toolchain download with GOTOOLCHAIN=go${GO_REQUIRED}+auto"
  elif grep -qE 'signal: killed|cannot allocate memory|out of memory' "$log"; then
    fail "the Go compiler/linker was killed, probably out of memory (see $log)" \
      "free memory (linking kube-apiserver needs ~3 GiB) or build with GOFLAGS=-p=1"
  else
    echo "---- last lines of $log ----" >&2
    tail -n 25 "$log" >&2
    echo "----" >&2
    fail "command failed (full log: $log)"
  fi
}

# run_logged DIR LOG CMD...: run CMD in DIR with output to LOG, printing a heartbeat meanwhile.
run_logged() {
  local dir="$1" log="$2"
  shift 2
  : >"$log"
  (cd "$dir" && exec "$@") >"$log" 2>&1 &
  CHILD_PID=$!
  local started=$SECONDS next=$((SECONDS + HEARTBEAT_SECONDS))
  while kill -0 "$CHILD_PID" 2>/dev/null; do
    sleep 1
    if ((SECONDS >= next)) && kill -0 "$CHILD_PID" 2>/dev/null; then
      say "  ... still running ($((SECONDS - started))s, $(wc -l <"$log") log lines, last: $(tail -n 1 "$log" | cut -c1-80))"
      next=$((SECONDS + HEARTBEAT_SECONDS))
    fi
  done
  local rc=0
  wait "$CHILD_PID" || rc=$?
  CHILD_PID=""
  if ((rc != 0)); then diagnose "$log"; fi
  say "  done in $((SECONDS - started))s"
}

# has_version BINARY EXPECTED ARGS...: the cached binary runs and reports EXPECTED.
has_version() {
  local bin="$1" expected="$2" out
  shift 2
  [[ -x $bin ]] || return 1
  # Capture first: `| grep -q` would exit at the first match, and with pipefail the binary's
  # SIGPIPE on its next line (kubectl prints two) would read as a mismatch.
  out="$("$bin" "$@" 2>/dev/null)" || return 1
  [[ $out == *"$expected"* ]]
}

# ---------------------------------------------------------------------------------------------
step "checking prerequisites (go, disk space) for Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION"
[[ -n $HELM_VERSION ]] || fail "hack/k8s-versions.env pins no HELM_VERSION"
want_apiserver=1 want_scheduler=1 want_kcm=1 want_kubectl=1 want_etcd=1 want_helm=1
if [[ $FORCE == 0 ]]; then
  has_version "$BIN_DIR/kube-apiserver" "Kubernetes $K8S_VERSION" --version && want_apiserver=0
  has_version "$BIN_DIR/kube-scheduler" "Kubernetes $K8S_VERSION" --version && want_scheduler=0
  has_version "$BIN_DIR/kube-controller-manager" "Kubernetes $K8S_VERSION" --version && want_kcm=0
  has_version "$BIN_DIR/kubectl" "Client Version: $K8S_VERSION" version --client && want_kubectl=0
  has_version "$BIN_DIR/etcd" "etcd Version: ${ETCD_VERSION#v}" --version && want_etcd=0
  has_version "$BIN_DIR/helm" "$HELM_VERSION" version --short && want_helm=0
fi
if ((want_apiserver + want_scheduler + want_kcm + want_kubectl + want_etcd + want_helm == 0)); then
  say "all six binaries cached in $BIN_DIR, nothing to build"
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null 2>&1 ||
  fail "'go' is not on PATH" "install Go >= 1.26 (https://go.dev/doc/install) and re-run"
# Never let the go command fetch a different toolchain behind our back unless asked to.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
GO_HAVE="$(go env GOVERSION)"
GO_HAVE="${GO_HAVE#go}"

mkdir -p "$BIN_DIR" "$LOG_DIR" ||
  fail "cannot create $BIN_DIR" "set BERTH_CACHE to a writable directory"
if command -v flock >/dev/null 2>&1; then # util-linux; without it, builds are not serialised
  exec 9>"$VERSION_DIR/.build.lock"
  if ! flock -n 9; then
    say "another build-k8s is running for $K8S_VERSION; waiting for it to finish"
    flock 9
  fi
fi

for dir in "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"; do
  probe="$dir"
  while [[ ! -d $probe ]]; do probe="$(dirname "$probe")"; done
  free_kb="$(df -Pk "$probe" | awk 'NR==2 {print $4}')"
  if ((free_kb < MIN_FREE_GB * 1024 * 1024)); then
    fail "out of disk: only $((free_kb / 1024)) MiB free for $dir, a cold build needs ~${MIN_FREE_GB} GiB" \
      "free space there, or point BERTH_CACHE / GOMODCACHE / GOCACHE at a larger disk" \
      "(override the threshold with BERTH_BUILD_MIN_FREE_GB)"
  fi
done
say "go $GO_HAVE ($(command -v go)), GOPROXY=$(go env GOPROXY), cache $VERSION_DIR"

# ---------------------------------------------------------------------------------------------
step "resolving k8s.io/kubernetes@$K8S_VERSION, go.etcd.io/etcd/server/v3@$ETCD_VERSION and $HELM_MODULE@$HELM_VERSION from the module proxy"
SRC_DIR="$VERSION_DIR/src"
ETCD_SRC_DIR="$VERSION_DIR/etcd-src"
HELM_SRC_DIR="$VERSION_DIR/helm-src"
mkdir -p "$SRC_DIR" "$ETCD_SRC_DIR" "$HELM_SRC_DIR"
meta_log="$LOG_DIR/resolve.log"
(cd "$SRC_DIR" && GOFLAGS='' go list -m -json "k8s.io/kubernetes@$K8S_VERSION") >"$meta_log" 2>&1 ||
  diagnose "$meta_log"
K8S_GOMOD="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' "$meta_log")"
GO_REQUIRED="$(sed -n 's/.*"GoVersion": "\(.*\)".*/\1/p' "$meta_log")"
[[ -f $K8S_GOMOD ]] || fail "the proxy did not return go.mod for k8s.io/kubernetes@$K8S_VERSION (see $meta_log)"
if [[ -n $GO_REQUIRED && "$(printf '%s\n%s\n' "$GO_REQUIRED" "$GO_HAVE" | sort -V | head -n1)" != "$GO_REQUIRED" ]]; then
  fail "k8s.io/kubernetes@$K8S_VERSION needs go >= $GO_REQUIRED, found go $GO_HAVE" \
    "install a newer Go, or allow a toolchain download with GOTOOLCHAIN=go${GO_REQUIRED}+auto"
fi

# Staging modules (k8s.io/api, k8s.io/client-go, ...) are required at v0.0.0 and replaced by
# ./staging/... in k8s.io/kubernetes's own go.mod; those replaces do not apply to a dependency,
# so pin each required one to its published v0.<minor>.<patch>, as scheduler-plugins does.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
required_staging="$(awk '/^require/,/^\)/' "$K8S_GOMOD" | awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' | sort -u)"
[[ -n $required_staging ]] || fail "found no staging modules in $K8S_GOMOD; is $K8S_VERSION a k8s.io/kubernetes release?"
{
  echo "// Generated by hack/build-k8s.sh: builds upstream binaries; not part of Berth."
  echo "module berth.local/k8s-build"
  echo
  echo "go ${GO_REQUIRED:-1.26.0}"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  for m in $required_staging; do echo "	$m => $m $STAGING_VERSION"; done
  echo ")"
} >"$SRC_DIR/go.mod"
cat >"$ETCD_SRC_DIR/main.go" <<'EOF'
// Generated by hack/build-k8s.sh: the etcd server binary, built from the etcdmain package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
printf '// Generated by hack/build-k8s.sh.\nmodule berth.local/etcd-build\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
  "${GO_REQUIRED:-1.26.0}" "$ETCD_VERSION" >"$ETCD_SRC_DIR/go.mod"
# helm as a dependency of a module of our own; `go get` raises the go line to what helm's go.mod
# declares (its own k8s.io/* requirements, independent of K8S_VERSION's, apply as they are).
printf '// Generated by hack/build-k8s.sh.\nmodule berth.local/helm-build\n\ngo %s\n\nrequire %s %s\n' \
  "${GO_REQUIRED:-1.26.0}" "$HELM_MODULE" "$HELM_VERSION" >"$HELM_SRC_DIR/go.mod"

if ((want_apiserver + want_scheduler + want_kcm + want_kubectl > 0)); then
  say "  downloading modules for kube-apiserver, kube-scheduler, kube-controller-manager, kubectl (go get)"
  run_logged "$SRC_DIR" "$LOG_DIR/go-get-k8s.log" go get \
    "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
fi
if ((want_etcd > 0)); then
  say "  downloading modules for etcd (go get)"
  run_logged "$ETCD_SRC_DIR" "$LOG_DIR/go-get-etcd.log" go get "go.etcd.io/etcd/server/v3/etcdmain@$ETCD_VERSION"
fi
if ((want_helm > 0)); then
  say "  downloading modules for helm (go get)"
  run_logged "$HELM_SRC_DIR" "$LOG_DIR/go-get-helm.log" go get "$HELM_MODULE/cmd/helm@$HELM_VERSION"
fi

# ---------------------------------------------------------------------------------------------
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
K8S_MINOR="${K8S_VERSION#v1.}"
K8S_MINOR="${K8S_MINOR%%.*}"
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
  K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$BUILD_DATE"
done

# build_one WANT NAME DIR PKG LDFLAGS VERSION-CHECK-ARGS...
build_one() {
  local want="$1" name="$2" dir="$3" pkg="$4" ldflags="$5" expected="$6"
  shift 6
  step "building $name ($pkg) ..."
  if [[ $want == 0 ]]; then
    say "  cached: $BIN_DIR/$name"
    return
  fi
  local tmp="$BIN_DIR/.$name.tmp"
  run_logged "$dir" "$LOG_DIR/build-$name.log" go build -v -trimpath -ldflags="$ldflags" -o "$tmp" "$pkg"
  if ! has_version "$tmp" "$expected" "$@"; then
    local got
    got="$("$tmp" "$@" 2>&1 | head -n1 || true)"
    rm -f "$tmp"
    fail "the freshly built $name does not report '$expected' (got: $got)"
  fi
  mv -f "$tmp" "$BIN_DIR/$name"
  say "  $BIN_DIR/$name ($(du -h "$BIN_DIR/$name" | cut -f1))"
}

build_one $want_apiserver kube-apiserver "$SRC_DIR" k8s.io/kubernetes/cmd/kube-apiserver \
  "$K8S_LDFLAGS" "Kubernetes $K8S_VERSION" --version
build_one $want_scheduler kube-scheduler "$SRC_DIR" k8s.io/kubernetes/cmd/kube-scheduler \
  "$K8S_LDFLAGS" "Kubernetes $K8S_VERSION" --version
build_one $want_kcm kube-controller-manager "$SRC_DIR" k8s.io/kubernetes/cmd/kube-controller-manager \
  "$K8S_LDFLAGS" "Kubernetes $K8S_VERSION" --version
build_one $want_kubectl kubectl "$SRC_DIR" k8s.io/kubernetes/cmd/kubectl \
  "$K8S_LDFLAGS" "Client Version: $K8S_VERSION" version --client
build_one $want_etcd etcd "$ETCD_SRC_DIR" berth.local/etcd-build \
  "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module" "etcd Version: ${ETCD_VERSION#v}" --version
# helm's Makefile sets its version the same way (LDFLAGS: internal/version.version); without it
# the binary reports only its minor line ("v4.3").
build_one $want_helm helm "$HELM_SRC_DIR" "$HELM_MODULE/cmd/helm" \
  "-s -w -X $HELM_MODULE/internal/version.version=$HELM_VERSION -X $HELM_MODULE/internal/version.gitTreeState=clean" \
  "$HELM_VERSION" version --short

STEP=$TOTAL_STEPS
say "all six binaries ready in $BIN_DIR ($((SECONDS - START_ALL))s)"
echo "$BIN_DIR"
