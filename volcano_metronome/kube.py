"""The one module that talks to the Kubernetes API (import-linter contract ``one-kubernetes-client``).

Everything above it sees Kubernetes objects as plain dicts in the API's JSON form (camelCase, as the
server returns them): requests go through the client's raw request path and responses are decoded
with :mod:`json`, never into the client's model classes. That keeps custom resources and built-in
kinds alike, and it is several times faster than model deserialisation.

What it offers:

- :func:`connect`: a :class:`Kube` from a kubeconfig file, else the in-cluster service account.
- :class:`Resource` and constants for every kind volcano-metronome reads or writes.
- :class:`Kube`: get, list (paginated), create, merge / JSON / strategic patch (optionally on a
  subresource, optionally guarded by ``resourceVersion``), replace, delete, watch, events.
- :class:`Informer`: list, then watch from the list's resourceVersion with bookmarks and a server
  timeout, re-list on 410 Gone, exponential backoff with jitter on errors; a thread-safe store.
- :func:`patch_webhook_ca_bundle`: write a CA bundle into every webhook of a
  MutatingWebhookConfiguration.
- :func:`read_secret` and :func:`write_secret`: a Secret, created or replaced only if unchanged
  since it was read (optimistic concurrency).

Errors are :class:`KubeError` (a :class:`MetronomeError`) carrying the HTTP status: 404
:class:`NotFound`, 409 :class:`Conflict` (also AlreadyExists), 410 :class:`Gone`, and
:class:`Unavailable` when the server cannot be reached.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import pathlib
import random
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from volcano_metronome import api
from volcano_metronome.core.errors import MetronomeError

log = logging.getLogger(__name__)

JSON = dict[str, Any]
FIELD_MANAGER = "volcano-metronome"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
_PATCH_TYPES = {"merge": MERGE, "json": JSON_PATCH, "strategic": STRATEGIC}
FENCE_MIN_SECONDS = 0.2  # a fenced write needs at least this much time left to be sent


# --------------------------------------------------------------------------------------------- errors
class KubeError(MetronomeError):
    """A request the API server refused or could not answer; ``status`` is the HTTP status (0 if none)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """404: the object (or the resource type) does not exist."""


class Conflict(KubeError):
    """409: the object changed since it was read (resourceVersion mismatch), or it already exists."""


class Gone(KubeError):
    """410: the resourceVersion a watch asked for is too old; re-list."""


class Fenced(KubeError):
    """A write refused before it was sent: the lease that allows it may have passed to another replica."""


class Unavailable(KubeError):
    """The API server could not be reached, or answered 429/5xx."""


class Invalid(KubeError):
    """422: the server's validation refused the object or patch (a failed JSON-patch test op too)."""


def _error(status: int, body: bytes, what: str) -> KubeError:
    reason, message = "", body.decode("utf-8", "replace")[:500]
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            reason, message = str(doc.get("reason", "")), str(doc.get("message", message))
    except ValueError:
        pass
    text = f"{what}: HTTP {status} {reason}: {message}".strip()
    cls: type[KubeError] = KubeError
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status == 410:
        cls = Gone
    elif status == 422:
        cls = Invalid
    elif status == 429 or status >= 500:
        cls = Unavailable
    return cls(text, status, reason)


# ------------------------------------------------------------------------------------------ resources
@dataclass(frozen=True)
class Resource:
    """Where objects of one kind live in the REST API."""

    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The collection path (all namespaces when ``namespace`` is None), or an object's path."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
        elif self.namespaced and name:
            raise KubeError(f"{self.kind} {name!r}: a namespace is required for a namespaced resource")
        base += f"/{self.plural}"
        if name:
            base += f"/{urllib.parse.quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", True, "Pod")
SECRETS = Resource("", "v1", "secrets", True, "Secret")
NODES = Resource("", "v1", "nodes", False, "Node")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
CORE_EVENTS = Resource("", "v1", "events", True, "Event")
EVENTS = Resource("events.k8s.io", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
BATCH_JOBS = Resource("batch", "v1", "jobs", True, "Job")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False,
                             "MutatingWebhookConfiguration")
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", True, "PodGroup")
VOLCANO_JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", True, "Job")
VOLCANO_QUEUES = Resource("scheduling.volcano.sh", "v1beta1", "queues", False, "Queue")
HYPERNODES = Resource("topology.volcano.sh", "v1alpha1", "hypernodes", False, "HyperNode")
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", True, "Workload")
ADMISSION_CHECKS = Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", False, "AdmissionCheck")
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", False, "ClusterQueue")
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", True, "LocalQueue")
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", False, "ResourceFlavor")
CLAIMS = Resource(api.GROUP, api.VERSION, api.CLAIMS, True, "STBandwidthClaim")
CAPACITIES = Resource(api.GROUP, api.VERSION, api.CAPACITIES, False, "STBandwidthCapacity")
QUEUE_POLICIES = Resource(api.GROUP, api.VERSION, api.QUEUE_POLICIES, False, "QueuePolicy")


