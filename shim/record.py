"""``berth shim --record DIR``: the cluster as the shim saw it, and what it
decided, written for ``berth replay`` (docs/record-replay.md).

What is recorded, in the order the shim's event loop saw it:

- ``ev``: every informer event (nodes, pods, and each kind the profiles read),
  the object as the shim decoded it (berth.v1 cluster.proto ``Node``, ``Pod``
  or ``ClusterObject``);
- ``st``: every change to the cluster state the plugin service is sent
  (``berth.client.ClusterStateLog``): what the informers brought, and what the
  shim itself did to it (assumed pods, forgotten ones, nominations, objects
  written). An ``st`` that stores the object the preceding ``ev`` carried
  names that event instead of repeating it;
- ``cycle``: a scheduling cycle's call (profile, the pods as sent, the state's
  generation, nextStartNodeIndex and the tie-break seed);
- ``decision``: its answer per pod (node, or the FailedScheduling message;
  nominated node and victims), in the words the shim acts on (``outcome``).

Cost on the scheduling path: an ``append`` of references to a deque (records
are never changed in place once made, ``ClusterStateLog``); encoding,
compression and the disk are a thread's. Bounded: the files are cut in
segments and the recording stops, saying so in the log and in its last record,
when it reaches its size cap or when the writer falls too far behind.

The shim draws each cycle's tie-break seed when recording (the plugin service
seeds selectHost's choice among equal scores with it, seed + i for the i-th pod
of a batch), so a replay on the same state makes the same choice.
"""

from __future__ import annotations

import base64
import collections
import gzip
import logging
import os
import random
import re
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from berth import __version__
from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.configz import effective_config
from berth.framework.profile import SchedulerConfig
from berth.shim.fiterror import is_rejected, rejection

log = logging.getLogger(__name__)

FORMAT = "berth-record"
# The format's version: a reader refuses any other (a change of meaning gets a
# new number; new optional fields do not).
VERSION = 1
SEGMENT_PATTERN = re.compile(r"^berth-record-(\d{6})\.jsonl\.gz$")
# Defaults: segments of 64 MiB on disk, the whole recording at most 1 GiB.
DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_MAX_BYTES = 1 << 30
# Records waiting for the writer: past this the recording stops rather than
# grow the shim's memory or slow its loop.
MAX_PENDING = 500_000
# How often the writer wakes, and flushes what it compressed so that a shim
# that dies loses at most this much.
WRITER_PERIOD = 0.05
FLUSH_SECONDS = 1.0
# A reader's bound on one line (a full node or a batch of pods is far less).
MAX_LINE_BYTES = 32 << 20
# Informer events whose objects an ``st`` may name instead of repeating them.
EVENT_REFS = 4096


def segment_name(n: int) -> str:
    return f"berth-record-{n:06d}.jsonl.gz"


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"


def _b64(msg: Any) -> str:
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


