"""What admitting one object produces, and the small readers every kind's admission shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.patches import Op, Path, mapping_at
from volcano_metronome.admission.resolve import Resolved


@dataclass(frozen=True)
class Outcome:
    """The JSONPatch ops for an allowed object, and warnings for whoever created it."""

    ops: tuple[Op, ...] = ()
    warnings: tuple[str, ...] = ()


UNMANAGED = Outcome()


def annotations_at(obj: Any, metadata_path: Path = ("metadata",)) -> Mapping[str, Any]:
    """The annotations of the metadata at ``metadata_path`` (empty when absent)."""
    return mapping_at(obj, (*metadata_path, "annotations")) or {}


def labels_at(obj: Any, metadata_path: Path = ("metadata",)) -> Mapping[str, Any]:
    """The labels of the metadata at ``metadata_path`` (empty when absent)."""
    return mapping_at(obj, (*metadata_path, "labels")) or {}


def profile_entries(resolved: Resolved, gang_size: int | None) -> dict[str, str]:
    """The annotations the webhook writes on a managed object."""
    entries = {api.PROFILE: resolved.json, api.PROFILE_SOURCE: resolved.source}
    if gang_size is not None:
        entries[api.GANG_SIZE] = str(gang_size)
    return entries


def created_by_controller(obj: Any) -> bool:
    """Whether the object has an owner (a controller made it): such objects are never denied."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    owners = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    return isinstance(owners, list) and len(owners) > 0


def string_or_none(value: Any) -> str | None:
    """``value`` if it is a non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None
