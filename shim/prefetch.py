"""The nodes' and pods' first LISTs, sent while the shim is still starting.

``berth shim`` spends its first half second importing modules and reading its
configuration before its informers start; their first LISTs then wait on the API
server (for 1500 pods, a third of the start-up). ``ListPrefetch`` sends those LISTs
on threads of their own as soon as the kubeconfig is known, so the API server
prepares them while the process imports, and each informer takes what was listed
for its first list instead of sending it (``Informer(prefetched=...)``).

What the informer sees is what its own first list would have given it:

- the same requests (the path, selectors and page size of ``KubeApi.list_pages``),
  sent through a ``KubeApi`` made from the same kubeconfig, and only when the
  kubeconfig is a plain one (``berth.kube.config.plain_configuration``: nothing that
  runs a credential plugin twice);
- an error (an unreachable server, a status, a continue token that expired) is
  raised from the informer's first list as its own would have been, so it is
  logged, counted and retried with backoff the same way;
- at most ``MAX_PAGES`` pages are held; a longer list goes on from the last page's
  continue token through the informer's own ``list_pages``;
- what was listed is used once, by the first list only, and only within
  ``MAX_AGE`` seconds of being asked for: a later list (after 410 Gone, or an
  informer started late) lists afresh. The watch starts from the listed
  resourceVersion, as after any list.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Imported here, on the main thread, before the listing threads start: they then
# import nothing while the main thread imports the rest of the shim.
from berth.kube.config import plain_configuration
from berth.kube.rest import KubeApi, ListResult

log = logging.getLogger(__name__)

# The shim's informers of nodes and pods (shim/scheduler.py). kube-scheduler's pod
# informer ignores finished pods (pkg/scheduler/scheduler.go NewInformerFactory:
# status.phase!=Succeeded,status.phase!=Failed).
NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

# Pages (of berth.kube.rest.LIST_PAGE objects) listed ahead of the informer; the rest
# of a longer list is paged by the informer itself.
MAX_PAGES = 4
# Seconds after which what was listed is not used: the informer lists afresh.
MAX_AGE = 10.0


@dataclass(frozen=True, slots=True)
class _More:
    """The list goes on from this continue token."""

    token: str


_END = object()


class PrefetchedList:
    """One collection's first pages, fetched on a thread; ``pages`` is consumed once."""

    def __init__(self, path: str, params: Mapping[str, str]) -> None:
        self.path = path
        self.params = dict(params)
        self.started = time.monotonic()
        self._items: queue.Queue[Any] = queue.Queue()
        self._taken = False
        self._lock = threading.Lock()

    def fetch(self, api: KubeApi, max_pages: int = MAX_PAGES) -> None:
        """Lists into the queue: pages, then the continue token of the rest (if any),
        then the end; an exception ends it where it happened."""
        try:
            # Leaving the loop early drops list_pages' generator, which then stops
            # waiting for the page it asked for ahead.
            for n, page in enumerate(api.list_pages(self.path, **self.params), 1):
                self._items.put(page)
                if n >= max_pages and page.continue_token:
                    self._items.put(_More(page.continue_token))
                    break
        except Exception as exc:  # handed to the informer, raised there
            self._items.put(exc)
        self._items.put(_END)

    def take(self, max_age: float) -> bool:
        """True once, when the listed pages are at most ``max_age`` seconds old."""
        with self._lock:
            if self._taken:
                return False
            self._taken = True
        if time.monotonic() - self.started > max_age:
            log.info("%s: listed more than %.1fs ago: listing again", self.path, max_age)
            return False
        return True

    def pages(self, api: KubeApi) -> Iterator[ListResult]:
        """The listed pages as ``api.list_pages`` would give them (waiting for the ones
        still coming), then the rest of the list from ``api`` itself."""
        while True:
            item = self._items.get()
            if item is _END:
                return
            if isinstance(item, Exception):
                raise item
            if isinstance(item, _More):
                yield from api.list_pages(self.path, **self.params, **{"continue": item.token})
                return
            yield item


