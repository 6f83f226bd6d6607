"""The extender client (shim/extenders.py) against a small HTTP server in
this process: what upstream's HTTPExtender sends (pkg/scheduler/extender.go
Filter, Prioritize, Bind, send; k8s.io/kube-scheduler/extender/v1 types),
how it reads answers, and findNodesThatPassExtenders / prioritizeNodes /
extendersBinding's rules (schedule_one.go); and the shim's half of a
preemption the extenders process (shim/preemption.py run_extenders): the
plugin service answers every candidate, the interested extenders narrow them
(preemption.go callExtenders) and the shim selects among those left with
upstream's default criteria (SelectCandidate)."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.extenders import ExtenderConfig, ExtenderTLSConfig, ManagedResource
from berth.framework.status import Code
from berth.framework.testing import make_node, make_pod
from berth.shim.cache import SchedulerCache
from berth.shim.extenders import (
    ExtenderError,
    Extenders,
    ExtenderSetupError,
    HTTPExtender,
    ObjectJson,
)
from berth.shim.preemption import PreemptionExecutor
from berth.shim.queue import QueuedPod
from berth.tls.pki import new_authority

Answer = Callable[[str, Any], tuple[int, bytes]]


class Recorder:
    """A tiny extender: records each call (path, decoded body) and answers
    with ``answer(verb, body)``."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.calls: list[tuple[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        # Per call: the client certificate's subject CN (TLS only; "" for none).
        self.peers: list[str] = []
        self.tls = tls
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                rec.calls.append((self.path, body))
                rec.headers.append(dict(self.headers))
                if rec.tls is not None:
                    cert = self.connection.getpeercert()
                    subject = dict(x[0] for x in cert["subject"]) if cert else {}
                    rec.peers.append(subject.get("commonName", ""))
                status, payload = rec.answer(self.path.rsplit("/", 1)[-1], body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A client that gave up (the timeout test) closes its end: not an error here.
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.server.server_address[1]}/ext"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Recorder]]:
    made: list[Recorder] = []

    def start(answer: Answer) -> Recorder:
        r = Recorder(answer)
        made.append(r)
        return r

    yield start
    for r in made:
        r.close()


def objects_with(pod_resources: dict[str, str] | None = None) -> ObjectJson:
    """An ObjectJson fed as the informers feed it: two nodes and one pending pod."""
    objs = ObjectJson(["berth"], keep_nodes=True)
    for name in ("n1", "n2", "n3"):
        objs.node_decoder(lambda o: o)(
            {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {}}
        )
    resources = {"requests": pod_resources} if pod_resources else {}
    objs.pod_decoder(lambda o: o)(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
            "spec": {
                "schedulerName": "berth",
                "containers": [{"name": "c", "resources": resources}],
            },
        }
    )
    return objs


def json_answer(value: Any) -> tuple[int, bytes]:
    return 200, orjson.dumps(value)


