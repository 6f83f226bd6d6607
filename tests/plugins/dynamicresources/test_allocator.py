"""The structured allocator against upstream's shared allocator test cases.

testdata/allocator_cases.jsonl holds every case of
k8s.io/dynamic-resource-allocation v0.36.3
structured/internal/allocatortesting/ (allocator_testing.go and
lexicographical_testing.go, run by TestAllocator) that upstream runs against
its "incubating" allocator (the one v1.36's
default feature gates select), named as upstream names them: the inputs
(features, allocated devices, classes, slices, node, claims) and upstream's
own answer, recorded by hack/gen-dra-allocator-cases.sh only after
upstream's assertions for the case passed. Each case here checks that the
port answers exactly the same: the same AllocationResults (devices in the
same order, the same configs and node selector), or no allocation, or an
error with upstream's text; and that the search took as many steps
(allocateOne invocations) as upstream's, which pins the search order and
backtracking.

Where texts cannot be identical the case says so: the class lister's
NotFound error (the test's fake lister vs the scheduler's informer) and CEL's
own compile messages (cel-go vs CEL C++) are compared on upstream's expected
substring instead.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from berth.framework.units import parse_quantity
from berth.plugins.dynamicresources.structured.allocator import (
    AllocationError,
    AllocationTimeoutError,
    Allocator,
    Features,
    NodeAllocationError,
)
from berth.plugins.dynamicresources.structured.cel import CelCache
from berth.plugins.dynamicresources.structured.pools import slice_record
from berth.plugins.dynamicresources.structured.state import AllocatedState
from tests.plugins.dynamicresources import allocator_problems

_CASES_FILE = Path(__file__).parent / "testdata" / "allocator_cases.jsonl"
_CASES: list[dict[str, Any]] = [
    json.loads(line) for line in _CASES_FILE.read_text().splitlines() if line.strip()
]
# Upstream replaces every generated share ID by this before comparing.
_FIXED_SHARE_ID = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"

_FEATURES = {
    "adminAccess": "admin_access",
    "consumableCapacity": "consumable_capacity",
    "deviceBindingAndStatus": "device_binding_and_status",
    "deviceTaints": "device_taints",
    "listTypeAttributes": "list_type_attributes",
    "partitionableDevices": "partitionable_devices",
    "prioritizedList": "prioritized_list",
}

# Errors whose wording comes from a component Berth does not share with
# upstream's test: compared on upstream's expected substring only.
_SUBSTRING_ONLY = {
    # The test's lister answers `"not found" not found`; the scheduler's
    # informer lister (and Berth) `deviceclass.resource.k8s.io "x" not found`.
    "no-classes",
    "unknown-class",
    # cel-go's compile error vs CEL C++'s.
    "invalid-CEL-one-device",
    "invalid-CEL-one-device-class",
    "invalid-CEL-all-devices",
    "all-devices-invalid-CEL",
}


def _state(case: dict[str, Any]) -> AllocatedState:
    state = AllocatedState()
    for d in case.get("allocatedDevices") or []:
        state.allocated_devices.add((d["driver"], d["pool"], d["device"]))
    for d in case.get("allocatedSharedDeviceIDs") or []:
        state.allocated_shared_device_ids.add(
            (d["driver"], d["pool"], d["device"], d.get("shareID", ""))
        )
    for d in case.get("allocatedCapacity") or []:
        state.aggregated_capacity[(d["driver"], d["pool"], d["device"])] = {
            name: parse_quantity(text).nanos for name, text in d["capacity"].items()
        }
    return state


def _normalize(results: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Share IDs replaced as upstream's test does (after checking they are
    UUIDs), quantities as nano units (the text of a computed quantity is
    canonicalised by the API server)."""
    if results is None:
        return None
    out: list[dict[str, Any]] = json.loads(json.dumps(results))
    for result in out:
        for r in result.get("devices", {}).get("results", []):
            if "shareID" in r:
                if r["shareID"] != _FIXED_SHARE_ID:
                    uuid.UUID(r["shareID"])
                r["shareID"] = _FIXED_SHARE_ID
            if "consumedCapacity" in r:
                r["consumedCapacity"] = {
                    k: parse_quantity(v).nanos for k, v in r["consumedCapacity"].items()
                }
    return out


