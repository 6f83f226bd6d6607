"""StickyNode (config name also ``StickyVM``): the pods of a VM-like owner go
back to the node where the owner first ran.

The default owners are KubeVirt's: a ``VirtualMachine`` owns a
``VirtualMachineInstance`` which owns a pod; pods come and go (crash,
eviction, deletion), the VirtualMachine stays. The first pod lands wherever
the other plugins put it; PostBind records that node on the VirtualMachine;
every later pod of that VirtualMachine may go only there, unless a person
intervenes (removes the annotation, or ``whenNodeGone: Reschedule`` once the
node is gone).

How it does that, and why:

- the owners are read from the snapshot (``Plugin.reads``: the caller
  watches them), never fetched from the API server inside a cycle, and the
  annotation is written by the caller (``ObjectWrite``, a JSON merge patch),
  so the plugin server holds no credentials;
- PreFilter narrows the candidates to the recorded node (a
  ``PreFilterResult``), so Filter does not even run on the others; Filter
  still rejects any other node it is asked about, UnschedulableAndUnresolvable
  (not Unschedulable: preempting pods elsewhere cannot help);
- a recorded node that is not in the cluster is reported at PreFilter, with
  the node and the owner named, instead of a plain "0 nodes" (``whenNodeGone``
  chooses between waiting for it and rescheduling);
- PostBind records the node whenever it differs from the recorded one, not
  only when none was recorded, so after ``whenNodeGone: Reschedule`` the owner
  sticks to its new node;
- the owner chain and the annotation key are args (defaults:
  VirtualMachineInstance, VirtualMachine and ``example.com/sticky-node``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from berth.framework.cycle_state import CycleState, StateKey
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    kind_event_resource,
)
from berth.framework.interfaces import (
    FilterPlugin,
    PostBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject, ObjectKind, ObjectWrite
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SKIP, SUCCESS, Status
from berth.plugins.stickynode.args import OwnerKind, StickyNodeArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "NAME",
    "SEED_NAME",
    "StickyNode",
    "StickyState",
    "StickyVM",
    "find_sticky_owner",
    "gone_reason",
    "mismatch_reason",
]

NAME = "StickyNode"
# The name KubeVirt-oriented configurations enable (``- name: StickyVM``).
SEED_NAME = "StickyVM"

log = logging.getLogger(__name__)


class StickyState(msgspec.Struct, frozen=True):
    """What PreFilter found, for Filter and PostBind of the same cycle."""

    # The sticky owner (the last link of the chain).
    group: str
    version: str
    resource: str
    kind: str
    namespace: str
    name: str
    # The recorded node, "" when none is recorded yet.
    node: str
    # PreFilter restricted the pod to ``node``.
    enforced: bool

    @property
    def owner(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class OwnerNotFound(LookupError):
    """A link of the chain names an object the snapshot does not hold."""


def mismatch_reason(state: StickyState) -> str:
    """Filter's reason for a node other than the recorded one."""
    return f"node(s) didn't match the sticky node {state.node} of {state.owner}"


def gone_reason(state: StickyState) -> str:
    """PreFilter's reason when the recorded node is not in the cluster."""
    return f"sticky node {state.node} of {state.owner} does not exist"


def _controller_ref(obj: ClusterObject, link: OwnerKind) -> tuple[str, str] | None:
    """(kind, name) of the object's controller owner when it is of ``link``'s
    kind and group (any version), else None."""
    refs = obj.metadata.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        api_version = str(ref.get("apiVersion", ""))
        group = api_version.rpartition("/")[0]
        if ref.get("kind") == link.kind and group == link.group:
            return link.kind, str(ref.get("name", ""))
        return None
    return None


def find_sticky_owner(
    snapshot: Snapshot, pod: PodInfo, chain: list[OwnerKind]
) -> ClusterObject | None:
    """Follows the pod's controller up ``chain`` (matching kinds; the first
    link by the pod's controller kind, the others by controller
    ownerReferences' kind and group). None when the pod is not in such a
    chain (not this plugin's business); OwnerNotFound when a
    link names an object the snapshot does not hold."""
    if not chain or pod.proto.owner_kind != chain[0].kind or not pod.proto.owner_name:
        return None
    namespace = pod.namespace
    name = pod.proto.owner_name
    obj: ClusterObject | None = None
    for i, link in enumerate(chain):
        obj = snapshot.object(link.group, link.resource, namespace, name)
        if obj is None:
            raise OwnerNotFound(
                f"{link.kind} {namespace}/{name} (owner of pod {pod.key}) is not in the "
                f"scheduler's cache: is the caller watching {link.version} {link.describe}?"
            )
        if i + 1 < len(chain):
            ref = _controller_ref(obj, chain[i + 1])
            if ref is None or not ref[1]:
                return None
            name = ref[1]
    return obj