async def test_filter_sends_the_pod_and_full_nodes_and_reads_the_answer(serve: Any) -> None:
    ext_srv = serve(
        lambda verb, body: json_answer(
            {
                "Nodes": {"items": [{"metadata": {"name": "n2"}}]},
                "FailedNodes": {"n1": "n1 is busy", "n3": "n3 is busy"},
                "FailedAndUnresolvableNodes": {"n3": "n3 has no GPU"},
            }
        )
    )
    objs = objects_with()
    exts = Extenders(
        [ExtenderConfig(url_prefix=ext_srv.url + "/", filter_verb="filter")], ["berth"]
    )
    exts.objects = objs
    pod = objs.pod("u1")
    assert pod is not None
    out = await exts.filter(pod, ["n1", "n2", "n3"])
    await exts.close()
    path, body = ext_srv.calls[0]
    # strings.TrimRight(urlPrefix, "/") + "/" + verb
    assert path == "/ext/filter"
    assert ext_srv.headers[0]["Content-Type"] == "application/json"
    assert body["Pod"]["metadata"]["uid"] == "u1"
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["n1", "n2", "n3"]
    assert body["NodeNames"] is None
    assert out.nodes == ["n2"] and out.filtered
    # FailedAndUnresolvableNodes takes precedence over FailedNodes.
    assert out.statuses["n3"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert out.statuses["n3"].reasons == ("n3 has no GPU",)
    assert out.statuses["n1"].code is Code.UNSCHEDULABLE


async def test_node_cache_capable_extender_gets_node_names(serve: Any) -> None:
    srv = serve(lambda verb, body: json_answer({"nodenames": ["n3"]}))  # any case, as Go decodes
    objs = objects_with()
    ext = HTTPExtender(
        ExtenderConfig(url_prefix=srv.url, filter_verb="filter", node_cache_capable=True)
    )
    pod = objs.pod("u1")
    assert pod is not None
    kept, failed, unresolvable = await ext.filter(pod, ["n1", "n3"], objs)
    await ext.close()
    assert srv.calls[0][1]["NodeNames"] == ["n1", "n3"] and srv.calls[0][1]["Nodes"] is None
    assert (kept, failed, unresolvable) == (["n3"], {}, {})


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ((500, b"{}"), "failed filter with extender at URL http://127.0.0.1:"),
        ((200, b'{"Error": "no GPUs left"}'), "no GPUs left"),
        ((200, b"not json"), "decoding the answer"),
        (
            (200, b'{"NodeNames": ["elsewhere"]}'),
            "claims a filtered node 'elsewhere' which is not found in the input node list",
        ),
        ((200, b'{"FailedNodes": {"n1": 3}}'), "FailedNodes must map node names to strings"),
    ],
    ids=["status 500", "Error field", "not JSON", "unknown node", "bad FailedNodes"],
)
async def test_filter_errors(serve: Any, answer: tuple[int, bytes], error: str) -> None:
    srv = serve(lambda verb, body: answer)
    objs = objects_with()
    ext = HTTPExtender(
        ExtenderConfig(url_prefix=srv.url, filter_verb="filter", node_cache_capable=True)
    )
    pod = objs.pod("u1")
    assert pod is not None
    with pytest.raises(ExtenderError, match=None) as info:
        await ext.filter(pod, ["n1"], objs)
    await ext.close()
    assert error in str(info.value)


async def test_an_unreachable_extender_fails_like_nethttp() -> None:
    ext = HTTPExtender(ExtenderConfig(url_prefix="http://127.0.0.1:1/x", filter_verb="filter"))
    objs = objects_with()
    pod = objs.pod("u1")
    assert pod is not None
    with pytest.raises(
        ExtenderError,
        match=r'^Post "http://127.0.0.1:1/x/filter": dial tcp 127.0.0.1:1: connect: connection refused$',
    ):
        await ext.filter(pod, ["n1"], objs)
    await ext.close()


async def test_answers_are_bounded_and_calls_timed_out(serve: Any) -> None:
    big = serve(lambda verb, body: (200, b"[" + b"0," * 5000 + b"0]"))
    ext = HTTPExtender(
        ExtenderConfig(url_prefix=big.url, prioritize_verb="p", weight=1), max_response_bytes=1000
    )
    objs = objects_with()
    pod = objs.pod("u1")
    assert pod is not None
    with pytest.raises(ExtenderError, match="answer larger than 1000 bytes"):
        await ext.prioritize(pod, ["n1"], objs)
    await ext.close()
    gate = threading.Event()

    def slow(verb: str, body: Any) -> tuple[int, bytes]:
        gate.wait(5)
        return json_answer([])

    slow_srv = serve(slow)
    ext = HTTPExtender(
        ExtenderConfig(url_prefix=slow_srv.url, prioritize_verb="p", weight=1, http_timeout=0.2)
    )
    with pytest.raises(ExtenderError, match="context deadline exceeded"):
        await ext.prioritize(pod, ["n1"], objs)
    gate.set()
    await ext.close()


