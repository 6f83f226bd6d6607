"""berth shim --record's format (shim/record.py) and berth replay
(berth/cli/replay.py) on synthetic recordings: the shim's calls made through
the same in-process plugin service, the recorder fed as SchedulingCycle and
RecordingStateLog feed it."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.cli.replay import Replayer, ReplayReport
from berth.framework.config import default_config, load_config
from berth.framework.profile import SchedulerConfig
from berth.framework.testing import make_node, make_pod
from berth.plugins.registry import load_registry
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim import record
from berth.shim.record import (
    RecordError,
    Recording,
    RecordingInvalid,
    RecordingStateLog,
    outcome,
    read_recording,
    segment_name,
)
from berth.shim.service import PluginService

MOST_ALLOCATED = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"""


def _service(config: SchedulerConfig, state: RecordingStateLog) -> PluginService:
    registry = load_registry()
    return PluginService.in_process(
        SchedulingService(config, build_frameworks(config, registry)), state
    )


async def _record_run(directory: Path, pods: list[cpb.Pod], *, batch: int = 1) -> list[str]:
    """Four nodes, then ``pods`` scheduled ``batch`` at a time the way
    SchedulingCycle does with --record, each placement assumed and then
    confirmed by an informer event. Returns where each pod went ("" none)."""
    config = default_config(load_registry())
    rec = Recording(directory)
    rec.start(config)
    state = RecordingStateLog(rec)
    svc = _service(config, state)
    for i in range(4):
        node = make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods=110).obj()
        rec.event("nodes", "ADDED", node)
        state.upsert_node(node)
    placed: list[str] = []
    start = 0
    for k in range(0, len(pods), batch):
        sent = pods[k : k + batch]
        for p in sent:
            rec.event("pods", "ADDED", p)
        seed = rec.seed()
        state.commit()
        cycle = rec.cycle("default-scheduler", sent, state.generation, start, seed)
        if len(sent) == 1:
            results = [await svc.schedule("default-scheduler", sent[0], start, seed=seed)]
            start = results[0].next_start_index
        else:
            b = await svc.schedule_batch("default-scheduler", sent, start, seed=seed)
            results, start = list(b.results), b.next_start_index
        rec.decisions(cycle, "default-scheduler", sent, [1] * len(sent), results)
        for p, resp in zip(sent, results, strict=True):
            o = outcome(resp)
            placed.append(o.node)
            if o.node:
                bound = cpb.Pod()
                bound.CopyFrom(p)
                bound.node_name = o.node
                rec.event("pods", "MODIFIED", bound)
                state.upsert_pod(bound)
    await svc.close()
    rec.close()
    return placed


def _pods(n: int) -> list[cpb.Pod]:
    out = [make_pod(f"p{i}").req(cpu="500m", memory="256Mi").obj() for i in range(n)]
    # One that fits nowhere: its FailedScheduling message is compared too.
    out.append(make_pod("huge").req(cpu="64").obj())
    return out


def _replay(directory: Path, config: str | None = None) -> ReplayReport:
    return asyncio.run(Replayer(str(directory), config, None).run())


@pytest.mark.parametrize("batch", [1, 5], ids=["single-cycles", "batches"])
def test_replay_same_config_has_no_difference(tmp_path: Path, batch: int) -> None:
    placed = asyncio.run(_record_run(tmp_path, _pods(12), batch=batch))
    assert placed[-1] == "" and all(placed[:-1])
    r = _replay(tmp_path)
    assert r.decisions == 13
    assert r.identical == 13 and r.different == 0
    assert r.results == {"scheduled": 12, "unschedulable": 1}
    assert r.events == 4 + 13 + 12


def test_replay_changed_weight_reports_moved_pods(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(12)))
    cfg = tmp_path / "most.yaml"
    cfg.write_text(MOST_ALLOCATED)
    r = _replay(tmp_path, str(cfg))
    # LeastAllocated spread the pods over the four nodes; MostAllocated packs
    # the later ones onto the node the first went to.
    assert r.different > 0
    assert r.identical + r.different == 13
    diff = r.differences[0]
    assert diff.recorded.result == diff.replayed.result == "scheduled"
    assert diff.recorded.node != diff.replayed.node
    assert diff.where.startswith(segment_name(1) + ":")


