"""ClusterStateLog carries objects beyond nodes and pods like nodes and pods:
in the delta of their generation, merged over generations to their last
state, in full states; a replica applying them holds exactly the caller's
objects."""

from __future__ import annotations

from berth.client import ClusterStateLog
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import Snapshot
from berth.framework.testing import make_object, object_ref

PG = ObjectKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")


def names(refs: object) -> list[str]:
    return sorted(r.name for r in refs)  # type: ignore[attr-defined]


def test_commit_puts_object_changes_in_the_delta() -> None:
    log = ClusterStateLog()
    log.upsert_object(make_object(PG, "a"))
    log.upsert_object(make_object(PG, "b"))
    assert log.has_pending
    g1 = log.commit()
    log.delete_object(object_ref(PG, "a"))
    log.upsert_object(make_object(PG, "b", spec={"minMember": 2}))
    g2 = log.commit()
    assert g2 == g1 + 1
    delta = log.state_since(g1).delta
    assert names(delta.delete_objects) == ["a"]
    assert [o.ref.name for o in delta.upsert_objects] == ["b"]
    assert b"minMember" in delta.upsert_objects[0].json


def test_changes_before_a_commit_collapse_to_the_last_state() -> None:
    log = ClusterStateLog()
    log.upsert_object(make_object(PG, "a"))
    log.commit()
    log.upsert_object(make_object(PG, "tmp"))
    log.delete_object(object_ref(PG, "tmp"))
    log.delete_object(object_ref(PG, "never-there"))
    log.commit()
    delta = log.state_since(1).delta
    assert names(delta.delete_objects) == ["tmp"]
    assert list(delta.upsert_objects) == []


def test_merged_deltas_and_full_states_agree_on_the_replica() -> None:
    log = ClusterStateLog()
    log.upsert_object(make_object(PG, "a"))
    log.upsert_object(make_object(PG, "b"))
    log.commit()
    behind = Snapshot()
    behind.apply(log.full_state().delta)
    log.delete_object(object_ref(PG, "a"))
    log.commit()
    log.upsert_object(make_object(PG, "a", spec={"back": True}))
    log.upsert_object(make_object(PG, "c"))
    log.commit()
    merged = log.state_since(1)
    assert merged.base_generation == 1 and not merged.full
    behind.apply(merged.delta)
    fresh = Snapshot()
    full = log.full_state()
    assert full.full
    fresh.apply(full.delta)
    for snap in (behind, fresh):
        objs = snap.objects(*PG.key)
        assert sorted(objs) == [("default", "a"), ("default", "b"), ("default", "c")]
        assert objs[("default", "a")].data["spec"] == {"back": True}