async def test_ignorable_extender_errors_are_skipped_others_fail(serve: Any) -> None:
    """findNodesThatPassExtenders: extenders in turn, the ignorable ones last
    (buildExtenders); an ignorable one's error is skipped."""
    order: list[str] = []

    def keep(name: str, nodes: list[str]) -> Answer:
        def answer(verb: str, body: Any) -> tuple[int, bytes]:
            order.append(name)
            return json_answer({"NodeNames": [n for n in body["NodeNames"] if n in nodes]})

        return answer

    ignorable = serve(keep("ignorable", ["n1"]))
    strict = serve(keep("strict", ["n1", "n2"]))
    configs = [
        ExtenderConfig(
            url_prefix=ignorable.url, filter_verb="f", node_cache_capable=True, ignorable=True
        ),
        ExtenderConfig(url_prefix=strict.url, filter_verb="f", node_cache_capable=True),
        ExtenderConfig(
            url_prefix="http://127.0.0.1:1",
            filter_verb="f",
            node_cache_capable=True,
            ignorable=True,
        ),
    ]
    exts = Extenders(configs, ["berth"])
    exts.objects = objects_with()
    pod = exts.pod("u1")
    assert pod is not None
    out = await exts.filter(pod, ["n1", "n2", "n3"])
    assert order == ["strict", "ignorable"]
    assert out.nodes == ["n1"]
    await exts.close()
    down = Extenders([ExtenderConfig(url_prefix="http://127.0.0.1:1", filter_verb="f")], ["berth"])
    down.objects = exts.objects
    with pytest.raises(ExtenderError, match="Post"):
        await down.filter(pod, ["n1"])
    await down.close()


async def test_prioritize_scales_by_weight_and_max_node_score(serve: Any) -> None:
    """score * weight * (MaxNodeScore / MaxExtenderPriority), summed over
    extenders; a failing prioritizer gives no scores."""
    a = serve(
        lambda verb, body: json_answer([{"Host": "n1", "Score": 3}, {"Host": "n2", "Score": 10}])
    )
    b = serve(lambda verb, body: json_answer([{"host": "n1", "score": 1}]))
    configs = [
        ExtenderConfig(url_prefix=a.url, prioritize_verb="prioritize", weight=2),
        ExtenderConfig(url_prefix=b.url, prioritize_verb="prioritize", weight=5),
        ExtenderConfig(url_prefix="http://127.0.0.1:1", prioritize_verb="p", weight=9),
    ]
    exts = Extenders(configs, ["berth"])
    exts.objects = objects_with()
    pod = exts.pod("u1")
    assert pod is not None
    scores = await exts.prioritize(pod, ["n1", "n2"])
    await exts.close()
    assert scores == {"n1": 3 * 2 * 10 + 1 * 5 * 10, "n2": 10 * 2 * 10}


async def test_managed_resources_decide_interest_and_the_binder(serve: Any) -> None:
    """IsInterested: no managedResources, or a container requesting or
    limiting one of them; extendersBinding picks the interested binder."""
    srv = serve(lambda verb, body: json_answer({}))
    cfg = ExtenderConfig(
        url_prefix=srv.url,
        filter_verb="filter",
        bind_verb="bind",
        managed_resources=(ManagedResource("example.com/gpu"),),
    )
    exts = Extenders([cfg], ["berth"])
    exts.objects = objects_with()
    assert not exts.interested(exts.pod("u1")) and exts.binder(exts.pod("u1")) is None
    exts.objects = objects_with({"example.com/gpu": "1"})
    assert exts.interested(exts.pod("u1"))
    binder = exts.binder(exts.pod("u1"))
    assert binder is not None
    await binder.bind("ns", "p", "u1", "n2")
    await exts.close()
    assert srv.calls == [
        ("/ext/bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": "u1", "Node": "n2"})
    ]


async def test_bind_answer_error_fails_the_binding(serve: Any) -> None:
    srv = serve(lambda verb, body: json_answer({"Error": "node is full"}))
    ext = HTTPExtender(ExtenderConfig(url_prefix=srv.url, bind_verb="bind"))
    with pytest.raises(ExtenderError, match="node is full"):
        await ext.bind("ns", "p", "u1", "n1")
    await ext.close()


