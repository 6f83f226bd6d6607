"""DynamicResources' PreBind and binding conditions (DRADeviceBindingConditions,
beta and on in v1.36): the TestPlugin cases of dynamicresources_test.go about
binding conditions, named as upstream names them, and the rechecks that
replace upstream's wait in PreBind (wait.PollUntilContextTimeout every 5 s up
to bindingTimeout, isPodReadyForBinding): PreBind answers Wait with a recheck
delay, and the caller calls it again with the claims as they are then.

Each case runs PreFilter, Filter, Reserve and PreBind over a snapshot; a
recheck runs PreBind again over a new snapshot holding the claims as PreBind's
writes left them (plus what a driver wrote in their status), with the cycle
state after its round trip through the caller, on a clock the test moves.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.snapshot import Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.testing import batch_of, fresh_state, make_object, snapshot_of
from berth.plugins.dynamicresources import (
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DynamicResources,
    DynamicResourcesArgs,
)
from berth.plugins.dynamicresources.dynamicresources import BINDING_POLL_SECONDS
from tests.plugins.dynamicresources.test_dynamicresources import (
    CLAIM,
    CLAIM2,
    DRIVER,
    NODE,
    NS,
    POD_REF,
    allocation_result,
    claim,
    device_class,
    nodes,
    pending,
    plugin_for,
    pod_with_claim_name,
    pod_with_claim_template,
    request,
)

DRIVER2 = "some-driver-2"
# dynamicresources_test.go bindingConditions, bindingFailureConditions.
CONDITIONS = ["condition"]
FAILURE_CONDITIONS = ["failed"]
# 2026-11-27T12:00:00Z, the tests' clock at the start.
T0 = 1795780800.0


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fabric_slice(driver: str = DRIVER, device: str = "instance-1") -> pb.ClusterObject:
    """fabricSlice: a device that binds to the node, with binding conditions."""
    return make_object(
        RESOURCE_SLICES,
        f"{NODE}-{driver}",
        spec={
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": device,
                    "bindsToNode": True,
                    "bindingConditions": CONDITIONS,
                    "bindingFailureConditions": FAILURE_CONDITIONS,
                }
            ],
        },
    )


def with_conditions(
    driver: str = DRIVER, device: str = "instance-1", req: str = "req-1", at: float | None = T0
) -> dict[str, Any]:
    """allocationResultWithBindingConditions (allocationTimestamp ``at``)."""
    result = allocation_result(device=device, req=req)
    result["devices"]["results"][0].update(
        driver=driver,
        bindingConditions=CONDITIONS,
        bindingFailureConditions=FAILURE_CONDITIONS,
    )
    if at is not None:
        result["allocationTimestamp"] = stamp(at)
    return result


def device_status(
    driver: str = DRIVER, device: str = "instance-1", **conditions: str
) -> dict[str, Any]:
    """An AllocatedDeviceStatus; ``conditions``: type -> "True"/"False"."""
    out: dict[str, Any] = {"driver": driver, "pool": NODE, "device": device}
    if conditions:
        out["conditions"] = [
            {"type": t, "status": s, "reason": f"{t.capitalize()}Reason", "message": f"{t} says so"}
            for t, s in conditions.items()
        ]
    return out


def bound_claim(**kw: Any) -> pb.ClusterObject:
    """boundClaim: allocated with binding conditions, all true."""
    return claim(
        finalizer=True,
        allocation=with_conditions(),
        devices_status=[device_status(condition="True", failed="False")],
        **kw,
    )


def bound_claim2() -> pb.ClusterObject:
    return claim(
        CLAIM2,
        finalizer=True,
        requests=[request("req-2")],
        allocation=with_conditions(DRIVER2, "instance-2", "req-2"),
        devices_status=[device_status(DRIVER2, "instance-2", condition="True", failed="False")],
    )


def failed_binding_claim2() -> pb.ClusterObject:
    return claim(
        CLAIM2,
        finalizer=True,
        requests=[request("req-2")],
        allocation=with_conditions(DRIVER2, "instance-2", "req-2"),
        devices_status=[device_status(DRIVER2, "instance-2", condition="False", failed="True")],
    )


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def written(objects: Sequence[pb.ClusterObject], state: CycleState) -> list[pb.ClusterObject]:
    """The claims after the caller performed PreBind's writes."""
    by_name = {o.ref.name: json.loads(o.json) for o in objects}
    for w in state.writes:
        assert w.resource == "resourceclaims", w
        by_name[w.name] = merge(by_name.get(w.name, {}), w.merge_patch)
    out = []
    for o in objects:
        again = pb.ClusterObject()
        again.CopyFrom(o)
        again.json = json.dumps(by_name[o.ref.name]).encode()
        out.append(again)
    return out


