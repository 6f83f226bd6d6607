"""StickyNode / StickyVM: following the owner chain, PreFilter's node
restriction, Filter's reason, PostBind's write; args and the example config;
whole cycles through the runtime with the seed's profile."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, default_config, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import PreFilterResult
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectKind, ObjectWrite
from berth.framework.runtime import Framework
from berth.framework.schedule_one import ScheduleResult, schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import SKIP, SUCCESS, Code, Status
from berth.framework.testing import (
    apply_objects,
    batch_of,
    handle_for,
    make_node,
    make_object,
    make_pod,
    snapshot_of,
)
from berth.plugins.registry import REGISTRY
from berth.plugins.stickynode import (
    DEFAULT_ANNOTATION_KEY,
    OwnerKind,
    StickyNode,
    StickyNodeArgs,
    StickyState,
    StickyVM,
    gone_reason,
    mismatch_reason,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "stickynode"
KEY = DEFAULT_ANNOTATION_KEY
VMI = ObjectKind("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance")
VM = ObjectKind("kubevirt.io", "v1", "virtualmachines", "VirtualMachine")
STS = ObjectKind("apps", "v1", "statefulsets", "StatefulSet")


def owner_ref(
    kind: str, name: str, api_version: str = "kubevirt.io/v1", controller: bool = True
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": controller,
    }


def _with_refs(kind: ObjectKind, name: str, refs: list[dict[str, Any]]) -> pb.ClusterObject:
    """An object of ``kind`` with these metadata.ownerReferences."""
    obj = make_object(kind, name)
    body = json.loads(obj.json)
    body["metadata"]["ownerReferences"] = refs
    obj.json = json.dumps(body).encode()
    return obj


def vmi(name: str, vm: str | None = None, **ref: Any) -> pb.ClusterObject:
    """A VirtualMachineInstance, controlled by VirtualMachine ``vm`` when given."""
    return _with_refs(VMI, name, [] if vm is None else [owner_ref("VirtualMachine", vm, **ref)])


def vm(name: str, node: str | None = None) -> pb.ClusterObject:
    return make_object(VM, name, annotations=None if node is None else {KEY: node})


def launcher(
    name: str = "virt-launcher-vm1", owner: str = "vm1", kind: str = "VirtualMachineInstance"
) -> pb.Pod:
    pod = make_pod(name).req(cpu="1", memory="1Gi").obj()
    if owner:
        pod.owner_kind = kind
        pod.owner_name = owner
    return pod


def nodes(*names: str, cpu: str = "4") -> list[pb.Node]:
    return [make_node(n).capacity(cpu=cpu, memory="16Gi").obj() for n in names]


def make_info(pod: pb.Pod) -> PodInfo:
    return PodInfo(pod)


def plugin_on(snap: Snapshot, args: StickyNodeArgs | None = None) -> StickyNode:
    return StickyVM(args, handle_for(snap))


# -- PreFilter -------------------------------------------------------------------

# (id, pod, objects, want result node names (None: no restriction), want status)
PRE_FILTER_CASES: list[
    tuple[str, pb.Pod, list[pb.ClusterObject], frozenset[str] | None, Status]
] = [
    ("pod without a controller: not ours", launcher(owner=""), [], None, SKIP),
    (
        "controller of another kind: not ours",
        launcher(kind="ReplicaSet"),
        [vmi("vm1", "vm1"), vm("vm1", "n1")],
        None,
        SKIP,
    ),
    ("VMI without a VirtualMachine: not ours", launcher(), [vmi("vm1")], None, SKIP),
    (
        "VMI controlled by another kind: not ours",
        launcher(),
        [_with_refs(VMI, "vm1", [owner_ref("VirtualMachinePool", "pool")])],
        None,
        SKIP,
    ),
    (
        "VMI controlled by a VirtualMachine of another group: not ours",
        launcher(),
        [vmi("vm1", "vm1", api_version="example.com/v1"), vm("vm1", "n1")],
        None,
        SKIP,
    ),
    (
        "a non-controller owner is not followed",
        launcher(),
        [vmi("vm1", "vm1", controller=False), vm("vm1", "n1")],
        None,
        SKIP,
    ),
    (
        "first placement: no node recorded, any node",
        launcher(),
        [vmi("vm1", "vm1"), vm("vm1")],
        None,
        SKIP,
    ),
    (
        "recorded node: only that node",
        launcher(),
        [vmi("vm1", "vm1"), vm("vm1", "n2")],
        frozenset({"n2"}),
        SUCCESS,
    ),
    (
        "the VirtualMachine's name differs from the VMI's",
        launcher(owner="vmi-x"),
        [vmi("vmi-x", "my-vm"), vm("my-vm", "n1")],
        frozenset({"n1"}),
        SUCCESS,
    ),
    (
        "recorded node gone: wait, named",
        launcher(),
        [vmi("vm1", "vm1"), vm("vm1", "gone")],
        None,
        Status(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            ("sticky node gone of VirtualMachine default/vm1 does not exist",),
        ),
    ),
]


@pytest.mark.parametrize(
    ("pod", "objects", "want_nodes", "want"),
    [pytest.param(p, o, n, s, id=i) for i, p, o, n, s in PRE_FILTER_CASES],
)
def test_pre_filter(
    pod: pb.Pod,
    objects: list[pb.ClusterObject],
    want_nodes: frozenset[str] | None,
    want: Status,
) -> None:
    snap = snapshot_of(nodes("n1", "n2"), objects=objects)
    pl = plugin_on(snap)
    result, st = pl.pre_filter(CycleState(), make_info(pod), snap.all_nodes())
    assert st == want
    assert (None if result is None else result.node_names) == want_nodes


@pytest.mark.parametrize(
    ("objects", "missing"),
    [
        pytest.param([], "VirtualMachineInstance default/vm1", id="VMI not watched yet"),
        pytest.param([vmi("vm1", "vm1")], "VirtualMachine default/vm1", id="VM not watched yet"),
    ],
)
def test_pre_filter_owner_missing_from_the_cache_is_an_error_naming_it(
    objects: list[pb.ClusterObject], missing: str
) -> None:
    # The seed answers Error ("get vmi failed"), so the pod is retried with backoff.
    snap = snapshot_of(nodes("n1"), objects=objects)
    _, st = plugin_on(snap).pre_filter(CycleState(), make_info(launcher()), snap.all_nodes())
    assert st.code is Code.ERROR
    assert missing in st.message
    assert "is not in the scheduler's cache" in st.message


def test_recorded_node_gone_with_reschedule_lets_any_node_and_records_the_new_one() -> None:
    snap = snapshot_of(nodes("n1"), objects=[vmi("vm1", "vm1"), vm("vm1", "gone")])
    pl = plugin_on(snap, StickyNodeArgs(when_node_gone="Reschedule"))
    state = CycleState()
    result, st = pl.pre_filter(state, make_info(launcher()), snap.all_nodes())
    assert (result, st) == (None, SKIP)
    pl.post_bind(state, make_info(launcher()), "n1")
    assert state.writes == [
        ObjectWrite(
            "kubevirt.io",
            "v1",
            "virtualmachines",
            "default",
            "vm1",
            {"metadata": {"annotations": {KEY: "n1"}}},
        )
    ]


def test_statefulset_owner_chain_of_one_link() -> None:
    args = StickyNodeArgs(
        owner_chain=[
            OwnerKind(group="apps", version="v1", resource="statefulsets", kind="StatefulSet")
        ],
        annotation_key="berth.dev/sticky-node",
    )
    sts = make_object(STS, "db", annotations={"berth.dev/sticky-node": "n2"})
    snap = snapshot_of(nodes("n1", "n2"), objects=[sts])
    pl = plugin_on(snap, args)
    pod = launcher("db-0", owner="db", kind="StatefulSet")
    result, st = pl.pre_filter(CycleState(), make_info(pod), snap.all_nodes())
    assert st == SUCCESS
    assert result == PreFilterResult(frozenset({"n2"}))
    assert StickyNode.reads(args) == (STS,)


# -- Filter ------------------------------------------------------------------------


def test_filter_rejects_every_node_but_the_recorded_one_naming_both() -> None:
    snap = snapshot_of(nodes("n1", "n2", "n3"), objects=[vmi("vm1", "vm1"), vm("vm1", "n2")])
    pl = plugin_on(snap)
    state = CycleState()
    pod = make_info(launcher())
    pl.pre_filter(state, pod, snap.all_nodes())
    verdicts = pl.filter_nodes(state, pod, batch_of(snap))
    want = Status(
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ("node(s) didn't match the sticky node n2 of VirtualMachine default/vm1",),
    )
    assert [verdicts.status_of(k) for k in range(3)] == [want, SUCCESS, want]


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(None, id="PreFilter skipped (no sticky owner)"),
        pytest.param(
            StickyState(
                "kubevirt.io",
                "v1",
                "virtualmachines",
                "VirtualMachine",
                "default",
                "vm1",
                "",
                False,
            ),
            id="no node recorded yet",
        ),
        pytest.param(
            StickyState(
                "kubevirt.io",
                "v1",
                "virtualmachines",
                "VirtualMachine",
                "default",
                "vm1",
                "gone",
                False,
            ),
            id="recorded node gone, rescheduling",
        ),
    ],
)
def test_filter_passes_every_node_when_nothing_is_enforced(state: StickyState | None) -> None:
    snap = snapshot_of(nodes("n1", "n2"))
    pl = plugin_on(snap)
    cs = CycleState()
    if state is not None:
        cs.write(pl._key, state)
    assert pl.filter_nodes(cs, make_info(launcher()), batch_of(snap)).passed().all()


def test_reasons() -> None:
    st = StickyState(
        "kubevirt.io", "v1", "virtualmachines", "VirtualMachine", "ns", "vm", "n1", True
    )
    assert mismatch_reason(st) == "node(s) didn't match the sticky node n1 of VirtualMachine ns/vm"
    assert gone_reason(st) == "sticky node n1 of VirtualMachine ns/vm does not exist"


# -- PostBind ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "bound", "writes"),
    [
        pytest.param(
            None,
            "n1",
            [{"metadata": {"annotations": {KEY: "n1"}}}],
            id="first pod records its node",
        ),
        pytest.param("n1", "n1", [], id="same node: nothing to write"),
    ],
)
def test_post_bind(recorded: str | None, bound: str, writes: list[dict[str, Any]]) -> None:
    snap = snapshot_of(nodes("n1", "n2"), objects=[vmi("vm1", "vm1"), vm("vm1", recorded)])
    pl = plugin_on(snap)
    state = CycleState()
    pod = make_info(launcher())
    pl.pre_filter(state, pod, snap.all_nodes())
    pl.post_bind(state, pod, bound)
    assert [w.merge_patch for w in state.writes] == writes
    for w in state.writes:
        assert (w.group, w.version, w.resource, w.namespace, w.name, w.subresource) == (
            "kubevirt.io",
            "v1",
            "virtualmachines",
            "default",
            "vm1",
            "",
        )


def test_post_bind_without_pre_filter_state_writes_nothing() -> None:
    snap = snapshot_of(nodes("n1"))
    state = CycleState()
    plugin_on(snap).post_bind(state, make_info(launcher(owner="")), "n1")
    assert state.writes == []


def test_post_bind_state_survives_the_wire() -> None:
    # The binding cycle gets the cycle state back from the caller, encoded.
    snap = snapshot_of(nodes("n1"), objects=[vmi("vm1", "vm1"), vm("vm1")])
    pl = plugin_on(snap)
    state = CycleState()
    pl.pre_filter(state, make_info(launcher()), snap.all_nodes())
    again = CycleState.decode(state.encode())
    pl.post_bind(again, make_info(launcher()), "n1")
    assert [w.name for w in again.writes] == ["vm1"]


# -- args --------------------------------------------------------------------------


def _config(args: Any, name: str = "StickyVM") -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "stickyvm",
                "plugins": {"multiPoint": {"enabled": [{"name": name}]}},
                "pluginConfig": [{"name": name, "args": args}],
            }
        ],
    }


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param({}, StickyNodeArgs(), id="defaults: the seed's chain and key"),
        pytest.param(
            {
                "ownerChain": [
                    {
                        "group": "apps",
                        "version": "v1",
                        "resource": "statefulsets",
                        "kind": "StatefulSet",
                    }
                ]
            },
            StickyNodeArgs(
                owner_chain=[
                    OwnerKind(
                        group="apps", version="v1", resource="statefulsets", kind="StatefulSet"
                    )
                ]
            ),
            id="a StatefulSet",
        ),
        pytest.param(
            {"annotationKey": "sticky", "whenNodeGone": "Reschedule"},
            StickyNodeArgs(annotation_key="sticky", when_node_gone="Reschedule"),
            id="unprefixed key, reschedule",
        ),
    ],
)
def test_valid_args(raw: dict[str, Any], want: StickyNodeArgs) -> None:
    profile = parse_config(_config(raw), "<test>", REGISTRY).profiles[0]
    assert profile.plugin_args["StickyVM"] == want


_VM_LINK = {
    "group": "kubevirt.io",
    "version": "v1",
    "resource": "virtualmachines",
    "kind": "VirtualMachine",
}
ARGS = "profiles[0].pluginConfig[0].args"


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        pytest.param(
            {"ownerChain": []},
            f"{ARGS}.ownerChain",
            "required value: at least one owner kind, the kind of the pod's controller (e.g. VirtualMachineInstance)",
            id="empty chain",
        ),
        pytest.param(
            {"ownerChain": [_VM_LINK] * 5},
            f"{ARGS}.ownerChain",
            "too many links (5): at most 4",
            id="chain too long",
        ),
        pytest.param(
            {"ownerChain": [_VM_LINK, _VM_LINK]},
            f"{ARGS}.ownerChain[1]",
            "virtualmachines.kubevirt.io appears twice: an owner cannot own itself",
            id="link twice",
        ),
        pytest.param(
            {"ownerChain": [{**_VM_LINK, "kind": ""}]},
            f"{ARGS}.ownerChain[0].kind",
            "required value, e.g. 'VirtualMachine'",
            id="no kind",
        ),
        pytest.param(
            {"ownerChain": [{**_VM_LINK, "resource": "VirtualMachines"}]},
            f"{ARGS}.ownerChain[0].resource",
            "invalid value 'VirtualMachines': must be the lowercase plural resource name, e.g. 'virtualmachines'",
            id="resource not lowercase",
        ),
        pytest.param(
            {"ownerChain": [{**_VM_LINK, "version": "1"}]},
            f"{ARGS}.ownerChain[0].version",
            "invalid value '1': must look like v1, v1beta1 or v1alpha1",
            id="bad version",
        ),
        pytest.param(
            {"ownerChain": [{**_VM_LINK, "group": "KubeVirt"}]},
            f"{ARGS}.ownerChain[0].group",
            "invalid value 'KubeVirt': must be a lowercase DNS subdomain such as 'kubevirt.io', or empty for the core group",
            id="bad group",
        ),
        pytest.param(
            {"ownerChain": [{"kind": "VirtualMachine", "resource": "virtualmachines"}]},
            f"{ARGS}.ownerChain[0].version",
            "required value",
            id="version missing",
        ),
        pytest.param(
            {"ownerChain": [{**_VM_LINK, "plural": "x"}]},
            f"{ARGS}.ownerChain[0].plural",
            'unknown field "plural"',
            id="unknown link field",
        ),
        pytest.param(
            {"annotationKey": ""},
            f"{ARGS}.annotationKey",
            "required value: the annotation that records the node, e.g. 'example.com/sticky-node'",
            id="empty key",
        ),
        pytest.param(
            {"annotationKey": "Example.com/node"},
            f"{ARGS}.annotationKey",
            "invalid value 'Example.com/node': the prefix before '/' must be a lowercase DNS subdomain such as 'example.com'",
            id="bad key prefix",
        ),
        pytest.param(
            {"annotationKey": "example.com/-x"},
            f"{ARGS}.annotationKey",
            "invalid value 'example.com/-x': the name part must consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
            id="bad key name",
        ),
        pytest.param(
            {"whenNodeGone": "Forget"},
            f"{ARGS}.whenNodeGone",
            "invalid value 'Forget': must be 'Wait' or 'Reschedule'",
            id="bad whenNodeGone",
        ),
        pytest.param({"node": "n1"}, f"{ARGS}.node", 'unknown field "node"', id="unknown field"),
    ],
)
def test_bad_args_are_config_errors(raw: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_config(raw), "<test>", REGISTRY)
    assert (info.value.field, info.value.reason) == (field, reason)


def test_building_in_code_validates_too() -> None:
    with pytest.raises(ValueError, match="ownerChain: required value"):
        StickyNode(StickyNodeArgs(owner_chain=[]))


def test_reads_the_owner_chain() -> None:
    assert StickyVM.reads(StickyNodeArgs()) == (VMI, VM)
    assert StickyVM.reads(None) == (VMI, VM)


def test_both_names_registered_and_not_in_the_default_profile() -> None:
    assert REGISTRY["StickyVM"] is StickyVM
    assert REGISTRY["StickyNode"] is StickyNode
    profile = default_config(REGISTRY).profiles[0]
    names = {r.name for refs in profile.plugins.values() for r in refs}
    assert not names & {"StickyVM", "StickyNode"}


def test_example_config_is_the_seeds_and_loads() -> None:
    path = EXAMPLE / "scheduler-config.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["clientConnection"] == {"kubeconfig": "/etc/kubernetes/scheduler.kubeconfig"}
    assert doc["profiles"] == [
        {
            "schedulerName": "stickyvm",
            "plugins": {
                # "NodeResourceFit" (sic): no such plugin; ignored, as upstream does.
                "preFilter": {
                    "enabled": [{"name": "StickyVM"}],
                    "disabled": [{"name": "NodeResourceFit"}],
                },
                "filter": {"enabled": [{"name": "StickyVM"}], "disabled": [{"name": "NodePorts"}]},
                "reserve": {"disabled": [{"name": "*"}]},
                "preBind": {"disabled": [{"name": "*"}]},
                "postBind": {"enabled": [{"name": "StickyVM"}], "disabled": [{"name": "*"}]},
            },
        }
    ]
    profile = load_config(path, REGISTRY).profiles[0]
    assert [r.name for r in profile.enabled("postBind")] == ["StickyVM"]
    assert "NodePorts" not in [r.name for r in profile.enabled("filter")]
    assert "NodeResourcesFit" in [r.name for r in profile.enabled("preFilter")]
    assert profile.plugin_args["StickyVM"] == StickyNodeArgs()
    fw = Framework(profile, REGISTRY)
    mine = [(r.kind, r.plugins) for r in fw.reads if "StickyVM" in r.plugins]
    assert mine == [(VMI, ("StickyVM",)), (VM, ("StickyVM",))]


# -- whole cycles with the seed's profile ------------------------------------------


def _framework() -> Framework:
    return Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)


def _cycle(fw: Framework, snap: Snapshot, pod: pb.Pod) -> tuple[ScheduleResult, CycleState]:
    state = CycleState()
    return schedule_pod(fw, snap, state, make_info(pod), rng=random.Random(0)), state


def test_cycle_first_pod_goes_anywhere_then_its_node_is_recorded_and_kept() -> None:
    fw = _framework()
    # n1 is busy: every default score prefers the empty n2.
    busy = make_pod("busy").node("n1").req(cpu="3", memory="8Gi").obj()
    snap = snapshot_of(nodes("n1", "n2"), [busy], objects=[vmi("vm1", "vm1"), vm("vm1")])
    first, state = _cycle(fw, snap, launcher("virt-launcher-vm1-a"))
    assert first.status.is_success, first.message
    assert first.node == "n2"
    fw.run_post_bind(state, make_info(launcher("virt-launcher-vm1-a")), "n2")
    assert [(p, w.merge_patch) for p, w in state.plugin_writes] == [
        ("StickyVM", {"metadata": {"annotations": {KEY: "n2"}}})
    ]

    # The caller performed the write; the pod was deleted; the node load flips.
    apply_objects(snap, [vm("vm1", "n2")])
    snap.apply(pb.ClusterDelta(delete_pods=[busy.uid]))
    snap.apply(
        pb.ClusterDelta(upsert_pods=[make_pod("other").node("n2").req(cpu="3", memory="8Gi").obj()])
    )
    again, state = _cycle(fw, snap, launcher("virt-launcher-vm1-b"))
    assert again.status.is_success, again.message
    assert again.node == "n2"
    fw.run_post_bind(state, make_info(launcher("virt-launcher-vm1-b")), "n2")
    assert state.plugin_writes == []


def test_cycle_recorded_node_full_the_pod_waits_with_the_reason() -> None:
    fw = _framework()
    full = make_pod("full").node("n2").req(cpu="4", memory="1Gi").obj()
    snap = snapshot_of(
        nodes("n1", "n2", "n3"), [full], objects=[vmi("vm1", "vm1"), vm("vm1", "n2")]
    )
    result, _ = _cycle(fw, snap, launcher())
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) "
        "[StickyVM]. no new claims to deallocate, preemption: 0/3 nodes are available: 1 No preemption victims found for "
        "incoming pod, 2 Preemption is not helpful for scheduling."
    )
    assert "StickyVM" in result.unschedulable_plugins


def test_cycle_recorded_node_gone_the_pod_waits_naming_node_and_owner() -> None:
    fw = _framework()
    snap = snapshot_of(nodes("n1"), objects=[vmi("vm1", "vm1"), vm("vm1", "n9")])
    result, _ = _cycle(fw, snap, launcher())
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/1 nodes are available: sticky node n9 of VirtualMachine default/vm1 does not exist. "
        "no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_cycle_pods_of_other_owners_are_left_alone() -> None:
    fw = _framework()
    snap = snapshot_of(nodes("n1", "n2"), objects=[vmi("vm1", "vm1"), vm("vm1", "n1")])
    pod = make_pod("web").req(cpu="100m").obj()
    result, state = _cycle(fw, snap, pod)
    assert result.status.is_success, result.message
    assert "StickyVM" in state.skip_filter_plugins
