"""``berth replay DIR``: a recording of ``berth shim --record`` played back
through the plugin chain, every decision compared with the one recorded.

The cluster state is rebuilt change by change, in the recorded order (the
``st`` records: what the informers brought and what the shim assumed,
forgot and nominated), and at each recorded cycle the same pods go through
the same in-process plugin service the shim runs without --plugin-server
(``berth.shim.service.PluginService.in_process`` over
``berth.server.service.SchedulingService``: the framework's schedule_one,
Reserve and Permit included) with the recorded nextStartNodeIndex and
tie-break seed. Nothing sleeps: the replay runs as fast as the cycles do.

The state follows the recording, not the replay: a pod the replay places
elsewhere still counts where the recorded run bound it, so each decision is
judged on the cluster as it really was (docs/record-replay.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.batch import OpportunisticBatch
from berth.framework.profile import SchedulerConfig
from berth.shim.record import (
    EVENT_REFS,
    Outcome,
    ReadReport,
    RecordingInvalid,
    decode,
    outcome,
    read_recording,
)
from berth.shim.service import PluginService

# Progress on stderr every this many seconds of replay.
PROGRESS_SECONDS = 2.0
# How long a batch runs on the plugin service's worker before other calls
# get a turn; the replay is the only caller.
REPLAY_SLICE_SECONDS = 1.0
# Cycles called and not yet answered that a recording may hold (the shim has
# one in flight at a time; a recording cut short, one).
MAX_OPEN_CYCLES = 64
# Differences kept in full for the report (all are counted).
MAX_DIFFERENCES = 10_000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a 'berth shim --record' recording through the plugin chain and report "
        "every decision that differs",
        description=(
            "Rebuild the cluster from the events recorded in DIR, in order, and at each "
            "recorded scheduling cycle run the same pods through the profile's plugin chain "
            "(in this process, the code the scheduler runs) on the cluster as it was then; "
            "report every decision that differs from the recorded one (node, or the "
            "FailedScheduling message), the totals and the replay's speed. With --config, a "
            "changed policy is replayed on the same traffic. Exit status: 0 no difference, 1 "
            "differences, 2 error."
        ),
        epilog="example: berth shim --config c.yaml --record /var/tmp/rec ...; "
        "berth replay /var/tmp/rec --config new-weights.yaml",
    )
    p.add_argument("directory", metavar="DIR", help="the directory berth shim --record wrote")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration to replay with (default: the one recorded)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="report format (default %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


@dataclass
class Difference:
    pod: str
    uid: str
    profile: str
    attempt: int
    cycle: int
    where: str
    recorded: Outcome
    replayed: Outcome

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["recorded"] = _outcome_json(self.recorded)
        out["replayed"] = _outcome_json(self.replayed)
        return out


def _outcome_json(o: Outcome) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(o).items() if v}


@dataclass
class ReplayReport:
    directory: str
    config: str
    berth: str = ""
    segments: int = 0
    records: int = 0
    events: int = 0
    state_changes: int = 0
    cycles: int = 0
    failed_cycles: int = 0
    decisions: int = 0
    identical: int = 0
    different: int = 0
    results: dict[str, int] = field(default_factory=dict)
    # Decisions whose recorded answer came from a later state than their
    # call was recorded at (a concurrent call moved the replica on).
    later_state: int = 0
    differences: list[Difference] = field(default_factory=list)
    # From the first recorded cycle to the last recorded decision; the
    # replay's run (reading, state, cycles) once set up; the set-up
    # (configuration, plugins, frameworks), whatever the recording's length.
    recorded_seconds: float = 0.0
    replay_seconds: float = 0.0
    setup_seconds: float = 0.0
    truncated: str = ""
    ended: str = ""

    @property
    def speedup(self) -> float:
        return self.recorded_seconds / self.replay_seconds if self.replay_seconds > 0 else 0.0

    @property
    def rate(self) -> float:
        return self.decisions / self.replay_seconds if self.replay_seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "differences"}
        out["differences"] = [d.to_json() for d in self.differences]
        out["speedup"] = round(self.speedup, 2)
        out["decisions_per_second"] = round(self.rate, 1)
        return out


class ReplayError(Exception):
    """A replay that cannot go on (a configuration without a recorded
    profile, a record out of place); the message says where."""


def _where(file: str, number: int) -> str:
    return f"{file}:{number}"


def _int(rec: dict[str, Any], key: str, where: str) -> int:
    v = rec.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise RecordingInvalid(f"{where}: {key!r} must be an integer, got {v!r}")
    return v


def _str(rec: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    v = rec.get(key, default)
    if not isinstance(v, str):
        raise RecordingInvalid(f"{where}: {key!r} must be a string, got {v!r}")
    return v


def _recorded_outcome(rec: dict[str, Any], where: str) -> Outcome:
    result = _str(rec, "result", where)
    if result not in ("scheduled", "unschedulable", "error"):
        raise RecordingInvalid(f"{where}: unknown result {result!r}")
    victims = rec.get("victims", [])
    if not isinstance(victims, list) or not all(isinstance(v, str) for v in victims):
        raise RecordingInvalid(f"{where}: 'victims' must be a list of namespace/name")
    return Outcome(
        result,
        node=_str(rec, "node", where, ""),
        message=_str(rec, "message", where, ""),
        nominated=_str(rec, "nominated", where, ""),
        victims=tuple(victims),
    )


def _config_of(header: dict[str, Any], config_path: str | None) -> tuple[SchedulerConfig, str]:
    from berth.framework.config import default_config, load_config, parse_config_text
    from berth.plugins.registry import load_registry

    registry = load_registry()
    if config_path:
        return load_config(config_path, registry), config_path
    cfg = header.get("config")
    if not isinstance(cfg, dict):
        raise RecordingInvalid("header: no 'config'; give --config")
    source = cfg.get("source")
    text = cfg.get("text")
    if isinstance(text, str):
        where = f"the recorded configuration ({source})"
        return parse_config_text(text, where, registry), where
    if source == "<defaults>":
        return default_config(registry), "the recorded configuration (the defaults)"
    raise RecordingInvalid(
        f"header: the configuration {source!r} was not recorded (unreadable when the recording "
        "began); give --config"
    )


_KINDS: dict[str, type[Any]] = {"nodes": cpb.Node, "pods": cpb.Pod}


class Replayer:
    def __init__(self, directory: str, config_path: str | None, progress: TextIO | None) -> None:
        self.directory = directory
        self.config_path = config_path
        self.progress = progress
        self.read = ReadReport()
        self.events: collections.OrderedDict[int, Any] = collections.OrderedDict()
        # Replayed answers of cycles whose decisions are still to come.
        self.pending: dict[int, tuple[int, list[Outcome]]] = {}
        self.service: PluginService | None = None
        self.report = ReplayReport(directory, config_path or "")
        self._last_progress = 0.0
        # The recorded time of the cycle being replayed.
        self._now = 0.0

    async def run(self) -> ReplayReport:
        from berth.server.app import build_frameworks
        from berth.server.service import SchedulingService

        began = time.perf_counter()
        self._last_progress = began
        lines = read_recording(self.directory, self.read)
        first = next(lines, None)
        if first is None:
            raise RecordingInvalid(
                f"{self.directory}: the recording is empty ({self.read.truncated})"
            )
        header = first.record
        self.report.berth = str(header.get("berth", ""))
        config, self.report.config = _config_of(header, self.config_path)
        from berth.plugins.registry import load_registry

        # One caller: a batch runs in one slice, not cut for others' turns.
        service = SchedulingService(
            config, build_frameworks(config, load_registry()), slice_seconds=REPLAY_SLICE_SECONDS
        )
        state = ClusterStateLog()
        self.service = PluginService.in_process(service, state)
        self.profiles = {p.scheduler_name for p in config.profiles}
        # Opportunistic batching (framework/batch.py) drops a ranking older
        # than 500 ms: on the replica's snapshot, its clock is the recorded
        # time of the cycle being replayed, so a hint is used (or not) as it
        # was when recorded.
        await self.service.sync()
        snapshot = service.store.snapshot_of(state.cluster_id)
        for name in self.profiles:
            snapshot.batches[name] = OpportunisticBatch(name, clock=self._recorded_now)
        ready = time.perf_counter()
        self.report.setup_seconds = round(ready - began, 3)
        # The recorded decisions' span: from the first cycle's call to the
        # last answer.
        first_ts: float | None = None
        last_ts = 0.0
        try:
            for line in lines:
                rec = line.record
                ts = rec.get("ts")
                if isinstance(ts, (int, float)):
                    if rec["t"] == "cycle" and first_ts is None:
                        first_ts = float(ts)
                    elif rec["t"] == "decision":
                        last_ts = float(ts)
                await self._one(line.file, line.number, rec)
                self._progress()
        finally:
            await self.service.close()
        r = self.report
        r.segments = self.read.segments
        r.records = self.read.lines
        r.truncated = self.read.truncated
        r.recorded_seconds = round(max(last_ts - (first_ts or last_ts), 0.0), 3)
        r.replay_seconds = round(time.perf_counter() - ready, 3)
        return r

    def _recorded_now(self) -> float:
        return self._now

    def _progress(self) -> None:
        if self.progress is None:
            return
        now = time.perf_counter()
        if now - self._last_progress < PROGRESS_SECONDS:
            return
        self._last_progress = now
        r = self.report
        print(
            f"berth replay: {self.read.lines} records, {r.decisions} decisions "
            f"({r.different} differ)",
            file=self.progress,
            flush=True,
        )

    async def _one(self, file: str, number: int, rec: dict[str, Any]) -> None:
        where = _where(file, number)
        t = rec["t"]
        svc = self.service
        assert svc is not None
        if t == "header":
            return
        if t == "ev":
            kind = _str(rec, "kind", where)
            obj = decode(_KINDS.get(kind, cpb.ClusterObject), rec.get("obj"), f"{where}: obj")
            seq = _int(rec, "seq", where)
            self.events[seq] = obj
            if len(self.events) > 2 * EVENT_REFS:
                self.events.popitem(last=False)
            self.report.events += 1
            return
        if t == "st":
            self._state(svc.state, rec, where)
            self.report.state_changes += 1
            return
        if t == "cycle":
            await self._cycle(svc, rec, where)
            return
        if t == "decision":
            self._decision(rec, where)
            return
        if t == "cycle_failed":
            self.pending.pop(_int(rec, "cycle", where), None)
            self.report.failed_cycles += 1
            return
        if t == "end":
            self.report.ended = _str(rec, "reason", where, "")
            return
        raise RecordingInvalid(f"{where}: unknown record type {t!r}")

    def _state(self, state: ClusterStateLog, rec: dict[str, Any], where: str) -> None:
        op = _str(rec, "op", where)
        kinds: dict[str, type[Any]] = {
            "upsert_node": cpb.Node,
            "upsert_pod": cpb.Pod,
            "upsert_object": cpb.ClusterObject,
        }
        if op in kinds:
            if "ev" in rec:
                ev = _int(rec, "ev", where)
                obj = self.events.get(ev)
                if obj is None or not isinstance(obj, kinds[op]):
                    raise RecordingInvalid(
                        f"{where}: names event {ev}, which is not a recent {kinds[op].__name__} "
                        "event of the recording"
                    )
            else:
                obj = decode(kinds[op], rec.get("obj"), f"{where}: obj")
            getattr(state, op)(obj)
        elif op in ("delete_node", "delete_pod"):
            getattr(state, op)(_str(rec, "key", where))
        elif op == "delete_object":
            state.delete_object(decode(cpb.ObjectRef, rec.get("ref"), f"{where}: ref"))
        else:
            raise RecordingInvalid(f"{where}: unknown state change {op!r}")

    async def _cycle(self, svc: PluginService, rec: dict[str, Any], where: str) -> None:
        cycle = _int(rec, "cycle", where)
        profile = _str(rec, "profile", where)
        ts = rec.get("ts")
        if not isinstance(ts, (int, float)):
            raise RecordingInvalid(f"{where}: 'ts' must be a number")
        self._now = float(ts)
        if profile not in self.profiles:
            raise ReplayError(
                f"{where}: the recording schedules profile {profile!r}, which "
                f"{self.report.config} does not have (it has {', '.join(sorted(self.profiles))})"
            )
        raw = rec.get("pods")
        if not isinstance(raw, list) or not raw:
            raise RecordingInvalid(f"{where}: 'pods' must be a non-empty list")
        pods = [decode(cpb.Pod, p, f"{where}: pods[{i}]") for i, p in enumerate(raw)]
        start = _int(rec, "start_index", where)
        seed = _int(rec, "seed", where)
        if start < 0 or seed < 0:
            raise RecordingInvalid(f"{where}: start_index and seed must be >= 0")
        explain = rec.get("explain", False)
        if not isinstance(explain, bool) or (explain and len(pods) != 1):
            raise RecordingInvalid(f"{where}: 'explain' must be a boolean, for one pod only")
        number = rec.get("scheduler_cycle", 0)
        if not isinstance(number, int) or number < 0:
            raise RecordingInvalid(f"{where}: 'scheduler_cycle' must be an integer >= 0")
        if len(pods) == 1:
            results: list[pb.ScheduleResponse] = [
                await svc.schedule(profile, pods[0], start, number, explain=explain, seed=seed)
            ]
        else:
            batch = await svc.schedule_batch(profile, pods, start, number, seed=seed)
            results = list(batch.results)
        if len(self.pending) >= MAX_OPEN_CYCLES:
            raise RecordingInvalid(
                f"{where}: more than {MAX_OPEN_CYCLES} cycles called and never answered"
            )
        if cycle in self.pending:
            raise RecordingInvalid(f"{where}: cycle {cycle} is called twice")
        self.pending[cycle] = (_int(rec, "gen", where), [outcome(r) for r in results])
        self.report.cycles += 1

    def _decision(self, rec: dict[str, Any], where: str) -> None:
        cycle = _int(rec, "cycle", where)
        i = _int(rec, "i", where)
        entry = self.pending.get(cycle)
        if entry is None or not 0 <= i < len(entry[1]):
            raise RecordingInvalid(f"{where}: a decision of cycle {cycle} pod {i}, never called")
        gen, replayed = entry
        recorded = _recorded_outcome(rec, where)
        r = self.report
        r.decisions += 1
        r.results[recorded.result] = r.results.get(recorded.result, 0) + 1
        if rec.get("gen", gen) != gen:
            r.later_state += 1
        mine = replayed[i]
        if mine == recorded:
            r.identical += 1
        else:
            r.different += 1
            if len(r.differences) < MAX_DIFFERENCES:
                r.differences.append(
                    Difference(
                        pod=_str(rec, "pod", where),
                        uid=_str(rec, "uid", where, ""),
                        profile=_str(rec, "profile", where, ""),
                        attempt=_int(rec, "attempt", where),
                        cycle=cycle,
                        where=where,
                        recorded=recorded,
                        replayed=mine,
                    )
                )
        if i == len(replayed) - 1:
            del self.pending[cycle]


def render_table(r: ReplayReport, out: TextIO) -> None:
    w = out.write
    w(
        f"Replayed {r.directory} ({r.segments} segment(s), {r.records} records, recorded by "
        f"Berth {r.berth or 'unknown'}) with {r.config}\n"
    )
    results = ", ".join(f"{n} {k}" for k, n in sorted(r.results.items())) or "none"
    w(
        f"Decisions: {r.decisions} recorded ({results}); {r.identical} identical, "
        f"{r.different} different\n"
    )
    w(
        f"Cycles: {r.cycles} replayed, {r.failed_cycles} recorded as failed calls; "
        f"{r.events} informer events, {r.state_changes} state changes\n"
    )
    w(
        f"Time: decisions recorded over {r.recorded_seconds:.2f} s, replayed in "
        f"{r.replay_seconds:.2f} s ({r.speedup:.1f}x faster than recorded, {r.rate:.0f} "
        f"decisions/s) after {r.setup_seconds:.2f} s of set-up\n"
    )
    if r.later_state:
        w(
            f"Note: {r.later_state} recorded answer(s) came from a later state than their call "
            "(a concurrent call moved the plugin server on); they may differ for that reason\n"
        )
    if r.truncated:
        w(f"Note: the recording is cut short at {r.truncated}; replayed up to there\n")
    if r.ended:
        w(f"Recording ended: {r.ended}\n")
    if not r.differences:
        return
    w("\n")
    rows = [("POD", "ATTEMPT", "RECORDED", "REPLAYED", "WHERE")]
    for d in r.differences:
        rows.append((d.pod, str(d.attempt), d.recorded.describe(), d.replayed.describe(), d.where))
    widths = [min(max(len(row[c]) for row in rows), 60) for c in range(4)]
    for row in rows:
        w("  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row[:4])) + "  " + row[4] + "\n")
    if r.different > len(r.differences):
        w(f"... and {r.different - len(r.differences)} more\n")


def run(args: argparse.Namespace) -> int:
    from berth.framework.config import ConfigError
    from berth.framework.runtime import ProfileError
    from berth.plugins.registry import RegistryError

    if not Path(args.directory).is_dir():
        print(f"berth replay: {args.directory}: not a directory", file=sys.stderr)
        return 2
    replayer = Replayer(args.directory, args.config, None if args.quiet else sys.stderr)
    try:
        report = asyncio.run(replayer.run())
    except RecordingInvalid as exc:
        print(f"berth replay: invalid recording: {exc}", file=sys.stderr)
        return 2
    except (ReplayError, ConfigError, RegistryError, ProfileError) as exc:
        print(f"berth replay: {exc}", file=sys.stderr)
        return 2
    if report.truncated:
        print(
            f"berth replay: the recording is cut short at {report.truncated} (the shim stopped "
            "without closing it); replayed the complete records before it",
            file=sys.stderr,
        )
    if args.output == "json":
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(report, sys.stdout)
    return 1 if report.different else 0


__all__ = ["Difference", "ReplayError", "ReplayReport", "Replayer", "register", "render_table"]