def now_rfc3339() -> str:
    """The current time as a Kubernetes ``Time`` (seconds, UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """The current time as a Kubernetes ``MicroTime`` (leases, events.k8s.io)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> float | None:
    """Unix seconds of a Kubernetes ``Time`` / ``MicroTime`` string (None when absent or malformed)."""
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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

    def patch_status(self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any], *,
                     resource_version: str | None = None) -> JSON:
        """Merge-patch the status subresource."""
        return self.patch(resource, namespace, name, dict(patch), subresource="status",
                          resource_version=resource_version)

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
        meta = regarding.get("metadata") or {}
        ref = {
            "apiVersion": regarding.get("apiVersion", ""),
            "kind": regarding.get("kind", ""),
            "name": meta.get("name", regarding.get("name", "")),
            "namespace": meta.get("namespace", regarding.get("namespace", "")),
            "uid": meta.get("uid", regarding.get("uid", "")),
        }
        namespace = ref["namespace"] or "default"
        event = {
            "metadata": {"name": f"{ref['name'][:200]}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "eventTime": now_micro(),
            "reportingController": controller,
            "reportingInstance": instance[:128],
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": type_,
            "regarding": {k: v for k, v in ref.items() if v},
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
        except (k8s_config.ConfigException, OSError, ValueError, TypeError) as exc:
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


# ------------------------------------------------------------------------------------------- informer
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


# ------------------------------------------------------------------------------------------ webhooks
def patch_webhook_ca_bundle(kube: Kube, name: str, ca_bundle_pem: bytes, *, attempts: int = 5) -> None:
    """Set ``clientConfig.caBundle`` of every webhook of the MutatingWebhookConfiguration ``name``."""
    bundle = base64.b64encode(ca_bundle_pem).decode("ascii")
    for attempt in range(attempts):
        obj = kube.get(MUTATING_WEBHOOKS, None, name)
        if obj is None:
            raise NotFound(f"MutatingWebhookConfiguration {name!r} not found", 404, "NotFound")
        hooks = obj.get("webhooks") or []
        ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
               for i in range(len(hooks))]
        if not ops:
            return
        try:
            kube.patch(MUTATING_WEBHOOKS, None, name, ops, kind="json",
                       resource_version=obj["metadata"]["resourceVersion"])
            return
        except Conflict:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


# ------------------------------------------------------------------------------------------- secrets
def read_secret(kube: Kube, namespace: str, name: str) -> JSON | None:
    """The Secret ``namespace/name`` as the API returns it (``data`` values base64), None when absent."""
    return kube.get(SECRETS, namespace, name)


def write_secret(kube: Kube, namespace: str, name: str, data: Mapping[str, bytes], *, type_: str,
                 current: Mapping[str, Any] | None) -> JSON:
    """Create the Secret (``current`` None) or replace ``current``, setting the entries of ``data`` (raw bytes).

    Optimistic concurrency: a create fails with :class:`Conflict` when the Secret exists by then, a
    replace (guarded by ``current``'s resourceVersion) when it changed since it was read; read it
    again and decide again. A replace keeps the Secret's other entries, labels and annotations.
    """
    encoded = {key: base64.b64encode(value).decode("ascii") for key, value in data.items()}
    if current is None:
        return kube.create(SECRETS, {"metadata": {"name": name, "namespace": namespace}, "type": type_,
                                     "data": encoded}, namespace)
    metadata = dict(current.get("metadata") or {})
    if not metadata.get("resourceVersion"):
        raise KubeError(f"Secret {namespace}/{name}: the copy to replace has no resourceVersion")
    metadata.pop("managedFields", None)  # the server keeps its own; sending them back is pointless
    metadata.update(name=name, namespace=namespace)
    body = {"apiVersion": SECRETS.api_version, "kind": SECRETS.kind, "metadata": metadata, "type": type_,
            "data": {**(current.get("data") or {}), **encoded}}
    return kube.replace(SECRETS, body)
