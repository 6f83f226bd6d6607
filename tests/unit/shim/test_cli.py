"""berth shim's command line: what it sets up before the scheduler runs."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import berth.shim.app
from berth.cli import main
from berth.shim.cli import GIL_SWITCH_INTERVAL


@pytest.fixture
def switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_shim_runs_with_a_short_gil_switch_interval(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None
) -> None:
    """The event writers and informers wait on the API server from threads; each
    answer needs the GIL back from the event loop, which CPython hands over after
    its switch interval. The shim runs with 1 ms instead of 5 ms."""
    seen: list[float] = []

    async def fake_run(settings: Any) -> int:
        seen.append(sys.getswitchinterval())
        return 0

    monkeypatch.setattr(berth.shim.app, "run", fake_run)
    sys.setswitchinterval(0.005)

    assert main(["shim", "--allow-default-scheduler"]) == 0
    assert seen == [0.001]
    assert seen == [GIL_SWITCH_INTERVAL]


@pytest.fixture
def collector() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_the_shim_runs_its_start_up_with_the_collector_paused_and_leaves_it_on(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None, collector: None
) -> None:
    """The cyclic collector is off while start-up creates its long-lived objects:
    the shim's run (shim/app.py) finds it paused, resumes it once the caches have
    synced (resume_collector, tested below), and the command leaves it on."""
    seen: list[bool] = []

    async def fake_run(settings: Any) -> int:
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(berth.shim.app, "run", fake_run)
    assert main(["shim", "--allow-default-scheduler"]) == 0
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.parametrize("how", ["synced", "limit", "cancelled"])
def test_the_collector_resumes_with_start_ups_objects_frozen(how: str, collector: None) -> None:
    """Once the caches have synced, after the limit if they have not, or at once when
    the shim stops first: every object that exists by then is frozen (no collection
    traverses it again) and the collector is on."""

    async def go() -> None:
        synced = asyncio.Event()
        task = asyncio.create_task(
            berth.shim.app.resume_collector(synced, limit=0.05 if how == "limit" else 30.0)
        )
        await asyncio.sleep(0.01)
        assert not gc.isenabled() and gc.get_freeze_count() == 0  # still waiting
        if how == "synced":
            synced.set()
        elif how == "cancelled":
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    gc.unfreeze()
    gc.disable()
    asyncio.run(go())
    assert gc.isenabled()
    assert gc.get_freeze_count() > 10_000  # the modules' objects, not a handful


def test_a_refused_start_leaves_the_collector_on(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None, collector: None
) -> None:
    started = _never_runs(monkeypatch)
    assert main(["shim"]) == 2  # default-scheduler without --allow-default-scheduler
    assert started == []
    assert gc.isenabled()


def _never_runs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    started: list[Any] = []

    async def fake_run(settings: Any) -> int:
        started.append(settings)
        return 0

    monkeypatch.setattr(berth.shim.app, "run", fake_run)
    return started


def test_no_config_refuses_default_scheduler_and_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A profile named default-scheduler would race the cluster's kube-scheduler for every
    pod that names no scheduler: refused unless --allow-default-scheduler."""
    started = _never_runs(monkeypatch)
    assert main(["shim"]) == 2
    err = capsys.readouterr().err
    assert "without --config the one profile is 'default-scheduler'" in err
    assert "schedulerName: berth-scheduler" in err and "--allow-default-scheduler" in err
    assert started == []


def test_a_config_naming_default_scheduler_is_refused_naming_file_and_field(
    monkeypatch: pytest.MonkeyPatch,
    switch_interval: None,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    started = _never_runs(monkeypatch)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: mine\n- schedulerName: default-scheduler\n"
    )
    assert main(["shim", "--config", str(cfg)]) == 2
    assert f"{cfg}: profiles[1].schedulerName is 'default-scheduler'" in capsys.readouterr().err
    assert started == []
    assert main(["shim", "--config", str(cfg), "--allow-default-scheduler"]) == 0
    assert [p.scheduler_name for p in started[0].config.profiles] == ["mine", "default-scheduler"]


def test_a_config_without_default_scheduler_needs_no_flag(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None, tmp_path: Path
) -> None:
    started = _never_runs(monkeypatch)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: berth-scheduler\n"
    )
    assert main(["shim", "--config", str(cfg)]) == 0
    assert len(started) == 1


def test_explain_max_pods_reaches_the_scheduler_and_a_negative_one_is_refused(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None, capsys: pytest.CaptureFixture[str]
) -> None:
    started = _never_runs(monkeypatch)
    assert main(["shim", "--allow-default-scheduler", "--explain-max-pods", "7"]) == 0
    assert started[0].options.explain_entries == 7
    assert main(["shim", "--allow-default-scheduler", "--explain-max-pods", "-1"]) == 2
    assert "--explain-max-pods must be >= 0, got -1" in capsys.readouterr().err
    assert len(started) == 1


def test_bind_connections_default_is_the_schedulers_and_the_bind_only_loops(
    monkeypatch: pytest.MonkeyPatch, switch_interval: None
) -> None:
    """`--bind-connections` left out gives ShimOptions' default, and the benchmarks'
    bind-only loop binds over as many connections as the shim."""
    from berth.dev.bench_perf import BIND_CONNECTIONS
    from berth.shim.scheduler import ShimOptions

    seen: list[int] = []

    async def fake_run(settings: Any) -> int:
        seen.append(settings.options.bind_connections)
        return 0

    monkeypatch.setattr(berth.shim.app, "run", fake_run)
    assert main(["shim", "--allow-default-scheduler"]) == 0
    assert seen == [ShimOptions().bind_connections] == [BIND_CONNECTIONS] == [32]
