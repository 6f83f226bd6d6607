#!/usr/bin/env bash
# Regenerates tests/plugins/dynamicresources/testdata/allocator_cases.jsonl:
# upstream's shared structured-allocator test cases
# (k8s.io/dynamic-resource-allocation structured/internal/allocatortesting,
# TestAllocator) with their inputs and the answer of the implementation
# v1.36's default feature gates select ("incubating"), one JSON object per
# line. It runs upstream's own test against upstream's allocator in a
# temporary copy of the module from the Go module cache; each case is written
# only after upstream's assertions for it passed (hack/dra-allocator-cases/
# dump.go). And testdata/allocator_random_answers.jsonl: the answers of
# upstream's incubating allocator (hack/dra-allocator-cases/answer.go) to
# generated problems (tests/plugins/dynamicresources/allocator_problems.py,
# seed 1, the first 1000; those whose search takes at most 2000 steps), which
# the test generates again. Needs Go and the module's
# dependencies (the Go module proxy).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/k8s-versions.env
. "$root/hack/k8s-versions.env"
version="${DRA_MODULE_VERSION:-v0.${K8S_VERSION#v1.}}"
modcache=$(go env GOMODCACHE)
src="$modcache/k8s.io/dynamic-resource-allocation@$version"
[ -d "$src" ] || go mod download "k8s.io/dynamic-resource-allocation@$version"
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src" "$work/dra"
chmod -R u+w "$work/dra"
pkg="$work/dra/structured/internal/allocatortesting"
cp "$root/hack/dra-allocator-cases/dump.go" "$pkg/zz_berth_dump.go"
# Call dumpCase once a case's assertions passed (before the optional
# allocateOne count check, which dumpCase records itself).
anchor='			if expectNumAllocateOneInvocations := tc.expectNumAllocateOneInvocations; expectNumAllocateOneInvocations > 0 {'
grep -qF "$anchor" "$pkg/allocator_testing.go" || { echo "gen-dra-allocator-cases: anchor not found in allocator_testing.go" >&2; exit 1; }
python3 - "$pkg/allocator_testing.go" "$anchor" <<'PY'
import sys
path, anchor = sys.argv[1], sys.argv[2]
text = open(path).read()
text = text.replace(anchor, "\t\t\tdumpCase(name, tc, tc.node, allocator, results, err)\n" + anchor, 1)
open(path, "w").write(text)
PY
out="$root/tests/plugins/dynamicresources/testdata/allocator_cases.jsonl"
mkdir -p "$(dirname "$out")"
tmp="$work/cases.jsonl"
(cd "$work/dra" && BERTH_DUMP_CASES="$tmp" go test -count=1 -run '^TestAllocator$' ./structured/internal/incubating/ >"$work/test.log" 2>&1) || {
  tail -50 "$work/test.log" >&2; echo "gen-dra-allocator-cases: upstream's test failed" >&2; exit 1; }
python3 - "$tmp" "$out" <<'PY'
import json, sys
cases = [json.loads(line) for line in open(sys.argv[1])]
cases.sort(key=lambda c: c["name"])
with open(sys.argv[2], "w") as f:
    for c in cases:
        f.write(json.dumps(c, sort_keys=True) + "\n")
print(f"gen-dra-allocator-cases: {len(cases)} cases -> {sys.argv[2]}")
PY
mkdir -p "$work/dra/structured/internal/berthanswer"
cp "$root/hack/dra-allocator-cases/answer.go" "$work/dra/structured/internal/berthanswer/main.go"
(cd "$work/dra" && go build -o "$work/answer" ./structured/internal/berthanswer/)
random_out="$root/tests/plugins/dynamicresources/testdata/allocator_random_answers.jsonl"
python3 "$root/tests/plugins/dynamicresources/allocator_problems.py" 1 1000 | "$work/answer" >"$work/random.jsonl"
python3 - "$work/random.jsonl" "$random_out" <<'PY'
import json, sys
cases = [json.loads(line) for line in open(sys.argv[1])]
kept = [c for c in cases if c.get("numAllocateOne", 0) <= 2000]
with open(sys.argv[2], "w") as f:
    for c in kept:
        answer = {k: c[k] for k in ("name", "results", "error", "numAllocateOne") if c.get(k) is not None}
        f.write(json.dumps(answer, sort_keys=True, separators=(",", ":")) + "\n")
print(f"gen-dra-allocator-cases: {len(kept)} of {len(cases)} random problems -> {sys.argv[2]}")
PY
