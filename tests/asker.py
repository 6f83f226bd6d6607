"""A test plugin that asks something of other pods at every extension point, as a gang
plugin does (scheduler-plugins' Coscheduling activates a gang's siblings and rejects
its waiting members): for the runtime's unit tests (tests/unit/framework) and the
same protocol over gRPC (tests/contract).

What it asks, by point (pod uids and messages are fixed, so tests can name them):

- PreFilter, Reserve, Permit, PreBind, PostBind: pods to activate ``from-<point>``
  (Reserve asks again for ``from-prefilter``: each pod is named once);
- PostFilter: reject waiting pod ``waiting-1`` (``<pod> fits no node``);
- Unreserve: reject waiting pod ``waiting-2`` (``<pod> unreserved``);
- Permit: allow waiting pod ``waiting-3``.

The pod's labels decide what fails: ``fit=no`` (Filter), ``reserve=fail|raise``,
``permit=wait|reject``, ``prebind=fail``.
"""

from __future__ import annotations

from collections.abc import Mapping

from berth.framework import (
    CycleState,
    FilterPlugin,
    NodeInfo,
    PermitPlugin,
    PodInfo,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    ReservePlugin,
    Status,
)
from berth.framework.interfaces import PostFilterResult, PreFilterResult
from berth.framework.snapshot import NodeBatch
from berth.framework.status import Code

PERMIT_WAIT_SECONDS = 10.0


class Asker(
    PreFilterPlugin,
    FilterPlugin,
    PostFilterPlugin,
    ReservePlugin,
    PermitPlugin,
    PreBindPlugin,
    PostBindPlugin,
):
    """See the module's docstring."""

    name = "Asker"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        state.activate_pods(["from-prefilter"])
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if pod.labels.get("fit") == "no":
            return Status.unschedulable("no fit")
        return Status.success()

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        state.signal_waiting_pod("waiting-1", False, f"{pod.name} fits no node")
        return None, Status.unschedulable(f"{pod.name} takes its gang down")

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        state.activate_pods(["from-reserve", "from-prefilter"])
        how = pod.labels.get("reserve")
        if how == "raise":
            raise RuntimeError("reserve broke")
        if how == "fail":
            return Status.unschedulable("no room")
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.signal_waiting_pod("waiting-2", False, f"{pod.name} unreserved")

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        state.signal_waiting_pod("waiting-3", True)
        state.activate_pods(["from-permit"])
        how = pod.labels.get("permit")
        if how == "wait":
            return Status(Code.WAIT, ("waiting for the gang",)), PERMIT_WAIT_SECONDS
        if how == "reject":
            return Status.unschedulable("gang incomplete"), 0.0
        return Status.success(), 0.0

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        state.activate_pods(["from-prebind"])
        if pod.labels.get("prebind") == "fail":
            return Status.error("cannot")
        return Status.success()

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.activate_pods(["from-postbind"])