def _upstream_json(results: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Upstream's AllocationResults as the JSON the v1 API gives them
    (``devices`` is always there; omitted fields stay omitted)."""
    if results is None:
        return None
    for r in results:
        r.setdefault("devices", {})
    return results


def _check(case: dict[str, Any], answer: dict[str, Any], substring_only: bool = False) -> None:
    """Runs the port on ``case``'s inputs and compares with upstream's
    ``answer`` (results, error, numAllocateOne)."""
    features = Features(**{py: bool(case["features"].get(go)) for go, py in _FEATURES.items()})
    classes = {c["metadata"]["name"]: c for c in case.get("classes") or []}
    allocator = Allocator(features, _state(case), classes, case.get("slices") or [], CelCache())
    if answer.get("error"):
        with pytest.raises(AllocationError) as raised:
            allocator.allocate(case["nodeName"], case["nodeLabels"] or {}, case["claims"] or [])
        message = raised.value.message
        if substring_only:
            assert answer["errorSubstring"] in message
        else:
            assert message == answer["error"]
        if "invalid resource pools were encountered" in answer["error"]:
            assert isinstance(raised.value, NodeAllocationError)
        return
    got = allocator.allocate(case["nodeName"], case["nodeLabels"] or {}, case["claims"] or [])
    assert _normalize(got) == _normalize(_upstream_json(answer.get("results")))
    # The same search: as many allocateOne steps as upstream's.
    assert allocator.num_allocate_one == answer.get("numAllocateOne", 0)
    if case.get("expectNumAllocateOne"):
        assert allocator.num_allocate_one == case["expectNumAllocateOne"]


@pytest.mark.parametrize("case", _CASES, ids=[c["name"] for c in _CASES])
def test_allocator_upstream_case(case: dict[str, Any]) -> None:
    _check(case, case, substring_only=case["name"] in _SUBSTRING_ONLY)


_RANDOM_ANSWERS: list[dict[str, Any]] = [
    json.loads(line)
    for line in (Path(__file__).parent / "testdata" / "allocator_random_answers.jsonl")
    .read_text()
    .splitlines()
    if line.strip()
]


def test_allocator_answers_as_upstream_on_generated_problems() -> None:
    """allocator_problems.py's problems (seed 1) against the answers of
    upstream's incubating allocator to the same problems: every result,
    error text and search step count the same."""
    problems = {p["name"]: p for p in allocator_problems.problems(1, 1000)}
    assert len(_RANDOM_ANSWERS) > 900
    outcomes = {"results": 0, "none": 0, "error": 0}
    for answer in _RANDOM_ANSWERS:
        problem = problems[answer["name"]]
        try:
            _check(problem, answer)
        except AssertionError as e:
            raise AssertionError(f"{answer['name']}: {e}") from e
        kind = (
            "error"
            if answer.get("error")
            else "none"
            if answer.get("results") is None
            else "results"
        )
        outcomes[kind] += 1
    # The problems exercise all three outcomes.
    assert min(outcomes.values()) > 50, outcomes


def test_cases_cover_upstream() -> None:
    """The fixture holds every case upstream runs against the incubating
    allocator: the 221 of allocator_testing.go but the 21 that need
    DRAListTypeAttributes (alpha, only the experimental allocator has it),
    and the 4 of lexicographical_testing.go."""
    names = {c["name"] for c in _CASES}
    assert len(names) == len(_CASES) == 204
    assert {"simple", "all-devices-many", "prioritized-list-with-backtracking"} <= names
    assert not any(c["features"].get("listTypeAttributes") for c in _CASES)


# -- Berth's own: the API around the port ------------------------------------------------


def _slice(name: str, node: str, *devices: dict[str, Any], pool: str = "pool-1") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "driver-a",
            "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def _claim(name: str, namespace: str = "default", **exactly: Any) -> dict[str, Any]:
    request = {"allocationMode": "ExactCount", "count": 1, "deviceClassName": "class-a"}
    request.update(exactly)
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": request}]}},
    }


_CLASSES = {
    "class-a": {
        "metadata": {"name": "class-a"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "driver-a"'}}]},
    }
}


def test_features_default_to_v1_36_gates() -> None:
    f = Features()
    assert (f.admin_access, f.prioritized_list, f.partitionable_devices, f.device_taints) == (
        True,
        True,
        True,
        True,
    )
    assert f.consumable_capacity and f.device_binding_and_status
    assert not f.list_type_attributes
    with pytest.raises(ValueError, match="DRAListTypeAttributes"):
        Allocator(Features(list_type_attributes=True), AllocatedState(), {}, [], CelCache())


def test_allocated_state_from_claims_as_foreach_allocated_device() -> None:
    """allocateddevices.go foreachAllocatedDevice: admin access is no
    allocation, a shareID makes a share whose consumed capacity is summed."""

    def allocated(*results: dict[str, Any]) -> dict[str, Any]:
        return {"status": {"allocation": {"devices": {"results": list(results)}}}}

    base = {"request": "r", "driver": "d", "pool": "p"}
    state = AllocatedState.from_claims(
        [
            allocated(
                {**base, "device": "dedicated"}, {**base, "device": "admin", "adminAccess": True}
            ),
            allocated(
                {**base, "device": "shared", "shareID": "s1", "consumedCapacity": {"mem": "1Gi"}}
            ),
            allocated(
                {**base, "device": "shared", "shareID": "s2", "consumedCapacity": {"mem": "512Mi"}}
            ),
            {"status": {}},
        ]
    )
    assert state.allocated_devices == {("d", "p", "dedicated")}
    assert state.allocated_shared_device_ids == {
        ("d", "p", "shared", "s1"),
        ("d", "p", "shared", "s2"),
    }
    assert state.aggregated_capacity == {
        ("d", "p", "shared"): {"mem": (1024 + 512) * 2**20 * 10**9}
    }
    assert state.is_device_allocated(("d", "p", "shared"))
    assert not state.is_device_allocated(("d", "p", "admin"))
    # Without consumable capacity a share is a dedicated allocation.
    plain = AllocatedState.from_claims(
        [allocated({**base, "device": "shared", "shareID": "s1"})], consumable_capacity=False
    )
    assert plain.allocated_devices == {("d", "p", "shared")}


class _CountingCel(CelCache):
    def __init__(self) -> None:
        super().__init__()
        self.compiled: list[str] = []

    def compile(self, expression: str) -> Any:
        self.compiled.append(expression)
        return super().compile(expression)


def test_one_allocator_serves_every_node_of_a_cycle() -> None:
    """Per node only the search runs: selectors are compiled once and each
    device's CEL answer is computed once for the Allocator's life."""
    cel = _CountingCel()
    slices = [
        _slice(f"slice-{n}", f"node-{n}", {"name": "gpu-0"}, {"name": "gpu-1"}, pool=f"pool-{n}")
        for n in range(3)
    ]
    allocator = Allocator(Features(), AllocatedState(), _CLASSES, slices, cel)
    claim = _claim("c")
    for _ in range(2):
        for n in range(3):
            got = allocator.allocate(f"node-{n}", {}, [claim])
            assert got is not None
            assert got[0]["devices"]["results"][0]["pool"] == f"pool-{n}"
            assert got[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
                f"node-{n}"
            ]
    assert cel.compiled == ['device.driver == "driver-a"']
    # One device of each node was looked at, once.
    records = [allocator._slices_on_node[f"node-{n}"][0] for n in range(3)]
    assert [len(r.devices[0].cel_answers) for r in records] == [1, 1, 1]
    assert [len(r.devices[1].cel_answers) for r in records] == [0, 0, 0]
    assert allocator.allocate("node-9", {}, [claim]) is None


def test_slices_from_the_api_server_are_decoded_once_across_cycles() -> None:
    """An object with a resourceVersion is decoded once and its CEL answers
    kept for the next cycle's Allocator; a new resourceVersion (an update)
    or an object without one (built by hand) is decoded again."""
    cel = _CountingCel()
    raw = _slice("s", "node-0", {"name": "gpu-0"})
    raw["metadata"]["resourceVersion"] = "7"
    first = Allocator(Features(), AllocatedState(), _CLASSES, [raw], cel)
    assert first.allocate("node-0", {}, [_claim("c")]) is not None
    record = slice_record(raw)
    assert record is slice_record(raw)
    assert record.devices[0].cel_answers == {'device.driver == "driver-a"': True}
    second = Allocator(Features(), AllocatedState(), _CLASSES, [raw], cel)
    assert second._slices_on_node["node-0"][0] is record
    raw["metadata"]["resourceVersion"] = "8"
    raw["spec"]["devices"][0]["name"] = "gpu-1"
    got = Allocator(Features(), AllocatedState(), _CLASSES, [raw], cel).allocate(
        "node-0", {}, [_claim("c")]
    )
    assert got is not None and got[0]["devices"]["results"][0]["device"] == "gpu-1"
    by_hand = _slice("s", "node-0", {"name": "gpu-0"})
    assert slice_record(by_hand) is not slice_record(by_hand)


def test_errors_name_the_claim_with_its_namespace() -> None:
    allocator = Allocator(Features(), AllocatedState(), {}, [], CelCache())
    with pytest.raises(AllocationError) as raised:
        allocator.allocate("node-0", {}, [_claim("gpu", namespace="team-a")])
    assert raised.value.message == (
        "claim team-a/gpu, request req-0: could not retrieve device class class-a: "
        'deviceclass.resource.k8s.io "class-a" not found'
    )


@pytest.mark.parametrize("name", ["off", "deadline"])
def test_interrupt(name: str) -> None:
    """allocator_testing.go TestAllocator "interrupt": six devices wanted
    from five, a search that tries every combination; with a deadline that
    has passed (upstream's timeout, deadline and cancel of the context, the
    scheduler's DRASchedulerFilterTimeout) it stops with an error, without
    one it finds no allocation."""
    slices = [_slice("slice-1", "node-1", *({"name": f"device-{i}"} for i in range(1, 6)))]
    allocator = Allocator(Features(), AllocatedState(), _CLASSES, slices, CelCache())
    claims = [_claim("claim-0", count=6)]
    if name == "off":
        assert allocator.allocate("node-1", {}, claims) is None
        return
    with pytest.raises(AllocationTimeoutError, match="filter operation aborted"):
        allocator.allocate("node-1", {}, claims, deadline=0.0)


def test_hostile_quantities_cost_nothing_and_say_what_is_wrong() -> None:
    bad_device = {"name": "d-0", "capacity": {"memory": {"value": "1" * 5000}}}
    good_device = {"name": "d-1", "capacity": {"memory": {"value": "1Gi"}}}
    allocator = Allocator(
        Features(), AllocatedState(), _CLASSES, [_slice("s", "node-0", bad_device)], CelCache()
    )
    # A device the API server would not have stored is never allocated.
    assert allocator.allocate("node-0", {}, [_claim("c")]) is None
    allocator = Allocator(
        Features(), AllocatedState(), _CLASSES, [_slice("s", "node-0", good_device)], CelCache()
    )
    with pytest.raises(
        AllocationError, match=r"claim default/c, request req-0: capacity memory: quantity"
    ):
        allocator.allocate(
            "node-0", {}, [_claim("c", capacity={"requests": {"memory": "x" * 10**6}})]
        )


def test_counters_are_kept_per_driver_and_pool() -> None:
    """Berth's one deliberate difference: upstream keys a pool's available and
    consumed counters by the pool's name alone (checkAvailableCounters), so a
    pool of another driver with the same name (drivers often name pools after
    the node) is checked against the first pool's counters. Here driver-b's
    two devices fit in its own 8Gi counter; upstream would add their use to
    driver-a's and check it against driver-a's 4Gi."""

    def partitioned(driver: str, total: str) -> list[dict[str, Any]]:
        pool = {"name": "node-0", "generation": 1, "resourceSliceCount": 2}
        consumes = [{"counterSet": "cs", "counters": {"mem": {"value": "4Gi"}}}]
        return [
            {
                "metadata": {"name": f"{driver}-counters"},
                "spec": {
                    "driver": driver,
                    "pool": pool,
                    "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": total}}}],
                },
            },
            {
                "metadata": {"name": f"{driver}-devices"},
                "spec": {
                    "driver": driver,
                    "pool": pool,
                    "nodeName": "node-0",
                    "devices": [{"name": f"d-{i}", "consumesCounters": consumes} for i in range(2)],
                },
            },
        ]

    classes = {
        name: {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for name, driver in (("class-a", "driver-a"), ("class-b", "driver-b"))
    }
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "a",
                        "exactly": {
                            "deviceClassName": "class-a",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    },
                    {
                        "name": "b",
                        "exactly": {
                            "deviceClassName": "class-b",
                            "allocationMode": "ExactCount",
                            "count": 2,
                        },
                    },
                ]
            }
        },
    }
    slices = partitioned("driver-a", "4Gi") + partitioned("driver-b", "8Gi")
    allocator = Allocator(Features(), AllocatedState(), classes, slices, CelCache())
    got = allocator.allocate("node-0", {}, [claim])
    assert got is not None
    assert [(r["driver"], r["device"]) for r in got[0]["devices"]["results"]] == [
        ("driver-a", "d-0"),
        ("driver-b", "d-0"),
        ("driver-b", "d-1"),
    ]


def test_many_claims_of_32_devices_do_not_hit_the_recursion_limit() -> None:
    """The search recurses once per device: 34 claims of 32 devices each
    (1088 levels) pass Python's default limit of 1000."""
    devices = [{"name": f"d-{i}"} for i in range(1100)]
    allocator = Allocator(
        Features(), AllocatedState(), _CLASSES, [_slice("s", "node-0", *devices)], CelCache()
    )
    claims = [_claim(f"c{k}", count=32) for k in range(34)]
    got = allocator.allocate("node-0", {}, claims)
    assert got is not None
    assert sum(len(r["devices"]["results"]) for r in got) == 34 * 32


def test_a_shared_device_consumes_its_counters() -> None:
    """internal.IsDeviceAllocated: a device with a share counts as
    allocated when a pool's available counters are computed, even with no
    consumed capacity recorded (a state not built by the scheduler)."""
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 2}
    consumes = [{"counterSet": "cs", "counters": {"mem": {"value": "4Gi"}}}]
    slices = [
        {
            "metadata": {"name": "counters"},
            "spec": {
                "driver": "driver-a",
                "pool": pool,
                "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": "4Gi"}}}],
            },
        },
        {
            "metadata": {"name": "devices"},
            "spec": {
                "driver": "driver-a",
                "pool": pool,
                "nodeName": "node-0",
                "devices": [
                    {"name": "d-0", "allowMultipleAllocations": True, "consumesCounters": consumes},
                    {"name": "d-1", "consumesCounters": consumes},
                ],
            },
        },
    ]
    free = Allocator(Features(), AllocatedState(), _CLASSES, slices, CelCache())
    got = free.allocate("node-0", {}, [_claim("c")])
    assert got is not None and got[0]["devices"]["results"][0]["device"] == "d-0"
    shared = AllocatedState(allocated_shared_device_ids={("driver-a", "p", "d-0", "share-1")})
    taken = Allocator(Features(), shared, _CLASSES, slices, CelCache())
    assert taken.allocate("node-0", {}, [_claim("c")]) is None


