"""shim/explain.py's attempt store and annotation, shim/explainfix.py's fixes."""

from __future__ import annotations

import json

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.events import EVENT_NODE_ADD
from berth.framework.testing import make_node, make_pod
from berth.kube.records import pod_record
from berth.shim.binding import WaitingPods
from berth.shim.cache import SchedulerCache
from berth.shim.explain import (
    MAX_GROUPS,
    MAX_SAMPLE_NODES,
    RESULT_ANNOTATION,
    AttemptStore,
    Explainer,
    attempt_of,
    lower_requests,
    result_annotation,
    wants_explain,
)
from berth.shim.explainfix import (
    format_quantity,
    gpu_fix,
    label_fix,
    preemption_fix,
    resource_fixes,
)
from berth.shim.hints import HintMap, Registered
from berth.shim.queue import SchedulingQueue
from berth.shim.serving import DebugRequest

GI = 1 << 30


def _failed(
    rejected: list[tuple[str, str, str]], message: str = "0/3 nodes", *, grouped: bool = False
) -> pb.ScheduleResponse:
    """A failed cycle's answer, its rejected nodes one entry each or, with
    ``grouped``, as Diagnosis.rejected_groups (ScheduleRequest.group_rejected)."""
    resp = pb.ScheduleResponse(status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=[message]))
    resp.diagnosis.message = message
    groups: dict[tuple[str, str], pb.NodeGroupStatus] = {}
    for node, plugin, reason in rejected:
        status = pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=[reason], plugin=plugin)
        if not grouped:
            resp.diagnosis.rejected.add(node=node, status=status)
            continue
        group = groups.get((plugin, reason))
        if group is None:
            group = groups[(plugin, reason)] = resp.diagnosis.rejected_groups.add(status=status)
        group.nodes.append(node)
    return resp


# -- the store ------------------------------------------------------------------


def test_store_keeps_at_most_max_entries_dropping_the_oldest_attempt() -> None:
    store = AttemptStore(max_entries=3)
    for i in range(5):
        store.put(f"u{i}", attempt_of(1, f"m{i}", error=False))
    assert len(store) == 3
    assert "u0" not in store and "u1" not in store
    # Recording again makes an entry the newest.
    store.put("u2", attempt_of(2, "again", error=False))
    store.put("u5", attempt_of(1, "m5", error=False))
    assert "u2" in store and "u3" not in store


def test_store_refuses_a_cap_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AttemptStore(0)


@pytest.mark.parametrize("grouped", [False, True])
def test_attempt_groups_nodes_by_plugin_and_reason_with_counts_and_capped_names(
    grouped: bool,
) -> None:
    rejected = [(f"n{i}", "NodeResourcesFit", "Insufficient cpu") for i in range(20)]
    rejected += [("a1", "NodeAffinity", "node(s) didn't match Pod's node affinity/selector")]
    resp = _failed(rejected, grouped=grouped)
    a = attempt_of(3, "0/21 nodes are available", error=False, resp=resp)
    assert [(r.plugin, r.count) for r in a.rejections] == [
        ("NodeResourcesFit", 20),
        ("NodeAffinity", 1),
    ]
    assert a.rejections[0].nodes == tuple(f"n{i}" for i in range(MAX_SAMPLE_NODES))
    assert a.attempt == 3 and not a.error
    assert a.as_dict()["rejections"][0]["code"] == "Unschedulable"


@pytest.mark.parametrize("grouped", [False, True])
def test_attempt_size_is_bounded_however_many_distinct_reasons(grouped: bool) -> None:
    rejected = [(f"n{i}", "P", f"reason {i % 100} " + "x" * 1000) for i in range(200)]
    resp = _failed(rejected, "m" * 100_000, grouped=grouped)
    a = attempt_of(1, "m" * 100_000, error=False, resp=resp)
    assert len(a.rejections) == MAX_GROUPS
    # Each reason has two nodes; the reasons past the first MAX_GROUPS are counted.
    assert a.other_nodes == 200 - 2 * MAX_GROUPS
    assert all(len(r.reason) <= 512 for r in a.rejections)
    assert len(a.message) <= 2048 and a.message.endswith("(truncated)")


