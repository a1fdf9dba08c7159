"""Reading the ``metronome.dev/*`` profile annotations a user sets, and the resolved profile the webhook wrote.

Annotation values are strings; every error names the annotation key, the value and the form expected
(the key is prefixed with where it sits, e.g. ``spec.tasks[1].template``, when it is not on the
object itself). Profiles are built only through :mod:`volcano_metronome.core.profile`, so the
webhook accepts exactly what the scheduling core accepts.
"""

from __future__ import annotations

import dataclasses

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_metronome import api
from volcano_metronome.catalog import Catalog
from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import COLLECTIVES, RING, Profile

# A Kubernetes object name (DNS-1123 subdomain): what an STBandwidthClaim may be called.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
WINDOWS_FORM = 'a JSON list of {"start_ms", "len_ms", "gbps"}, e.g. [{"start_ms": 176, "len_ms": 24, "gbps": 80}]'
PROFILE_FORM = 'compact JSON {"period_ms", "windows": [{"start_ms", "len_ms", "gbps"}], "jitter_ms"}'


@dataclass(frozen=True)
class Explicit:
    """A profile given in full by annotations: ``source`` is ``annotation`` or ``catalog``."""

    profile: Profile
    source: str


@dataclass(frozen=True)
class ClaimRef:
    """A profile to be read from the named STBandwidthClaim."""

    name: str


ProfileRequest = Explicit | ClaimRef


def has_user_keys(annotations: Mapping[str, Any]) -> bool:
    """Whether any user profile annotation is present."""
    return any(key in annotations for key in api.USER_PROFILE_KEYS)


def read_request(annotations: Mapping[str, Any], catalog: Catalog, line_rate_gbps: float,
                 where: str = "") -> ProfileRequest | None:
    """The profile the user annotations ask for, ``None`` when there are none.

    Accepted combinations (anything else is an error naming the first key that does not fit):
    ``model`` [+ ``jitter-ms``]; ``period-ms`` + ``windows`` [+ ``jitter-ms``] [+ ``collective``];
    ``period-ms`` + ``duty-cycle`` + ``gbps`` [+ ``jitter-ms``] [+ ``collective``]; ``claim`` alone.
    """
    present = {key: annotations[key] for key in api.USER_PROFILE_KEYS if key in annotations}
    if not present:
        return None
    at = f"{where}: " if where else ""
    for key, value in present.items():
        if not isinstance(value, str):
            raise InvalidInput(at + key, value, "a string (annotation values are strings)")
    if api.CLAIM in present:
        _only(present, {api.CLAIM}, at, "alone: the STBandwidthClaim carries the whole profile")
        name = present[api.CLAIM]
        if not _NAME.fullmatch(name):
            raise InvalidInput(at + api.CLAIM, name, "the name of an STBandwidthClaim (a DNS-1123 subdomain)")
        return ClaimRef(name)
    jitter = _number(present, api.JITTER_MS, at, "a number of milliseconds >= 0 such as \"2\"") \
        if api.JITTER_MS in present else None
    if api.MODEL in present:
        _only(present, {api.MODEL, api.JITTER_MS}, at, f"absent when {api.MODEL} is set")
        try:
            entry = catalog.get(present[api.MODEL].strip(), field=at + api.MODEL)
            profile = entry.profile(line_rate_gbps)
            if jitter is not None:
                profile = dataclasses.replace(profile, jitter_ms=jitter)  # keeps the model's collective
        except InvalidInput as exc:
            raise _renamed(exc, at, _MODEL_FORM_FIELDS, present) from None
        return Explicit(profile, "catalog")
    if api.PERIOD_MS not in present:
        first = next(iter(present))
        raise InvalidInput(at + first, present[first], f"to come with {api.PERIOD_MS}")
    period = _number(present, api.PERIOD_MS, at, "a number of milliseconds > 0 such as \"200\"")
    jitter_ms = 0.0 if jitter is None else jitter
    collective = present.get(api.COLLECTIVE, RING).strip()
    if collective not in COLLECTIVES:
        raise InvalidInput(at + api.COLLECTIVE, present[api.COLLECTIVE], f"one of {', '.join(COLLECTIVES)}")
    if api.WINDOWS in present:
        _only(present, {api.PERIOD_MS, api.WINDOWS, api.JITTER_MS, api.COLLECTIVE}, at,
              f"absent when {api.WINDOWS} is set")
        windows = _json(present[api.WINDOWS], at + api.WINDOWS, WINDOWS_FORM)
        if not isinstance(windows, list):
            raise InvalidInput(at + api.WINDOWS, present[api.WINDOWS], WINDOWS_FORM)
        try:
            return Explicit(Profile.from_mapping({"period_ms": period, "windows": windows, "jitter_ms": jitter_ms,
                                                  "collective": collective}), "annotation")
        except InvalidInput as exc:
            raise _renamed(exc, at, _WINDOWS_FORM_FIELDS, present) from None
    if api.DUTY_CYCLE in present:
        _only(present, {api.PERIOD_MS, api.DUTY_CYCLE, api.GBPS, api.JITTER_MS, api.COLLECTIVE}, at,
              f"absent when {api.DUTY_CYCLE} is set")
        duty = _number(present, api.DUTY_CYCLE, at, "a fraction of the period in (0, 1] such as \"0.12\"")
        if api.GBPS not in present:
            raise InvalidInput(at + api.GBPS, None, f"a rate in Gbps such as \"80\" along with {api.DUTY_CYCLE}")
        gbps = _number(present, api.GBPS, at, "a rate in Gbps such as \"80\"")
        try:
            profile = Profile.from_duty_cycle(period, duty, gbps, jitter_ms)
            return Explicit(dataclasses.replace(profile, collective=collective), "annotation")
        except InvalidInput as exc:
            raise _renamed(exc, at, _DUTY_FORM_FIELDS, present) from None
    if api.GBPS in present:
        raise InvalidInput(at + api.GBPS, present[api.GBPS], f"to come with {api.DUTY_CYCLE}")
    raise InvalidInput(at + api.PERIOD_MS, present[api.PERIOD_MS],
                       f"to come with {api.WINDOWS}, or with {api.DUTY_CYCLE} and {api.GBPS}")


