"""The Kubernetes client: dicts in, dicts out (:class:`Kube`, :func:`connect`).

Requests go through the client's raw request path and responses are decoded with :mod:`json`, never
into the client's model classes: that keeps custom resources and built-in kinds alike, and it is
several times faster than model deserialisation.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import urllib.parse
import uuid
from typing import Any, Callable, Iterator, Mapping, Sequence

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from volcano_metronome import api
from volcano_metronome.shapes import JSON
from volcano_metronome.shapes.apierrors import Conflict, Fenced, Invalid, KubeError, NotFound, Unavailable
from volcano_metronome.shapes.apierrors import error_from_status as _error
from volcano_metronome.shapes.refs import object_ref
from volcano_metronome.shapes.resources import EVENTS, Resource
from volcano_metronome.shapes.times import format_micro

FIELD_MANAGER = "volcano-metronome"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
_PATCH_TYPES = {"merge": MERGE, "json": JSON_PATCH, "strategic": STRATEGIC}
FENCE_MIN_SECONDS = 0.2  # a fenced write needs at least this much time left to be sent


def now_micro() -> str:
    """The current time as a Kubernetes ``MicroTime`` (leases, events.k8s.io)."""
    return format_micro(time.time())


# ------------------------------------------------------------------------------------------- client
class Kube:
    """A thin, thread-safe client: dicts in, dicts out. Build it with :func:`connect`."""

    def __init__(self, api_client: k8s_client.ApiClient, request_timeout: float = 30.0,
                 fence: Callable[[], float] | None = None) -> None:
        self._api = api_client
        self.request_timeout = request_timeout
        self.fence = fence

    def fenced(self, remaining: Callable[[], float]) -> "Kube":
        """This client (same connections) whose writes must end within ``remaining()`` seconds.

        Each write's timeout is cut to the time left, and a write is refused (:class:`Fenced`) when
        less than ``FENCE_MIN_SECONDS`` is left: a write of a leader cannot be sent, nor wait for its
        answer, past the moment its lease could pass to another replica. Reads are not fenced.
        """
        return Kube(self._api, self.request_timeout, remaining)

    @property
    def host(self) -> str:
        """The API server URL."""
        return str(self._api.configuration.host)

    def close(self) -> None:
        """Release the connection pool."""
        self._api.close()  # type: ignore[no-untyped-call]

    # -- raw requests
    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (), body: Any = None,
                content_type: str = "application/json", timeout: float | tuple[float, float] | None = None,
                stream: bool = False) -> Any:
        """One request; returns the decoded JSON body (or, with ``stream``, the open urllib3 response).

        It goes straight to the client's connection pool (TLS, client certificates and proxies as the
        kubeconfig configured them) with the client's auth header, skipping the generated layer's
        per-call serialisation, which costs more CPU than the request itself at hundreds per second.
        """
        headers = {"Accept": "application/json", "Content-Type": content_type, **self._api.default_headers}
        auth = self._api.configuration.auth_settings().get("BearerToken")  # refreshes expiring tokens
        if auth:
            headers[auth["key"]] = auth["value"]
        url = self._api.configuration.host + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        t = timeout if timeout is not None else self.request_timeout
        if self.fence is not None and method != "GET":
            left = self.fence()
            if left < FENCE_MIN_SECONDS:
                raise Fenced(f"{method} {path}: not sent, the lease may pass to another replica in {left:.2f}s")
            t = (min(t[0], left), min(t[1], left)) if isinstance(t, tuple) else min(t, left)
        to = urllib3.Timeout(connect=t[0], read=t[1]) if isinstance(t, tuple) else urllib3.Timeout(total=t)
        try:
            raw = self._api.rest_client.pool_manager.request(method, url, body=data, headers=headers, timeout=to,
                                                             preload_content=False, retries=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if stream and 200 <= raw.status < 300:
            return raw
        try:
            payload = raw.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        finally:
            raw.release_conn()
        if not 200 <= raw.status < 300:
            raise _error(raw.status, payload, f"{method} {path}")
        return json.loads(payload) if payload else None

    # -- reads
    def get(self, resource: Resource, namespace: str | None, name: str,
            subresource: str | None = None) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            return dict(self.request("GET", resource.path(namespace, name, subresource)))
        except NotFound:
            return None

    def list(self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int = 500) -> JSON:
        """Every object (all pages): ``{"items": [...], "metadata": {"resourceVersion": ...}}``."""
        items: list[JSON] = []
        query = _selectors(label_selector, field_selector) + [("limit", page_size)]
        cont = None
        while True:
            page = self.request("GET", resource.path(namespace), query=query + ([("continue", cont)] if cont else []))
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                meta = dict(page.get("metadata") or {})
                meta.pop("continue", None)
                for item in items:  # list items carry no kind; add it back so objects look the same everywhere
                    item.setdefault("kind", resource.kind)
                    item.setdefault("apiVersion", resource.api_version)
                return {"items": items, "metadata": meta}

    # -- writes
    def create(self, resource: Resource, obj: Mapping[str, Any], namespace: str | None = None) -> JSON:
        """Create ``obj`` (namespace from the argument or ``obj.metadata.namespace``)."""
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        body = dict(obj)
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        return dict(self.request("POST", resource.path(ns if resource.namespaced else None), body=body))

    def patch(self, resource: Resource, namespace: str | None, name: str, patch: Any, *, kind: str = "merge",
              subresource: str | None = None, resource_version: str | None = None) -> JSON:
        """Patch an object. ``kind`` is merge, json or strategic; ``resource_version`` makes it conditional.

        With a resourceVersion the server answers 409 (:class:`Conflict`) when the object changed since
        it was read: for merge and strategic patches it goes in ``metadata.resourceVersion``, for a
        JSON patch as a leading ``test`` op (a failed test is a 422, mapped to :class:`Conflict` here).
        """
        content_type = _PATCH_TYPES[kind]
        if resource_version is not None:
            if kind == "json":
                patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}, *patch]
            else:
                patch = dict(patch)
                patch["metadata"] = {**(patch.get("metadata") or {}), "resourceVersion": resource_version}
        path = resource.path(namespace if resource.namespaced else None, name, subresource)
        try:
            return dict(self.request("PATCH", path, body=patch, content_type=content_type,
                                     query=[("fieldManager", FIELD_MANAGER)]))
        except Invalid as exc:
            if kind == "json" and resource_version is not None and "test" in str(exc).lower():
                raise Conflict(str(exc), 409, "Conflict") from None
            raise

    def replace(self, resource: Resource, obj: Mapping[str, Any], subresource: str | None = None) -> JSON:
        """PUT ``obj`` (its ``metadata.resourceVersion`` makes the update conditional)."""
        meta = obj.get("metadata") or {}
        path = resource.path(meta.get("namespace") if resource.namespaced else None, meta["name"], subresource)
        return dict(self.request("PUT", path, body=dict(obj)))

    def delete(self, resource: Resource, namespace: str | None, name: str, *,
               resource_version: str | None = None, uid: str | None = None) -> bool:
        """Delete; False when it was already gone. Preconditions on resourceVersion / uid when given."""
        pre = {k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v}
        body = {"kind": "DeleteOptions", "apiVersion": "v1", **({"preconditions": pre} if pre else {})}
        try:
            self.request("DELETE", resource.path(namespace if resource.namespaced else None, name), body=body)
            return True
        except NotFound:
            return False

    # -- watch
    def watch(self, resource: Resource, namespace: str | None = None, *, resource_version: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None, timeout_seconds: int = 300,
              bookmarks: bool = True, on_open: Callable[[Any], None] | None = None) -> Iterator[JSON]:
        """Watch events ``{"type", "object"}`` until the server closes the stream (ERROR events raise)."""
        query = _selectors(label_selector, field_selector) + [("watch", "true"), ("timeoutSeconds", timeout_seconds)]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        resp = self.request("GET", resource.path(namespace), query=query, stream=True,
                            timeout=(10.0, timeout_seconds + 30.0))
        if on_open is not None:
            on_open(resp)
        try:
            for line in _lines(resp):
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise _error(int(status.get("code") or 500), json.dumps(status).encode(),
                                 f"watch {resource.plural}")
                yield event
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise Unavailable(f"watch {resource.plural}: {type(exc).__name__}: {exc}") from None
        finally:
            resp.release_conn()

    # -- events
    def emit_event(self, regarding: Mapping[str, Any], *, reason: str, note: str, type_: str = "Normal",
                   action: str = "Schedule", controller: str = api.ADMISSION_CHECK_CONTROLLER,
                   instance: str = "volcano-metronome") -> JSON:
        """Record an ``events.k8s.io/v1`` Event about ``regarding`` (an object dict, or an object reference)."""
        ref = object_ref(regarding)
        namespace = ref.get("namespace") or "default"
        event = {
            "metadata": {"name": f"{ref.get('name', '')[:200]}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "eventTime": now_micro(),
            "reportingController": controller,
            "reportingInstance": instance[:128],
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": type_,
            "regarding": ref,
        }
        return self.create(EVENTS, event, namespace)


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if label_selector:
        out.append(("labelSelector", label_selector))
    if field_selector:
        out.append(("fieldSelector", field_selector))
    return out


def _lines(resp: Any) -> Iterator[bytes]:
    """Newline-delimited JSON from a chunked streaming response, as chunks arrive."""
    pending = b""
    for chunk in resp.stream(None, decode_content=True):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


# ------------------------------------------------------------------------------------------- connect
def connect(kubeconfig: str | None = None, *, context: str | None = None, qps_pool: int = 32,
            request_timeout: float = 30.0) -> Kube:
    """A client from ``kubeconfig`` (or $KUBECONFIG / ~/.kube/config), else the in-cluster service account."""
    cfg = k8s_client.Configuration()
    tried: list[str] = []
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    default = pathlib.Path.home() / ".kube" / "config"
    if path is None and default.is_file() and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        path = str(default)
    if path is not None:
        if not pathlib.Path(path).is_file():
            raise KubeError(f"kubeconfig {path!r}: no such file")
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=cfg, persist_config=False)
        except yaml.YAMLError as exc:
            raise KubeError(f"kubeconfig {path!r}: not valid YAML: {exc}") from None
        except (TypeError, AttributeError) as exc:  # the client indexes whatever the YAML held
            raise KubeError(f"kubeconfig {path!r}: not a kubeconfig (expected a mapping with clusters, contexts "
                            f"and users): {exc}") from None
        except (k8s_config.ConfigException, OSError, ValueError) as exc:
            raise KubeError(f"kubeconfig {path!r}: {exc}") from None
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException as exc:
            tried.append(f"in-cluster config: {exc}")
            raise KubeError(
                "no Kubernetes credentials: pass --kubeconfig FILE, set KUBECONFIG, or run in a pod with a "
                f"service account ({'; '.join(tried)})") from None
    cfg.connection_pool_maxsize = qps_pool
    return Kube(k8s_client.ApiClient(cfg), request_timeout=request_timeout)
