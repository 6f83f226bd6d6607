"""List-then-watch informers, like client-go's Reflector and DeltaFIFO.

Each informer runs on its own thread: it lists the collection, then watches
from the list's resourceVersion with bookmarks, decodes every event with
orjson into a slim record (``berth.kube.records``), and hands batches of events to
the asyncio loop. Guarantees, each tested:

- no event is lost: a watch that ends or breaks is resumed from the last
  resourceVersion seen (events or bookmarks); when that version has expired
  (410 Gone) the informer lists again and reports the difference as events,
  deletions included, as DeltaFIFO.Replace does;
- no event is applied twice: an object whose resourceVersion is the one
  already delivered is not delivered again;
- an unreachable API server is retried with backoff (client-go's reflector
  backs off from 800 ms to 30 s), never given up on;
- a watch that died without a word (the connection open, nothing arriving: a
  dropped NAT entry, a partition) is replaced within ``WATCH_IDLE_TIMEOUT``
  seconds: every watch asks the API server to end it within
  ``2 * WATCH_TIMEOUT_SECONDS``, which a live one does even when nothing
  changes, so a stream silent for longer is dead; it is closed and watched
  again from the last resourceVersion.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from berth.kube.errors import ApiError, WatchStalled
from berth.kube.records import ObjectError
from berth.kube.rest import JSON, KubeApi

log = logging.getLogger(__name__)

R = TypeVar("R")

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

# client-go reflector (tools/cache/reflector.go): backoff 800 ms doubling to 30 s;
# each watch asks the server to end it after a minimum times a random factor in
# [1, 2), so the watches of many clients do not all restart at once.
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0
# The minimum. The reflector's is 5 minutes (minWatchTimeout); the shim's is shorter
# because it must tell an idle watch from a dead one without HTTP/2 pings (client-go
# speaks HTTP/2 and pings a connection silent for 30 s: http2 ReadIdleTimeout, set by
# k8s.io/apimachinery/pkg/util/net/http.go). Bookmarks do not help: the API server
# sends none on a watch of a kind that does not change (v1.36, measured: 200 s without
# one on nodes, pods and statefulsets of an idle cluster), but it does end every watch
# at its timeoutSeconds. A restart resumes from the last resourceVersion, served from
# the watch cache: about 0.3 requests a second for the shim's ~17 watches.
WATCH_TIMEOUT_SECONDS = 36
# A watch silent this long is taken for dead: a live one ends (or speaks) within
# 2 * WATCH_TIMEOUT_SECONDS = 72 s, and a dead one is replaced within 90 s.
WATCH_IDLE_TIMEOUT = 85.0


def watch_timeout_seconds(minimum: int, rng: random.Random | None = None) -> int:
    """reflector.go ListAndWatch: ``minWatchTimeout * (rand.Float64() + 1.0)``."""
    return int(minimum * ((rng or random).random() + 1.0))


@dataclass(frozen=True, slots=True)
class Event(Generic[R]):
    type: str  # ADDED, MODIFIED or DELETED
    key: str
    record: R
    resource_version: str


@dataclass
class InformerStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    duplicates: int = 0
    relists_after_gone: int = 0
    errors: int = 0
    # Watches replaced because their stream stayed silent past the idle timeout.
    stalled_watches: int = 0
    decode_seconds: float = 0.0


class Informer(Generic[R]):
    """Watches ``path`` and delivers ``Event``s to ``on_events`` on ``loop``.

    ``decode`` turns a raw object into a record (raising ObjectError for one
    it cannot use: logged and skipped); ``key_of`` names an object (pods by
    uid, nodes by name). ``decode_first_list``, when given, makes the decoder
    for the objects of a list that finds nothing known yet (the first list):
    ``berth.kube.records.PodSlabs`` puts them into shared messages, which costs
    less memory for records decoded together and kept. A later list (after
    410 Gone) keeps few of its records, so it decodes with ``decode``.
    """

    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        name: str,
        decode: Callable[[JSON], R],
        decode_first_list: Callable[[], Callable[[JSON], R]] | None = None,
        key_of: Callable[[JSON], str],
        on_events: Callable[[list[Event[R]]], None],
        loop: asyncio.AbstractEventLoop,
        field_selector: str | None = None,
        label_selector: str | None = None,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        watch_idle_timeout: float = WATCH_IDLE_TIMEOUT,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.api = api
        self.path = path
        self.name = name
        self.decode = decode
        self.decode_first_list = decode_first_list
        self.key_of = key_of
        self.on_events = on_events
        self.loop = loop
        self.field_selector = field_selector
        self.label_selector = label_selector
        # The shortest server-side watch length; each watch gets up to twice it.
        self.watch_timeout = watch_timeout
        self.watch_idle_timeout = watch_idle_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.stats = InformerStats()
        # What has been delivered: key -> (resourceVersion, record).
        self._known: dict[str, tuple[str, R]] = {}
        self._rv = ""
        self._stop = threading.Event()
        self._synced = asyncio.Event()
        self._thread: threading.Thread | None = None
        self._pending: list[Event[R]] = []
        self._pending_lock = threading.Lock()
        self._flush_scheduled = False

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    async def wait_synced(self) -> None:
        """Returns once the first list has been delivered (HasSynced)."""
        await self._synced.wait()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        return self._rv

    # -- the thread -------------------------------------------------------------

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return params

    def _run(self) -> None:
        backoff = self.backoff_initial
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                backoff = self.backoff_initial
            except ApiError as exc:
                if exc.gone:
                    # The resourceVersion is too old for a watch: list again.
                    log.info("%s: watch expired (410 Gone); listing again", self.name)
                    self.stats.relists_after_gone += 1
                    need_list = True
                    continue
                self.stats.errors += 1
                if isinstance(exc, WatchStalled):
                    self.stats.stalled_watches += 1
                    log.warning(
                        "%s: watch replaced: %s; watching again from resourceVersion %s in %.1fs",
                        self.name,
                        exc.message,
                        self._rv,
                        backoff,
                    )
                else:
                    log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)
            except Exception:
                self.stats.errors += 1
                log.exception("%s: unexpected error; retrying in %.1fs", self.name, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)

    def _list(self) -> None:
        # Page by page: each page's JSON becomes records before the next page
        # is fetched. What was known is compared only once the whole list is
        # in, so a list that fails half-way changes nothing.
        listed: list[Event[R]] = []
        count = 0
        rv = ""
        decode = self.decode
        if self.decode_first_list is not None and not self._known:
            decode = self.decode_first_list()
        for page in self.api.list_pages(self.path, **self._params()):
            count += len(page.items)
            rv = page.resource_version or rv
            for obj in page.items:
                ev = self._event_for(ADDED, obj, decode)
                if ev is not None:
                    listed.append(ev)
            del page
        self.stats.lists += 1
        seen: set[str] = set()
        out: list[Event[R]] = []
        for ev in listed:
            seen.add(ev.key)
            old = self._known.get(ev.key)
            if old is not None and old[0] == ev.resource_version:
                continue
            kind = ADDED if old is None else MODIFIED
            out.append(Event(kind, ev.key, ev.record, ev.resource_version))
            self._known[ev.key] = (ev.resource_version, ev.record)
        # DeltaFIFO.Replace: what the list no longer has was deleted meanwhile.
        for key in [k for k in self._known if k not in seen]:
            old_rv, record = self._known.pop(key)
            out.append(Event(DELETED, key, record, old_rv))
        self._rv = rv
        log.info(
            "%s: listed %d objects at resourceVersion %s (%d changes delivered)",
            self.name,
            count,
            self._rv,
            len(out),
        )
        self._deliver(out, synced=True)

    def _event_for(
        self, kind: str, obj: JSON, decode: Callable[[JSON], R] | None = None
    ) -> Event[R] | None:
        meta = obj.get("metadata") or {}
        rv = str(meta.get("resourceVersion") or "")
        t0 = time.perf_counter()
        try:
            key = self.key_of(obj)
            record = (decode or self.decode)(obj)
        except (ObjectError, KeyError, TypeError, ValueError) as exc:
            log.warning(
                "%s: skipping %s/%s: %s",
                self.name,
                meta.get("namespace", ""),
                meta.get("name", "?"),
                exc,
            )
            return None
        finally:
            self.stats.decode_seconds += time.perf_counter() - t0
        return Event(kind, key, record, rv)

    def _watch(self) -> None:
        self.stats.watches += 1
        for line in self.api.watch_lines(
            self.path,
            timeout_seconds=watch_timeout_seconds(self.watch_timeout),
            stop=self._stop,
            idle_timeout=self.watch_idle_timeout,
            resourceVersion=self._rv,
            **self._params(),
        ):
            raw = orjson.loads(line)
            kind = raw.get("type")
            obj = raw.get("object") or {}
            if kind == "BOOKMARK":
                self._rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
                continue
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiError("WATCH", self.path, code, line)
            ev = self._event_for(str(kind), obj)
            self._rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
            if ev is None:
                continue
            if ev.type == DELETED:
                if self._known.pop(ev.key, None) is None:
                    self.stats.duplicates += 1
                    continue
            else:
                old = self._known.get(ev.key)
                if old is not None and old[0] == ev.resource_version:
                    self.stats.duplicates += 1
                    continue
                if old is None and ev.type == MODIFIED:
                    ev = Event(ADDED, ev.key, ev.record, ev.resource_version)
                elif old is not None and ev.type == ADDED:
                    ev = Event(MODIFIED, ev.key, ev.record, ev.resource_version)
                self._known[ev.key] = (ev.resource_version, ev.record)
            self.stats.events += 1
            self._deliver([ev])

    def _deliver(self, events: list[Event[R]], synced: bool = False) -> None:
        """Hands events to the loop in order; events that pile up while the
        loop is busy go over in one batch."""
        with self._pending_lock:
            self._pending.extend(events)
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule or synced:
            try:
                self.loop.call_soon_threadsafe(self._flush, synced)
            except RuntimeError:
                # The loop is closed: the shim is stopping.
                self._stop.set()

    def _flush(self, synced: bool) -> None:
        with self._pending_lock:
            events, self._pending = self._pending, []
            self._flush_scheduled = False
        if events:
            self.on_events(events)
        if synced:
            self._synced.set()


def pod_key(obj: JSON) -> str:
    uid = (obj.get("metadata") or {}).get("uid")
    if not uid:
        raise ObjectError("Pod metadata.uid: required")
    return str(uid)


def node_key(obj: JSON) -> str:
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        raise ObjectError("Node metadata.name: required")
    return str(name)


__all__ = [
    "ADDED",
    "DELETED",
    "MODIFIED",
    "WATCH_IDLE_TIMEOUT",
    "Event",
    "Informer",
    "InformerStats",
    "node_key",
    "pod_key",
    "watch_timeout_seconds",
]