def read_resolved(annotations: Mapping[str, Any], where: str = "") -> Explicit | None:
    """The profile the webhook already wrote (``metronome.dev/profile`` and its source), ``None`` when absent."""
    raw = annotations.get(api.PROFILE)
    if raw is None:
        return None
    at = f"{where}: " if where else ""
    if not isinstance(raw, str):
        raise InvalidInput(at + api.PROFILE, raw, PROFILE_FORM)
    profile = _cached_profile(raw, at + api.PROFILE) if len(raw) <= _CACHED_TEXT else _profile(raw, at + api.PROFILE)
    source = annotations.get(api.PROFILE_SOURCE)
    return Explicit(profile, source if source in api.PROFILE_SOURCES else "annotation")


@functools.lru_cache(maxsize=256)
def profile_json(profile: Profile) -> str:
    """The value of ``metronome.dev/profile``: compact JSON of ``Profile.to_dict()``."""
    return json.dumps(profile.to_dict(), separators=(",", ":"))


def _profile(text: str, field: str) -> Profile:
    return Profile.from_mapping(_json(text, field, PROFILE_FORM), field=field)


# Every pod of a gang carries the same profile text: parse it once (values only; errors are not cached).
_CACHED_TEXT = 4096
_cached_profile = functools.lru_cache(maxsize=256)(_profile)


def _only(present: Mapping[str, str], allowed: set[str], at: str, expected: str) -> None:
    for key, value in present.items():
        if key not in allowed:
            raise InvalidInput(at + key, value, expected)


def _number(present: Mapping[str, str], key: str, at: str, expected: str) -> float:
    text = present[key].strip(" \t\n\r")
    if not fields.DECIMAL.fullmatch(text):
        raise InvalidInput(at + key, present[key], expected)
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidInput(at + key, present[key], expected)
    return value


class _Twice(ValueError):
    """A JSON object with a key given twice (``json`` keeps the last silently)."""


def _json(text: str, field: str, expected: str) -> Any:
    """Parse JSON whose integers become floats (no unbounded int parsing), with no NaN/Infinity and no key twice."""
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise _Twice(twice)
        return dict(pairs)

    try:
        return json.loads(text, parse_int=float, parse_constant=refuse, object_pairs_hook=unique)
    except _Twice as exc:
        raise InvalidInput(field, text, f"{expected}, each key once (here {exc.args[0]!r} is given twice)") from None
    except (ValueError, RecursionError):
        raise InvalidInput(field, text, expected) from None


# Field names core.profile uses, and the annotation each came from, per form.
_WINDOWS_FORM_FIELDS = (("profile.period_ms", api.PERIOD_MS), ("profile.jitter_ms", api.JITTER_MS),
                        ("profile.windows", api.WINDOWS))
_DUTY_FORM_FIELDS = (("profile.period_ms", api.PERIOD_MS), ("profile.jitter_ms", api.JITTER_MS),
                     ("profile.duty_cycle", api.DUTY_CYCLE), ("profile.windows", api.GBPS))
_MODEL_FORM_FIELDS = (("profile.jitter_ms", api.JITTER_MS),)


def _renamed(exc: InvalidInput, at: str, sources: tuple[tuple[str, str], ...],
             present: Mapping[str, str]) -> InvalidInput:
    """``exc`` with the core's field name replaced by the annotation key the value came from (and, for a
    single-number annotation, the value as the user wrote it)."""
    if at and exc.field.startswith(at):
        return exc
    for core_name, key in sources:
        if exc.field.startswith(core_name):
            if key == api.WINDOWS:
                return InvalidInput(at + key + exc.field[len(core_name):], exc.value, exc.expected)
            return InvalidInput(at + key, present.get(key, exc.value), exc.expected)
    return InvalidInput(at + exc.field, exc.value, exc.expected)
