"""berth.client.answers: a failed cycle's rejected nodes read the same in either form."""

from __future__ import annotations

from berth.api.v1 import scheduling_pb2 as pb
from berth.client import rejected_by_status, rejected_count, rejected_nodes

CPU = pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["Insufficient cpu"], plugin="NodeResourcesFit")
TAINT = pb.Status(code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, plugin="TaintToleration")


def test_per_node_and_grouped_answers_read_alike() -> None:
    per_node = pb.Diagnosis()
    for node, st in (("a", CPU), ("b", TAINT), ("c", CPU)):
        per_node.rejected.add(node=node, status=st)
    grouped = pb.Diagnosis()
    grouped.rejected_groups.add(status=CPU, nodes=["a", "c"])
    grouped.rejected_groups.add(status=TAINT, nodes=["b"])
    want = {"a": CPU, "b": TAINT, "c": CPU}
    for d in (per_node, grouped):
        assert dict(rejected_nodes(d)) == want
        assert rejected_count(d) == 3
    assert [(list(n), st) for n, st in rejected_by_status(per_node)] == [
        (["a"], CPU),
        (["b"], TAINT),
        (["c"], CPU),
    ]
    assert [(list(n), st) for n, st in rejected_by_status(grouped)] == [
        (["a", "c"], CPU),
        (["b"], TAINT),
    ]
    assert list(rejected_nodes(pb.Diagnosis())) == []
    assert rejected_count(pb.Diagnosis()) == 0
