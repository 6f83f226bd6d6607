"""SchedulingGates, after upstream's scheduling_gates_test.go at v1.36
(TestPreEnqueue); case ids are upstream's test names where they exist."""

from __future__ import annotations

import pytest

from berth.framework.interfaces import Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.status import Code, Status
from berth.framework.testing import make_pod
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.queuesort import PrioritySort
from berth.plugins.schedulinggates import SchedulingGates, waiting_for_gates_message


def gated(*gates: str) -> PodInfo:
    """st.MakePod().Name("p").SchedulingGates(gates)."""
    pod = make_pod("p").obj()
    pod.scheduling_gates.extend(gates)
    return PodInfo(pod)


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(gated(), Status(), id="pod does not carry scheduling gates"),
        pytest.param(
            gated("foo", "bar"),
            Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("waiting for scheduling gates: [foo bar]",)
            ),
            id="pod carries scheduling gates",
        ),
        pytest.param(
            gated("example.com/quota"),
            Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                ("waiting for scheduling gates: [example.com/quota]",),
            ),
            id="one gate is still listed in brackets",
        ),
        pytest.param(
            gated("z", "a", "m"),
            Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("waiting for scheduling gates: [z a m]",)),
            id="gates keep the pod's order",
        ),
    ],
)
def test_pre_enqueue_matches_upstream_scheduling_gates(pod: PodInfo, want: Status) -> None:
    """scheduling_gates_test.go, TestPreEnqueue."""
    assert SchedulingGates().pre_enqueue(pod) == want


def test_message_prints_gates_as_go_prints_a_string_slice() -> None:
    """fmt's %v of a []string: brackets, one space between elements."""
    assert waiting_for_gates_message(["foo", "bar"]) == "waiting for scheduling gates: [foo bar]"
    assert waiting_for_gates_message([]) == "waiting for scheduling gates: []"


REGISTRY: dict[str, type[Plugin]] = {
    "SchedulingGates": SchedulingGates,
    "PrioritySort": PrioritySort,
    "DefaultBinder": DefaultBinder,
}


def test_framework_pre_enqueue_names_the_plugin() -> None:
    """framework.go, RunPreEnqueuePlugins: the rejecting plugin is recorded."""
    fw = Framework(
        ProfileConfig(
            "test",
            {
                "preEnqueue": (PluginRef("SchedulingGates"),),
                "queueSort": (PluginRef("PrioritySort"),),
                "bind": (PluginRef("DefaultBinder"),),
            },
        ),
        REGISTRY,
    )
    st = fw.run_pre_enqueue(gated("foo"))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.plugin == "SchedulingGates"
    assert st.message == "waiting for scheduling gates: [foo]"
    assert fw.run_pre_enqueue(gated()).is_success
