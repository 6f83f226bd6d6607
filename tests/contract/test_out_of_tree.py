"""An out-of-tree plugin as a user gets one: examples/out-of-tree-plugin,
pip-installed into this venv, found by ``berth plugins``, ``berth place``
and ``berth serve`` through its ``berth.plugins`` entry point; separate
processes, real gRPC.

The fixture installs the example for this module only and uninstalls it
afterwards, so nothing needs it preinstalled and the venv is left as found
(had the distribution been installed before, it stays installed, rebuilt from
the current sources)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from berth.cli.place import load_inputs
from berth.client import ClusterStateLog, SchedulingClient, open_channel
from berth.framework.events import node_scheduling_properties_change
from berth.framework.testing import make_node, make_pod
from berth.shim.hints import HintMap
from berth.shim.queue import BACKOFF, UNSCHEDULABLE, SchedulingQueue
from berth.shim.service import PluginService
from tests.unit.shim.fakes import FakeClock
from tests.unit.shim.test_queue import T0, FakePlugins

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "out-of-tree-plugin"
CONFIG = EXAMPLE / "scheduler-config.yaml"
CLUSTER = EXAMPLE / "cluster.yaml"
POD = EXAMPLE / "pod.yaml"
DIST = "berth-example-plugin"
ENTRY_POINT = "PreferLabel = berth_example_plugin.plugin:PreferLabel"
REJECTION = "node(s) had label example.com/pool with a value other than 'general'"


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def berth(*args: str) -> subprocess.CompletedProcess[str]:
    return run("-m", "berth", *args, timeout=60)


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    out = run("-m", "pip", "--disable-pip-version-check", *args)
    assert out.returncode == 0, f"pip {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    was_installed = run("-m", "pip", "show", "--quiet", DIST).returncode == 0
    # Built from a copy: a build leaves build/ and *.egg-info behind.
    source = tmp_path_factory.mktemp("example") / "out-of-tree-plugin"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__*"))
    # Offline when the venv has setuptools (Python 3.11's venvs do); otherwise
    # pip fetches it into an isolated build environment.
    offline = (
        ["--no-build-isolation", "--no-index"] if importlib.util.find_spec("setuptools") else []
    )
    pip("install", "--quiet", "--no-deps", *offline, str(source))
    try:
        yield
    finally:
        if not was_installed:
            pip("uninstall", "--quiet", "--yes", DIST)


def test_berth_plugins_lists_it_with_its_distribution() -> None:
    out = berth("plugins")
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert re.fullmatch(
        rf"PreferLabel\s+filter, score\s+no\s+{DIST} 0\.1\.0, entry point {ENTRY_POINT}",
        rows["PreferLabel"],
    ), rows["PreferLabel"]
    assert re.search(r"NodeResourcesFit\s.*\syes, weight 1\s+in-tree$", rows["NodeResourcesFit"])
    args = out.stdout[out.stdout.index("  PreferLabel: PreferLabelArgs\n") :].splitlines()
    assert args[1].split() == ["labelKey", "str", "required"]
    assert args[2].split() == ["labelValue", "str", "required"]
    assert out.stdout.rstrip().endswith(
        f'"berth.plugins" entry points of the distributions installed in {sys.prefix}: '
        f"{DIST} 0.1.0 (PreferLabel)."
    )
    # berth serve --list-plugins prints the same and exits.
    listed = berth("serve", "--list-plugins")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == out.stdout


def test_berth_place_uses_it_for_a_placement_only_it_explains() -> None:
    # The default plugins alone go for the node with the most free capacity.
    alone = berth(
        "place", "--cluster", str(CLUSTER), "--pod", str(POD), "--profile", "default-scheduler"
    )
    assert alone.returncode == 0, alone.stderr
    assert "Placement: gpu-1" in alone.stdout
    assert "PreferLabel" not in alone.stdout

    out = berth("place", "--cluster", str(CLUSTER), "--pod", str(POD), "--config", str(CONFIG))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "profile berth-example" in text
    assert "Placement: general-1" in text
    assert f"gpu-1      UnschedulableAndUnresolvable by PreferLabel: {REJECTION}" in text
    table = text[text.index("Scores (normalised x weight):") :].splitlines()[1:]
    column = table[0].split().index("PreferLabel")
    scores = {row.split()[0]: row.split()[column] for row in table[1:] if row.strip()}
    # Normalised 100 x weight 5 for the labelled node, 0 for the other.
    assert scores == {"general-1": "500", "big-1": "0"}
    assert re.search(r"general-1\s.*<- chosen", text)


@dataclass
class Served:
    port: int
    # What the server wrote before it listened (logs and the listening line).
    startup: str


@pytest.fixture
def served_example() -> Iterator[Served]:
    """``berth serve --config scheduler-config.yaml`` in its own process."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "berth",
            "serve",
            "--config",
            str(CONFIG),
            "--listen",
            "127.0.0.1:0",
            "--insecure-plaintext",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if "listening on port" in line:
            break
    else:
        proc.wait(timeout=30)
        pytest.fail("berth serve did not start:\n" + "".join(lines))
    try:
        yield Served(int(lines[-1].rsplit(" ", 1)[1]), "".join(lines))
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