def driver_sets(obj: pb.ClusterObject, *statuses: Mapping[str, Any]) -> pb.ClusterObject:
    """A driver writes status.devices of the claim."""
    data = json.loads(obj.json)
    data.setdefault("status", {})["devices"] = list(statuses)
    again = pb.ClusterObject()
    again.CopyFrom(obj)
    again.json = json.dumps(data).encode()
    return again


@dataclass
class Run:
    """One pod through PreFilter .. PreBind, then its rechecks."""

    pod: pb.Pod
    claims: list[pb.ClusterObject]
    others: list[pb.ClusterObject]
    args: DynamicResourcesArgs | None = None
    now: list[float] = field(default_factory=lambda: [T0])
    state: CycleState = field(default_factory=fresh_state)
    node: str = NODE

    def plugin(self, snap: Snapshot) -> DynamicResources:
        return plugin_for(snap, self.args, clock=lambda: self.now[0])

    def schedule(self) -> Status:
        """PreFilter, Filter, Reserve on NODE, then the first PreBind."""
        snap = snapshot_of(nodes(), (), [*self.claims, *self.others])
        pl = self.plugin(snap)
        pod = PodInfo(self.pod)
        _, st = pl.pre_filter(self.state, pod, batch_of(snap))
        assert st.is_success, st
        verdicts = pl.filter_nodes(self.state, pod, batch_of(snap))
        assert verdicts.status_of(0) == SUCCESS, verdicts.status_of(0)
        assert pl.reserve(self.state, pod, NODE) == SUCCESS
        assert pl.pre_bind_pre_flight(self.state, pod, NODE) == SUCCESS
        st = pl.pre_bind(self.state, pod, NODE)
        self.claims = written(self.claims, self.state)
        return st

    def recheck(self, after: float | None = None) -> Status:
        """The caller's next PreBind call, ``after`` seconds later (the delay
        the last Wait asked for by default), the cycle state encoded and
        decoded as it travels."""
        delay = self.state.pre_bind_recheck_after if after is None else after
        assert delay > 0
        self.now[0] += delay
        self.state = CycleState.decode(self.state.encode())
        snap = snapshot_of(nodes(), (), [*self.claims, *self.others])
        st = self.plugin(snap).pre_bind(self.state, PodInfo(self.pod), self.node)
        self.claims = written(self.claims, self.state)
        return st


def status_patch(state: CycleState, name: str = CLAIM) -> Mapping[str, Any]:
    (patch,) = [w.merge_patch for w in state.writes if w.name == name and w.subresource]
    return patch


def test_bind_claim_with_binding_conditions() -> None:
    """bind-claim-with-binding-conditions (bindingTimeout 1s, no controller sets
    the conditions): PreBind writes the allocation and the reservation, waits,
    and fails with "device binding timeout" when the wait's deadline passes."""
    run = Run(
        pod_with_claim_name(),
        [pending()],
        [device_class(), fabric_slice()],
        DynamicResourcesArgs(binding_timeout="1s"),
    )
    st = run.schedule()
    assert st.code is Code.WAIT
    patch = status_patch(run.state)
    assert patch["status"]["reservedFor"] == [POD_REF]
    allocation = patch["status"]["allocation"]
    assert allocation["allocationTimestamp"] == stamp(T0)
    (result,) = allocation["devices"]["results"]
    assert (result["bindingConditions"], result["bindingFailureConditions"]) == (
        CONDITIONS,
        FAILURE_CONDITIONS,
    )
    # The recheck comes when the 1s wait ends, not after 5s.
    assert run.state.pre_bind_recheck_after == 1.0
    st = run.recheck()
    assert st == Status.error("device binding timeout: context deadline exceeded")
    # The recheck writes nothing again.
    assert run.state.writes == []


