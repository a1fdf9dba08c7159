"""Watch-fed, read-only caches of Volcano PodGroups and STBandwidthClaims for the request path.

Admission never calls the API server: it reads these caches through :class:`Lookups`. Each worker
process keeps its own informers (threads cannot cross gunicorn's fork), and ``/readyz`` fails until
every cache has completed its first list.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from volcano_metronome.admission import Lookups, Settings


class _Store(Protocol):
    """What the server needs of an informer."""

    @property
    def synced(self) -> bool: ...

    def start(self) -> Any: ...

    def get(self, namespace: str | None, name: str) -> Mapping[str, Any] | None: ...


class Caches:
    """The informers the settings ask for, and the lookups they back."""

    def __init__(self, pod_groups: _Store | None = None, claims: _Store | None = None) -> None:
        self.pod_groups = pod_groups
        self.claims = claims

    @classmethod
    def connect(cls, settings: Settings, kubeconfig: str | None) -> "Caches":
        """Informers for what ``settings.watch`` enables (no API connection when it enables nothing)."""
        if not (settings.watch.pod_groups or settings.watch.claims):
            return cls()
        from volcano_metronome import kube

        client = kube.connect(kubeconfig)
        return cls(
            pod_groups=kube.Informer(client, kube.PODGROUPS) if settings.watch.pod_groups else None,
            claims=kube.Informer(client, kube.CLAIMS) if settings.watch.claims else None,
        )

    def start(self) -> None:
        """Start every informer's background list-and-watch."""
        for store in self._stores():
            store.start()

    def synced(self) -> bool:
        """Whether every cache has completed its first list."""
        return all(store.synced for store in self._stores())

    def lookups(self) -> Lookups:
        """Read-only views for the admission logic."""
        return Lookups(pod_group=self.pod_groups.get if self.pod_groups is not None else None,
                       claim=self.claims.get if self.claims is not None else None)

    def _stores(self) -> list[_Store]:
        return [store for store in (self.pod_groups, self.claims) if store is not None]