# -- what a cycle's answer means -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One pod's scheduling decision, as the shim acts on it
    (shim/schedule_one.py handle_result): ``scheduled`` on ``node``, or
    ``unschedulable`` / ``error`` with the FailedScheduling ``message``;
    ``nominated`` and ``victims`` (namespace/name) when PostFilter
    preempted."""

    result: str
    node: str = ""
    message: str = ""
    nominated: str = ""
    victims: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.result == "scheduled":
            return f"node {self.node}"
        text = f"{self.result}: {self.message}"
        if self.nominated:
            text += f" (nominated {self.nominated}"
            if self.victims:
                text += f", victims {', '.join(self.victims)}"
            text += ")"
        return text


def outcome(resp: pb.ScheduleResponse) -> Outcome:
    """What the shim makes of a cycle's answer: a placement that Reserve and
    Permit let on, or the failure's message as FailedScheduling reports it
    (a Reserve or Permit rejection as upstream's one-node FitError)."""
    st = resp.status
    if st.code == pb.CODE_SUCCESS and resp.node:
        rs = resp.reserve_status
        if rs.code != pb.CODE_SUCCESS:
            return _turned_away(resp.node, rs, "Reserve failed")
        ps = resp.permit.status
        if ps.code not in (pb.CODE_SUCCESS, pb.CODE_WAIT, pb.CODE_SKIP):
            return _turned_away(resp.node, ps, "rejected at Permit")
        return Outcome("scheduled", node=resp.node)
    pf = resp.post_filter
    return Outcome(
        "error" if st.code == pb.CODE_ERROR else "unschedulable",
        message=resp.diagnosis.message or "; ".join(st.reasons) or "scheduling failed",
        nominated=pf.nominated_node_name,
        victims=tuple(f"{v.namespace}/{v.name}" for v in pf.victims),
    )


def _turned_away(node: str, st: pb.Status, fallback: str) -> Outcome:
    if st.code == pb.CODE_ERROR or not is_rejected(st):
        return Outcome("error", message="; ".join(st.reasons) or fallback)
    return Outcome("unschedulable", message=rejection(node, st)[0])


# -- the writer --------------------------------------------------------------------------


class RecordError(ValueError):
    """The recording cannot start (its directory); berth shim says so and exits 2."""


class Recording:
    """Appends records to DIR from a thread of its own. Every method called
    on the event loop only appends to a deque."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_pending: int = MAX_PENDING,
        clock: Any = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = min(segment_bytes, max_bytes)
        self.max_pending = max_pending
        self._clock = clock
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._stopped_reason = ""
        self.recording = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycles = 0
        self._rng = random.Random()
        # Writer state (its thread only).
        self._file: BinaryIO | None = None
        self._gz: gzip.GzipFile | None = None
        self._segment = 0
        self._closed_bytes = 0
        self._unflushed = 0
        self._seq = 0
        self._event_refs: collections.OrderedDict[int, tuple[Any, int]] = collections.OrderedDict()
        self.written_records = 0

    # -- lifecycle ------------------------------------------------------------------

    def start(self, config: SchedulerConfig) -> None:
        """Creates DIR (refusing one that holds a recording already) and the
        first segment with the header; starts the writer thread."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            existing = [p.name for p in self.directory.iterdir() if SEGMENT_PATTERN.match(p.name)]
        except OSError as exc:
            raise RecordError(f"--record {self.directory}: {exc.strerror or exc}") from exc
        if existing:
            raise RecordError(
                f"--record {self.directory}: the directory holds a recording already "
                f"({sorted(existing)[0]}, ...); give a new or empty directory"
            )
        if config.extenders:
            log.warning(
                "recording to %s: the cycles of pods an extender is interested in are not "
                "recorded (berth replay does not call extenders); the other pods' are",
                self.directory,
            )
        self._header = header_record(config, self._clock())
        try:
            self._open_segment()
        except OSError as exc:
            raise RecordError(f"--record {self.directory}: {exc.strerror or exc}") from exc
        self.recording = True
        self._thread = threading.Thread(target=self._run, name="berth-recorder", daemon=True)
        self._thread.start()
        log.info(
            "recording cluster events and scheduling decisions to %s (segments of %s, "
            "at most %s in all)",
            self.directory,
            _size(self.segment_bytes),
            _size(self.max_bytes),
            extra={"event": "RecordingStarted"},
        )

    def close(self) -> None:
        """Writes what is pending and an ``end`` record; closes the files."""
        if self._thread is None:
            return
        if self.recording:
            self._stop_recording("the shim stopped", log_it=False)
        self._stop.set()
        self._thread.join()
        self._thread = None

    # -- on the event loop --------------------------------------------------------------

    def _put(self, item: tuple[Any, ...]) -> None:
        if not self.recording:
            return
        if len(self._pending) >= self.max_pending:
            self._stop_recording(
                f"the writer fell {len(self._pending)} records behind (the disk is too slow)"
            )
            return
        self._pending.append(item)

    def event(self, kind: str, type_: str, obj: Any) -> None:
        """An informer event: ``kind`` (``nodes``, ``pods``, or
        ``resource.group`` / ``resource`` for other kinds), ADDED, MODIFIED or
        DELETED, the decoded record."""
        self._put(("ev", self._clock(), kind, type_, obj))

    def state(self, op: str, obj: Any) -> None:
        """A change to the cluster state: ``op`` is the ClusterStateLog
        method, ``obj`` its argument (a record, a name or uid, an ObjectRef)."""
        self._put(("st", self._clock(), op, obj))

    def seed(self) -> int:
        """A cycle's tie-break seed (non-zero: 0 means unseeded)."""
        return self._rng.getrandbits(62) | 1

    def cycle(
        self,
        profile: str,
        pods: Sequence[cpb.Pod],
        generation: int,
        start_index: int,
        seed: int,
        explain: bool = False,
        *,
        scheduler_cycle: int = 0,
    ) -> int:
        """A cycle's call, made on the state at ``generation``; returns the
        cycle's number for its decisions. ``explain``: a pod that asked for
        explanations is scheduled over every node (shim/explain.py).
        ``scheduler_cycle``: the scheduler's cycle number the call carries
        (opportunistic batching keys its ranking on it)."""
        self._cycles += 1
        item = ("cycle", self._clock(), self._cycles, profile, list(pods), generation)
        self._put((*item, start_index, seed, explain, scheduler_cycle))
        return self._cycles

    def decisions(
        self,
        cycle: int,
        profile: str,
        pods: Sequence[cpb.Pod],
        attempts: Sequence[int],
        responses: Sequence[pb.ScheduleResponse],
    ) -> None:
        """The answers of cycle ``cycle``, one per pod. Read here (a few
        fields each): the shim may change a response afterwards (extenders'
        preemption)."""
        if not self.recording:
            return
        outcomes = [(outcome(r), r.generation) for r in responses]
        item = ("decisions", self._clock(), cycle, profile, list(pods), list(attempts))
        self._put((*item, outcomes))

    def cycle_failed(self, cycle: int, message: str) -> None:
        """The cycle's call failed (the plugin service unreachable): no
        decision."""
        self._put(("cycle_failed", self._clock(), cycle, message))

    def _stop_recording(self, reason: str, *, log_it: bool = True) -> None:
        if not self.recording:
            return
        self.recording = False
        self._stopped_reason = reason
        self._pending.append(("end", self._clock(), reason))
        if log_it:
            log.warning(
                "recording to %s stopped: %s; the shim goes on scheduling, unrecorded, and "
                "berth replay covers what was recorded until now",
                self.directory,
                reason,
                extra={"event": "RecordingStopped"},
            )

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        last_flush = time.monotonic()
        while True:
            stopping = self._stop.wait(WRITER_PERIOD)
            try:
                self._drain()
                if time.monotonic() - last_flush >= FLUSH_SECONDS or stopping:
                    self._flush()
                    last_flush = time.monotonic()
            except OSError as exc:
                self._pending.clear()
                if self.recording:
                    self.recording = False
                    log.error(
                        "recording to %s stopped: %s; the shim goes on scheduling, unrecorded",
                        self.directory,
                        exc,
                        extra={"event": "RecordingStopped"},
                    )
                self._close_segment()
                return
            if stopping and not self._pending:
                self._close_segment()
                return

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            item = pending.popleft()
            if self._gz is None:
                continue
            self._write(self._encode(item))
            if item[0] == "end":
                self._close_segment()
                pending.clear()
                return

    def _flush(self) -> None:
        if self._gz is not None:
            self._gz.flush(zlib.Z_SYNC_FLUSH)
            self._unflushed = 0

    def _on_disk(self) -> int:
        """The segment's size once what it holds is flushed, at most: the
        compressed bytes written plus the input the compressor still holds
        (deflate does not grow its input by more than a few bytes)."""
        assert self._file is not None
        return self._file.tell() + self._unflushed

    def _write(self, line: bytes) -> None:
        if self._closed_bytes + self._on_disk() + len(line) > self.max_bytes:
            self._flush()
        if self._closed_bytes + self._on_disk() + len(line) > self.max_bytes:
            gz = self._gz
            assert gz is not None
            reason = f"it reached its size cap of {_size(self.max_bytes)}"
            # Said here, in the writer: the loop may not call again, and
            # what was still queued (even after a close) is dropped.
            self.recording = False
            self._stopped_reason = reason
            log.warning(
                "recording to %s stopped: %s; the shim goes on scheduling, unrecorded, and "
                "berth replay covers what was recorded until now",
                self.directory,
                reason,
                extra={"event": "RecordingStopped"},
            )
            gz.write(self._encode(("end", self._clock(), reason)))
            self._close_segment()
            self._pending.clear()
            return
        if self._on_disk() >= self.segment_bytes:
            self._close_segment()
            self._open_segment()
        assert self._gz is not None
        self._gz.write(line)
        self._unflushed += len(line)
        self.written_records += 1

    def _open_segment(self) -> None:
        self._segment += 1
        path = self.directory / segment_name(self._segment)
        self._file = open(path, "xb")  # noqa: SIM115 - closed in _close_segment
        # mtime 0: the segment's bytes depend on its records only.
        self._gz = gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=6, mtime=0)
        header = dict(self._header, segment=self._segment)
        if self._segment > 1:
            header.pop("config", None)
        line = orjson.dumps(header) + b"\n"
        self._gz.write(line)
        self._unflushed = len(line)

    def _close_segment(self) -> None:
        if self._gz is not None:
            self._gz.close()
            self._gz = None
        if self._file is not None:
            self._closed_bytes += self._file.tell()
            self._file.close()
            self._file = None

    def _encode(self, item: tuple[Any, ...]) -> bytes:
        self._seq += 1
        seq = self._seq
        what = item[0]
        rec: dict[str, Any] = {"t": what, "seq": seq, "ts": round(item[1], 6)}
        if what == "ev":
            _, _, kind, type_, obj = item
            rec.update(kind=kind, type=type_, obj=_b64(obj))
            refs = self._event_refs
            # Kept in the order of their records, as the reader keeps them.
            refs.pop(id(obj), None)
            refs[id(obj)] = (obj, seq)
            if len(refs) > EVENT_REFS:
                refs.popitem(last=False)
        elif what == "st":
            _, _, op, obj = item
            rec["op"] = op
            if isinstance(obj, str):
                rec["key"] = obj
            elif op.startswith("delete"):
                rec["ref"] = _b64(obj)
            else:
                ref = self._event_refs.get(id(obj))
                if ref is not None and ref[0] is obj:
                    rec["ev"] = ref[1]
                else:
                    rec["obj"] = _b64(obj)
        elif what == "cycle":
            _, _, cycle, profile, pods, gen, start, seed, explain, scheduler_cycle = item
            rec.update(
                cycle=cycle,
                profile=profile,
                gen=gen,
                start_index=start,
                seed=seed,
                pods=[_b64(p) for p in pods],
            )
            if explain:
                rec["explain"] = True
            if scheduler_cycle:
                rec["scheduler_cycle"] = scheduler_cycle
        elif what == "decisions":
            _, _, cycle, profile, pods, attempts, outcomes = item
            rec["t"] = "decision"
            lines = []
            for i, (pod, attempt, (o, gen)) in enumerate(
                zip(pods, attempts, outcomes, strict=True)
            ):
                d = dict(
                    rec,
                    seq=seq + i,
                    cycle=cycle,
                    i=i,
                    pod=f"{pod.namespace}/{pod.name}",
                    uid=pod.uid,
                    profile=profile,
                    attempt=attempt,
                    result=o.result,
                    gen=gen,
                )
                if o.node:
                    d["node"] = o.node
                if o.message:
                    d["message"] = o.message
                if o.nominated:
                    d["nominated"] = o.nominated
                if o.victims:
                    d["victims"] = list(o.victims)
                lines.append(orjson.dumps(d))
            self._seq += max(len(lines) - 1, 0)
            return b"\n".join(lines) + b"\n" if lines else b""
        elif what == "cycle_failed":
            _, _, cycle, message = item
            rec.update(cycle=cycle, message=message)
        elif what == "end":
            rec["reason"] = item[2]
        return orjson.dumps(rec) + b"\n"