def test_ties_replay_alike_with_the_recorded_seed(tmp_path: Path) -> None:
    # Empty identical nodes: every first pod is a four-way tie, broken by
    # the recorded seed; the replay must make the same choice every time.
    pods = [make_pod(f"t{i}").req(cpu="1").obj() for i in range(8)]
    placed = asyncio.run(_record_run(tmp_path, pods))
    assert len(set(placed)) > 1
    for _ in range(3):
        r = _replay(tmp_path)
        assert r.different == 0 and r.decisions == 8


def test_round_trip_keeps_every_record_in_order(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(3)))
    lines = list(read_recording(tmp_path))
    kinds = [ln.record["t"] for ln in lines]
    assert kinds[0] == "header" and kinds[-1] == "end"
    assert lines[0].record["version"] == record.VERSION
    assert lines[-1].record["reason"] == "the shim stopped"
    seqs = [ln.record["seq"] for ln in lines[1:]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # A state change that stores the object an event carried names the event.
    st = [ln.record for ln in lines if ln.record["t"] == "st"]
    assert st and all("ev" in s for s in st if s["op"] == "upsert_node")
    decision = next(ln.record for ln in lines if ln.record["t"] == "decision")
    assert decision["pod"] == "default/p0" and decision["result"] == "scheduled"
    assert decision["node"].startswith("n")


def test_refuses_a_directory_holding_a_recording(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(1)))
    with pytest.raises(RecordError, match="holds a recording already"):
        Recording(tmp_path).start(default_config(load_registry()))


def _rewrite(path: Path, edit: object) -> None:
    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    new = edit(lines)  # type: ignore[operator]
    path.write_bytes(gzip.compress(b"".join(new)))


def test_refuses_another_format_version(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(1)))

    def bump(lines: list[bytes]) -> list[bytes]:
        h = orjson.loads(lines[0])
        h["version"] = record.VERSION + 1
        return [orjson.dumps(h) + b"\n", *lines[1:]]

    _rewrite(tmp_path / segment_name(1), bump)
    with pytest.raises(
        RecordingInvalid, match=r"berth-record-000001\.jsonl\.gz:1: format version 2"
    ):
        _replay(tmp_path)


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(1)))
    _rewrite(tmp_path / segment_name(1), lambda ls: [*ls[:3], b"{not json\n", *ls[3:]])
    with pytest.raises(RecordingInvalid, match=r"berth-record-000001\.jsonl\.gz:4: not a JSON"):
        _replay(tmp_path)


def test_bad_object_names_file_line_and_field(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(1)))

    def spoil(lines: list[bytes]) -> list[bytes]:
        out = []
        for ln in lines:
            r = orjson.loads(ln)
            if r["t"] == "cycle":
                r["pods"] = ["!!not base64!!"]
                ln = orjson.dumps(r) + b"\n"
            out.append(ln)
        return out

    _rewrite(tmp_path / segment_name(1), spoil)
    with pytest.raises(RecordingInvalid, match=r"\.jsonl\.gz:\d+: pods\[0\]: not a Pod"):
        _replay(tmp_path)


def test_cut_tail_is_replayed_up_to_the_cut(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(6)))
    seg = tmp_path / segment_name(1)
    whole = _replay(tmp_path)
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) * 2 // 3])
    r = _replay(tmp_path)
    assert r.truncated.startswith(segment_name(1) + ":")
    assert 0 < r.decisions < whole.decisions
    assert r.different == 0


def test_cut_segment_that_is_not_the_last_is_an_error(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(2)))
    first = tmp_path / segment_name(1)
    data = first.read_bytes()
    # A second segment after a first one cut short.
    lines = gzip.decompress(data).splitlines(keepends=True)
    h = orjson.loads(lines[0])
    h["segment"] = 2
    h.pop("config")
    (tmp_path / segment_name(2)).write_bytes(gzip.compress(orjson.dumps(h) + b"\n"))
    first.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordingInvalid, match=r"000001\.jsonl\.gz:\d+: the segment is cut short"):
        _replay(tmp_path)


def test_missing_segment_is_an_error(tmp_path: Path) -> None:
    asyncio.run(_record_run(tmp_path, _pods(1)))
    (tmp_path / segment_name(1)).rename(tmp_path / segment_name(2))
    with pytest.raises(RecordingInvalid, match=r"berth-record-000001\.jsonl\.gz is missing"):
        _replay(tmp_path)


