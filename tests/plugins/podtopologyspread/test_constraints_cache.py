"""common.pod_constraints: a pod's own constraints parsed once for all the
pods carrying the same ones, as filterTopologySpreadConstraints
(pkg/scheduler/framework/plugins/podtopologyspread/common.go) parses them for
each pod: the same result for every pod, whatever came before."""

from __future__ import annotations

import pytest

from berth.framework.labels import SelectorError
from berth.plugins.podtopologyspread import common
from berth.plugins.podtopologyspread.common import filter_constraints, pod_constraints
from tests.plugins.podtopologyspread.testutil import DNS, SA, C, spread_pod


def test_pods_with_the_same_constraints_share_one_parse() -> None:
    common._PARSED.clear()
    a = spread_pod("foo=", C(1, "zone", DNS, "foo")).proto
    b = spread_pod("foo= other=x", C(1, "zone", DNS, "foo")).proto
    assert pod_constraints(a, DNS) == filter_constraints(a.topology_spread_constraints, {}, DNS)
    assert pod_constraints(b, DNS) == pod_constraints(a, DNS)
    assert len(common._PARSED) == 1
    # Another action is another entry (ScheduleAnyway keeps none of these).
    assert pod_constraints(a, SA) == []
    assert len(common._PARSED) == 2


def test_match_label_keys_values_tell_pods_apart() -> None:
    common._PARSED.clear()
    v1 = spread_pod("foo= version=v1", C(1, "zone", DNS, "foo", mlk=["version"])).proto
    v2 = spread_pod("foo= version=v2", C(1, "zone", DNS, "foo", mlk=["version"])).proto
    none = spread_pod("foo=", C(1, "zone", DNS, "foo", mlk=["version"])).proto
    for p in (v1, v2, none, v1):
        want = filter_constraints(p.topology_spread_constraints, p.labels, DNS)
        assert pod_constraints(p, DNS) == want
    assert pod_constraints(v1, DNS) != pod_constraints(v2, DNS)


def test_a_selector_that_does_not_parse_fails_every_time() -> None:
    common._PARSED.clear()
    bad = spread_pod("foo=", C(1, "zone", DNS, "foo")).proto
    bad.topology_spread_constraints[0].label_selector.match_expressions.add(
        key="-bad", operator="Exists"
    )
    for _ in range(2):
        with pytest.raises(SelectorError, match="labelSelector"):
            pod_constraints(bad, DNS)
    assert not common._PARSED


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    common._PARSED.clear()
    monkeypatch.setattr(common, "_PARSED_MAX", 4)
    for i in range(10):
        p = spread_pod("foo=", C(i + 1, "zone", DNS, "foo")).proto
        assert pod_constraints(p, DNS)[0].max_skew == i + 1
        assert len(common._PARSED) <= 4