def test_object_json_keeps_pending_pods_of_its_profiles_only() -> None:
    objs = ObjectJson(["berth"], keep_nodes=False)
    decode = objs.pod_decoder(lambda o: o)
    pod = {
        "metadata": {"uid": "u", "name": "p", "namespace": "ns", "resourceVersion": "1"},
        "spec": {"schedulerName": "berth"},
    }
    decode(pod)
    assert objs.pod("u") is not None
    decode({**pod, "spec": {"schedulerName": "berth", "nodeName": "n1"}})
    assert objs.pod("u") is None
    decode({**pod, "spec": {"schedulerName": "other"}})
    assert objs.pod("u") is None
    decode(pod)
    objs.on_deleted_pod("u", "0")  # an older version's deletion
    assert objs.pod("u") is not None
    objs.on_deleted_pod("u", "1")
    assert objs.pod("u") is None
    # Nodes are kept only when some extender is sent node objects.
    assert objs.node_decoder(len) is len


async def no_fetch(uids: list[str]) -> dict[str, bytes]:
    raise AssertionError("nodeCacheCapable extenders are sent uids only")


def on_node(extender: str, node: str, uid: str) -> str | None:
    return None if uid.startswith(node) else f"{uid} is not on {node}"


async def test_process_preemption_sends_meta_victims_and_reads_the_answer(serve: Any) -> None:
    """ProcessPreemption with nodeCacheCapable: NodeNameToMetaVictims in, the
    extender's NodeNameToMetaVictims out; a node it drops is no candidate."""
    srv = serve(
        lambda verb, body: json_answer(
            {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "n1-b"}], "NumPDBViolations": 1}}}
        )
    )
    cfg = ExtenderConfig(url_prefix=srv.url, preempt_verb="preempt", node_cache_capable=True)
    exts = Extenders([cfg], ["berth"])
    exts.objects = objects_with()
    pod = exts.pod("u1")
    assert pod is not None and exts.preempts(pod)
    out = await exts.process_preemption(
        pod, {"n1": (["n1-a"], 0), "n2": (["n2-a"], 0)}, no_fetch, on_node
    )
    await exts.close()
    assert out == {"n1": (["n1-b"], 1)}
    path, body = srv.calls[0]
    assert path == "/ext/preempt" and body["NodeNameToVictims"] is None
    assert body["NodeNameToMetaVictims"] == {
        "n1": {"Pods": [{"UID": "n1-a"}], "NumPDBViolations": 0},
        "n2": {"Pods": [{"UID": "n2-a"}], "NumPDBViolations": 0},
    }


@pytest.mark.parametrize(
    ("answer", "ignorable", "want"),
    [
        (
            {"NodeNameToMetaVictims": {"n1": {"Pods": []}}},
            False,
            'expected at least one victim pod on node "n1"',
        ),
        ({"NodeNameToMetaVictims": {"n1": {"Pods": []}}}, True, {}),
        (
            {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "n2-x"}]}}},
            False,
            "n2-x is not on n1",
        ),
        (
            {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "n2-x"}]}}},
            True,
            {"n1": (["n1-a"], 0)},
        ),
    ],
    ids=["no victims", "no victims, ignorable", "victim elsewhere", "victim elsewhere, ignorable"],
)
async def test_process_preemption_checks_the_answer(
    serve: Any, answer: Any, ignorable: bool, want: Any
) -> None:
    """callExtenders: a node left without victims, or a victim not on its node
    (convertPodUIDToPod), is an error, skipped when the extender is ignorable."""
    srv = serve(lambda verb, body: json_answer(answer))
    cfg = ExtenderConfig(
        url_prefix=srv.url, preempt_verb="preempt", node_cache_capable=True, ignorable=ignorable
    )
    exts = Extenders([cfg], ["berth"])
    exts.objects = objects_with()
    pod = exts.pod("u1")
    assert pod is not None
    if isinstance(want, str):
        with pytest.raises(ExtenderError) as info:
            await exts.process_preemption(pod, {"n1": (["n1-a"], 0)}, no_fetch, on_node)
        assert want in str(info.value)
    else:
        assert await exts.process_preemption(pod, {"n1": (["n1-a"], 0)}, no_fetch, on_node) == want
    await exts.close()


