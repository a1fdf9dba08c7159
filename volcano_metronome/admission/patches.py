"""JSONPatch (RFC 6902) operations that bring one part of an object to a wanted state, and no further.

Every helper compares what is there with what is wanted and emits nothing when they agree, so a
patch computed for an already-admitted object is empty (the webhook is idempotent by construction).
Missing parents are created in one ``add`` (``/metadata/annotations`` when an object has none), and
path segments are escaped as RFC 6901 requires (``~`` -> ``~0``, ``/`` -> ``~1``: every annotation
key we write contains a ``/``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from volcano_metronome.core.errors import InvalidInput

Op = dict[str, Any]
Path = tuple[str | int, ...]


@functools.lru_cache(maxsize=4096, typed=True)  # the same few keys and indexes in every review; str is immutable
def escape(segment: str | int) -> str:
    """One RFC 6901 reference token: ``~`` becomes ``~0`` and ``/`` becomes ``~1`` (in that order)."""
    text = str(segment)
    if "~" not in text and "/" not in text:
        return text
    return text.replace("~", "~0").replace("/", "~1")


def pointer(path: Path) -> str:
    """The JSON pointer of ``path`` (``()`` is the whole document, ``""``)."""
    return "/" + "/".join([escape(segment) for segment in path]) if path else ""


def describe(path: Path) -> str:
    """``path`` as a field name for error messages: ``spec.tasks[1].template``."""
    text = ""
    for segment in path:
        text += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if text else segment)
    return text


def mapping_at(doc: Any, path: Path) -> Mapping[str, Any] | None:
    """The mapping at ``path``, ``None`` when some part of the path is absent (or null).

    Raises :class:`InvalidInput` when something that is not a mapping (or list, for an int segment)
    sits where the path needs one: a patch through it could not apply.
    """
    # The common case (plain JSON dicts and lists, the path there) in a tight loop; anything else, and every
    # error, through the checked walk below. Called a dozen times per review.
    node = doc
    for segment in path:
        if type(node) is dict and type(segment) is str:
            node = node.get(segment)
            if node is None:
                return None
        elif type(node) is list and type(segment) is int and 0 <= segment < len(node):
            node = node[segment]
        else:
            return _checked_mapping_at(doc, path)
    return node if type(node) is dict else _checked_mapping_at(doc, path)


def _checked_mapping_at(doc: Any, path: Path) -> Mapping[str, Any] | None:
    node = doc
    for depth, segment in enumerate(path):
        if isinstance(segment, int):
            if not isinstance(node, list) or not 0 <= segment < len(node):
                raise InvalidInput(describe(path[:depth]) or "object", node, f"a list with an item {segment}")
            node = node[segment]
        else:
            if not isinstance(node, dict):
                raise InvalidInput(describe(path[:depth]) or "object", node, "a mapping")
            if node.get(segment) is None:
                return None
            node = node[segment]
    if not isinstance(node, dict):
        raise InvalidInput(describe(path) or "object", node, "a mapping")
    return node


def list_at(doc: Any, path: Path) -> list[Any] | None:
    """The list at ``path``, ``None`` when absent or null; :class:`InvalidInput` when it is something else."""
    parent = mapping_at(doc, path[:-1]) if path else None
    if parent is None:
        return None
    value = parent.get(str(path[-1]))
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidInput(describe(path), value, "a list")
    return value


def set_entries(doc: Any, path: Path, entries: Mapping[str, Any]) -> list[Op]:
    """Ops making the mapping at ``path`` hold ``entries`` (other keys kept), creating it and its parents if absent."""
    if not entries:
        return []
    target = mapping_at(doc, path)
    if target is None:
        return _create(doc, path, dict(entries))
    return [{"op": "add", "path": pointer((*path, key)), "value": value}
            for key, value in entries.items() if key not in target or target[key] != value]


def set_children(doc: Any, path: Path, children: Mapping[str, Mapping[str, Any]]) -> list[Op]:
    """:func:`set_entries` for several child mappings of the mapping at ``path`` (a template's ``metadata``:
    its ``labels`` and ``annotations``), creating that mapping in one ``add`` when absent.

    Calling :func:`set_entries` once per child would, when the parent is absent, emit one ``add`` of
    the parent per child, and each later ``add`` would replace the parent the earlier one created.
    """
    wanted = {child: dict(entries) for child, entries in children.items() if entries}
    if not wanted:
        return []
    if mapping_at(doc, path) is None:
        return _create(doc, path, wanted)
    ops: list[Op] = []
    for child, entries in wanted.items():
        ops += set_entries(doc, (*path, child), entries)
    return ops


def set_value(doc: Any, path: Path, value: Any) -> list[Op]:
    """Ops making the member at ``path`` equal ``value``, creating parents if absent."""
    return set_entries(doc, path[:-1], {str(path[-1]): value})


def ensure_in_list(doc: Any, path: Path, item: Any, same: Callable[[Any], bool]) -> list[Op]:
    """Ops making the list at ``path`` hold ``item``: the first entry for which ``same`` holds is replaced if it
    differs, else ``item`` is appended; a missing list is created as ``[item]``."""
    items = list_at(doc, path)
    if items is None:
        return _create(doc, path, [item])
    for index, existing in enumerate(items):
        if same(existing):
            return [] if existing == item else [{"op": "replace", "path": pointer((*path, index)), "value": item}]
    return [{"op": "add", "path": pointer((*path, "-")), "value": item}]


def ensure_all_in_list(doc: Any, path: Path, items: Sequence[Any], key: Callable[[Any], Any]) -> list[Op]:
    """:func:`ensure_in_list` for several items told apart by ``key`` (e.g. env vars by name), in one go."""
    existing = list_at(doc, path)
    if existing is None:
        return _create(doc, path, list(items)) if items else []
    ops: list[Op] = []
    for item in items:
        index = next((i for i, e in enumerate(existing) if _safe_key(key, e) == key(item)), None)
        if index is None:
            ops.append({"op": "add", "path": pointer((*path, "-")), "value": item})
        elif existing[index] != item:
            ops.append({"op": "replace", "path": pointer((*path, index)), "value": item})
    return ops


def _create(doc: Any, path: Path, value: Any) -> list[Op]:
    """One ``add`` at the deepest existing ancestor of ``path``, carrying the missing parents as nested mappings."""
    depth = len(path) - 1
    while depth > 0 and mapping_at_or_none(doc, path[:depth]) is None:
        depth -= 1
    for segment in reversed(path[depth + 1:]):
        value = {str(segment): value}
    return [{"op": "add", "path": pointer(path[:depth + 1]), "value": value}]


def mapping_at_or_none(doc: Any, path: Path) -> Mapping[str, Any] | None:
    """Like :func:`mapping_at` but ``None`` for anything that is not there as a mapping."""
    try:
        return mapping_at(doc, path)
    except InvalidInput:
        return None


def _safe_key(key: Callable[[Any], Any], item: Any) -> Any:
    try:
        return key(item)
    except (KeyError, TypeError, AttributeError):
        return None

