"""``berth demo --once`` end to end: its own cluster, plugin server and shim, the printed
outcome, and nothing left running afterwards."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from berth.demo import PODS
from berth.localcluster.cluster import default_state_dir
from berth.localcluster.testing import processes_mentioning

pytestmark = pytest.mark.integration

DEMO_TIMEOUT = 240.0


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
    for pod in PODS:
        if pod.fits_on is None:
            assert rows[pod.name] == "Pending", done.stdout
        else:
            assert rows[pod.name].startswith("demo-"), done.stdout
        if pod.fits_on:
            assert rows[pod.name] == pod.fits_on, done.stdout
    # Upstream's FitError text, from the PodScheduled condition the shim wrote.
    expected = {
        "too-much-cpu": "0/4 nodes are available: 1 node(s) were unschedulable, "
        "3 Insufficient cpu.",
        "too-much-memory": "0/4 nodes are available: 1 node(s) were unschedulable, "
        "3 Insufficient memory.",
        "wants-gpu": "0/4 nodes are available: 1 node(s) were unschedulable, "
        "3 Insufficient nvidia.com/gpu.",
    }
    for name, message in expected.items():
        assert re.search(rf"^  {re.escape(name)}\s+{re.escape(message)}$", done.stdout, re.M), (
            done.stdout
        )
    assert "--once: everything stops now" in done.stdout

    # Everything it started is gone: by the pids it printed, and by anything naming its dir.
    started = re.search(r"^Processes: (.*)$", done.stderr, re.MULTILINE)
    assert started is not None, done.stderr
    pids = [int(p) for p in re.findall(r"pid (\d+)", started.group(1))]
    assert len(pids) == 4, done.stderr
    assert [pid for pid in pids if _alive(pid)] == []
    assert processes_mentioning(str(state)) == []
    assert not (state / "demo.json").exists()
    assert not (state / "cluster" / "state.json").exists()
    assert (state / "logs" / "shim.log").is_file()
    assert (state / "logs" / "serve.log").is_file()


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
