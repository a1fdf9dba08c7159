"""The one profile parser: a profile as the CRDs, the webhook's settings and the annotations write it. PURE.

Every path that reads a profile (the webhook reading a claim or its default profiles, the controller
reading a claim or a QueuePolicy's ``defaultProfile``) goes through :func:`parse_profile` or
:func:`profile_from_spec`, so the same bad profile gets the same message, naming the same field
(camelCase, as written) and value. Keys are camelCase and strict: an unknown key is an error naming
it (the CRDs' structural schemas prune unknown keys before the controller sees them).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from volcano_metronome.catalog import Catalog
from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile
from volcano_metronome.shapes import JSON

# camelCase keys of a profile in a settings file or a custom resource, and the names core.profile uses.
_CAMEL = {"periodMs": "period_ms", "windows": "windows", "jitterMs": "jitter_ms", "collective": "collective"}
_CAMEL_WINDOW = {"startMs": "start_ms", "lenMs": "len_ms", "gbps": "gbps"}


def parse_profile(data: Any, where: str, catalog: Catalog, line_rate_gbps: float) -> Profile:
    """A profile written as ``{model: NAME [, jitterMs]}`` or ``{periodMs, windows: [{startMs, lenMs, gbps}], jitterMs, collective}``."""
    if isinstance(data, dict) and "model" in data:
        entries = fields.mapping(data, where, {"model", "jitterMs"})
        name = entries["model"]
        entry = catalog.get(name, field=f"{where}.model")
        try:
            profile = entry.profile(line_rate_gbps)
        except InvalidInput as exc:  # the entry is valid at its own rate; at this line rate it may not be
            raise InvalidInput(f"{where}.model", name, f"a model whose profile at lineRateGbps {line_rate_gbps:g} is "
                                                       f"valid; there its {exc}") from None
        if "jitterMs" in entries:
            jitter = fields.number(entries["jitterMs"], f"{where}.jitterMs")
            try:
                profile = dataclasses.replace(profile, jitter_ms=jitter)  # keeps the model's collective
            except InvalidInput as exc:
                raise InvalidInput(f"{where}.jitterMs", jitter, exc.expected) from None
        return profile
    return profile_from_spec(data, where)


def profile_from_spec(data: Any, where: str, extra_keys: frozenset[str] = frozenset()) -> Profile:
    """A profile in camelCase form ``{periodMs, windows: [{startMs, lenMs, gbps}], jitterMs, collective}``; ``extra_keys``
    (e.g. other fields of a claim's spec) are allowed and ignored."""
    entries = fields.mapping(data, where, set(_CAMEL) | extra_keys)
    raw_windows = entries.get("windows")
    if not isinstance(raw_windows, list) or not raw_windows:
        raise InvalidInput(f"{where}.windows", raw_windows, "a non-empty list of {startMs, lenMs, gbps}")
    windows = []
    for i, window in enumerate(raw_windows):
        at = f"{where}.windows[{i}]"
        parts = fields.mapping(window, at, set(_CAMEL_WINDOW))
        windows.append({_CAMEL_WINDOW[k]: fields.number(v, f"{at}.{k}") for k, v in parts.items()})
    snake = {"period_ms": fields.number(entries.get("periodMs"), f"{where}.periodMs"), "windows": windows}
    if "jitterMs" in entries:
        snake["jitter_ms"] = fields.number(entries["jitterMs"], f"{where}.jitterMs")
    if "collective" in entries:
        snake["collective"] = entries["collective"]  # Profile.from_mapping names a bad one: {where}.collective
    try:
        return Profile.from_mapping(snake, field=where)
    except InvalidInput as exc:
        raise InvalidInput(_camel_field(exc.field, where), exc.value, _camel_field(exc.expected, where)) from None


def profile_to_spec(profile: Profile) -> JSON:
    """A profile in the CRDs' camelCase form (``collective`` only when not the default ring, as ``to_dict``)."""
    d = profile.to_dict()
    return {"periodMs": d["period_ms"],
            "windows": [{"startMs": w["start_ms"], "lenMs": w["len_ms"], "gbps": w["gbps"]} for w in d["windows"]],
            "jitterMs": d["jitter_ms"]} | ({"collective": d["collective"]} if "collective" in d else {})


def profile_from_annotation(text: str, where: str) -> Profile:
    """The webhook's ``metronome.dev/profile`` annotation (compact JSON of ``Profile.to_dict()``, snake_case)."""
    try:
        data = json.loads(text)
    except ValueError:
        raise InvalidInput(where, text, "compact JSON of a profile {period_ms, windows, jitter_ms}") from None
    return Profile.from_mapping(data, where)


def _camel_field(name: str, where: str) -> str:
    """Rename core.profile's snake_case field names to the camelCase keys of the input."""
    if name.startswith("profile."):  # core.profile.validate names fields without the caller's prefix
        name = where + name[len("profile"):]
    for snake, camel in (("period_ms", "periodMs"), ("jitter_ms", "jitterMs"), ("start_ms", "startMs"),
                         ("len_ms", "lenMs")):
        name = name.replace(snake, camel)
    return name
