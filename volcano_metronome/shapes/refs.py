"""References to objects: ``regarding`` of an Event, ``ownerReferences`` entries, claim names. PURE."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from volcano_metronome.shapes import JSON


def object_ref(obj: Mapping[str, Any]) -> JSON:
    """An ``ObjectReference`` to ``obj`` (an object dict, or already a reference); empty fields left out."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", obj.get("name", "")),
        "namespace": meta.get("namespace", obj.get("namespace", "")),
        "uid": meta.get("uid", obj.get("uid", "")),
    }
    return {k: v for k, v in ref.items() if v}


def claim_name(kind: str, name: str) -> str:
    """The name of the claim the controller creates for a gang: ``<kind>-<name>``, hashed if too long."""
    base = f"{kind.lower()}-{name}"
    if len(base) <= 253:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    return f"{base[:242]}-{digest}"