def header_record(config: SchedulerConfig, started: float) -> dict[str, Any]:
    """The header of every segment: format, version, Berth's version; the
    first also carries the configuration (the file's text, to replay it, and
    the effective settings as /configz shows them)."""
    text: str | None = None
    if config.source != "<defaults>":
        try:
            text = Path(config.source).read_text()
        except OSError as exc:
            log.warning("recording: cannot read the configuration %s again: %s", config.source, exc)
    # As /configz shows it (framework/configz.py).
    effective = effective_config(config)
    return {
        "t": "header",
        "format": FORMAT,
        "version": VERSION,
        "berth": __version__,
        "started": round(started, 6),
        "config": {"source": config.source, "text": text, "effective": effective},
    }


class RecordingStateLog(ClusterStateLog):
    """The cluster state the shim ships, each change also recorded."""

    def __init__(self, recorder: Recording) -> None:
        super().__init__()
        self.recorder = recorder

    def upsert_node(self, node: cpb.Node) -> None:
        super().upsert_node(node)
        self.recorder.state("upsert_node", node)

    def delete_node(self, name: str) -> None:
        if name in self.nodes:
            self.recorder.state("delete_node", name)
        super().delete_node(name)

    def upsert_pod(self, pod: cpb.Pod) -> None:
        super().upsert_pod(pod)
        self.recorder.state("upsert_pod", pod)

    def delete_pod(self, uid: str) -> None:
        if uid in self.pods:
            self.recorder.state("delete_pod", uid)
        super().delete_pod(uid)

    def upsert_object(self, obj: cpb.ClusterObject) -> None:
        super().upsert_object(obj)
        self.recorder.state("upsert_object", obj)

    def delete_object(self, ref: cpb.ObjectRef) -> None:
        self.recorder.state("delete_object", ref)
        super().delete_object(ref)


