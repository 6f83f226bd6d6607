"""framework/gpus.py: one parser per GPU source (DRA ResourceSlices and
ResourceClaims, GFD labels, HAMi's annotation, Berth's annotation), the
order they are read in, and malformed input giving reasons, not exceptions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.framework.gpus import (
    HAMI_ANNOTATION,
    HAMI_POD_ANNOTATION,
    MAX_CARDS_TEXT,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Card,
    DraInventory,
    NodeGPUs,
    RequestPolicy,
    Source,
    card_use,
    dra_driver_errors,
    parse_gfd_labels,
    parse_hami_annotation,
    parse_hami_pod_devices,
    read_node_gpus,
)
from berth.framework.testing import make_node, make_object, make_pod, snapshot_of
from tests.gpu_objects import DRIVER, claim, device, resource_slice

GI = 2**30


def dra_cards(objects: list[Any], node: str = "n1") -> NodeGPUs | None:
    snap = snapshot_of([make_node(node).obj()], objects=objects)
    return DraInventory(snap, [DRIVER, "gpu.example.com"]).node_gpus(node)


# -- DRA ---------------------------------------------------------------------------------


def test_dra_devices_of_the_node_are_cards_with_product_and_uuid() -> None:
    got = dra_cards([resource_slice("s1", "n1", [device("gpu-0"), device("gpu-1", "40Gi")])])
    assert got is not None and got.source is Source.DRA and not got.problem
    assert [(c.id, c.memory, c.exclusive, c.available) for c in got.cards] == [
        ("gpu.nvidia.com/n1/gpu-0", 80 * GI, True, True),
        ("gpu.nvidia.com/n1/gpu-1", 40 * GI, True, True),
    ]
    assert got.cards[0].product == "NVIDIA A100-SXM4-80GB"
    assert got.cards[0].uuid == "GPU-gpu-0"
    assert got.cards[0].describe() == "gpu.nvidia.com/n1/gpu-0 (NVIDIA A100-SXM4-80GB, GPU-gpu-0)"


def test_the_example_driver_s_devices_have_a_model_and_no_type() -> None:
    # kubernetes-sigs/dra-example-driver: attributes index, uuid, model; capacity memory.
    dev = {
        "name": "gpu-0",
        "attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "uuid": {"string": "gpu-1a"}},
        "capacity": {"memory": {"value": "80Gi"}},
    }
    got = dra_cards([resource_slice("s", "n1", [dev], driver="gpu.example.com")])
    assert got is not None
    assert [(c.id, c.product, c.uuid) for c in got.cards] == [
        ("gpu.example.com/n1/gpu-0", "LATEST-GPU-MODEL", "gpu-1a")
    ]


@pytest.mark.parametrize(
    ("objects", "want"),
    [
        pytest.param([], None, id="no slices: no DRA source"),
        pytest.param(
            [resource_slice("s", "n2", [device("gpu-0")])], None, id="another node's slice"
        ),
        pytest.param(
            [resource_slice("s", "n1", [device("nic-0")], driver="net.example.com")],
            None,
            id="a driver that is not a GPU driver",
        ),
        pytest.param(
            [resource_slice("s", "n1", [device("mig-0", "10Gi", kind="mig")])],
            [],
            id="MIG partitions are not whole cards",
        ),
        pytest.param(
            [resource_slice("s", "n1", [{"name": "gpu-0", "attributes": {}}])],
            [],
            id="a device without memory capacity",
        ),
        pytest.param(
            [
                resource_slice("old", "n1", [device("gpu-0")], generation=1),
                resource_slice("new", "n1", [device("gpu-9")], generation=2),
            ],
            ["gpu-9"],
            id="only the pool's newest generation",
        ),
        pytest.param(
            [resource_slice("s", "n1", [device("gpu-0", "lots")])],
            [],
            id="a memory that is not a quantity is no card",
        ),
    ],
)
def test_dra_which_devices_are_cards(objects: list[Any], want: list[str] | None) -> None:
    got = dra_cards(objects)
    if want is None:
        assert got is None
    else:
        assert got is not None and not got.problem
        assert [c.id.rsplit("/", 1)[1] for c in got.cards] == want


def test_an_incomplete_pool_offers_nothing_and_says_so() -> None:
    # pools_stable.go GatherPools: an incomplete pool is not allocated from.
    got = dra_cards([resource_slice("s", "n1", [device("gpu-0")], count=2)])
    assert got is not None and got.cards == ()
    assert got.problem == (
        "ResourceSlices: incomplete pool gpu.nvidia.com/n1 (1 of 2 slices): "
        "the driver is still publishing it"
    )


@pytest.mark.parametrize(
    ("extra", "available", "why"),
    [
        pytest.param([], True, "", id="free"),
        pytest.param(
            [claim("c", "n1", "gpu-0")], False, "allocated in a ResourceClaim", id="alloc"
        ),
        pytest.param([claim("c", "n1", "gpu-1")], True, "", id="another device allocated"),
    ],
)
def test_dra_allocated_devices_are_used(extra: list[Any], available: bool, why: str) -> None:
    got = dra_cards([resource_slice("s", "n1", [device("gpu-0"), device("gpu-1")]), *extra])
    assert got is not None
    assert (got.cards[0].available, got.cards[0].why) == (available, why)


def test_dra_consumable_capacity_counts_what_claims_consumed() -> None:
    objects = [
        resource_slice("s", "n1", [device("gpu-0", "80Gi", shared=True)]),
        claim("a", "n1", "gpu-0", consumed="10Gi"),
        claim("b", "n1", "gpu-0", consumed="20Gi"),
    ]
    got = dra_cards(objects)
    assert got is not None
    card = got.cards[0]
    assert (card.available, card.exclusive, card.used) == (True, False, 30 * GI)


def test_dra_shared_counters_used_by_an_allocated_partition_make_the_card_not_free() -> None:
    # Partitionable devices: the whole GPU and its partition draw on one counter set.
    counters = [{"name": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"}}}]
    uses = [{"counterSet": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"}}}]
    part = [{"counterSet": "gpu-0-cs", "counters": {"memory": {"value": "10Gi"}}}]
    objects = [
        resource_slice("counters", "n1", [], counters=counters, count=2),
        resource_slice(
            "devices",
            "n1",
            [
                device("gpu-0", counters=uses),
                device("gpu-0-mig", "10Gi", kind="mig", counters=part),
            ],
            count=2,
        ),
    ]
    got = dra_cards(objects)
    assert got is not None and got.cards[0].available
    got = dra_cards([*objects, claim("c", "n1", "gpu-0-mig")])
    assert got is not None
    assert (got.cards[0].available, got.cards[0].why) == (
        False,
        "its shared counters are used by allocated devices",
    )


def test_dra_a_no_schedule_taint_makes_the_card_not_free() -> None:
    taint = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    effect_none = [{"key": "note", "effect": "None"}]
    got = dra_cards(
        [
            resource_slice(
                "s", "n1", [device("gpu-0", taints=taint), device("g1", taints=effect_none)]
            )
        ]
    )
    assert got is not None
    assert [(c.available, c.why) for c in got.cards] == [
        (False, "tainted gpu.nvidia.com/xid"),
        (True, ""),
    ]


def test_dra_claim_consumers_by_card_id_with_a_slash_in_the_pool() -> None:
    objects = [
        resource_slice("s", "n1", [device("gpu-0")], pool="rack/1"),
        make_object(
            RESOURCE_CLAIMS,
            "c",
            status={
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "r", "driver": DRIVER, "pool": "rack/1", "device": "gpu-0"}
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-1"}],
            },
        ),
    ]
    snap = snapshot_of([make_node("n1").obj()], objects=objects)
    inventory = DraInventory(snap, [DRIVER])
    assert inventory.consumers("gpu.nvidia.com/rack/1/gpu-0") == {"uid-1"}


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"spec": "not an object"}, id="spec not an object"),
        pytest.param(
            {"spec": {"driver": DRIVER, "pool": {"name": 7}}}, id="pool name not a string"
        ),
        pytest.param(
            {"spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "p"}, "devices": 5}},
            id="devices not a list",
        ),
        pytest.param(
            {
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "n1",
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                    "devices": [7, {"name": 3}, {"name": "x", "capacity": {"memory": "80Gi"}}],
                }
            },
            id="devices not objects",
        ),
    ],
)
def test_dra_malformed_slices_are_skipped_not_raised(bad: dict[str, Any]) -> None:
    got = dra_cards([make_object(RESOURCE_SLICES, "bad", **bad)])
    assert got is None or got.cards == ()


@pytest.mark.parametrize(
    ("policy", "need", "consumed", "violated"),
    [
        pytest.param(RequestPolicy(), 10, 10, False, id="no policy: the request"),
        pytest.param(RequestPolicy(min=4, step=4, max=64), 10, 12, False, id="rounded to step"),
        pytest.param(RequestPolicy(min=4, step=4, max=64), 2, 4, False, id="below min: min"),
        pytest.param(RequestPolicy(min=4, step=4, max=8), 10, 12, True, id="above max"),
        pytest.param(RequestPolicy(min=4), 5, 5, False, id="range without step"),
        pytest.param(RequestPolicy(valid_values=(8, 16)), 9, 16, False, id="next valid value"),
        pytest.param(RequestPolicy(valid_values=(8, 16)), 17, 17, True, id="above valid values"),
    ],
)
def test_request_policy(policy: RequestPolicy, need: int, consumed: int, violated: bool) -> None:
    # consumable_capacity.go calculateConsumedCapacity, roundUpRange, roundUpValidValues.
    assert policy.consumed(need) == consumed
    assert policy.violated_by(consumed) is violated


# -- GFD -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "cards", "memory", "capacity", "problem"),
    [
        pytest.param(
            {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "81920"},
            2,
            80 * GI,
            2,
            "",
            id="count and MiB",
        ),
        pytest.param(
            {
                "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.memory": "16384",
                "nvidia.com/gpu.replicas": "4",
            },
            1,
            16 * GI,
            4,
            "",
            id="time-sliced replicas",
        ),
        pytest.param({"nvidia.com/gpu.count": "2"}, 2, 0, 2, "", id="no memory label"),
        pytest.param(
            {"nvidia.com/gpu.count": "two"},
            0,
            0,
            None,
            "label nvidia.com/gpu.count 'two' is not a non-negative integer",
            id="count not a number",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "-5"},
            0,
            0,
            None,
            "label nvidia.com/gpu.memory '-5' is not a non-negative integer",
            id="negative memory",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "65"},
            0,
            0,
            None,
            "label nvidia.com/gpu.count 65 is more than 64",
            id="too many cards",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "9" * 5000},
            0,
            0,
            None,
            "label nvidia.com/gpu.count '" + "9" * 64 + "'... (5000 characters) "
            "is not a non-negative integer",
            id="huge number refused before int()",
        ),
    ],
)
def test_gfd_labels(
    labels: dict[str, str], cards: int, memory: int, capacity: int | None, problem: str
) -> None:
    got = parse_gfd_labels({**labels, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert got.source is Source.GFD
    assert got.problem == problem
    assert len(got.cards) == cards
    assert all(c.memory == memory and c.product == "NVIDIA-A100-SXM4-80GB" for c in got.cards)
    assert [c.id for c in got.cards] == [str(i) for i in range(cards)]
    assert got.resource_capacity == capacity


# -- HAMi ----------------------------------------------------------------------------------

HAMI_JSON = json.dumps(
    [
        {
            "id": "GPU-0fc3",
            "index": 0,
            "count": 10,
            "devmem": 32768,
            "devcore": 100,
            "type": "NVIDIA-Tesla V100-PCIE-32GB",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        },
        # Go's omitempty: health false is left out.
        {"id": "GPU-7aa1", "index": 1, "count": 10, "devmem": 32768, "devcore": 100},
    ]
)
# HAMi's older text form (its protocol document's example).
HAMI_TEXT = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,1,"
    "hami-core:"
)


def test_hami_json() -> None:
    got = parse_hami_annotation(HAMI_JSON)
    assert not got.problem
    assert [(c.id, c.memory, c.max_pods, c.available, c.why) for c in got.cards] == [
        ("GPU-0fc3", 32 * GI, 10, True, ""),
        ("GPU-7aa1", 32 * GI, 10, False, "HAMi reports it unhealthy"),
    ]
    assert got.cards[0].product == "NVIDIA-Tesla V100-PCIE-32GB"
    # The healthy cards' split counts, in units of nvidia.com/gpu.
    assert got.resource_capacity == 10


def test_hami_text_form() -> None:
    got = parse_hami_annotation(HAMI_TEXT)
    assert not got.problem
    assert [(c.id[:12], c.memory, c.max_pods, c.available) for c in got.cards] == [
        ("GPU-00552014", 32 * GI, 10, True),
        ("GPU-0fc3eda5", 32 * GI, 10, True),
    ]
    assert got.resource_capacity == 20


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("[{", "not JSON", id="broken JSON"),
        pytest.param('{"id": "x"}', "want a JSON list of devices, got dict", id="object"),
        pytest.param("GPU-1;GPU-2", "neither a JSON list nor ':'-separated", id="not either form"),
        pytest.param("a:b:", "no device in it", id="text without devices"),
        pytest.param("[7]", "device 0: want a JSON object, got int", id="not an object"),
        pytest.param(
            '[{"id": "g", "devmem": "32G"}]', "device 0: devmem '32G' is not an int32", id="str"
        ),
        pytest.param(
            '[{"id": "g", "count": -1}]', "device 0: count -1 is not an int32 >= 0", id="neg"
        ),
        pytest.param('[{"id": ""}]', "device 0: id '' is not a device id", id="empty id"),
        pytest.param(
            '[{"id": "g", "health": "yes"}]', "device 0: type must be a string", id="health str"
        ),
        pytest.param(json.dumps([{"id": "g"}] * 65), "65 devices, at most 64", id="too many"),
        pytest.param("[" * 3000 + "]" * 3000, "not JSON", id="nested too deep"),
        pytest.param("a,b,c:", "device 0: 3 fields, want 7", id="text: too few fields"),
        pytest.param(
            "g,10,lots,100,T,0,true:", "device 0: devmem 'lots' is not a non-negative", id="text"
        ),
        pytest.param("g,10,1,100,T,0,maybe:", "device 0: health 'maybe' is not", id="text health"),
        pytest.param(
            "x" * (MAX_CARDS_TEXT + 1), f"{MAX_CARDS_TEXT + 1} characters, at most", id="too long"
        ),
    ],
)
def test_hami_malformed(text: str, problem: str) -> None:
    got = parse_hami_annotation(text)
    assert got.source is Source.HAMI and got.cards == ()
    assert got.problem.startswith(f"annotation {HAMI_ANNOTATION}: {problem}"), got.problem


# -- precedence ----------------------------------------------------------------------------

GFD = {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "40960"}


def node_with(labels: dict[str, str], annotations: dict[str, str]) -> Any:
    node = make_node("n1").obj()
    node.labels.update(labels)
    node.annotations.update(annotations)
    return node


@pytest.mark.parametrize(
    ("dra", "labels", "annotations", "source"),
    [
        pytest.param(True, GFD, {HAMI_ANNOTATION: HAMI_JSON, "berth.dev/gpu-cards": "[]"}, "dra"),
        pytest.param(False, GFD, {HAMI_ANNOTATION: HAMI_JSON, "berth.dev/gpu-cards": "[]"}, "gfd"),
        pytest.param(False, {}, {HAMI_ANNOTATION: HAMI_JSON, "berth.dev/gpu-cards": "[]"}, "hami"),
        pytest.param(False, {}, {"berth.dev/gpu-cards": '["8Gi"]'}, "berth"),
        pytest.param(False, {"nvidia.com/gpu.product": "A100"}, {}, None),
        # A broken higher source is reported, not skipped for a lower one.
        pytest.param(False, {"nvidia.com/gpu.count": "x"}, {"berth.dev/gpu-cards": "[]"}, "gfd"),
    ],
)
def test_precedence(
    dra: bool, labels: dict[str, str], annotations: dict[str, str], source: str | None
) -> None:
    node = node_with(labels, annotations)
    objects = [resource_slice("s", "n1", [device("gpu-0")])] if dra else []
    snap = snapshot_of([node], objects=objects)
    got = read_node_gpus(snap.nodes["n1"], DraInventory(snap, [DRIVER]), "berth.dev/gpu-cards")
    assert (None if got is None else got.source.name.lower()) == source


def test_without_dra_drivers_slices_are_not_read() -> None:
    snap = snapshot_of([node_with(GFD, {})], objects=[resource_slice("s", "n1", [device("gpu-0")])])
    got = read_node_gpus(snap.nodes["n1"], None, "berth.dev/gpu-cards")
    assert got is not None and got.source is Source.GFD


def test_card_consumes() -> None:
    assert Card("a", 80, exclusive=True).consumes(10) == 80
    assert Card("a", 80).consumes(10) == 10
    assert Card("a", 80, policy=RequestPolicy(min=8, step=8)).consumes(10) == 16


@pytest.mark.parametrize(
    ("drivers", "error"),
    [
        pytest.param(["gpu.nvidia.com"], "", id="ok"),
        pytest.param([], "", id="none"),
        pytest.param(["GPU.nvidia.com"], "[0]: invalid value 'GPU.nvidia.com'", id="upper"),
        pytest.param(["a"] * 17, ": 17 drivers, at most 16", id="too many"),
    ],
)
def test_dra_driver_errors(drivers: list[str], error: str) -> None:
    errors = dra_driver_errors(drivers)
    assert (errors[0][: len(error)] if errors else "") == error


# -- hostile input: nothing raises ----------------------------------------------------------

_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["id", "count", "devmem", "devcore", "type", "health", "x"]),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    text=st.one_of(
        st.text(max_size=200),
        _JSONISH.map(json.dumps),
        st.lists(st.text(alphabet="GPU-01,:tru", max_size=30), max_size=5).map(":".join),
    )
)
def test_hami_parser_never_raises(text: str) -> None:
    got = parse_hami_annotation(text)
    assert got.source is Source.HAMI
    # Either cards or a reason, never both.
    assert not (got.problem and got.cards)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    labels=st.dictionaries(
        st.sampled_from(
            ["nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas"]
        ),
        st.text(max_size=30),
    )
)
def test_gfd_parser_never_raises(labels: dict[str, str]) -> None:
    assert parse_gfd_labels({"nvidia.com/gpu.count": "1", **labels}).source is Source.GFD


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    spec=st.dictionaries(
        st.sampled_from(["driver", "nodeName", "pool", "devices", "sharedCounters"]),
        _JSONISH,
        max_size=5,
    ),
    devices=st.lists(
        st.dictionaries(
            st.sampled_from(["name", "attributes", "capacity", "consumesCounters", "taints", "x"]),
            _JSONISH,
        ),
        max_size=4,
    ),
    status=_JSONISH,
)
def test_dra_inventory_never_raises(
    spec: dict[str, Any], devices: list[dict[str, Any]], status: Any
) -> None:
    slice_spec = {
        "driver": DRIVER,
        "nodeName": "n1",
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
        **spec,
    }
    objects = [
        make_object(RESOURCE_SLICES, "s", spec=slice_spec),
        make_object(RESOURCE_CLAIMS, "c", status=status),
    ]
    snap = snapshot_of([make_node("n1").obj()], objects=objects)
    inventory = DraInventory(snap, [DRIVER])
    got = inventory.node_gpus("n1")
    assert got is None or got.source is Source.DRA


# -- HAMi's pod annotation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("GPU-a,NVIDIA,3000,0:;", [("GPU-a", 3000 * 2**20)], id="one container"),
        pytest.param(
            "GPU-a,NVIDIA,1000,10:GPU-b,NVIDIA,2000,20:;GPU-a,NVIDIA,500,5:;",
            [("GPU-a", 1000 * 2**20), ("GPU-b", 2000 * 2**20), ("GPU-a", 500 * 2**20)],
            id="two devices, two containers",
        ),
        pytest.param(";", [], id="nothing allocated"),
        pytest.param("GPU-a,NVIDIA,lots,0:;GPU-b,NVIDIA:;", [], id="malformed entries skipped"),
        pytest.param("GPU-a,NVIDIA,1,0:" * 2000, [], id="too long"),
    ],
)
def test_hami_pod_devices(text: str, want: list[tuple[str, int]]) -> None:
    assert parse_hami_pod_devices(text) == want


def test_pods_hami_placed_take_what_hami_recorded() -> None:
    node = node_with({}, {HAMI_ANNOTATION: HAMI_JSON})
    placed = make_pod("hami").node("n1").obj()
    placed.annotations[HAMI_POD_ANNOTATION] = "GPU-0fc3,NVIDIA,8192,30:;"
    # A Berth card annotation on a pod HAMi placed is not counted a second time.
    placed.annotations["berth.dev/gpu-card"] = "GPU-0fc3"
    placed.annotations["berth.dev/gpu-memory"] = "1Gi"
    snap = snapshot_of([node], [placed])
    gpus = read_node_gpus(snap.nodes["n1"], None, "berth.dev/gpu-cards")
    assert gpus is not None
    use = card_use(gpus, snap.nodes["n1"], "berth.dev/gpu-card", "berth.dev/gpu-memory")
    assert use.free == [24 * GI, 32 * GI]
    assert use.pods == [1, 0]
