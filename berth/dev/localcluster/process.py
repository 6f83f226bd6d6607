"""Starting and stopping the control plane's processes, and only ever our own.

Every process is started in its own session (so a terminal's Ctrl-C aimed at `berth` or
pytest does not reach it; it is stopped deliberately) and recorded as a `ProcessRecord`: pid, binary path and the
kernel's start time for that pid. `stop` checks all three against /proc before sending a
signal, so a recycled pid belonging to someone else is never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from berth.dev.localcluster.errors import StateError

log = logging.getLogger(__name__)

# Children started by this interpreter, by pid: kept so they are reaped (no zombies) and so
# Popen does not warn about a still-running child when a caller drops its handle.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessRecord:
    """Identity of a process we started: enough to find it again and to be sure it is ours."""

    name: str  # "etcd", "kube-apiserver", ...
    pid: int
    binary: str  # absolute path, argv[0]
    start_ticks: int  # /proc/<pid>/stat field 22
    log_path: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        try:
            return cls(
                name=str(data["name"]),
                pid=int(data["pid"]),
                binary=str(data["binary"]),
                start_ticks=int(data["start_ticks"]),
                log_path=str(data["log_path"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise StateError(f"malformed process record {data!r}: {err}") from err


def local_serve_command(config: str | os.PathLike[str], port: int) -> list[str]:
    """``berth serve`` from this interpreter with ``config``, on loopback ``port``, in
    plaintext (said explicitly: one machine, no network between the processes), as the
    benchmarks and start-up probes run it."""
    return [
        sys.executable,
        "-m",
        "berth",
        "serve",
        "--config",
        str(config),
        "--listen",
        f"127.0.0.1:{port}",
        "--insecure-plaintext",
    ]


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name, or None if the pid is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 overall


def _is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_ours(record: ProcessRecord) -> bool:
    """The pid is alive and still the process we started (same binary, same start time)."""
    if _is_zombie(record.pid):
        return False
    argv = cmdline(record.pid)
    # Right after execve (and on a loaded machine for a while) the kernel can show a live
    # process with an empty cmdline: look again before calling it someone else's.
    for _ in range(40):
        if argv or _stat_fields(record.pid) is None or _is_zombie(record.pid):
            break
        time.sleep(0.025)
        argv = cmdline(record.pid)
    return bool(argv) and argv[0] == record.binary and start_ticks(record.pid) == record.start_ticks


_PR_SET_PDEATHSIG = 1
# Resolved here, not in the forked child: loading a library after fork can deadlock.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the thread that started us ends (when
    the process dies, for a thread that lives as long as the process, e.g. the main one).

    SIGKILL, not SIGTERM: kube-apiserver's graceful shutdown hangs for minutes when etcd goes
    away at the same moment, and an orphaned test cluster has nothing worth shutting down
    gracefully (`remove_orphaned_data_dirs` clears etcd's data later)."""
    if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``argv`` detached from our terminal, stdout+stderr appended to ``log_path``.

    ``die_with_parent``: the kernel sends it SIGKILL if this process dies first (even by
    SIGKILL; strictly: if the calling thread ends, so call from a long-lived thread), for tests and benchmarks whose cluster must not outlive them. `berth cluster up`
    leaves it off: its cluster outlives the command by design.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    _CHILDREN[proc.pid] = proc
    ticks = start_ticks(proc.pid)
    if ticks is None:  # exited already; the caller's readiness check reports why
        ticks = -1
    record = ProcessRecord(
        name=name, pid=proc.pid, binary=argv[0], start_ticks=ticks, log_path=str(log_path)
    )
    log.info("started %s (pid %d), log %s", name, proc.pid, log_path)
    return proc, record


def _reap(pid: int) -> bool:
    """True if ``pid`` has exited (reaping it if it is our child)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return False
        del _CHILDREN[pid]
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass  # not our child: its parent (init, after `berth cluster up` exited) reaps it
    return _stat_fields(pid) is None or _is_zombie(pid)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _reap(pid):
            return True
        time.sleep(0.05)
    return _reap(pid)


def stop(record: ProcessRecord, *, grace: float = 10.0) -> str:
    """Stop a process we started: SIGTERM, then SIGKILL after ``grace`` seconds.

    Returns what happened, for logs. A pid that is gone or now belongs to another program is
    left alone.
    """
    if not is_ours(record):
        _reap(record.pid)
        if _stat_fields(record.pid) is None or _is_zombie(record.pid):
            return f"{record.name} (pid {record.pid}) had already exited"
        return (
            f"{record.name}: pid {record.pid} now belongs to another program "
            f"({' '.join(cmdline(record.pid))[:120]!r}); left it alone"
        )
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    if _wait_gone(record.pid, grace):
        return f"stopped {record.name} (pid {record.pid})"
    if is_ours(record):
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
    if _wait_gone(record.pid, 5.0):
        return f"killed {record.name} (pid {record.pid}) after {grace:.0f}s without exiting"
    raise StateError(
        f"{record.name} (pid {record.pid}) survived SIGKILL; check it with `ps -p {record.pid}`"
    )


def log_tail(path: str | Path, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) if tail else "    (log is empty)"


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.2,
    abort: Callable[[], str | None] = lambda: None,
) -> tuple[bool, str | None]:
    """Poll ``check`` until it is true or ``timeout`` passes; stop early if ``abort`` says why.

    Returns (ready, abort_reason).
    """
    deadline = time.monotonic() + timeout
    while True:
        reason = abort()
        if reason is not None:
            return False, reason
        if check():
            return True, None
        if time.monotonic() >= deadline:
            return False, None
        time.sleep(interval)
