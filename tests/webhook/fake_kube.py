"""An in-memory stand-in for the API server behind :class:`volcano_metronome.kube.Kube`.

It replaces only ``Kube.request`` (the one place HTTP happens), so the real ``get`` / ``create`` /
``replace`` / ``patch`` code and the functions built on them run unchanged. It keeps objects by REST
path, assigns resourceVersions, answers 404 / 409 (AlreadyExists, stale resourceVersion) / 422 as
the server does for what these tests exercise (a Secret's type is immutable, ``kubernetes.io/tls``
needs ``tls.crt`` and ``tls.key``, a failed JSON-patch ``test`` op), and records every request as
the RBAC verb and resource it needs, so tests can check a Role allows exactly what the code does.
"""

from __future__ import annotations

import base64
import binascii
import copy
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jsonpatch

from volcano_metronome import kube

VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Call:
    """One request as RBAC sees it."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None


def _parse(path: str) -> tuple[str, str, str | None, str | None]:
    """``(group, plural, namespace, name)`` of a REST path."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    return group, rest[0], namespace, rest[1] if len(rest) > 1 else None


class FakeKube(kube.Kube):
    """A :class:`kube.Kube` whose requests go to a dict. ``before`` runs ahead of each request (to race it)."""

    def __init__(self) -> None:  # noqa: D107 - no API client: nothing leaves the process
        self.request_timeout = 1.0
        self.objects: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.before: Callable[[str, str], None] | None = None
        self._versions = itertools.count(100)

    # -- test helpers
    def put(self, group: str, resource: str, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` directly (as another client would have), with a fresh resourceVersion."""
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
        self.objects[(group, resource, namespace, stored["metadata"]["name"])] = stored
        return copy.deepcopy(stored)

    def stored(self, group: str, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of the object as stored, None when absent."""
        obj = self.objects.get((group, resource, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    # -- the server
    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (), body: Any = None,
                content_type: str = "application/json", timeout: float | tuple[float, float] | None = None,
                stream: bool = False) -> Any:
        if self.before is not None:
            self.before(method, path)
        group, resource, namespace, name = _parse(path)
        self.calls.append(Call(VERBS[method], group, resource, namespace, name))
        what = f"{method} {path}"
        if method == "POST":
            name = body["metadata"]["name"]
            if (group, resource, namespace, name) in self.objects:
                raise kube.Conflict(f"{what}: HTTP 409 AlreadyExists", 409, "AlreadyExists")
            _validate(body, None, what)
            return self.put(group, resource, namespace, body)
        assert name is not None, f"{what}: only object paths are served"
        key = (group, resource, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise kube.NotFound(f"{what}: HTTP 404 NotFound", 404, "NotFound")
        if method == "GET":
            return copy.deepcopy(current)
        if method == "PUT":
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent != current["metadata"]["resourceVersion"]:
                raise kube.Conflict(f"{what}: HTTP 409 Conflict: the object has been modified", 409, "Conflict")
            _validate(body, current, what)
            return self.put(group, resource, namespace, body)
        if method == "PATCH":
            assert content_type == kube.JSON_PATCH, "only JSON patches are served"
            try:
                patched = jsonpatch.apply_patch(current, body)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise kube.Invalid(f"{what}: HTTP 422 Invalid: the server rejected our request due to an error in "
                                   f"our request: test operation failed: {exc}", 422, "Invalid") from None
            _validate(patched, current, what)
            return self.put(group, resource, namespace, patched)
        if method == "DELETE":
            del self.objects[key]
            return {"kind": "Status", "status": "Success"}
        raise AssertionError(f"{what}: not served")


def _validate(obj: dict[str, Any], old: dict[str, Any] | None, what: str) -> None:
    """The API server's checks of a Secret that the certs command could get wrong."""
    if obj.get("kind", "Secret") != "Secret" or "data" not in obj:
        return
    if old is not None and old.get("type") != obj.get("type"):
        raise kube.Invalid(f"{what}: HTTP 422 Invalid: type: field is immutable", 422, "Invalid")
    for key, value in obj["data"].items():
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError):
            raise kube.Invalid(f"{what}: HTTP 422 Invalid: data[{key}]: illegal base64", 422, "Invalid") from None
    if obj.get("type") == "kubernetes.io/tls" and not {"tls.crt", "tls.key"} <= set(obj["data"]):
        raise kube.Invalid(f"{what}: HTTP 422 Invalid: data[tls.crt], data[tls.key]: Required value", 422, "Invalid")