def test_bind_failure_concurrent_deallocation() -> None:
    """bind-failure-concurrent-deallocation: as above; a claim deallocated by
    someone else while PreBind waits is not ready, so the wait still ends in
    the timeout."""
    run = Run(
        pod_with_claim_name(),
        [pending()],
        [device_class(), fabric_slice()],
        DynamicResourcesArgs(binding_timeout="1s"),
    )
    assert run.schedule().code is Code.WAIT
    data = json.loads(run.claims[0].json)
    data["status"].pop("allocation")
    run.claims[0].json = json.dumps(data).encode()
    assert run.recheck() == Status.error("device binding timeout: context deadline exceeded")


def test_bound_claim_with_succeeded_binding_conditions() -> None:
    """bound-claim-with-succeeded-binding-conditions: the claim is allocated
    and its conditions are true: PreBind reserves it and succeeds at once."""
    run = Run(pod_with_claim_name(), [bound_claim()], [])
    assert run.schedule() == SUCCESS
    assert status_patch(run.state)["status"]["reservedFor"] == [POD_REF]
    assert run.state.pre_bind_recheck_after == 0.0


def test_prebind_fail_with_binding_timeout() -> None:
    """prebind-fail-with-binding-timeout: allocated bindingTimeout - 10s ago,
    its device not ready: the polls every 5s end with isClaimTimeout's
    error once allocationTimestamp + bindingTimeout has passed."""
    timeout = 600.0
    allocated_at = T0 - timeout + 10
    run = Run(
        pod_with_claim_name(),
        [
            claim(
                finalizer=True,
                allocation=with_conditions(at=allocated_at),
                devices_status=[device_status()],
            )
        ],
        [],
        DynamicResourcesArgs(binding_timeout="600s"),
    )
    assert run.schedule().code is Code.WAIT
    assert status_patch(run.state)["status"]["reservedFor"] == [POD_REF]
    verdicts = []
    for _ in range(5):
        assert run.state.pre_bind_recheck_after == BINDING_POLL_SECONDS
        st = run.recheck()
        verdicts.append(st)
        if st.code is not Code.WAIT:
            break
    # Polls at +5s, +10s (not yet: Before is strict), +15s (timed out).
    assert [v.code for v in verdicts] == [Code.WAIT, Code.WAIT, Code.ERROR]
    assert verdicts[-1] == Status.error(f"device binding timeout: claim={CLAIM}")


def test_bound_claim_without_binding_conditions() -> None:
    """bound-claim-without-binding-conditions: no device has binding
    conditions: PreBind reserves the claim and succeeds without waiting."""
    other = claim("not-my-claim")
    run = Run(
        pod_with_claim_template(), [claim(finalizer=True, allocation=allocation_result())], []
    )
    run.others.append(other)
    assert run.schedule() == SUCCESS
    assert run.state.pre_bind_recheck_after == 0.0


def test_multi_claims_binding_conditions_all_success() -> None:
    run = Run(
        pod_with_claim_name(CLAIM, CLAIM2),
        [bound_claim(), bound_claim2()],
        [device_class(), fabric_slice(), fabric_slice(DRIVER2, "instance-2")],
    )
    assert run.schedule() == SUCCESS
    assert [w.name for w in run.state.writes] == [CLAIM, CLAIM2]


