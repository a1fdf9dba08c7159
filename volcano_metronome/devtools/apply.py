"""A tiny server-side apply over HTTPS with urllib, for dev tooling that must not use the kubernetes client.

Only ``volcano_metronome.kube`` may import the kubernetes client, and dev tooling must not shell out to
``kubectl``; this module speaks just enough of the API: resource discovery, server-side apply
(``PATCH`` with ``application/apply-patch+yaml``, field manager ``volcano-metronome``), GET and
waiting for CRDs to be Established. Credentials come from a kubeconfig with client certificates
(the kind ``ControlPlane`` writes).
"""

from __future__ import annotations

import base64
import json
import pathlib
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml

from volcano_metronome.core.errors import MetronomeError

FIELD_MANAGER = "volcano-metronome"
# libyaml's loader, when PyYAML was built with it: Kueue's Workload CRD (1.4 MB of YAML) takes
# seconds with the pure-Python loader and a fraction of that with the C one.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ApiError(MetronomeError):
    """The API server refused a request, or could not be reached; carries its status and message."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Resource:
    """Where objects of one kind live in the REST API."""

    group_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        """The collection path, or the object path when ``name`` is given."""
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced:
            if not namespace:
                raise ApiError(f"{self.plural} are namespaced: metadata.namespace is required")
            base += f"/namespaces/{urllib.parse.quote(namespace)}"
        base += f"/{self.plural}"
        return base + (f"/{urllib.parse.quote(name)}" if name else "")


@dataclass
class ApiClient:
    """An HTTPS client for one API server, authenticated with a client certificate."""

    server: str
    ca_file: pathlib.Path
    cert_file: pathlib.Path
    key_file: pathlib.Path
    timeout: float = 30.0
    _discovery: dict[tuple[str, str], Resource] = field(default_factory=dict, repr=False)
    _context: ssl.SSLContext | None = field(default=None, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: pathlib.Path, *, context: str | None = None) -> ApiClient:
        """A client for the current (or named) context of a kubeconfig that uses client certificates.

        Embedded ``*-data`` fields are written to a private temporary directory, since Python's ssl
        only loads certificates from files.
        """
        try:
            config = yaml.safe_load(pathlib.Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ApiError(f"cannot read kubeconfig {path}: {exc}") from exc
        name = context or config.get("current-context")
        ctx = _named(config.get("contexts"), name, "context", path)
        cluster = _named(config.get("clusters"), ctx.get("cluster"), "cluster", path)
        user = _named(config.get("users"), ctx.get("user"), "user", path)
        secrets = pathlib.Path(tempfile.mkdtemp(prefix="metronome-apply-"))

        def material(section: Mapping[str, Any], key: str) -> pathlib.Path:
            if f"{key}-data" in section:
                target = secrets / key
                target.write_bytes(base64.b64decode(section[f"{key}-data"]))
                target.chmod(0o600)
                return target
            if key in section:
                return (pathlib.Path(path).parent / str(section[key])).resolve()
            raise ApiError(f"kubeconfig {path}: {key} (or {key}-data) is required for this client")

        client = cls(
            server=str(cluster["server"]).rstrip("/"),
            ca_file=material(cluster, "certificate-authority"),
            cert_file=material(user, "client-certificate"),
            key_file=material(user, "client-key"),
        )
        # The SSL context keeps what it loaded; the files may go with the client.
        weakref.finalize(client, shutil.rmtree, secrets, True)
        return client

    # ------------------------------------------------------------------ raw requests
    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send one request; returns the decoded JSON answer, raises :class:`ApiError` on >= 400."""
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl()) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(f"{method} {path}: {exc.code} {_status_message(exc.read())}", status=exc.code) from None
        except OSError as exc:
            raise ApiError(f"{method} {path}: cannot reach {self.server}: {exc}") from exc
        if not payload:
            return {}
        decoded = json.loads(payload)
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    def get(self, obj_or_kind: Mapping[str, Any]) -> dict[str, Any]:
        """Read back the object named by ``apiVersion``, ``kind``, ``metadata.name`` (and namespace)."""
        resource = self.resource(obj_or_kind["apiVersion"], obj_or_kind["kind"])
        meta = obj_or_kind.get("metadata", {})
        return self.request("GET", resource.path(meta.get("namespace"), meta["name"]))

    # ------------------------------------------------------------------ discovery and apply
    def resource(self, api_version: str, kind: str) -> Resource:
        """The REST resource of ``kind`` in ``api_version`` (discovery, cached; refreshed on a miss)."""
        key = (api_version, kind)
        if key not in self._discovery:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                listing = self.request("GET", path)
            except ApiError as exc:
                if exc.status == 404:
                    raise ApiError(f"the API server does not serve {api_version} (is its CRD installed?)", status=404) from None
                raise
            for entry in listing.get("resources", []):
                if "/" not in entry["name"]:  # skip subresources such as jobs/status
                    self._discovery[(api_version, entry["kind"])] = Resource(
                        api_version, entry["name"], bool(entry["namespaced"])
                    )
        if key not in self._discovery:
            raise ApiError(f"the API server serves no kind {kind} in {api_version}", status=404)
        return self._discovery[key]

    def apply(self, obj: Mapping[str, Any], *, subresource: str | None = None, force: bool = True) -> dict[str, Any]:
        """Server-side apply ``obj``; returns the object as stored. ``force`` takes over conflicting fields."""
        for required in ("apiVersion", "kind"):
            if not obj.get(required):
                raise ApiError(f"cannot apply an object without {required}: {_short(obj)}")
        meta = obj.get("metadata") or {}
        if not meta.get("name"):
            raise ApiError(f"cannot apply an object without metadata.name: {_short(obj)}")
        resource = self.resource(str(obj["apiVersion"]), str(obj["kind"]))
        path = resource.path(meta.get("namespace"), meta["name"])
        if subresource:
            path += f"/{subresource}"
        query = {"fieldManager": FIELD_MANAGER}
        if force:
            query["force"] = "true"
        # JSON is YAML, and it keeps what the caller wrote exactly.
        body = json.dumps(obj).encode()
        return self.request("PATCH", path, body=body, content_type="application/apply-patch+yaml", query=query)

    def apply_file(self, path: pathlib.Path, *, namespace: str | None = None) -> list[dict[str, Any]]:
        """Apply every document of a YAML file (``List`` kinds are expanded); returns what was stored."""
        return [self.apply(obj) for obj in load_manifests(path, namespace=namespace)]

    def wait_established(self, crd_names: Iterable[str], *, timeout: float = 60.0) -> None:
        """Wait until every named CRD reports the condition Established=True."""
        pending = set(crd_names)
        deadline = time.monotonic() + timeout
        while pending:
            for name in sorted(pending):
                crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    pending.discard(name)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise ApiError(f"CRDs not Established after {timeout:.0f}s: {', '.join(sorted(pending))}")
            time.sleep(0.2)
        # New kinds only appear in discovery once established; forget what we cached before.
        self._discovery.clear()

    def install_crds(self, paths: Iterable[pathlib.Path], *, timeout: float = 60.0) -> list[str]:
        """Apply the CRDs in ``paths`` and wait until all are Established; returns their names."""
        names: list[str] = []
        for path in paths:
            for obj in load_manifests(path):
                if obj.get("kind") != "CustomResourceDefinition":
                    raise ApiError(f"{path}: expected only CustomResourceDefinitions, found {obj.get('kind')}")
                names.append(self.apply(obj)["metadata"]["name"])
        self.wait_established(names, timeout=timeout)
        return names

    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            context = ssl.create_default_context(cafile=str(self.ca_file))
            context.load_cert_chain(self.cert_file, self.key_file)
            self._context = context
        return self._context


