"""Property test: whatever a cluster user writes into a pod, a node or a PodGroup,
and whatever a scheduler configuration file says, Berth answers with a decision
or a documented refusal, never an exception or a hang: every value a cluster user
controls is parsed at bounded cost.

Objects are generated as the API server serves them (JSON) and go the way the
shim sends them: berth.kube.records' decoders (ObjectError is their documented
refusal), the cluster state, then a Schedule call with Reserve and Permit on
the in-process plugin service, whose profile runs upstream's default plugins
and the seed plugins that read annotations, labels, NodeMetrics and PodGroups.
The answer must be a decision (a node, or Unschedulable with reasons), never
CODE_ERROR but for the one upstream gives too (a topology spread selector the API
server would refuse). The configuration parser may refuse a document only with
ConfigError. Each example has a deadline (the hang check) and the whole file
runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.config import API_VERSION, KIND, ConfigError, parse_config
from berth.framework.objects import ClusterObject
from berth.framework.storage import inline_source
from berth.kube.records import ObjectError, node_record, pod_record
from berth.plugins.coscheduling.core import POD_GROUP_LABEL, PODGROUP
from berth.plugins.lowcpu.low_cpu import (
    METRICS_GROUP,
    METRICS_KIND,
    METRICS_RESOURCE,
    METRICS_VERSION,
)
from berth.plugins.registry import load_registry
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.service import InProcessStub

PROFILE = "hostile"
GPU_MEMORY = "berth.dev/gpu-memory"
GPU_CARDS = "berth.dev/gpu-cards"
GPU_CARD = "berth.dev/gpu-card"
STICKY = "example.com/sticky-node"

# The seed plugins on top of upstream's defaults, at the points they serve.
CONFIG: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "profiles": [
        {
            "schedulerName": PROFILE,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "GPUCardFit"}]},
                "preFilter": {"enabled": [{"name": "Coscheduling"}]},
                "filter": {"enabled": [{"name": "AvoidNodePlugin"}, {"name": "LowCpuScheduler"}]},
                "postFilter": {"enabled": [{"name": "Coscheduling"}]},
                "score": {
                    "enabled": [
                        {"name": "LowCpuScheduler"},
                        {"name": "GPUPriorityPlugin"},
                        {"name": "SameLabelSpread"},
                    ]
                },
                "reserve": {"enabled": [{"name": "Coscheduling"}]},
                "permit": {"enabled": [{"name": "Coscheduling"}]},
            },
        }
    ],
}

EXAMPLE_DEADLINE = dt.timedelta(seconds=5)
# What the shim's informer skips an object for, with a warning (Informer._event_for);
# values the API server validates (int32 fields) are the only way there.
DECODE_REFUSALS = (ObjectError, KeyError, TypeError, ValueError)

# -- hostile values ----------------------------------------------------------------

POISON = [
    "1e100000000",
    "1e999999999",
    "1e-999999999",
    "9223372036854775807Ei",
    "-9223372036854775808",
    "0.000000000001m",
    "9" * 5000,
    "0." + "0" * 5000 + "1",
    "1e" + "9" * 30,
    "x" * 20_000,
    "",
    " 1",
    "NaN",
    "-1",
    '["1e999999999"]',
    "[" + "[" * 5000 + "]" * 5000 + "]",
]

# By index: a strategy's repr would otherwise carry the long strings.
poison = st.sampled_from(range(len(POISON))).map(POISON.__getitem__)
quantity_like = st.from_regex(
    r"[+-]?[0-9]{0,25}(\.[0-9]{0,25})?([eE][+-]?[0-9]{1,20}|[KMGTPE]i|[numkMGTPE])?",
    fullmatch=True,
)
texts = st.one_of(
    poison,
    quantity_like,
    st.text(max_size=30),
    st.text(alphabet="abc-._/0123456789", max_size=80),
)
label_values = st.one_of(st.text(alphabet="abcz09-._", max_size=70), poison, quantity_like)
label_keys = st.one_of(
    st.sampled_from(["zone", "kubernetes.io/hostname", "avoid", "app", "example.com/x"]),
    st.text(alphabet="abc-./", max_size=20),
)
labels = st.dictionaries(label_keys, label_values, max_size=5)
ints = st.one_of(
    st.integers(min_value=-5, max_value=10),
    # JSON integers reach Berth as int64 at most (the API server's decoder).
    st.sampled_from([2**31, 2**31 - 1, 2**63 - 1, -(2**63)]),
    st.text(max_size=5),
    st.floats(allow_nan=True),
    st.none(),
)
values_lists = st.one_of(
    st.lists(label_values, max_size=6),
    st.builds(lambda v, n: [v] * n, label_values, st.sampled_from([1000, 5000])),
    st.builds(lambda n: [str(i) for i in range(n)], st.sampled_from([1000, 5000])),
)
requirement = st.fixed_dictionaries(
    {
        "key": label_keys,
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bad"]),
        "values": values_lists,
    }
)
label_selector = st.fixed_dictionaries(
    {}, optional={"matchLabels": labels, "matchExpressions": st.lists(requirement, max_size=3)}
)
node_term = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.lists(requirement, max_size=3),
        "matchFields": st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["metadata.name", "spec.x"]),
                    "operator": st.sampled_from(["In", "NotIn", "Gt"]),
                    "values": values_lists,
                }
            ),
            max_size=2,
        ),
    },
)
pod_term = st.fixed_dictionaries(
    {"topologyKey": label_keys},
    optional={
        "labelSelector": label_selector,
        "namespaces": st.lists(st.text(max_size=10), max_size=3),
        "matchLabelKeys": st.lists(label_keys, max_size=2),
    },
)
affinity = st.fixed_dictionaries(
    {},
    optional={
        "nodeAffinity": st.fixed_dictionaries(
            {},
            optional={
                "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
                    {"nodeSelectorTerms": st.lists(node_term, max_size=3)}
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
                    st.fixed_dictionaries({"weight": ints, "preference": node_term}), max_size=2
                ),
            },
        ),
        "podAffinity": st.fixed_dictionaries(
            {},
            optional={
                "requiredDuringSchedulingIgnoredDuringExecution": st.lists(pod_term, max_size=2)
            },
        ),
        "podAntiAffinity": st.fixed_dictionaries(
            {},
            optional={
                "requiredDuringSchedulingIgnoredDuringExecution": st.lists(pod_term, max_size=2),
                "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
                    st.fixed_dictionaries({"weight": ints, "podAffinityTerm": pod_term}),
                    max_size=2,
                ),
            },
        ),
    },
)
spread = st.fixed_dictionaries(
    {
        "maxSkew": ints,
        "topologyKey": label_keys,
        "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway", "x"]),
    },
    optional={
        "labelSelector": label_selector,
        "minDomains": ints,
        "matchLabelKeys": st.lists(label_keys, max_size=2),
    },
)
container_requests = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]), texts, max_size=3
)
pod_annotations = st.dictionaries(
    st.sampled_from([GPU_MEMORY, GPU_CARD, STICKY, "other"]), texts, max_size=3
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    meta_labels = draw(labels)
    if draw(st.booleans()):
        meta_labels = {**meta_labels, POD_GROUP_LABEL: "pg"}
    return {
        "metadata": {
            "name": "p",
            "uid": "uid-p",
            "namespace": "ns",
            "labels": meta_labels,
            "annotations": draw(pod_annotations),
        },
        "spec": {
            "schedulerName": PROFILE,
            "priority": draw(st.integers(min_value=-(2**31), max_value=2**31 - 1)),
            "containers": [
                {"name": "c", "image": "i", "resources": {"requests": draw(container_requests)}}
            ],
            "nodeSelector": draw(labels),
            "affinity": draw(affinity),
            "topologySpreadConstraints": draw(st.lists(spread, max_size=2)),
            "tolerations": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "key": label_keys,
                            "operator": st.sampled_from(["Equal", "Exists", "x"]),
                            "value": label_values,
                            "effect": st.sampled_from(["NoSchedule", "NoExecute", ""]),
                        }
                    ),
                    max_size=2,
                )
            ),
        },
    }


@st.composite
def nodes(draw: st.DrawFn, name: str) -> dict[str, Any]:
    node_annotations = {}
    if draw(st.booleans()):
        node_annotations[GPU_CARDS] = draw(
            st.one_of(texts, st.lists(texts, max_size=4).map(lambda v: orjson.dumps(v).decode()))
        )
    alloc = {
        "cpu": "8",
        "memory": "16Gi",
        "pods": "110",
        "nvidia.com/gpu": "4",
        **draw(st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), texts, max_size=1)),
    }
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {**draw(labels), "kubernetes.io/hostname": name},
            "annotations": node_annotations,
        },
        "spec": {
            "taints": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {"key": label_keys, "value": label_values, "effect": st.just("NoSchedule")}
                    ),
                    max_size=1,
                )
            )
        },
        "status": {"capacity": alloc, "allocatable": alloc},
    }


pod_groups = st.fixed_dictionaries(
    {},
    optional={
        "minMember": ints,
        "scheduleTimeoutSeconds": ints,
        "minResources": st.one_of(
            st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "x"]), texts, max_size=3),
            texts,
            ints,
        ),
    },
)
node_metrics = st.fixed_dictionaries(
    {"cpu": texts, "memory": texts, "window": st.sampled_from(["30s", "x", "1e99s"])}
)


# -- the service ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def service() -> SchedulingService:
    registry = load_registry()
    config = parse_config(CONFIG, "<hostile>", registry)
    return SchedulingService(config, build_frameworks(config, registry))


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _object(
    group: str, version: str, resource: str, kind: str, ns: str, name: str, body: dict[str, Any]
) -> cpb.ClusterObject:
    doc = {
        "apiVersion": f"{group}/{version}",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        **body,
    }
    return cpb.ClusterObject(
        ref=cpb.ObjectRef(group=group, resource=resource, namespace=ns, name=name),
        version=version,
        kind=kind,
        json=orjson.dumps(doc),
    )


async def _schedule(
    service: SchedulingService,
    pod: cpb.Pod,
    node_list: list[cpb.Node],
    group: dict[str, Any],
    metrics: dict[str, Any],
) -> pb.ScheduleResponse:
    state = ClusterStateLog()
    for n in node_list:
        state.upsert_node(n)
        state.upsert_object(
            _object(
                METRICS_GROUP,
                METRICS_VERSION,
                METRICS_RESOURCE,
                METRICS_KIND,
                "",
                n.name,
                {
                    "timestamp": dt.datetime.now(dt.UTC).isoformat(),
                    "window": metrics["window"],
                    "usage": {"cpu": metrics["cpu"], "memory": metrics["memory"]},
                },
            )
        )
    state.upsert_object(
        _object(
            PODGROUP.group,
            PODGROUP.version,
            PODGROUP.resource,
            PODGROUP.kind,
            "ns",
            "pg",
            {"spec": group},
        )
    )
    # The same pod twice more, bound to the first node by its creator: what
    # other pods carry (requests summed, affinity terms, card annotations) is
    # read from the snapshot too.
    for k in range(2 if node_list else 0):
        bound = cpb.Pod()
        bound.CopyFrom(pod)
        bound.uid, bound.name, bound.node_name = f"uid-bound-{k}", f"bound-{k}", node_list[0].name
        state.upsert_pod(bound)
    state.commit()
    client = SchedulingClient(None, state, stub=InProcessStub(service))
    return await client.schedule(PROFILE, pod, reserve_and_permit=True)


@settings(
    max_examples=150,
    deadline=EXAMPLE_DEADLINE,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    pod=pods(),
    node_docs=st.tuples(nodes("n1"), nodes("n2")),
    group=pod_groups,
    metrics=node_metrics,
)
@pytest.mark.timeout(120)
def test_hostile_pods_nodes_and_pod_groups_get_a_decision(
    service: SchedulingService,
    loop: asyncio.AbstractEventLoop,
    pod: dict[str, Any],
    node_docs: tuple[dict[str, Any], ...],
    group: dict[str, Any],
    metrics: dict[str, Any],
) -> None:
    try:
        record = pod_record(pod)
    except DECODE_REFUSALS:
        return  # refused as the shim's informer refuses it (shim/informer.py)
    node_list = []
    for doc in node_docs:
        try:
            node_list.append(node_record(doc))
        except DECODE_REFUSALS:
            continue
    resp = loop.run_until_complete(_schedule(service, record, node_list, group, metrics))
    if resp.status.code == pb.CODE_ERROR:
        # The one Error upstream answers too: a topology spread label selector the API
        # server would refuse (pkg/apis/core/validation ValidateLabelSelector) reaches
        # PodTopologySpread, whose PreFilter and PreScore return AsStatus of
        # LabelSelectorAsSelector's error (podtopologyspread/filtering.go
        # calPreFilterState, scoring.go PreScore).
        reasons = list(resp.status.reasons)
        assert reasons, "an Error without a reason"
        assert all(
            "topology spread constraints: " in r and "labelSelector" in r for r in reasons
        ), reasons
        return
    if resp.status.code != pb.CODE_SUCCESS:
        assert resp.diagnosis.message or resp.status.reasons
        # Reasons quote user values cut short.
        assert len(resp.diagnosis.message) < 20_000


plugin_names = st.sampled_from(
    ["GPUCardFit", "Coscheduling", "LowCpuScheduler", "NodeResourcesFit", "PodTopologySpread", "x"]
)
arg_values = st.one_of(
    texts,
    ints,
    st.lists(texts, max_size=3),
    st.dictionaries(st.text(max_size=10), texts, max_size=3),
)
config_docs = st.fixed_dictionaries(
    {"apiVersion": st.just(API_VERSION), "kind": st.just(KIND)},
    optional={
        "percentageOfNodesToScore": ints,
        "parallelism": ints,
        "podInitialBackoffSeconds": ints,
        "profiles": st.lists(
            st.fixed_dictionaries(
                {"schedulerName": st.text(max_size=10)},
                optional={
                    "plugins": st.dictionaries(
                        st.sampled_from(["multiPoint", "filter", "score", "queueSort", "x"]),
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "enabled": st.lists(
                                    st.fixed_dictionaries(
                                        {"name": plugin_names}, optional={"weight": ints}
                                    ),
                                    max_size=3,
                                ),
                                "disabled": st.lists(
                                    st.fixed_dictionaries({"name": plugin_names}), max_size=2
                                ),
                            },
                        ),
                        max_size=2,
                    ),
                    "pluginConfig": st.lists(
                        st.fixed_dictionaries(
                            {
                                "name": plugin_names,
                                "args": st.dictionaries(
                                    st.sampled_from(
                                        [
                                            "permitWaitingTimeSeconds",
                                            "nodeCardsAnnotation",
                                            "metricsPollSeconds",
                                            "defaultConstraints",
                                            "scoringStrategy",
                                            "x",
                                        ]
                                    ),
                                    arg_values,
                                    max_size=2,
                                ),
                            }
                        ),
                        max_size=2,
                    ),
                },
            ),
            max_size=2,
        ),
    },
)


@settings(
    max_examples=150,
    deadline=EXAMPLE_DEADLINE,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(doc=config_docs)
@pytest.mark.timeout(120)
def test_hostile_configuration_is_parsed_or_refused_with_config_error(doc: dict[str, Any]) -> None:
    try:
        parse_config(doc, "<hostile>", load_registry())
    except ConfigError as exc:
        assert str(exc)


@pytest.mark.timeout(30)
def test_pods_whose_requests_sum_past_int64_leave_their_node_full(
    service: SchedulingService, loop: asyncio.AbstractEventLoop
) -> None:
    """Pods bound by their creators (spec.nodeName) may each ask for up to
    2^63-1 millicores; two of them on one node summed past the snapshot's int64
    columns and every Schedule call of that cluster failed. Saturated, the node
    is full."""
    state = ClusterStateLog()
    state.upsert_node(
        node_record(
            {
                "metadata": {"name": "n1", "uid": "uid-n1"},
                "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}},
            }
        )
    )
    for k in range(2):
        state.upsert_pod(
            pod_record(
                {
                    "metadata": {
                        "name": f"greedy-{k}",
                        "uid": f"uid-greedy-{k}",
                        "namespace": "ns",
                    },
                    "spec": {
                        "nodeName": "n1",
                        "containers": [
                            {
                                "name": "c",
                                "image": "i",
                                "resources": {"requests": {"cpu": "9223372036854775807m"}},
                            }
                        ],
                    },
                }
            )
        )
    state.commit()
    client = SchedulingClient(None, state, stub=InProcessStub(service))
    pod = pod_record(
        {
            "metadata": {"name": "p", "uid": "uid-p", "namespace": "ns"},
            "spec": {
                "schedulerName": PROFILE,
                "containers": [
                    {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}
                ],
            },
        }
    )
    resp = loop.run_until_complete(client.schedule(PROFILE, pod))
    assert resp.status.code == pb.CODE_UNSCHEDULABLE
    assert "1 Insufficient cpu" in resp.diagnosis.message


def test_a_pod_whose_resource_claim_is_missing_is_unschedulable_with_upstreams_reason(
    service: SchedulingService, loop: asyncio.AbstractEventLoop
) -> None:
    """A pod naming a ResourceClaim that does not exist: DynamicResources'
    PreFilter rejects it with upstream's reason (foreachPodResourceClaim, the
    assume cache's NotFoundError), and its PostFilter adds upstream's "no new
    claims to deallocate" before preemption's part of the FitError."""
    state = ClusterStateLog()
    state.upsert_node(
        node_record(
            {
                "metadata": {"name": "n1", "uid": "uid-n1"},
                "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}},
            }
        )
    )
    state.commit()
    client = SchedulingClient(None, state, stub=InProcessStub(service))
    pod = pod_record(
        {
            "metadata": {"name": "p", "uid": "uid-p", "namespace": "ns"},
            "spec": {
                "schedulerName": PROFILE,
                "containers": [{"name": "c", "image": "i"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
            },
        }
    )
    resp = loop.run_until_complete(client.schedule(PROFILE, pod, reserve_and_permit=True))
    assert not resp.node
    assert resp.status.code == pb.CODE_UNSCHEDULABLE  # a FitError, as upstream's
    assert resp.diagnosis.message == (
        '0/1 nodes are available: could not find ResourceClaim "ns/gpu-claim". '
        "no new claims to deallocate, preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling."
    )
    assert "DynamicResources" in resp.diagnosis.unschedulable_plugins


def _schedule_member_of_nested_group(
    service: SchedulingService, loop: asyncio.AbstractEventLoop, spec: dict[str, Any]
) -> pb.ScheduleResponse:
    """Schedules a member of PodGroup ns/pg whose spec holds, in place of
    the string "NESTED", a list nested 1000 levels deep (JSON the server's
    own check takes: orjson, 1024 levels), on one 8-cpu node n1."""
    depth = 1000
    group = _object(
        PODGROUP.group,
        PODGROUP.version,
        PODGROUP.resource,
        PODGROUP.kind,
        "ns",
        "pg",
        {"spec": spec},
    )
    group.json = group.json.replace(b'"NESTED"', b"[" * depth + b"]" * depth)
    assert orjson.loads(group.json)  # the server's own check takes it
    state = ClusterStateLog()
    state.upsert_node(
        node_record(
            {
                "metadata": {"name": "n1", "uid": "uid-n1"},
                "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}},
            }
        )
    )
    state.upsert_object(group)
    state.commit()
    pod = pod_record(
        {
            "metadata": {
                "name": "p",
                "uid": "uid-p",
                "namespace": "ns",
                "labels": {POD_GROUP_LABEL: "pg"},
            },
            "spec": {"schedulerName": PROFILE, "containers": [{"name": "c", "image": "i"}]},
        }
    )
    client = SchedulingClient(None, state, stub=InProcessStub(service))
    return loop.run_until_complete(client.schedule(PROFILE, pod, reserve_and_permit=True))


def test_a_pod_group_nested_as_deep_as_the_server_takes_is_read_not_an_error(
    service: SchedulingService, loop: asyncio.AbstractEventLoop
) -> None:
    """JSON the server's own check takes (orjson, 1024 levels) is read by the
    plugins too, where Python's json recursed and failed near 1000 levels:
    a RecursionError, an Error of every member's cycle."""
    resp = _schedule_member_of_nested_group(service, loop, {"minMember": 1, "x": "NESTED"})
    assert resp.status.code == pb.CODE_SUCCESS, list(resp.status.reasons)
    assert resp.node == "n1"


def test_a_pod_group_field_nested_deep_is_unschedulable_with_its_reason(
    service: SchedulingService, loop: asyncio.AbstractEventLoop
) -> None:
    """spec.minMember as a list nested 1000 levels (JSON the server takes):
    the reason quotes it cut short, where repr() of it raised RecursionError
    and every member's cycle ended in Error (coscheduling.go PreFilter
    answers a PodGroup it cannot read Unschedulable)."""
    resp = _schedule_member_of_nested_group(service, loop, {"minMember": "NESTED"})
    assert resp.status.code == pb.CODE_UNSCHEDULABLE, list(resp.status.reasons)
    assert "spec.minMember: must be an integer" in resp.diagnosis.message
    assert len(resp.diagnosis.message) < 1000


def test_json_past_the_depth_the_server_takes_is_a_value_error_naming_the_object() -> None:
    deep = b"[" * 2000 + b"]" * 2000
    obj = ClusterObject("g", "things", "ns", "t", "v1", "Thing", b'{"x":' + deep + b"}")
    with pytest.raises(ValueError, match=r"object things\.g ns/t: json does not decode"):
        _ = obj.data
    pod = cpb.Pod(name="p", namespace="ns")
    volume = cpb.Volume(name="v", source_json=deep)
    with pytest.raises(ValueError, match=r"pod ns/p: volumes\['v'\].source_json does not decode"):
        inline_source(pod, volume)


def test_a_spread_selector_the_api_server_would_refuse_is_an_error_as_upstream(
    service: SchedulingService, loop: asyncio.AbstractEventLoop
) -> None:
    """The Error the property test above admits: PodTopologySpread's PreFilter on a
    selector LabelSelectorAsSelector refuses (podtopologyspread/filtering.go
    calPreFilterState returns AsStatus of the error), with the plugin's wording."""
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "labels": {"app": "a"}},
        "spec": {
            "schedulerName": PROFILE,
            "containers": [{"name": "c", "image": "i"}],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"-": "x"}},
                }
            ],
        },
    }
    node = node_record(
        {
            "metadata": {"name": "n1", "uid": "uid-n1", "labels": {"zone": "z1"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }
    )
    resp = loop.run_until_complete(
        _schedule(
            service,
            pod_record(pod),
            [node],
            {"minMember": 1},
            {"cpu": "100m", "memory": "1Gi", "window": "30s"},
        )
    )
    assert resp.status.code == pb.CODE_ERROR
    (reason,) = resp.status.reasons
    assert reason.startswith(
        'running PreFilter plugin "PodTopologySpread": get constraints from pod: '
        "obtaining pod's hard topology spread constraints: "
        "topologySpreadConstraints[0].labelSelector.matchLabels[-].key: name part must"
    ), reason