# -- the reader ------------------------------------------------------------------------------


class RecordingInvalid(Exception):
    """A recording that cannot be read: the message names the file, the line
    and the reason."""


@dataclass(frozen=True, slots=True)
class Line:
    file: str
    number: int
    record: dict[str, Any]


@dataclass
class ReadReport:
    segments: int = 0
    lines: int = 0
    # A tail cut short (the shim died before closing its last segment):
    # "file:line: reason", replayed up to there.
    truncated: str = ""


def segments(directory: str | os.PathLike[str]) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        raise RecordingInvalid(f"{d}: not a directory")
    found = sorted(p for p in d.iterdir() if SEGMENT_PATTERN.match(p.name))
    if not found:
        raise RecordingInvalid(f"{d}: holds no recording (no {segment_name(1)})")
    for n, p in enumerate(found, start=1):
        if p.name != segment_name(n):
            raise RecordingInvalid(f"{d}: {segment_name(n)} is missing (found {p.name} after it)")
    return found


def read_recording(
    directory: str | os.PathLike[str], report: ReadReport | None = None
) -> Iterator[Line]:
    """Every line of the recording in DIR, in order, the header of each
    segment checked (format, version). A cut at the end of the last segment
    ends the iteration and is noted in ``report.truncated``; anything else
    malformed raises RecordingInvalid naming the file and line."""
    report = report if report is not None else ReadReport()
    files = segments(directory)
    report.segments = len(files)
    for index, path in enumerate(files):
        last = index == len(files) - 1
        number = 0
        try:
            with gzip.open(path, "rb") as f:
                while True:
                    try:
                        raw = f.readline(MAX_LINE_BYTES + 1)
                    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                        where = f"{path.name}:{number + 1}"
                        if not last:
                            raise RecordingInvalid(
                                f"{where}: the segment is cut short ({exc}) and is not the last"
                            ) from exc
                        report.truncated = f"{where}: cut short ({exc})"
                        return
                    if not raw:
                        break
                    number += 1
                    if len(raw) > MAX_LINE_BYTES:
                        raise RecordingInvalid(
                            f"{path.name}:{number}: line longer than {MAX_LINE_BYTES} bytes"
                        )
                    if not raw.endswith(b"\n"):
                        where = f"{path.name}:{number}"
                        if not last:
                            raise RecordingInvalid(f"{where}: the line is cut short")
                        report.truncated = f"{where}: the last line is cut short"
                        return
                    try:
                        rec = orjson.loads(raw)
                    except orjson.JSONDecodeError as exc:
                        raise RecordingInvalid(
                            f"{path.name}:{number}: not a JSON object: {exc}"
                        ) from exc
                    if not isinstance(rec, dict) or not isinstance(rec.get("t"), str):
                        raise RecordingInvalid(
                            f'{path.name}:{number}: not a record (a JSON object with "t")'
                        )
                    if number == 1:
                        _check_header(path.name, rec, index + 1)
                    report.lines += 1
                    yield Line(path.name, number, rec)
        except OSError as exc:
            raise RecordingInvalid(f"{path.name}: {exc.strerror or exc}") from exc
        if number == 0:
            if last:
                report.truncated = f"{path.name}:1: the segment is empty"
                return
            raise RecordingInvalid(f"{path.name}: empty segment")


