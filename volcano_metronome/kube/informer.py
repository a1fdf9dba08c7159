"""A watch-fed cache of one resource (:class:`Informer`), as client-go's reflector keeps one."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from volcano_metronome.kube.client import Kube
from volcano_metronome.shapes import JSON
from volcano_metronome.shapes.apierrors import Gone, NotFound
from volcano_metronome.shapes.resources import Resource

log = logging.getLogger(__name__)


def key_of(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """``(namespace, name)`` of an object (namespace None for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or None, str(meta.get("name", ""))


def rv_newer(a: str | None, b: str | None) -> bool:
    """True when resourceVersion ``a`` is newer than ``b``.

    resourceVersions are opaque, but every API server backed by etcd uses the etcd revision, an
    integer; when either is not an integer, a differing ``a`` is taken as newer.
    """
    if a is None:
        return False
    if b is None:
        return True
    try:
        return int(a) > int(b)
    except ValueError:
        return a != b


class Informer:
    """A watch-fed cache of one resource: list, then watch; re-list on 410; back off on errors.

    ``on_change(event_type, obj)`` runs on the informer's thread for every ADDED / MODIFIED / DELETED
    (re-lists produce the difference as such events); keep it cheap. A resource whose type is not
    installed (404 on the first list) counts as synced and empty, and is retried with backoff, so
    optional integrations (Volcano, Kueue) may be installed after the controller starts. A 404 after
    a successful list keeps the cache (see ``_missing``).
    """

    def __init__(self, kube: Kube, resource: Resource, namespace: str | None = None,
                 label_selector: str | None = None,
                 on_change: Callable[[str, JSON], None] | None = None, *, field_selector: str | None = None,
                 timeout_seconds: int = 300, backoff_initial: float = 0.2, backoff_max: float = 30.0,
                 missing_grace_s: float = 120.0) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change
        self.timeout_seconds = timeout_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.restarts = 0  # watches re-established after an error or a 410
        self.installed = True  # False while the resource type answers 404
        self.missing_grace_s = missing_grace_s
        self._listed = False  # a list has succeeded once
        self._missing_since: float | None = None  # first 404 after a successful list
        self.resource_version: str | None = None
        self._store: dict[tuple[str | None, str], JSON] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None

    # -- lifecycle
    def start(self) -> "Informer":
        """Start the daemon thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.resource.plural}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching; returns promptly (the open stream is shut down)."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - best effort on a stream another thread reads
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def wait_synced(self, timeout: float) -> bool:
        """True once the first list has completed (within ``timeout`` seconds)."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        """Whether the first list has completed."""
        return self._synced.is_set()

    # -- store
    def get(self, namespace: str | None, name: str) -> JSON | None:
        """The cached object, or None."""
        with self._lock:
            return self._store.get((namespace or None, name))

    def items(self) -> list[JSON]:
        """Every cached object (a snapshot list; the dicts must be treated as read-only)."""
        with self._lock:
            return list(self._store.values())

    # -- the loop
    def _run(self) -> None:
        # Like client-go's reflector: list once, then watch from the last resourceVersion seen;
        # re-list only when the server says that version is gone (410) or the type was missing.
        delay = self.backoff_initial
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                started = time.monotonic()
                self._watch_once()
                if time.monotonic() - started > 1.0:  # a healthy watch ran to its timeout: go again now
                    delay = self.backoff_initial
                    continue
            except Gone:
                self.restarts += 1
                need_list = True
                log.info("watch %s: resourceVersion too old, re-listing", self.resource.plural)
                continue
            except NotFound:
                if self.installed:
                    log.info("%s: resource type not installed; retrying with backoff", self.resource.plural)
                self.installed = False
                need_list = True
                self._missing(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - the informer must survive anything the server does
                if self._stop.is_set():
                    return
                self.restarts += 1
                log.warning("watch %s failed (%s); retrying in %.1fs", self.resource.plural, exc, delay)
            self._stop.wait(delay * (0.5 + random.random()))
            delay = min(self.backoff_max, delay * 2)

    def _missing(self, now: float) -> None:
        """The type answered 404. Never listed: synced and empty (an optional integration not installed).
        Listed before: a 404 may be transient (an API server restarting, a CRD being re-registered), and
        emptying the cache would make every object look deleted (claims gone, gangs decided again), so the
        cache is kept until the type has been missing for ``missing_grace_s`` (a deleted CRD's objects are
        deleted with it)."""
        if not self._listed:
            self._replace([])
            self._synced.set()
            return
        if self._missing_since is None:
            self._missing_since = now
            log.warning("%s: 404 after a successful list; keeping the cache for up to %.0fs",
                        self.resource.plural, self.missing_grace_s)
        elif now - self._missing_since >= self.missing_grace_s and self.items():
            log.warning("%s: missing for %.0fs; emptying the cache", self.resource.plural, now - self._missing_since)
            self._replace([])

    def _list(self) -> None:
        page = self.kube.list(self.resource, self.namespace, label_selector=self.label_selector,
                              field_selector=self.field_selector)
        self._listed, self._missing_since = True, None
        self.installed = True
        self.resource_version = (page.get("metadata") or {}).get("resourceVersion")
        self._replace(page["items"])
        self._synced.set()

    def _watch_once(self) -> None:
        def opened(resp: Any) -> None:
            self._resp = resp

        try:
            for event in self.kube.watch(self.resource, self.namespace, resource_version=self.resource_version,
                                         label_selector=self.label_selector, field_selector=self.field_selector,
                                         timeout_seconds=self.timeout_seconds, on_open=opened):
                kind, obj = event.get("type"), event.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    self.resource_version = rv or self.resource_version
                    continue
                obj.setdefault("kind", self.resource.kind)
                obj.setdefault("apiVersion", self.resource.api_version)
                key = key_of(obj)
                with self._lock:
                    if kind == "DELETED":
                        self._store.pop(key, None)
                    else:
                        self._store[key] = obj
                self.resource_version = rv or self.resource_version
                self._notify(str(kind), obj)
        finally:
            self._resp = None

    def _replace(self, items: Iterable[JSON]) -> None:
        fresh = {key_of(o): o for o in items}
        with self._lock:
            old, self._store = self._store, fresh
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._notify("ADDED", obj)
            elif (before.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._notify("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._notify("DELETED", obj)

    def _notify(self, kind: str, obj: JSON) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(kind, obj)
        except Exception:  # noqa: BLE001 - a callback bug must not kill the watch
            log.exception("informer %s: on_change failed", self.resource.plural)
