"""What a cycle reads: informer stores, overlaid with the objects the controller itself just wrote.

A write's result reaches the informer a moment later, through the watch. Until it does, a cycle
reading the informer alone would see the world before the write and could decide a gang again.
The :class:`Overlay` holds every object the writer got back from the API server (and tombstones for
deleted ones) and wins over the informer's copy until the informer holds the same or a newer
resourceVersion, like the scheduler's assume cache.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Mapping, Protocol, Sequence

from volcano_metronome.controller.objects import meta
from volcano_metronome.shapes import JSON
from volcano_metronome.kube import key_of, rv_newer


class Store(Protocol):
    """A read-only view of one resource's objects (an Informer, or a fake in tests)."""

    def get(self, namespace: str | None, name: str) -> JSON | None:
        """The object, or None."""

    def items(self) -> list[JSON]:
        """Every object."""


_Key = tuple[str, str | None, str]


class Overlay:
    """Objects the controller wrote, by (resource plural, namespace, name); thread-safe."""

    def __init__(self, ttl_s: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        # (object or None when deleted, its resourceVersion or the deleted object's uid, when recorded)
        self._objs: dict[_Key, tuple[JSON | None, str, float]] = {}
        self._lock = threading.Lock()
        self._ttl = ttl_s
        self._clock = clock

    def record(self, plural: str, obj: JSON) -> None:
        """Remember ``obj`` as the newest known state."""
        ns, name = key_of(obj)
        with self._lock:
            current = self._objs.get((plural, ns, name))
            rv = str(meta(obj).get("resourceVersion", ""))
            if current is not None and current[0] is not None and rv_newer(current[1], rv):
                return
            self._objs[(plural, ns, name)] = (obj, rv, self._clock())

    def record_deleted(self, plural: str, namespace: str | None, name: str, uid: str = "") -> None:
        """Remember that the object is gone; with ``uid``, a new object of the same name (e.g. the pod its
        owner recreates under the same name, as Volcano's job controller does) is shown at once."""
        with self._lock:
            self._objs[(plural, namespace or None, name)] = (None, uid, self._clock())

    def __len__(self) -> int:
        with self._lock:
            return len(self._objs)

    def merge(self, plural: str, items: Sequence[JSON]) -> list[JSON]:
        """``items`` (the informer's) with our newer copies swapped in, created ones added, deleted removed."""
        now = self._clock()
        with self._lock:
            mine = {(ns, name): v for (p, ns, name), v in self._objs.items() if p == plural}
            if not mine:
                return list(items)
            out: list[JSON] = []
            seen: set[tuple[str | None, str]] = set()
            for obj in items:
                key = key_of(obj)
                seen.add(key)
                entry = mine.get(key)
                if entry is None:
                    out.append(obj)
                    continue
                ours, rv, at = entry
                theirs = str(meta(obj).get("resourceVersion", ""))
                if ours is None:
                    if now - at > self._ttl or (rv and meta(obj).get("uid") not in (None, rv)):
                        del self._objs[(plural, *key)]
                        out.append(obj)
                    continue  # deleted by us; the informer has not heard yet
                if rv_newer(rv, theirs) and now - at <= self._ttl:
                    out.append(ours)
                else:
                    del self._objs[(plural, *key)]  # the informer caught up
                    out.append(obj)
            for key, (ours, rv, at) in mine.items():
                if key in seen:
                    continue
                if ours is None or now - at > self._ttl:
                    del self._objs[(plural, *key)]
                    continue
                out.append(ours)  # created by us; not in the informer yet
            return out


class View:
    """The stores a cycle reads, each merged with the overlay."""

    def __init__(self, stores: Mapping[str, Store], overlay: Overlay) -> None:
        self.stores = stores
        self.overlay = overlay

    def items(self, plural: str) -> list[JSON]:
        """Every object of the resource (empty when there is no store for it)."""
        store = self.stores.get(plural)
        return self.overlay.merge(plural, store.items() if store is not None else [])