class ListPrefetch:
    """The nodes' and pods' first LISTs from ``kubeconfig`` (None: where
    `berth.kube.config.load_configuration` looks), each on a thread of its own.

    Informers ask ``take`` from their own thread; it waits until the kubeconfig has
    been read (a few milliseconds after ``start``) and answers None when there is
    nothing to take: a kubeconfig that is not plain or cannot be read (the shim's own
    ``KubeApi.from_kubeconfig`` then says what is wrong, as without a prefetch), a
    collection not listed here, or a list already taken or too old."""

    def __init__(
        self, kubeconfig: str | None, *, max_pages: int = MAX_PAGES, max_age: float = MAX_AGE
    ) -> None:
        self.kubeconfig = kubeconfig
        self.max_pages = max_pages
        self.max_age = max_age
        self.lists = {
            NODES_PATH: PrefetchedList(NODES_PATH, {}),
            PODS_PATH: PrefetchedList(PODS_PATH, {"fieldSelector": POD_FIELD_SELECTOR}),
        }
        self._configured = threading.Event()
        self._api: KubeApi | None = None

    def for_kubeconfig(self, kubeconfig: str | None) -> ListPrefetch | None:
        """This prefetch if it listed with ``kubeconfig`` (the one the shim uses), else
        None: its lists may come from another cluster or another user."""
        return self if kubeconfig == self.kubeconfig else None

    def start(self) -> None:
        threading.Thread(target=self._run, name="berth-list-prefetch", daemon=True).start()

    def _run(self) -> None:
        try:
            if plain_configuration(self.kubeconfig) is not None:
                self._api = KubeApi.from_kubeconfig(self.kubeconfig)
        except Exception as exc:  # the shim's own KubeApi reports it
            log.debug("list prefetch: no API access: %s", exc)
        finally:
            self._configured.set()
        api = self._api
        if api is None:
            return
        threads = [
            threading.Thread(
                target=prefetched.fetch,
                args=(api, self.max_pages),
                name=f"berth-list-prefetch-{path.rsplit('/', 1)[-1]}",
                daemon=True,
            )
            for path, prefetched in self.lists.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        api.close()

    def take(self, path: str, params: Mapping[str, str]) -> PrefetchedList | None:
        """The list of ``path`` with ``params`` to use for an informer's first list."""
        prefetched = self.lists.get(path)
        if prefetched is None or prefetched.params != dict(params):
            return None
        self._configured.wait()
        if self._api is None or not prefetched.take(self.max_age):
            return None
        return prefetched


def start_for_shim(kubeconfig_flag: str | None, config_path: str | None) -> ListPrefetch | None:
    """Starts the first LISTs of ``berth shim --kubeconfig kubeconfig_flag --config
    config_path``, with the kubeconfig the shim will use (the flag, else the
    configuration's clientConnection.kubeconfig, else the defaults), read from the
    file's YAML before the configuration is loaded; shim/app.py uses them only if its
    kubeconfig is the same. None (nothing sent): the configuration delays the informers
    until this replica leads (delayCacheUntilActive), or it cannot be
    read (the shim then refuses it, saying why)."""
    kubeconfig = kubeconfig_flag or None
    if config_path:
        import yaml

        try:
            with open(config_path, "rb") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            return None
        if not isinstance(doc, dict):
            return None
        if doc.get("delayCacheUntilActive"):
            return None
        connection = doc.get("clientConnection")
        if kubeconfig is None and isinstance(connection, dict):
            configured = connection.get("kubeconfig")
            if configured is not None and not isinstance(configured, str):
                return None
            kubeconfig = configured or None
    return _started(kubeconfig)


def _started(kubeconfig: str | None) -> ListPrefetch:
    prefetch = ListPrefetch(kubeconfig)
    prefetch.start()
    return prefetch