def test_node_selectors_that_do_not_parse_are_errors() -> None:
    """GatherPools: a slice's node selector that does not parse stops the
    allocation (API validation keeps such slices out)."""
    bad = _slice("s", "", {"name": "d-0"})
    del bad["spec"]["nodeName"]
    bad["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]
    }
    allocator = Allocator(Features(), AllocatedState(), _CLASSES, [bad], CelCache())
    with pytest.raises(AllocationError) as raised:
        allocator.allocate("node-0", {}, [_claim("c")])
    assert raised.value.message.startswith(
        "gather pool information: failed to perform node selection for slice s: "
        "failed to parse node selector: "
    )
    assert 'Unsupported value: "Near"' in raised.value.message


def test_result_node_selector_from_slices_and_its_limits() -> None:
    """createNodeSelector: the one term of each device's slice selector,
    requirements merged without repeats; a selector of several terms cannot
    be merged and is an error."""

    def selected(name: str, *terms: dict[str, Any]) -> dict[str, Any]:
        s = _slice(name, "", {"name": "d-0"}, pool=name)
        del s["spec"]["nodeName"]
        s["spec"]["nodeSelector"] = {"nodeSelectorTerms": list(terms)}
        return s

    zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
    zone_again = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "a"]}]}
    rack = {"matchExpressions": [{"key": "rack", "operator": "Exists"}]}
    labels = {"zone": "a", "rack": "1"}
    allocator = Allocator(
        Features(),
        AllocatedState(),
        _CLASSES,
        [selected("p1", zone), selected("p2", zone_again), selected("p3", rack)],
        CelCache(),
    )
    got = allocator.allocate("node-0", labels, [_claim("c", count=3)])
    assert got is not None
    assert got[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": zone["matchExpressions"] + rack["matchExpressions"]}
        ]
    }
    two_terms = Allocator(
        Features(), AllocatedState(), _CLASSES, [selected("p1", zone, rack)], CelCache()
    )
    with pytest.raises(AllocationError) as raised:
        two_terms.allocate("node-0", labels, [_claim("c")])
    assert raised.value.message == (
        "create NodeSelector for claim c: unsupported ResourceSlice.NodeSelector with 2 terms"
    )