class StickyNode(
    PreFilterPlugin[StickyNodeArgs], FilterPlugin[StickyNodeArgs], PostBindPlugin[StickyNodeArgs]
):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = StickyNodeArgs

    def __init__(self, args: StickyNodeArgs | None = None, handle: Handle | None = None) -> None:
        sticky_args = StickyNodeArgs() if args is None else args
        # Checked here too, so a plugin built in code is checked like one
        # built from a configuration file.
        sticky_args.validate()
        super().__init__(sticky_args, handle)
        self.chain = list(sticky_args.owner_chain)
        self.annotation_key = sticky_args.annotation_key
        self.wait_when_gone = sticky_args.when_node_gone == "Wait"
        # One key per plugin name, in case a profile enables both names.
        self._key: StateKey[StickyState] = StateKey(self.name, StickyState)

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """Every kind of the owner chain, watched by the caller."""
        chain = (
            args.owner_chain if isinstance(args, StickyNodeArgs) else StickyNodeArgs().owner_chain
        )
        return tuple(ObjectKind(k.group, k.version, k.resource, k.kind) for k in chain)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A pod kept off every node but its sticky one is helped by that
        node coming (back), or by an owner of the chain changing (the
        recorded node, or the chain itself)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            *(
                ClusterEventWithHint(ClusterEvent(kind_event_resource(kind), ActionType.ALL))
                for kind in type(self).reads(self.args)
            ),
        ]

    @classmethod
    def writes(cls, args: Any) -> tuple[ObjectKind, ...]:
        """PostBind records the node on the last owner of the chain."""
        sticky_args = args if isinstance(args, StickyNodeArgs) else StickyNodeArgs()
        last = sticky_args.sticky_owner
        return (ObjectKind(last.group, last.version, last.resource, last.kind),)

    # -- PreFilter ---------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        snapshot = self.handle.snapshot
        try:
            owner = find_sticky_owner(snapshot, pod, self.chain)
        except OwnerNotFound as exc:
            # Error, not Unschedulable: the pod is retried with backoff, by
            # which time the caller's watch has the owner.
            return None, Status.error(str(exc))
        if owner is None:
            return None, SKIP
        link = self.chain[-1]
        node = str(owner.annotations.get(self.annotation_key, ""))
        st = StickyState(
            link.group,
            link.version,
            link.resource,
            link.kind,
            owner.namespace,
            owner.name,
            node,
            enforced=False,
        )
        if not node:
            log.info("pod %s: %s has no sticky node yet; any node will do", pod.key, st.owner)
            state.write(self._key, st)
            return None, SKIP
        if node not in snapshot.nodes:
            state.write(self._key, st)
            if self.wait_when_gone:
                log.info("pod %s: %s", pod.key, gone_reason(st))
                return None, Status.unresolvable(gone_reason(st))
            log.info("pod %s: %s; rescheduling it anywhere", pod.key, gone_reason(st))
            return None, SKIP
        st = StickyState(
            st.group, st.version, st.resource, st.kind, st.namespace, st.name, node, enforced=True
        )
        state.write(self._key, st)
        log.info("pod %s: %s is sticky to node %s", pod.key, st.owner, node)
        return PreFilterResult(frozenset((node,))), SUCCESS

    # -- Filter ------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        st = state.get(self._key)
        if st is None or not st.enforced or node.name == st.node:
            return SUCCESS
        return Status.unresolvable(mismatch_reason(st))

    # -- PostBind ----------------------------------------------------------

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        st = state.get(self._key)
        if st is None or st.node == node_name:
            return
        log.info("pod %s bound to %s: recording it on %s", pod.key, node_name, st.owner)
        state.add_write(
            ObjectWrite(
                st.group,
                st.version,
                st.resource,
                st.namespace,
                st.name,
                {"metadata": {"annotations": {self.annotation_key: node_name}}},
            )
        )


class StickyVM(StickyNode):
    """The same plugin under the name ``StickyVM``, so a
    KubeSchedulerConfiguration that enables ``- name: StickyVM`` loads unchanged."""

    name: ClassVar[str] = SEED_NAME
