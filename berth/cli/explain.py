"""``berth explain``: why is this pod (or every pending pod) pending, asked of
a running shim.

GETs ``/debug/explain`` on the shim's secure port (``berth shim
--metrics-listen``, 10259 in the deployment), authenticated like ``kubectl``
would be: the kubeconfig's bearer token, or its client certificate when the
shim trusts its CA (``--client-ca-file``); the API server authorizes the
caller for ``get`` on the non-resource URL ``/debug/explain``. Prints the
pod's queue, its last attempt, a fresh dry-run cycle over every node (per
node: the plugin that rejects it and why; per feasible node: each plugin's
raw, normalised and weighted score), upstream's FitError summary and the
smallest changes that would make it fit (docs/explain.md).
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import yaml

DEFAULT_SERVER = "https://127.0.0.1:10259"
# The most of an answer read: --all-pending over hundreds of pods stays far below.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class UsageError(Exception):
    pass


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "explain",
        help="why a pod (or every pending pod) is pending, asked of a running shim",
        description=(
            "Ask a running 'berth shim' why NAMESPACE/POD is pending: the queue it sits in "
            "and why (backoff until when, unschedulable since when, the events that would "
            "move it, the gate that holds it), its last attempt, a dry-run cycle now over "
            "every node (each node's rejecting plugin and reason, each feasible node's raw, "
            "normalised and weighted scores), upstream's FitError summary and the smallest "
            "change that would make it fit where one can be worked out (less CPU or memory, "
            "a node label, a preemption, a GPU card, the missing members of its PodGroup). "
            "Exit status: 0 answered, 1 the shim refused or does not know the pod, "
            "2 usage or connection error."
        ),
        epilog=(
            "examples: berth explain default/web-0 --server https://10.0.0.5:10259 "
            "--certificate-authority ca.crt; berth explain --all-pending -o json. "
            "Credentials come from the kubeconfig (its token, or its client certificate); "
            "the caller needs RBAC 'get' on nonResourceURLs /debug/explain."
        ),
    )
    p.add_argument("pod", nargs="?", metavar="NAMESPACE/POD", help="the pending pod")
    p.add_argument(
        "--all-pending",
        action="store_true",
        help="every pod the shim holds in its queue (without a dry run each, unless --live)",
    )
    p.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        metavar="URL",
        help=f"the shim's secure port (default {DEFAULT_SERVER})",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="table (default), or the shim's whole answer as json or yaml",
    )
    live = p.add_mutually_exclusive_group()
    live.add_argument(
        "--live",
        dest="live",
        action="store_true",
        default=None,
        help="also run a dry-run cycle now (the default for one pod)",
    )
    live.add_argument(
        "--no-live",
        dest="live",
        action="store_false",
        help="only what the shim kept of the last attempt (the default for --all-pending)",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="credentials (default: as kubectl)")
    p.add_argument("--context", metavar="NAME", help="the kubeconfig context to use")
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help="a bearer token instead of the kubeconfig's credentials",
    )
    p.add_argument(
        "--certificate-authority",
        metavar="FILE",
        help="CA bundle that signed the shim's serving certificate",
    )
    p.add_argument(
        "--insecure-skip-tls-verify",
        action="store_true",
        help="do not verify the shim's certificate (its default one is self-signed)",
    )
    p.add_argument("--timeout", type=float, default=40.0, metavar="SECONDS", help="default 40")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        url = _url(args)
        context, headers = _credentials(args)
    except UsageError as exc:
        print(f"berth explain: {exc}", file=sys.stderr)
        return 2
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=args.timeout, context=context) as r:
            body = r.read(MAX_ANSWER_BYTES + 1)
            status = r.status
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_ANSWER_BYTES + 1)
        status = exc.code
    except (OSError, ValueError) as exc:
        print(f"berth explain: cannot reach the shim at {args.server}: {exc}", file=sys.stderr)
        return 2
    if len(body) > MAX_ANSWER_BYTES:
        print(f"berth explain: answer larger than {MAX_ANSWER_BYTES} bytes", file=sys.stderr)
        return 2
    try:
        doc = json.loads(body)
    except ValueError:
        text = body[:2000].decode(errors="replace").strip()
        print(f"berth explain: the shim answered {status}: {text}", file=sys.stderr)
        return 1 if status >= 400 else 2
    if status != 200:
        err = doc.get("error") if isinstance(doc, dict) else None
        print(f"berth explain: the shim answered {status}: {err or doc}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump(doc, sys.stdout, indent=2)
        print()
    elif args.output == "yaml":
        yaml.safe_dump(doc, sys.stdout, sort_keys=False, allow_unicode=True)
    else:
        pods = doc.get("pods") if args.all_pending else [doc]
        for i, pod in enumerate(pods or []):
            if i:
                print()
            render(pod, sys.stdout)
        if args.all_pending and not pods:
            print("no pending pods")
        if doc.get("truncated"):
            print(f"... and {doc['truncated']} more pending pods not shown")
    return 0


def _url(args: argparse.Namespace) -> str:
    if bool(args.pod) == bool(args.all_pending):
        raise UsageError("give NAMESPACE/POD, or --all-pending")
    base = args.server.rstrip("/")
    if not base.startswith(("https://", "http://")):
        raise UsageError(f"--server {args.server!r}: expected https://HOST:PORT")
    query: dict[str, str] = {}
    if args.all_pending:
        query["all"] = "1"
        query["live"] = "1" if args.live else "0"
    else:
        if args.pod.count("/") != 1:
            raise UsageError(f"{args.pod!r}: expected NAMESPACE/POD")
        query["pod"] = args.pod
        query["live"] = "0" if args.live is False else "1"
    return f"{base}/debug/explain?{urllib.parse.urlencode(query)}"


def _credentials(args: argparse.Namespace) -> tuple[ssl.SSLContext | None, dict[str, str]]:
    """The TLS context (the shim's CA, and the kubeconfig's client
    certificate) and the Authorization header."""
    headers: dict[str, str] = {"Accept": "application/json"}
    if not args.server.startswith("https://"):
        if args.token:
            headers["Authorization"] = f"Bearer {args.token}"
        return None, headers
    if args.insecure_skip_tls_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        try:
            context = ssl.create_default_context(cafile=args.certificate_authority)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"--certificate-authority {args.certificate_authority}: {exc}"
            ) from exc
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
        return context, headers
    from berth.kube.config import ConfigurationError, authorization, load_configuration

    try:
        cfg = load_configuration(
            args.kubeconfig,
            context=args.context,
            hint="pass --kubeconfig, or --token",
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    auth = authorization(cfg)
    if auth:
        headers["Authorization"] = auth
    if cfg.cert_file and cfg.key_file:
        try:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"the kubeconfig's client certificate: {exc}") from exc
    return context, headers


# -- the table ---------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]], out: TextIO, indent: str = "  ") -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        out.write(indent + "  ".join(cells).rstrip() + "\n")


def render(doc: Mapping[str, Any], out: TextIO) -> None:
    """One pod's explanation as text."""
    head = f"Pod {doc.get('pod')}"
    if doc.get("profile"):
        head += f" (scheduler {doc['profile']})"
    status = doc.get("status", "")
    out.write(f"{head}: {status}")
    if status in ("bound", "assumed"):
        out.write(f" on node {doc.get('node')}\n")
        return
    out.write("\n")
    q: Mapping[str, Any] = doc.get("queue") or {}
    if q:
        line = f"  Queue: {q.get('queue')}, attempts {q.get('attempts')}"
        if q.get("backoffUntil"):
            line += f", backoff until {q['backoffUntil']} ({q.get('backoffSeconds')}s left)"
        if q.get("unschedulableSince"):
            line += (
                f", unschedulable since {q['unschedulableSince']} "
                f"(retried anyway at {q.get('retriedAnywayAt')})"
            )
        if q.get("gatedBy"):
            line += f", gated by {q['gatedBy']}"
        out.write(line + "\n")
        if q.get("rejectedBy"):
            out.write(f"  Rejected by: {', '.join(q['rejectedBy'])}\n")
        for m in q.get("movedBy") or []:
            out.write(f"  Moved by {m['plugin']} events: {', '.join(m['events'])}\n")
    for line in doc.get("why") or []:
        out.write(f"  Why: {line}\n")
    last: Mapping[str, Any] | None = doc.get("lastAttempt")
    if last:
        out.write(
            f"  Last attempt #{last.get('attempt')} at {last.get('at')}: {last.get('result')}\n"
        )
        rows = [["NODES", "PLUGIN", "CODE", "REASON", "E.G."]]
        for r in last.get("rejections") or []:
            rows.append(
                [str(r["nodes"]), r["plugin"], r["code"], r["reason"], ", ".join(r["examples"])]
            )
        if len(rows) > 1:
            _table(rows, out, "    ")
    live: Mapping[str, Any] | None = doc.get("live")
    if live:
        out.write(
            f"  Now (dry run over {live.get('evaluatedNodes')} nodes): "
            + (f"fits on {live['node']}" if live.get("node") else str(live.get("message")))
            + "\n"
        )
        rows = [["NODE", "PLUGIN", "CODE", "REASON"]]
        for r in live.get("rejected") or []:
            rows.append([r["node"], r["plugin"], r["code"], r["reason"]])
        if len(rows) > 1:
            _table(rows, out, "    ")
        if live.get("rejectedNotShown"):
            out.write(f"    ... {live['rejectedNotShown']} more rejected nodes\n")
        scores = live.get("scores") or []
        if scores:
            plugins = sorted({p for s in scores for p in s["plugins"]})
            rows = [["NODE", "TOTAL", *[f"{p} (raw/norm/weighted)" for p in plugins]]]
            for s in scores:
                cells = [s["node"], str(s["total"])]
                for p in plugins:
                    v = s["plugins"].get(p)
                    cells.append(f"{v['raw']}/{v['normalized']}/{v['weighted']}" if v else "-")
                rows.append(cells)
            _table(rows, out, "    ")
    if doc.get("liveError"):
        out.write(f"  Dry run failed: {doc['liveError']}\n")
    group: Mapping[str, Any] | None = doc.get("podGroup")
    if group:
        line = f"  PodGroup {group.get('name')}"
        minimum = next((f for f in ("minMember", "minCount") if f in group), "")
        if minimum:
            line += (
                f": {minimum} {group[minimum]}, {len(group.get('members') or [])} member(s), "
                f"{group.get('assigned')} assigned"
            )
        if group.get("problem"):
            line += f" ({group['problem']})"
        out.write(line + "\n")
        rows = [["MEMBER", "STATE", "LAST ATTEMPT"]]
        for m in group.get("members") or []:
            rows.append([m["pod"], m["state"], m.get("lastAttempt", "")])
        if len(rows) > 1:
            _table(rows, out, "    ")
        reasons = group.get("nodeReasons") or []
        if reasons:
            out.write("    Node-level reasons over the pending members:\n")
            for r in reasons:
                out.write(f"      {r['nodes']} {r['reason']}\n")
    fixes = doc.get("fixes") or []
    if fixes:
        out.write("  Would make it fit:\n")
        for f in fixes:
            out.write(f"    - {f}\n")


__all__ = ["register", "render", "run"]