def load_manifests(path: pathlib.Path, *, namespace: str | None = None) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML file, ``List`` items expanded, empty documents skipped.

    ``namespace`` fills ``metadata.namespace`` where it is missing (harmless on cluster-scoped
    kinds only if the caller knows the file; it is applied as given).
    """
    try:
        documents = list(yaml.load_all(pathlib.Path(path).read_text(), Loader=_LOADER))
    except (OSError, yaml.YAMLError) as exc:
        raise ApiError(f"cannot read manifests from {path}: {exc}") from exc
    objects: list[dict[str, Any]] = []
    for doc in documents:
        if not doc:
            continue
        if not isinstance(doc, dict):
            raise ApiError(f"{path}: expected mappings, found {type(doc).__name__}")
        items = doc.get("items", []) if str(doc.get("kind", "")).endswith("List") else [doc]
        for item in items:
            if namespace and not item.get("metadata", {}).get("namespace"):
                item.setdefault("metadata", {})["namespace"] = namespace
            objects.append(item)
    return objects


def _named(entries: Any, name: Any, what: str, path: pathlib.Path) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            value = entry.get(what)
            if isinstance(value, dict):
                return value
    raise ApiError(f"kubeconfig {path}: no {what} named {name!r}")


def _status_message(payload: bytes) -> str:
    try:
        status = json.loads(payload)
    except ValueError:
        return payload.decode(errors="replace")[:500]
    if isinstance(status, dict) and "message" in status:
        return f"{status.get('reason', '')}: {status['message']}"
    return payload.decode(errors="replace")[:500]


def _short(obj: Mapping[str, Any]) -> str:
    text = json.dumps(obj)
    return text if len(text) < 200 else text[:197] + "..."
