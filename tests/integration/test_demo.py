"""``berth demo --once`` end to end: its own cluster, plugin server and shim, the printed
outcome of both profiles (``berth-demo``, upstream's defaults; ``custom-scheduler``, the seed
plugins with the NodeMetrics and PodGroup they read), and nothing left running afterwards.
Then ``unexpected()``, the demo's own check, on outcomes that differ from the expected ones."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from berth.dev.demo import (
    CONFIG_YAML,
    NAMESPACE,
    PODS,
    PROFILE,
    SEED_PODS,
    SEED_PROFILE,
    PodOutcome,
    unexpected,
)
from berth.dev.localcluster.cluster import default_state_dir
from berth.dev.localcluster.testing import processes_mentioning

pytestmark = pytest.mark.integration

DEMO_TIMEOUT = 240.0
DEV = "gpu.nvidia.com/demo-medium/gpu-"  # GPUCardFit's card id of the demo's DRA devices


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def test_demo_once(tmp_path: Path, k8s_bin_dir: Path) -> None:
    state = tmp_path / "demo"
    assert state / "cluster" != default_state_dir()  # never a developer's `berth cluster up`
    # BERTH_DEMO_DIR: should --state-dir ever be ignored, fail rather than use ~/.cache/berth.
    env = {**os.environ, "BERTH_K8S_BIN_DIR": str(k8s_bin_dir), "BERTH_DEMO_DIR": "/nonexistent"}
    env.pop("KUBECONFIG", None)
    # On a timeout, run() kills the demo; its processes die with it (--once).
    argv = [sys.executable, "-m", "berth", "demo", "--once", "--no-build"]
    done = subprocess.run(
        [*argv, "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        env=env,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output

    # Progress on every step, then the table on stdout.
    for step in range(1, 7):
        assert f"[demo {step}/6]" in done.stderr
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^  (\S+)\s+cpu .*?\s{2,}(\S+)$", done.stdout, re.MULTILINE)
    }
    assert set(rows) == {p.name for p in PODS}, done.stdout
    # The berth-demo table is the same as before the seed profile existed.
    assert f"Pods in namespace {NAMESPACE} (schedulerName {PROFILE}):\n  POD  " in done.stdout
    for pod in PODS:
        if pod.fits_on is None:
            assert rows[pod.name] == "Pending", done.stdout
        else:
            assert rows[pod.name].startswith("demo-"), done.stdout
        if pod.fits_on:
            assert rows[pod.name] == pod.fits_on, done.stdout
    # Upstream's FitError text, from the PodScheduled condition the shim wrote.
    # Every node is unresolvable for them (cordoned, tainted for GPU pods, or less
    # allocatable than the request): DefaultPreemption's message says preemption cannot help.
    not_helpful = (
        " no new claims to deallocate, preemption: 0/5 nodes are available: "
        "5 Preemption is not helpful for scheduling."
    )
    others = (
        "0/5 nodes are available: 1 node(s) had untolerated taint(s), "
        "1 node(s) were unschedulable, "
    )
    expected = {
        "too-much-cpu": others + "3 Insufficient cpu." + not_helpful,
        "too-much-memory": others + "3 Insufficient memory." + not_helpful,
        "wants-gpu": others + "3 Insufficient nvidia.com/gpu." + not_helpful,
    }
    for name, message in expected.items():
        assert re.search(rf"^  {re.escape(name)}\s+{re.escape(message)}$", done.stdout, re.M), (
            done.stdout
        )
    assert "--once: everything stops now" in done.stdout
    check_seed_outcomes(done.stdout, done.stderr)

    # Everything it started is gone: by the pids it printed, and by anything naming its dir.
    started = re.search(r"^Processes: (.*)$", done.stderr, re.MULTILINE)
    assert started is not None, done.stderr
    pids = [int(p) for p in re.findall(r"pid (\d+)", started.group(1))]
    assert len(pids) == 5, done.stderr  # etcd, kube-apiserver, kube-controller-manager, serve, shim
    assert [pid for pid in pids if _alive(pid)] == []
    assert processes_mentioning(str(state)) == []
    assert not (state / "demo.json").exists()
    assert not (state / "cluster" / "state.json").exists()
    assert (state / "logs" / "shim.log").is_file()
    assert (state / "logs" / "serve.log").is_file()


def _section(stdout: str, heading: str) -> list[str]:
    """The lines of the block that starts with a line beginning ``heading``, up to the next
    blank line (heading excluded)."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
    assert len(starts) == 1, (heading, stdout)
    block = []
    for line in lines[starts[0] + 1 :]:
        if not line.strip():
            break
        block.append(line)
    return block


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def check_seed_outcomes(stdout: str, stderr: str) -> None:
    """The custom-scheduler section: the seeds' verification steps, as the demo printed
    them from the API server (nodes, pods and their annotations, PodScheduled conditions)."""
    # What the seed plugins read, as created in step 3 and listed back for the node table.
    assert "demo-large 90% CPU" in stderr, stderr
    assert "ClusterRole berth-demo:seed-plugins for system:kube-scheduler" in stderr, stderr
    nodes = {_cells(line)[0]: _cells(line) for line in _section(stdout, "Nodes (")[1:]}
    assert nodes["demo-small"][3:] == ["10%", "-", "labelled avoid=true"], nodes
    assert nodes["demo-medium"][3:] == ["20%", "ResourceSlices: gpu-0 40Gi, gpu-1 30Gi"], nodes
    assert nodes["demo-large"][3:] == ["90%", "-"], nodes
    assert nodes["demo-gpu"][3:] == [
        "10%",
        "GFD labels: 1 x 24576Mi NVIDIA-L4",
        "tainted nvidia.com/gpu",
    ], nodes
    assert "ResourceSlice demo-medium-gpu.nvidia.com (resource.k8s.io/v1" in stderr, stderr

    heading = f"Pods in namespace {NAMESPACE} (schedulerName {SEED_PROFILE}:"
    table = _section(stdout, heading)
    assert _cells(table[0]) == ["POD", "PLUGIN", "WHAT MATTERS", "NODE"], table
    rows = {_cells(line)[0]: _cells(line)[1:] for line in table[1:]}
    assert list(rows) == [p.name for p in SEED_PODS], stdout
    plugin = {name: row[0] for name, row in rows.items()}
    node = {name: row[2] for name, row in rows.items()}
    note = {name: row[3] if len(row) > 3 else "" for name, row in rows.items()}
    assert {p.name: p.plugin for p in SEED_PODS} == plugin
    why = {
        _cells(line)[0]: line.split(None, 1)[1].strip()
        for line in _section(stdout, f"Why the Pending {SEED_PROFILE} pods")
    }

    # AvoidNodePlugin: pinned to the node labelled avoid=true, stays Pending with the seed's
    # reason (scheduler-framework-plugins.txt: "node <name> is labeled avoid=true").
    assert node["avoid-me"] == "Pending", stdout
    assert "1 node demo-small is labeled avoid=true" in why["avoid-me"], why

    # LowCpuScheduler: the pod that prefers demo-large (NodeMetrics: 90% CPU) lands elsewhere;
    # pinned to demo-large, a pod waits with "cpu usage too high".
    assert node["likes-large"] == "demo-medium", stdout
    assert note["likes-large"] == "not demo-large: its NodeMetrics say 90% CPU used", stdout
    assert node["pinned-hot"] == "Pending", stdout
    assert "1 cpu usage too high" in why["pinned-hot"], why

    # GPUCardFit over ResourceSlices: devices of 40Gi and 30Gi, two pods of 40Gi: one gets
    # gpu-0 (written on the pod by PreBind), the other waits with "no free GPU card
    # (ResourceSlices)"; a 30Gi pod gets gpu-1. Over GFD labels: the L4 pod gets card 0.
    rivals = ["gpu-40gi-a", "gpu-40gi-b"]
    winners = [n for n in rivals if node[n] != "Pending"]
    assert len(winners) == 1, stdout
    (loser,) = set(rivals) - set(winners)
    assert node[winners[0]] == "demo-medium", stdout
    device = "gpu.nvidia.com/demo-medium/gpu-"
    assert note[winners[0]].startswith(f"GPU card {device}0 (berth.dev/gpu-card"), stdout
    assert note[loser] == "", stdout
    assert "no free GPU card (ResourceSlices)" in why[loser], why
    assert node["gpu-30gi"] == "demo-medium", stdout
    assert note["gpu-30gi"].startswith(f"GPU card {device}1 "), stdout
    assert node["gpu-l4"] == "demo-gpu", stdout
    assert note["gpu-l4"].startswith("GPU card 0 "), stdout

    # Coscheduling: PodGroup demo-gang, minMember 3, its 3 pods bound together.
    for name in ("gang-1", "gang-2", "gang-3"):
        assert node[name] == "demo-medium", stdout
        assert note[name] == "PodGroup demo-gang: 3 of 3 bound", stdout
    assert set(why) == {"avoid-me", "pinned-hot", loser}, why