async def test_process_preemption_sends_full_victims_without_node_cache(serve: Any) -> None:
    srv = serve(lambda verb, body: json_answer({"NodeNameToMetaVictims": {}}))
    exts = Extenders([ExtenderConfig(url_prefix=srv.url, preempt_verb="preempt")], ["berth"])
    exts.objects = objects_with()
    pod = exts.pod("u1")
    assert pod is not None

    async def fetch(uids: list[str]) -> dict[str, bytes]:
        return {u: orjson.dumps({"metadata": {"uid": u, "name": "victim"}}) for u in uids}

    assert await exts.process_preemption(pod, {"n1": (["n1-a"], 2)}, fetch, on_node) == {}
    await exts.close()
    body = srv.calls[0][1]
    assert body["NodeNameToMetaVictims"] is None
    assert body["NodeNameToVictims"] == {
        "n1": {"Pods": [{"metadata": {"uid": "n1-a", "name": "victim"}}], "NumPDBViolations": 2}
    }


@pytest.fixture(scope="module")
def pki() -> dict[str, bytes]:
    """A CA, a serving certificate for extender.test (no IP SAN: connecting to
    127.0.0.1 verifies only with serverName) and a client certificate."""
    ca = new_authority("extender-ca", days=1)
    serving = ca.issue("extender", days=1, dns=("extender.test",))
    client = ca.issue("berth-shim", days=1)
    return {
        "ca": ca.cert_pem,
        "cert": serving.cert,
        "key": serving.key,
        "client_cert": client.cert,
        "client_key": client.key,
    }


def tls_server(serve: Any, pki: dict[str, bytes], tmp_path: Any) -> Recorder:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    (tmp_path / "s.crt").write_bytes(pki["cert"])
    (tmp_path / "s.key").write_bytes(pki["key"])
    (tmp_path / "ca.crt").write_bytes(pki["ca"])
    ctx.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    ctx.load_verify_locations(tmp_path / "ca.crt")
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return Recorder(lambda verb, body: json_answer({}), ctx)


@pytest.mark.parametrize(
    ("tls", "enable_https", "client_cn", "error"),
    [
        ("data", False, "berth-shim", None),
        ("files", False, "berth-shim", None),
        ("no server name", False, None, "certificate verify failed"),
        ("insecure", False, "", None),
        ("enableHTTPS without CA", True, "", None),
        ("system CAs", False, None, "certificate verify failed"),
    ],
)
async def test_tls_config(
    serve: Any,
    pki: dict[str, bytes],
    tmp_path: Any,
    tls: str,
    enable_https: bool,
    client_cn: str | None,
    error: str | None,
) -> None:
    """extender.go makeTransport: tlsConfig's CA, serverName, client certificate (data or
    files), insecure; enableHTTPS without a CA does not verify."""
    srv = tls_server(serve, pki, tmp_path)
    try:
        for name in ("ca", "client_cert", "client_key"):
            (tmp_path / name).write_bytes(pki[name])
        cfgs = {
            "data": ExtenderTLSConfig(
                server_name="extender.test",
                ca_data=pki["ca"],
                cert_data=pki["client_cert"],
                key_data=pki["client_key"],
            ),
            "files": ExtenderTLSConfig(
                server_name="extender.test",
                ca_file=str(tmp_path / "ca"),
                cert_file=str(tmp_path / "client_cert"),
                key_file=str(tmp_path / "client_key"),
            ),
            "no server name": ExtenderTLSConfig(ca_data=pki["ca"]),
            "insecure": ExtenderTLSConfig(insecure=True),
            "enableHTTPS without CA": None,
            "system CAs": None,
        }
        ext = HTTPExtender(
            ExtenderConfig(
                url_prefix=srv.url,
                bind_verb="bind",
                enable_https=enable_https,
                tls_config=cfgs[tls],
            )
        )
        if error is None:
            await ext.bind("ns", "p", "u1", "n1")
            assert srv.peers == [client_cn]
        else:
            with pytest.raises(ExtenderError, match=error):
                await ext.bind("ns", "p", "u1", "n1")
            assert srv.calls == []
        await ext.close()
    finally:
        srv.close()