@pytest.mark.parametrize(
    ("name", "claims"),
    [
        # bound-claim-with-mixed-binding-conditions: timed out, one
        # condition of two true.
        (
            "bound-claim-with-mixed-binding-conditions",
            lambda: [
                claim(
                    finalizer=True,
                    allocation=with_conditions(at=T0 - 600),
                    devices_status=[device_status(condition1="True", condition2="False")],
                )
            ],
        ),
        # multi-claims-binding-conditions-one-fail: the second claim's
        # failure condition is true.
        (
            "multi-claims-binding-conditions-one-fail",
            lambda: [bound_claim(), failed_binding_claim2()],
        ),
    ],
)
def test_filter_rejects_claims_whose_binding_failed_or_timed_out(name: str, claims: Any) -> None:
    """Filter: resourceclaim not available on the node; PostFilter deallocates
    the claim (reserved for nobody)."""
    pod = pod_with_claim_name(CLAIM) if "mixed" in name else pod_with_claim_name(CLAIM, CLAIM2)
    got = claims()
    snap = snapshot_of(nodes(), (), got)
    pl = plugin_for(snap, clock=lambda: T0 + 1)
    state = fresh_state()
    info = PodInfo(pod)
    _, st = pl.pre_filter(state, info, batch_of(snap))
    assert st == SUCCESS
    verdicts = pl.filter_nodes(state, info, batch_of(snap))
    assert verdicts.status_of(0) == Status.unresolvable("resourceclaim not available on the node")
    _, post = pl.post_filter(state, info, {NODE: verdicts.status_of(0)})
    assert post == Status.unschedulable("deallocation of ResourceClaim completed")
    (w,) = state.writes
    assert w.name == got[-1].ref.name
    assert w.merge_patch["status"] == {"reservedFor": None, "allocation": None, "devices": None}


# -- the rechecks ----------------------------------------------------------------------------------


def waiting_run(**args: Any) -> Run:
    run = Run(
        pod_with_claim_name(),
        [pending()],
        [device_class(), fabric_slice()],
        DynamicResourcesArgs(**args),
    )
    assert run.schedule().code is Code.WAIT
    return run


def test_a_recheck_succeeds_once_the_driver_sets_every_binding_condition() -> None:
    run = waiting_run()
    assert run.state.pre_bind_recheck_after == BINDING_POLL_SECONDS
    # Nothing reported yet, then the failure condition false and the
    # condition not yet true: still waiting, and nothing written again.
    assert run.recheck().code is Code.WAIT
    run.claims[0] = driver_sets(run.claims[0], device_status(failed="False"))
    st = run.recheck()
    assert st == Status.wait(f"waiting for binding conditions of claim {CLAIM}")
    assert run.state.writes == []
    run.claims[0] = driver_sets(run.claims[0], device_status(condition="True", failed="False"))
    assert run.recheck() == SUCCESS
    assert run.state.writes == []


def test_a_recheck_fails_with_upstreams_message_when_a_failure_condition_is_true() -> None:
    run = waiting_run()
    run.claims[0] = driver_sets(run.claims[0], device_status(condition="False", failed="True"))
    assert run.recheck() == Status.error(
        f'device binding failed: claim={CLAIM}, reason=FailedReason, message="failed says so"'
    )


def test_the_wait_ends_at_binding_timeout_after_it_began() -> None:
    """PollUntilContextTimeout's deadline: bindingTimeout after PreBind began
    waiting, checked before the claims (isClaimTimeout would say the same
    here, a second later at most)."""
    run = waiting_run(binding_timeout="12s")
    delays = []
    while True:
        delays.append(run.state.pre_bind_recheck_after)
        st = run.recheck()
        if st.code is not Code.WAIT:
            break
    assert delays == [5.0, 5.0, 2.0]
    assert st == Status.error("device binding timeout: context deadline exceeded")


def test_a_claim_gone_while_waiting_is_an_error() -> None:
    run = waiting_run()
    run.claims = []
    assert run.recheck() == Status.error(f'resourceclaim.resource.k8s.io "{CLAIM}" not found')


def test_filter_and_pre_bind_agree_on_the_failure_message_source() -> None:
    """isClaimReadyForBinding's error names the condition's reason and message
    (Go's %q for the message)."""
    run = waiting_run()
    status = device_status(condition="False", failed="True")
    status["conditions"][1]["message"] = 'quote " and\nnewline'
    run.claims[0] = driver_sets(run.claims[0], status)
    st = run.recheck()
    assert st.message == (
        f'device binding failed: claim={CLAIM}, reason=FailedReason, message="quote \\" and\\nnewline"'
    )


def test_resource_claims_kind_is_what_pre_bind_writes() -> None:
    run = waiting_run()
    assert {(w.group, w.resource) for w in run.state.writes} == {
        (RESOURCE_CLAIMS.group, RESOURCE_CLAIMS.resource)
    }
    assert {w.namespace for w in run.state.writes} == {NS}