def test_size_cap_stops_recording_with_a_last_record_and_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = default_config(load_registry())
    rec = Recording(tmp_path, max_bytes=64 << 10, segment_bytes=16 << 10)
    rec.start(config)
    import random

    rng = random.Random(1)
    with caplog.at_level("WARNING", logger="berth.shim.record"):
        for i in range(5000):
            # Incompressible labels, so the cap is reached.
            node = make_node(f"n{i}").label("x", f"{rng.getrandbits(128):x}").obj()
            rec.event("nodes", "ADDED", node)
        rec.close()
    assert not rec.recording
    files = sorted(tmp_path.iterdir())
    assert len(files) > 1
    assert sum(f.stat().st_size for f in files) <= (64 << 10) + 4096
    lines = list(read_recording(tmp_path))
    assert lines[-1].record["t"] == "end"
    assert "size cap" in lines[-1].record["reason"]
    assert any("recording to" in m and "stopped" in m for m in caplog.messages)


def test_overflow_stops_recording_rather_than_grow(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recording(tmp_path, max_pending=10)
    rec.start(default_config(load_registry()))
    rec._stop.set()  # the writer exits at once, as a stuck disk would leave it
    assert rec._thread is not None
    rec._thread.join()
    node = make_node("n").obj()
    with caplog.at_level("WARNING", logger="berth.shim.record"):
        for _ in range(20):
            rec.event("nodes", "ADDED", node)
    assert not rec.recording
    assert any("fell 10 records behind" in m for m in caplog.messages)


def test_replay_cli_json_and_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from berth.cli import main

    asyncio.run(_record_run(tmp_path, _pods(6)))
    assert main(["replay", str(tmp_path), "-o", "json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decisions"] == 7 and out["different"] == 0 and out["differences"] == []
    cfg = tmp_path / "most.yaml"
    cfg.write_text(MOST_ALLOCATED)
    assert main(["replay", str(tmp_path), "--config", str(cfg), "--quiet"]) == 1
    text = capsys.readouterr().out
    assert "POD" in text and "RECORDED" in text and "default/p" in text


def test_replay_cli_missing_profile_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from berth.cli import main

    asyncio.run(_record_run(tmp_path, _pods(1)))
    cfg = tmp_path / "other.yaml"
    cfg.write_text(MOST_ALLOCATED.replace("default-scheduler", "other"))
    assert main(["replay", str(tmp_path), "--config", str(cfg), "--quiet"]) == 2
    assert "profile 'default-scheduler'" in capsys.readouterr().err


def test_header_carries_the_configuration_text(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(MOST_ALLOCATED)
    rec_dir = tmp_path / "rec"
    rec = Recording(rec_dir)
    rec.start(load_config(cfg_file, load_registry()))
    rec.close()
    header = next(iter(read_recording(rec_dir))).record
    assert header["config"]["text"] == MOST_ALLOCATED
    assert header["config"]["source"] == str(cfg_file)
    assert header["berth"]


def test_explained_cycle_replays_with_explain(tmp_path: Path) -> None:
    """A pod that asked for explanations is scheduled over every node, its
    nominated node not tried first (framework/schedule_one.py explain): the
    replay must run it the same way. n0 fits the pod but n1 scores higher."""

    async def run() -> str:
        config = default_config(load_registry())
        rec = Recording(tmp_path)
        rec.start(config)
        state = RecordingStateLog(rec)
        svc = _service(config, state)
        for name in ("n0", "n1"):
            state.upsert_node(make_node(name).capacity(cpu="4", memory="8Gi", pods=110).obj())
        state.upsert_pod(make_pod("busy").req(cpu="3").node("n0").obj())
        pod = make_pod("p").req(cpu="500m").obj()
        pod.nominated_node_name = "n0"
        seed = rec.seed()
        state.commit()
        cycle = rec.cycle("default-scheduler", [pod], state.generation, 0, seed, explain=True)
        resp = await svc.schedule("default-scheduler", pod, 0, explain=True, seed=seed)
        rec.decisions(cycle, "default-scheduler", [pod], [1], [resp])
        await svc.close()
        rec.close()
        return outcome(resp).node

    assert asyncio.run(run()) == "n1"
    cycle = next(ln.record for ln in read_recording(tmp_path) if ln.record["t"] == "cycle")
    assert cycle["explain"] is True
    r = _replay(tmp_path)
    assert r.decisions == 1 and r.different == 0