@pytest.mark.parametrize(
    "tls",
    [
        ExtenderTLSConfig(ca_file="/nonexistent/ca.crt"),
        ExtenderTLSConfig(ca_data=b"not a certificate"),
        ExtenderTLSConfig(cert_data=b"junk", key_data=b"junk"),
    ],
    ids=["CA file missing", "CA data not PEM", "client certificate not PEM"],
)
def test_unusable_tls_material_stops_the_start(tls: ExtenderTLSConfig) -> None:
    """scheduler.go New: "couldn't build extenders" names the extender."""
    cfg = ExtenderConfig(url_prefix="https://e.test/x", filter_verb="f", tls_config=tls)
    with pytest.raises(
        ExtenderSetupError,
        match=r"couldn't build extenders: extenders\[0\] \(https://e.test/x\): tlsConfig: ",
    ):
        Extenders([cfg], ["berth"])


# -- selecting after the extenders (shim/preemption.py run_extenders) ------------


def cached(*pods: cpb.Pod) -> SchedulerCache:
    state = ClusterStateLog("c1")
    for name in ("n1", "n2", "n3"):
        state.upsert_node(make_node(name).capacity(cpu="1", memory="4Gi").obj())
    for p in pods:
        state.upsert_pod(p)
    state.commit()
    return SchedulerCache(state)


def victim(name: str, node: str, priority: int) -> cpb.Pod:
    p = make_pod(name, "ns").uid(name).priority(priority).obj()
    p.node_name = node
    return p


def executor(cache: SchedulerCache) -> PreemptionExecutor:
    # The API is only read for extenders sent full victims (not here).
    return PreemptionExecutor(
        api=None,  # type: ignore[arg-type]
        workers=None,  # type: ignore[arg-type]
        tasks=None,  # type: ignore[arg-type]
        cache=cache,
        queue=None,  # type: ignore[arg-type]
        waiting=None,  # type: ignore[arg-type]
        recorders={},
        status=None,  # type: ignore[arg-type]
    )


def answer_with_candidates() -> pb.ScheduleResponse:
    """A failed cycle whose DefaultPreemption listed n1 (a victim of
    priority 10, the default criteria's choice) and n2 (priority 20, a
    nomination to clear)."""
    resp = pb.ScheduleResponse(status=pb.Status(code=pb.CODE_UNSCHEDULABLE))
    resp.diagnosis.message = "0/3 nodes are available: 3 Insufficient cpu."
    pf = resp.post_filter
    pf.status.code = pb.CODE_SUCCESS
    pf.plugin = "DefaultPreemption"
    pf.nominating_mode = pb.NOMINATING_MODE_OVERRIDE
    pf.candidates.add(node_name="n1").victims.add(uid="n1-low", namespace="ns", name="n1-low")
    n2 = pf.candidates.add(node_name="n2", clear_nomination_pod_uids=["queued"])
    n2.victims.add(uid="n2-mid", namespace="ns", name="n2-mid")
    return resp


def queued() -> QueuedPod:
    pod = make_pod("p", "ns").uid("u1").priority(1000).obj()
    return QueuedPod(pod=pod, profile="berth", timestamp=0.0, first_seen=0.0)


def extenders(url: str, **kwargs: Any) -> Extenders:
    cfg = ExtenderConfig(url_prefix=url, preempt_verb="preempt", node_cache_capable=True, **kwargs)
    exts = Extenders([cfg], ["berth"])
    exts.objects = objects_with()
    return exts


def summary(pf: pb.PostFilterResponse) -> tuple[Any, ...]:
    return (
        pf.status.code,
        pf.nominated_node_name,
        [v.name for v in pf.victims],
        list(pf.clear_nomination_pod_uids),
        len(pf.candidates),
    )


async def test_the_extender_sees_every_candidate_and_the_best_it_keeps_is_selected(
    serve: Any,
) -> None:
    srv = serve(
        lambda verb, body: json_answer(
            {"NodeNameToMetaVictims": {"n2": body["NodeNameToMetaVictims"]["n2"]}}
        )
    )
    exts = extenders(srv.url)
    resp = answer_with_candidates()
    cache = cached(victim("n1-low", "n1", 10), victim("n2-mid", "n2", 20))
    await executor(cache).run_extenders(exts, queued(), resp)
    await exts.close()
    sent = srv.calls[0][1]["NodeNameToMetaVictims"]
    assert sent == {
        "n1": {"Pods": [{"UID": "n1-low"}], "NumPDBViolations": 0},
        "n2": {"Pods": [{"UID": "n2-mid"}], "NumPDBViolations": 0},
    }
    assert summary(resp.post_filter) == (pb.CODE_SUCCESS, "n2", ["n2-mid"], ["queued"], 0)
    assert resp.post_filter.nominating_mode == pb.NOMINATING_MODE_OVERRIDE


