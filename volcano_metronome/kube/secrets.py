"""Secrets and webhook CA bundles: the writes the certificate commands make through :class:`Kube`."""

from __future__ import annotations

import base64
import time
from typing import Any, Mapping

from volcano_metronome.kube.client import Kube
from volcano_metronome.shapes import JSON
from volcano_metronome.shapes.apierrors import Conflict, KubeError, NotFound
from volcano_metronome.shapes.resources import MUTATING_WEBHOOKS, SECRETS


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