def test_demo_config_loads_with_both_profiles() -> None:
    from berth.framework.config import parse_config
    from berth.plugins.registry import REGISTRY

    config = parse_config(yaml.safe_load(CONFIG_YAML), "berth demo's configuration", REGISTRY)
    profiles = {p.scheduler_name: p for p in config.profiles}
    assert list(profiles) == [PROFILE, SEED_PROFILE]
    seed = profiles[SEED_PROFILE].plugins
    assert [r.name for r in seed["filter"]][-3:] == [
        "GPUCardFit",
        "AvoidNodePlugin",
        "LowCpuScheduler",
    ]
    assert "LowCpuScheduler" in [r.name for r in seed["score"]]
    assert [r.name for r in seed["permit"]] == ["Coscheduling"]
    # VolumeBinding comes with upstream's default plugins (multiPoint), before the seed's.
    assert [r.name for r in seed["preBind"]] == ["VolumeBinding", "DynamicResources", "GPUCardFit"]
    assert profiles[SEED_PROFILE].plugin_args["LowCpuScheduler"].metrics_poll_seconds == 1
    # berth-demo is upstream's defaults, nothing of the seeds.
    plain = {r.name for refs in profiles[PROFILE].plugins.values() for r in refs}
    assert not plain & {"GPUCardFit", "AvoidNodePlugin", "LowCpuScheduler", "Coscheduling"}