async def test_among_several_kept_the_default_criteria_decide(
    serve: Any,
) -> None:
    """The extender keeps both and swaps n2's victim for a lower-priority
    pod there: n2's highest victim (5) is now lower than n1's (10)."""
    srv = serve(
        lambda verb, body: json_answer(
            {
                "NodeNameToMetaVictims": {
                    "n1": {"Pods": [{"UID": "n1-low"}]},
                    "n2": {"Pods": [{"UID": "n2-lowest"}]},
                }
            }
        )
    )
    exts = extenders(srv.url)
    resp = answer_with_candidates()
    cache = cached(
        victim("n1-low", "n1", 10), victim("n2-mid", "n2", 20), victim("n2-lowest", "n2", 5)
    )
    await executor(cache).run_extenders(exts, queued(), resp)
    await exts.close()
    assert summary(resp.post_filter) == (pb.CODE_SUCCESS, "n2", ["n2-lowest"], ["queued"], 0)


async def test_without_an_interested_extender_the_shim_selects_as_the_plugin_would(
    serve: Any,
) -> None:
    srv = serve(lambda verb, body: json_answer({}))
    # The extender manages a resource the pod does not ask for.
    exts = extenders(srv.url, managed_resources=(ManagedResource("example.com/gpu"),))
    resp = answer_with_candidates()
    cache = cached(victim("n1-low", "n1", 10), victim("n2-mid", "n2", 20))
    await executor(cache).run_extenders(exts, queued(), resp)
    await exts.close()
    assert srv.calls == []
    assert summary(resp.post_filter) == (pb.CODE_SUCCESS, "n1", ["n1-low"], [], 0)


@pytest.mark.parametrize(
    ("answer", "code", "why"),
    [
        ((200, b'{"NodeNameToMetaVictims": {}}'), pb.CODE_UNSCHEDULABLE, "no candidate node"),
        ((500, b"{}"), pb.CODE_ERROR, "failed preempt with extender"),
    ],
    ids=["none kept", "extender failed"],
)
async def test_no_candidate_left_or_a_failed_extender_means_no_preemption(
    serve: Any,
    answer: tuple[int, bytes],
    code: int,
    why: str,
) -> None:
    """preemption.go Preempt: nothing selected, or callExtenders' error: no
    PostFilterResult, so the nomination stays (ModeNoop) and the FitError
    ends with why."""
    srv = serve(lambda verb, body: answer)
    exts = extenders(srv.url)
    resp = answer_with_candidates()
    cache = cached(victim("n1-low", "n1", 10), victim("n2-mid", "n2", 20))
    await executor(cache).run_extenders(exts, queued(), resp)
    await exts.close()
    assert summary(resp.post_filter) == (code, "", [], [], 0)
    assert resp.post_filter.nominating_mode == pb.NOMINATING_MODE_NOOP
    assert resp.post_filter.status.reasons[0].startswith("preemption: ")
    assert why in resp.post_filter.status.reasons[0]
    assert resp.diagnosis.message.startswith("0/3 nodes are available: 3 Insufficient cpu. ")


async def test_a_candidate_whose_victim_is_gone_is_not_selected(serve: Any) -> None:
    """n1's victim left the cache while the extender answered: the shim's
    guard would refuse n1 whole, so n2, the other candidate kept, is
    selected though the criteria prefer n1's victims."""
    srv = serve(
        lambda verb, body: json_answer({"NodeNameToMetaVictims": body["NodeNameToMetaVictims"]})
    )
    exts = extenders(srv.url, managed_resources=(ManagedResource("example.com/gpu"),))
    resp = answer_with_candidates()
    cache = cached(victim("n2-mid", "n2", 20))
    await executor(cache).run_extenders(exts, queued(), resp)
    await exts.close()
    assert summary(resp.post_filter) == (pb.CODE_SUCCESS, "n2", ["n2-mid"], ["queued"], 0)
