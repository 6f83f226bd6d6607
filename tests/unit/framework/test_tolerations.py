"""Toleration matching, after upstream's Toleration.ToleratesTaint and its tests
(k8s.io/api/core/v1/toleration_test.go, TestTolerationToleratesTaint)."""

from __future__ import annotations

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.tolerations import tolerates_taint, tolerations_tolerate_taint

TAINT = pb.Taint(key="foo", value="bar", effect="NoSchedule")


def tol(key: str = "", operator: str = "", value: str = "", effect: str = "") -> pb.Toleration:
    return pb.Toleration(key=key, operator=operator, value=value, effect=effect)


@pytest.mark.parametrize(
    ("toleration", "want"),
    [
        pytest.param(tol("foo", "Equal", "bar", "NoSchedule"), True, id="same key, value, effect"),
        pytest.param(tol("foo", "", "bar", "NoSchedule"), True, id="empty operator means Equal"),
        pytest.param(tol("foo", "Equal", "baz", "NoSchedule"), False, id="Equal, different value"),
        pytest.param(tol("foo", "Exists", "", "NoSchedule"), True, id="Exists ignores the value"),
        pytest.param(tol("foo", "Exists", "", ""), True, id="empty effect matches all effects"),
        pytest.param(tol("foo", "Exists", "", "NoExecute"), False, id="different effect"),
        pytest.param(tol("", "Exists"), True, id="empty key with Exists matches every taint"),
        pytest.param(tol("", "Equal", "bar"), True, id="empty key with Equal compares value only"),
        pytest.param(tol("other", "Exists"), False, id="different key"),
        pytest.param(tol("foo", "Gt", "1"), False, id="Gt is feature-gated off: no match"),
        pytest.param(tol("foo", "Lt", "9"), False, id="Lt is feature-gated off: no match"),
        pytest.param(tol("foo", "Bogus", "bar"), False, id="unknown operator: no match"),
    ],
)
def test_tolerates_taint_follows_upstream_rules(toleration: pb.Toleration, want: bool) -> None:
    assert tolerates_taint(toleration, TAINT) is want


def test_any_matching_toleration_is_enough() -> None:
    assert tolerations_tolerate_taint([tol("x", "Exists"), tol("foo", "Exists")], TAINT)
    assert not tolerations_tolerate_taint([tol("x", "Exists")], TAINT)
    assert not tolerations_tolerate_taint([], TAINT)