def _check_header(name: str, rec: dict[str, Any], segment: int) -> None:
    if rec.get("t") != "header" or rec.get("format") != FORMAT:
        raise RecordingInvalid(f"{name}:1: not a {FORMAT} header")
    version = rec.get("version")
    if version != VERSION:
        raise RecordingInvalid(
            f"{name}:1: format version {version!r}; this Berth ({__version__}) reads version "
            f"{VERSION} only: replay it with the Berth that recorded it "
            f"({rec.get('berth', 'unknown')})"
        )
    if rec.get("segment") != segment:
        raise RecordingInvalid(f"{name}:1: header says segment {rec.get('segment')!r}")


def decode(msg_type: type[Any], text: object, where: str) -> Any:
    """A base64 protobuf field of a record, or RecordingInvalid."""
    if not isinstance(text, str):
        raise RecordingInvalid(f"{where}: expected a base64 string")
    try:
        msg = msg_type()
        msg.ParseFromString(base64.b64decode(text, validate=True))
    except (ValueError, TypeError) as exc:
        raise RecordingInvalid(f"{where}: not a {msg_type.__name__}: {exc}") from exc
    except Exception as exc:  # protobuf's DecodeError
        raise RecordingInvalid(f"{where}: not a {msg_type.__name__}: {exc}") from exc
    return msg


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "EVENT_REFS",
    "FORMAT",
    "VERSION",
    "Line",
    "Outcome",
    "ReadReport",
    "RecordError",
    "Recording",
    "RecordingInvalid",
    "RecordingStateLog",
    "decode",
    "header_record",
    "outcome",
    "read_recording",
    "segment_name",
    "segments",
]
