"""Process records: stop only what we started, never a pid that now belongs to another program."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster.errors import StateError
from berth.dev.localcluster.process import (
    ProcessRecord,
    cmdline,
    is_ours,
    spawn,
    start_ticks,
    stop,
    wait_until,
)

SLEEP = shutil.which("sleep") or "/bin/sleep"


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], ProcessRecord]]:
    proc, record = spawn("sleeper", [SLEEP, "300"], tmp_path / "sleeper.log")
    yield proc, record
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_spawned_process_is_recognised_as_ours(
    sleeper: tuple[subprocess.Popen[bytes], ProcessRecord],
) -> None:
    _, record = sleeper
    assert is_ours(record)
    assert cmdline(record.pid)[0] == SLEEP
    assert start_ticks(record.pid) == record.start_ticks


def test_stop_terminates_and_reaps_our_process(
    sleeper: tuple[subprocess.Popen[bytes], ProcessRecord],
) -> None:
    proc, record = sleeper
    assert stop(record, grace=5) == f"stopped sleeper (pid {record.pid})"
    assert proc.poll() is not None
    assert not Path(f"/proc/{record.pid}").exists()


def test_stop_leaves_a_recycled_pid_alone(
    sleeper: tuple[subprocess.Popen[bytes], ProcessRecord],
) -> None:
    """Same pid, different start time: it is not the process we recorded."""
    proc, record = sleeper
    recycled = dataclasses.replace(record, start_ticks=record.start_ticks - 1)
    assert not is_ours(recycled)
    message = stop(recycled)
    assert "belongs to another program" in message
    assert proc.poll() is None  # still running


def test_stop_leaves_a_different_binary_alone(
    sleeper: tuple[subprocess.Popen[bytes], ProcessRecord],
) -> None:
    proc, record = sleeper
    other = dataclasses.replace(record, binary="/usr/local/bin/etcd")
    assert "left it alone" in stop(other)
    assert proc.poll() is None


def test_stop_of_an_exited_process_says_so(tmp_path: Path) -> None:
    proc, record = spawn("quick", ["/bin/true"], tmp_path / "quick.log")
    proc.wait()
    assert "already exited" in stop(record)


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    script = "trap '' TERM; echo ready; while true; do sleep 0.1; done"
    sh = shutil.which("sh") or "/bin/sh"
    proc, record = spawn("stubborn", [sh, "-c", script], tmp_path / "stubborn.log")
    ready, _ = wait_until(
        lambda: "ready" in (tmp_path / "stubborn.log").read_text(), timeout=10, interval=0.05
    )
    assert ready
    assert "killed stubborn" in stop(record, grace=0.5)
    assert proc.poll() is not None


def test_malformed_record_is_a_state_error() -> None:
    with pytest.raises(StateError):
        ProcessRecord.from_json({"name": "etcd", "pid": "x"})


def test_wait_until_reports_the_abort_reason() -> None:
    ready, why = wait_until(lambda: False, timeout=5, abort=lambda: "etcd exited with code 1")
    assert (ready, why) == (False, "etcd exited with code 1")


def test_wait_until_times_out() -> None:
    assert wait_until(lambda: False, timeout=0.2, interval=0.05) == (False, None)


def test_die_with_parent_takes_the_child_down_when_its_starter_is_killed(tmp_path: Path) -> None:
    """A starter killed by SIGKILL (e.g. a CI timeout) cannot clean up; the kernel does."""
    starter = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from berth.dev.localcluster.process import spawn\n"
        f"_, rec = spawn('sleeper', ['{SLEEP}', '300'], Path(sys.argv[1]), die_with_parent=True)\n"
        "print(rec.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", starter, str(tmp_path / "s.log")], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert cmdline(child) == [SLEEP, "300"]
    parent.kill()
    parent.wait()
    gone, _ = wait_until(lambda: cmdline(child) == [], timeout=10, interval=0.05)
    assert gone, f"pid {child} outlived its starter"


def test_orphaned_etcd_data_dirs_are_removed_and_used_or_fresh_ones_kept(
    tmp_path: Path,
) -> None:
    from berth.dev.localcluster.cluster import remove_orphaned_data_dirs

    orphan, used, fresh, other = (
        tmp_path / name for name in ("berth-etcd-orphan", "berth-etcd-used", "berth-etcd-new", "x")
    )
    for d in (orphan, used, fresh, other):
        d.mkdir()
    for d in (orphan, used, other):
        os.utime(d, (0, 0))  # long ago
    sh = shutil.which("sh") or "/bin/sh"
    proc, _ = spawn("user", [sh, "-c", "sleep 300; true", f"--data-dir={used}"], tmp_path / "u.log")
    try:
        assert remove_orphaned_data_dirs(tmp_path) == [orphan]
    finally:
        proc.kill()
        proc.wait()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "berth-etcd-new",
        "berth-etcd-used",
        "x",
    ]
