"""Every version of some objects, in the order the API server wrote them (a watch, recorded).

Polling can miss a state that lasts a few milliseconds (a Workload held by its admission check, a
claim's decision before the job finished and released it); a watch delivers every resourceVersion.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from volcano_metronome import kube
from volcano_metronome.controller import objects

JSON = dict[str, Any]


class History:
    """Records ADDED / MODIFIED / DELETED versions of ``resource`` in ``namespace`` from ``start()`` on."""

    def __init__(self, k: kube.Kube, resource: kube.Resource, namespace: str | None = None) -> None:
        self.k = k
        self.resource = resource
        self.namespace = namespace
        self.events: list[tuple[str, JSON]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"history-{resource.plural}", daemon=True)
        self._started = threading.Event()
        self.error: BaseException | None = None

    def start(self) -> History:
        """Begin recording; returns once the watch is open, so nothing after this call is missed."""
        self._thread.start()
        if not self._started.wait(30):
            raise AssertionError(f"the watch on {self.resource.plural} did not open: {self.error}")
        return self

    def stop(self) -> None:
        """Close the watch and wait for the recorder."""
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001 - closing a stream that may already be closed
                pass
        self._thread.join(10)

    def versions(self, name: str | None = None) -> list[JSON]:
        """The recorded versions (of the object ``name``, or all), oldest first."""
        with self._lock:
            return [obj for _, obj in self.events if name is None or objects.name(obj) == name]

    def first(self, predicate: Callable[[JSON], bool], name: str | None = None) -> JSON | None:
        """The first recorded version satisfying ``predicate``."""
        return next((obj for obj in self.versions(name) if predicate(obj)), None)

    def _run(self) -> None:
        try:
            listing = self.k.list(self.resource, self.namespace)
            with self._lock:
                self.events.extend(("EXISTING", obj) for obj in listing["items"])
            version = listing["metadata"].get("resourceVersion")
            while not self._stopping.is_set():
                for event in self.k.watch(self.resource, self.namespace, resource_version=version,
                                          timeout_seconds=120, on_open=self._opened):
                    obj = event["object"]
                    version = objects.resource_version(obj) or version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        with self._lock:
                            self.events.append((event["type"], obj))
        except BaseException as exc:  # noqa: BLE001 - reported by start() or ignored after stop()
            if not self._stopping.is_set():
                self.error = exc
                self._started.set()

    def _opened(self, response: Any) -> None:
        self._response = response
        self._started.set()