def _expected_outcomes() -> dict[str, PodOutcome]:
    """The outcomes the demo expects (gpu-40gi-a winning the card)."""
    got = {}
    for p in PODS:
        node = None if p.fits_on is None else (p.fits_on or "demo-small")
        message = "" if node else "0/5 nodes are available: 3 Insufficient cpu."
        got[p.name] = PodOutcome(p.name, p.requests, node, message, settled=True)
    for s in SEED_PODS:
        expect = s.lose if s.lose is not None and s.name == "gpu-40gi-b" else s.expect
        got[s.name] = PodOutcome(
            s.name,
            "cpu 100m, memory 128Mi",
            expect.node,
            "" if expect.node else f"0/5 nodes are available: 1 {expect.reason}.",
            settled=True,
            scheduler=SEED_PROFILE,
            card=expect.card or "",
            group=s.group,
        )
    return got


@pytest.mark.parametrize(
    ("name", "change", "problem"),
    [
        ("avoid-me", {"node": "demo-small", "message": ""}, "avoid-me should stay Pending"),
        ("avoid-me", {"message": "0/5 nodes are available: 5 other."}, "lacks 'node demo-small"),
        ("likes-large", {"node": "demo-large"}, "likes-large should be bound to demo-medium"),
        ("pinned-hot", {"node": "demo-large", "message": ""}, "pinned-hot should stay Pending"),
        ("gpu-40gi-b", {"node": "demo-medium", "card": DEV + "0", "message": ""}, "2 were bound"),
        (
            "gpu-40gi-a",
            {"node": None, "message": "no free GPU card (ResourceSlices)", "card": ""},
            "0 were bound",
        ),
        ("gpu-40gi-a", {"card": DEV + "1"}, f"gpu-40gi-a should have GPU card {DEV}0"),
        ("gpu-40gi-b", {"card": DEV + "0"}, "gpu-40gi-b is Pending but carries berth.dev/gpu-card"),
        ("gpu-30gi", {"card": ""}, f"gpu-30gi should have GPU card {DEV}1 written on it"),
        ("gpu-l4", {"node": "demo-medium"}, "gpu-l4 should be bound to demo-gpu"),
        ("gang-2", {"node": None, "message": "timed out"}, "gang-2 should be bound"),
    ],
)
def test_unexpected_names_each_seed_outcome_that_differs(
    name: str, change: dict[str, str | None], problem: str
) -> None:
    got = _expected_outcomes()
    assert unexpected(list(got.values())) == []
    # The other 40Gi pod winning is as good.
    swapped = dict(got)
    swapped["gpu-40gi-a"], swapped["gpu-40gi-b"] = (
        dataclasses.replace(got["gpu-40gi-b"], name="gpu-40gi-a"),
        dataclasses.replace(got["gpu-40gi-a"], name="gpu-40gi-b"),
    )
    assert unexpected(list(swapped.values())) == []

    got[name] = dataclasses.replace(got[name], **change)  # type: ignore[arg-type]
    problems = unexpected(list(got.values()))
    assert any(problem in p for p in problems), problems
    del got[name]
    assert f"pod {name} is missing" in unexpected(list(got.values()))


def test_demo_down_without_a_demo(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "berth", "demo", "--down", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "nothing to stop" in done.stderr