async def test_berth_serve_serves_it_and_schedule_shows_its_score(served_example: Served) -> None:
    # The server says where its out-of-tree plugins come from.
    assert (
        f"out-of-tree plugins: PreferLabel ({DIST} 0.1.0, entry point {ENTRY_POINT})"
        in served_example.startup
    )
    log, pod = load_inputs(str(CLUSTER), str(POD))
    async with open_channel(f"127.0.0.1:{served_example.port}") as channel:
        resp = await SchedulingClient(channel, log).schedule(
            "berth-example", pod, explain=True, seed=1
        )
    assert resp.node == "general-1", resp
    scores = {s.node: dict(s.plugins) for s in resp.scores}
    assert scores["general-1"]["PreferLabel"] == 500
    assert scores["big-1"]["PreferLabel"] == 0
    (rejected,) = resp.diagnosis.rejected
    assert (rejected.node, rejected.status.plugin) == ("gpu-1", "PreferLabel")
    assert list(rejected.status.reasons) == [REJECTION]


def test_a_config_naming_an_unknown_plugin_says_where_berth_looked(tmp_path: Path) -> None:
    cfg = tmp_path / "scheduler-config.yaml"
    cfg.write_text(CONFIG.read_text().replace("name: PreferLabel", "name: NoSuchPlugin", 1))
    looked = (
        'Berth looked in the in-tree registry (plugins/registry.py) and in the "berth.plugins" '
        f"entry points of the distributions installed in {sys.prefix}: {DIST} 0.1.0 "
        "(PreferLabel); to add a plugin, pip install <your package> into that environment"
    )
    for command in (
        ["place", "--cluster", str(CLUSTER), "--pod", str(POD), "--config", str(cfg)],
        ["serve", "--config", str(cfg), "--listen", "127.0.0.1:0", "--insecure-plaintext"],
        # Refused before it looks for a cluster.
        ["shim", "--config", str(cfg)],
    ):
        out = berth(*command)
        assert out.returncode == 2, (command, out.stdout)
        assert (
            f'{cfg}: profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin "NoSuchPlugin"'
        ) in out.stderr
        assert looked in out.stderr, out.stderr


def test_the_examples_own_tests_pass_with_the_project_venv() -> None:
    out = run("-m", "pytest", "-p", "no:cacheprovider", "-q", str(EXAMPLE))
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"\d+ passed", out.stdout)


async def test_its_declared_event_moves_the_pods_it_rejected(served_example: Served) -> None:
    """The shim's queue with the hint map DescribeProfiles gives for the
    example's profile, its hints asked of the out-of-tree plugin over gRPC
    (QueueingHints): a pod PreferLabel rejected moves when a node is relabelled
    to the wanted value, not when it is relabelled to another one, nor on an
    event PreferLabel did not register."""
    service = PluginService.over_grpc(
        f"127.0.0.1:{served_example.port}", ClusterStateLog(), timeout=10.0
    )
    try:
        profiles = await service.describe()
        events = [
            (e.resource, e.action_type, e.has_hint)
            for e in profiles["berth-example"].events
            if e.plugin == "PreferLabel"
        ]
        # Node Add|UpdateNodeLabel with its hint, and the UpdateNodeTaint the
        # framework adds for a plugin that registers Node/Add.
        assert events == [("Node", 1 | 8, True), ("Node", 16, False)]
        asked: list[int] = []

        async def ask(*args: Any) -> list[tuple[str, ...]]:
            asked.append(len(args[3]))
            return await service.queueing_hints(*args)

        plugins = FakePlugins()
        q = SchedulingQueue(plugins.sort_keys, plugins.pre_enqueue, clock=FakeClock(T0))
        q.set_hints(HintMap.from_profiles({"berth-example": profiles["berth-example"].events}), ask)
        pod = make_pod("p").uid("p").obj()
        q.add(pod, "berth-example")
        await q.admit_incoming()
        (qp,) = await q.pop_batch(1)
        q.done_unschedulable(qp, frozenset({"PreferLabel"}))

        old = make_node("n").label("example.com/pool", "gpu").obj()
        to_batch = make_node("n").label("example.com/pool", "batch").obj()
        to_general = make_node("n").label("example.com/pool", "general").obj()
        alloc = make_node("n").label("example.com/pool", "gpu").allocatable(cpu="8").obj()
        for new in (to_batch, alloc):
            for event in node_scheduling_properties_change(new, old):
                q.move(event, old, new)
        assert await q.process_hints() == 0
        assert q.get("p").where == UNSCHEDULABLE  # type: ignore[union-attr]
        for event in node_scheduling_properties_change(to_general, old):
            q.move(event, old, to_general)
        assert await q.process_hints() == 1
        assert q.get("p").where == BACKOFF  # type: ignore[union-attr]
        # The relabels were asked about; the allocatable change was not.
        assert asked == [1, 1]
    finally:
        await service.close()