def test_attempt_of_a_prefilter_rejection_counts_every_node() -> None:
    resp = pb.ScheduleResponse(status=pb.Status(code=pb.CODE_UNSCHEDULABLE))
    resp.diagnosis.pre_filter_status.CopyFrom(
        pb.Status(code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, reasons=["short"], plugin="Gang")
    )
    a = attempt_of(1, "0/4 nodes are available: short.", error=False, resp=resp, num_nodes=4)
    assert [(r.plugin, r.count, r.reason) for r in a.rejections] == [("Gang", 4, "short")]


def test_attempt_of_a_permit_rejection_names_the_node() -> None:
    st = pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["timeout"], plugin="Coscheduling")
    a = attempt_of(2, "0/1 nodes", error=False, node="n1", status=st)
    assert a.node == "n1"
    assert [(r.plugin, r.nodes) for r in a.rejections] == [("Coscheduling", ("n1",))]


async def _admitted_queue() -> SchedulingQueue:
    async def sort(profile: str, pods: object) -> list[tuple[int]]:
        return [(0,) for _ in pods]  # type: ignore[attr-defined]

    async def admit(profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    return SchedulingQueue(sort, admit)  # type: ignore[arg-type]


async def test_store_entry_goes_when_the_pod_is_deleted_or_bound() -> None:
    queue = await _admitted_queue()
    store = AttemptStore()
    queue.on_leave = store.drop
    a = make_pod("a").uid("ua").obj()
    b = make_pod("b").uid("ub").obj()
    queue.add(a, "p")
    queue.add(b, "p")
    await queue.admit_incoming()
    store.put("ua", attempt_of(1, "m", error=False))
    store.put("ub", attempt_of(1, "m", error=False))
    queue.delete("ua")
    assert "ua" not in store and "ub" in store
    [qp] = await queue.pop_batch(1)
    queue.done_bound(qp)
    assert "ub" not in store
    assert queue.find("default", "b") is None


# -- the annotation ---------------------------------------------------------------


def test_only_pods_that_ask_want_explanations() -> None:
    pod = make_pod("p").obj()
    assert not wants_explain(pod)
    pod.annotations["explain.berth.dev/enabled"] = "true"
    assert wants_explain(pod)
    pod.annotations["explain.berth.dev/enabled"] = "yes"
    assert not wants_explain(pod)


def test_result_annotation_has_filter_results_scores_and_the_selected_node() -> None:
    resp = _failed([("n2", "NodeResourcesFit", "Insufficient cpu")])
    resp.node = "n1"
    sc = resp.scores.add(node="n1", total=150)
    sc.plugins["ImageLocality"] = 100
    doc = json.loads(result_annotation(4, resp, result="scheduled"))
    assert doc["selectedNode"] == "n1"
    assert doc["filter"] == {"n2": "NodeResourcesFit: Insufficient cpu"}
    assert doc["scores"] == {"n1": {"total": 150, "ImageLocality": 100}}
    assert doc["attempt"] == 4 and doc["result"] == "scheduled"


def test_result_annotation_is_cut_to_the_limit_and_says_so() -> None:
    rejected = [(f"node-{i:05d}", "NodeAffinity", "didn't match " * 5) for i in range(3000)]
    text = result_annotation(1, _failed(rejected), result="unschedulable", limit=16 * 1024)
    assert len(text.encode()) <= 16 * 1024
    doc = json.loads(text)
    assert doc["truncated"] is True
    assert 0 < len(doc["filter"]) < 3000


def test_the_result_annotation_is_left_out_of_pod_records() -> None:
    obj = {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "u",
            "annotations": {RESULT_ANNOTATION: "{}", "explain.berth.dev/enabled": "true"},
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    rec = pod_record(obj)
    assert dict(rec.annotations) == {"explain.berth.dev/enabled": "true"}


def test_registered_events_of_the_rejecting_plugins() -> None:
    hints = HintMap(
        {
            "p": [
                Registered("NodeResourcesFit", EVENT_NODE_ADD, True),
                Registered("NodeAffinity", EVENT_NODE_ADD, False),
            ]
        }
    )
    assert hints.registered("p", {"NodeResourcesFit"}) == [("NodeResourcesFit", ["NodeAdd (hint)"])]
    assert hints.registered("other", {"NodeResourcesFit"}) == []


# -- the fixes ---------------------------------------------------------------------


def test_quantities_read_as_users_write_them() -> None:
    assert format_quantity("cpu", 500) == "500m"
    assert format_quantity("cpu", 2000) == "2"
    assert format_quantity("memory", GI) == "1Gi"
    assert format_quantity("memory", 1536 << 20) == "1536Mi"
    assert format_quantity("memory", 1000) == "1000"
    assert format_quantity("nvidia.com/gpu", 2) == "2"


def test_resource_fixes_smallest_change_first_then_more_nodes() -> None:
    # The pod asks 2 CPUs; n1 has 1.5 free, n2 1.5, n3 1 (noderesources/fit.go fitsRequest).
    free = {
        "n1": {"cpu": 1500, "memory": 8 * GI, "pods": 10},
        "n2": {"cpu": 1500, "memory": 8 * GI, "pods": 10},
        "n3": {"cpu": 1000, "memory": 8 * GI, "pods": 10},
    }
    fixes = resource_fixes({"cpu": 2000, "memory": GI}, free)
    assert [f.text() for f in fixes] == [
        "2 nodes would fit with 500m less cpu",
        "3 nodes would fit with 1 less cpu",
    ]
    assert fixes[0].nodes == ("n1", "n2")


def test_resource_fixes_combine_resources_a_node_is_short_of() -> None:
    free = {"n1": {"cpu": 500, "memory": GI, "pods": 1}}
    [fix] = resource_fixes({"cpu": 1000, "memory": 2 * GI}, free)
    assert fix.text() == "1 node would fit with 500m less cpu and 1Gi less memory"


@pytest.mark.parametrize(
    "room",
    [
        pytest.param({"cpu": 0, "pods": 5}, id="nothing-free-request-would-go-to-zero"),
        pytest.param({"cpu": -500, "pods": 5}, id="overcommitted"),
        pytest.param({"cpu": 900, "pods": 0}, id="no-pod-slot"),
        pytest.param({"pods": 5}, id="resource-absent"),
    ],
)
def test_resource_fixes_none_when_no_lower_request_helps(room: dict[str, int]) -> None:
    assert resource_fixes({"cpu": 1000}, {"n1": room}) == []


def test_lower_requests_takes_from_the_containers_in_order() -> None:
    pod = make_pod("p").container("a", cpu="300m").container("b", cpu="1").obj()
    lowered = lower_requests(pod, {"cpu": 500})
    assert lowered is not None
    assert [c.requests.milli_cpu for c in lowered.containers] == [0, 800]
    assert [c.requests.milli_cpu for c in pod.containers] == [300, 1000]
    assert lower_requests(pod, {"cpu": 5000}) is None


def test_label_fix_for_a_node_selector_picks_the_node_needing_fewest_labels() -> None:
    pod = make_pod("p").node_selector(zone="b", disk="ssd").obj()
    nodes = {"n1": {"zone": "a"}, "n2": {"zone": "a", "disk": "ssd"}}
    fix = label_fix(pod, nodes)
    assert fix is not None
    assert fix.node == "n2" and dict(fix.labels) == {"zone": "b"}
    assert fix.command() == "kubectl label node n2 zone=b"


def test_label_fix_for_required_affinity_uses_the_cheapest_term() -> None:
    pod = make_pod("p").obj()
    terms = pod.affinity.node_affinity.required.terms
    t1 = terms.add()
    t1.match_expressions.add(key="gpu", operator="In", values=["a100"])
    t1.match_expressions.add(key="zone", operator="In", values=["z9"])
    t2 = terms.add()
    t2.match_expressions.add(key="tier", operator="NotIn", values=["spot"])
    fix = label_fix(pod, {"n1": {"tier": "spot"}})
    assert fix is not None and dict(fix.labels) == {"tier": None}
    assert fix.command() == "kubectl label node n1 tier-"


def test_label_fix_none_when_labels_cannot_do_it() -> None:
    pod = make_pod("p").obj()
    term = pod.affinity.node_affinity.required.terms.add()
    term.match_expressions.add(key="cores", operator="Gt", values=["64"])
    assert label_fix(pod, {"n1": {}}) is None


def test_preemption_and_gpu_fix_texts() -> None:
    assert (
        preemption_fix("n1", [("ns", "low-a", 0), ("ns", "low-b", 0)])
        == "evicting 2 pods ns/low-a, ns/low-b on node n1 (priority 0) would make room"
    )
    assert gpu_fix(3, "40Gi") == (
        "one more node with a free 40Gi GPU card (GPUCardFit found none on 3 nodes)"
    )


# -- the explainer, over a real queue and cache with a fake plugin service ---------------


class FakeService:
    """PluginService.explain: the dry runs asked, answered from ``answers`` in order."""

    def __init__(self, *answers: pb.ScheduleResponse) -> None:
        self.answers = list(answers)
        self.asked: list[cpb.Pod] = []

    async def explain(self, profile: str, pod: cpb.Pod) -> pb.ScheduleResponse:
        self.asked.append(pod)
        return self.answers.pop(0)


async def _explainer(
    service: FakeService, gate: str = ""
) -> tuple[Explainer, SchedulingQueue, SchedulerCache, AttemptStore]:
    async def sort(profile: str, pods: object) -> list[tuple[int]]:
        return [(0,) for _ in pods]  # type: ignore[attr-defined]

    async def admit(profile: str, pod: cpb.Pod) -> pb.Status:
        if gate and pod.scheduling_gates:
            return pb.Status(code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, plugin=gate)
        return pb.Status()

    queue = SchedulingQueue(sort, admit)  # type: ignore[arg-type]
    cache = SchedulerCache()
    store = AttemptStore()
    ex = Explainer(
        cache=cache,
        queue=queue,
        service=service,  # type: ignore[arg-type]
        store=store,
        waiting=WaitingPods(),
    )
    return ex, queue, cache, store


def _get(query: dict[str, tuple[str, ...]]) -> DebugRequest:
    return DebugRequest("/debug/explain", query)


@pytest.mark.parametrize(
    ("query", "code", "words"),
    [
        pytest.param({}, 400, "give pod=NAMESPACE/NAME", id="nothing"),
        pytest.param({"pod": ("a/b",), "all": ("1",)}, 400, "or all=1", id="both"),
        pytest.param({"pod": ("a/b", "a/c")}, 400, "given 2 times", id="twice"),
        pytest.param({"pod": ("no-slash",)}, 400, "expected NAMESPACE/NAME", id="no-namespace"),
        pytest.param({"pod": ("A/../b",)}, 400, "DNS names", id="not-dns"),
        pytest.param({"pod": ("a/b",), "live": ("maybe",)}, 400, "expected 0 or 1", id="flag"),
        pytest.param({"pod": ("ns/ghost",)}, 404, "is not pending in this scheduler", id="unknown"),
    ],
)
async def test_explain_endpoint_refuses_bad_queries_with_what_to_send(
    query: dict[str, tuple[str, ...]], code: int, words: str
) -> None:
    ex, *_ = await _explainer(FakeService())
    answer = await ex.handle(_get(query))
    assert answer.code == code
    assert answer.content_type == "application/json"
    assert words in json.loads(answer.body)["error"]


async def test_a_gated_pod_is_told_which_gates_to_remove_and_no_cycle_runs() -> None:
    service = FakeService()
    ex, queue, _, _ = await _explainer(service, gate="SchedulingGates")
    pod = make_pod("held").uid("uh").obj()
    pod.scheduling_gates.append("example.com/wait")
    queue.add(pod, "p")
    await queue.admit_incoming()
    answer = await ex.handle(_get({"pod": ("default/held",)}))
    doc = json.loads(answer.body)
    assert doc["queue"]["queue"] == "gated" and doc["queue"]["gatedBy"] == "SchedulingGates"
    assert doc["why"] == ["gated at PreEnqueue by SchedulingGates"]
    assert doc["fixes"] == ["remove the pod's scheduling gates: example.com/wait"]
    assert service.asked == []


async def test_resource_fix_is_checked_by_a_second_dry_run_with_lower_requests() -> None:
    first = _failed(
        [("n1", "NodeResourcesFit", "Insufficient cpu"), ("n2", "NodeAffinity", "no")],
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match.",
    )
    second = pb.ScheduleResponse(node="n1", feasible_nodes=1)
    service = FakeService(first, second)
    ex, queue, cache, store = await _explainer(service)
    cache.upsert_node(make_node("n1").capacity(cpu="2", memory="4Gi").obj())
    cache.upsert_node(make_node("n2").capacity(cpu="8", memory="4Gi").obj())
    cache.add_or_update_pod(make_pod("other").uid("uo").node("n1").req(cpu="500m").obj())
    pod = make_pod("web").uid("uw").req(cpu="2").obj()
    queue.add(pod, "p")
    await queue.admit_incoming()
    store.put("uw", attempt_of(1, "0/2 nodes are available", error=False, resp=first))
    doc = await ex.explain("default", "web", live=True)
    assert doc["lastAttempt"]["attempt"] == 1
    assert doc["live"]["rejected"][0] == {
        "node": "n1",
        "plugin": "NodeResourcesFit",
        "code": "Unschedulable",
        "reason": "Insufficient cpu",
    }
    assert doc["fixes"] == [
        "1 node would fit with 500m less cpu (checked: a cycle with those requests places it on n1)"
    ]
    # The second dry run asked with the request lowered by the fix.
    assert [c.requests.milli_cpu for c in service.asked[1].containers] == [1500]


async def test_a_bound_pod_is_not_pending() -> None:
    ex, _, cache, _ = await _explainer(FakeService())
    cache.add_or_update_pod(make_pod("done").uid("ud").node("n1").obj())
    doc = await ex.explain("default", "done", live=True)
    assert doc["status"] == "bound" and doc["node"] == "n1"


def test_each_gang_api_names_its_pod_groups_members_minimum_and_how_to_join() -> None:
    """shim/explain.py GANGS: Coscheduling's label and minMember, the Workload API's
    spec.schedulingGroup and gang minCount (None for the basic policy)."""
    from berth.framework.objects import ClusterObject
    from berth.framework.testing import make_object
    from berth.plugins.coscheduling import PODGROUP as CO_PODGROUP
    from berth.plugins.gangscheduling import PODGROUP as WL_PODGROUP
    from berth.shim.explain import GANGS

    co, wl = GANGS
    labelled = cpb.Pod(name="a", labels={"scheduling.x-k8s.io/pod-group": "g"})
    grouped = cpb.Pod(name="b", scheduling_group="h")
    assert (co.member_of(labelled), co.member_of(grouped)) == ("g", "")
    assert (wl.member_of(labelled), wl.member_of(grouped)) == ("", "h")
    assert co.key == ("scheduling.x-k8s.io", "podgroups")
    assert wl.key == ("scheduling.k8s.io", "podgroups")
    co_obj = ClusterObject.from_proto(make_object(CO_PODGROUP, "g", "ns", spec={"minMember": 3}))
    gang = {"schedulingPolicy": {"gang": {"minCount": 4}}}
    wl_obj = ClusterObject.from_proto(make_object(WL_PODGROUP, "h", "ns", spec=gang))
    basic: dict[str, object] = {"schedulingPolicy": {"basic": {}}}
    wl_basic = ClusterObject.from_proto(make_object(WL_PODGROUP, "h", "ns", spec=basic))
    assert (co.minimum(co_obj), wl.minimum(wl_obj), wl.minimum(wl_basic)) == (3, 4, None)
    assert (co.min_field, wl.min_field) == ("minMember", "minCount")
    assert co.joining("g") == "labelled scheduling.x-k8s.io/pod-group=g"
    assert wl.joining("h") == "with spec.schedulingGroup.podGroupName h"
