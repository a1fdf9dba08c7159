"""The webhook's settings: the parsed form of its ``--config`` file (camelCase keys, as in Kubernetes configs).

Parsing is strict (an unknown key is an error naming it) because the Helm chart passes the file
through from its values unchanged: a typo must fail the rollout, not be ignored. Default profiles
are resolved to :class:`Profile` values here, once, so a request never parses them again.
Every key and its default is documented in ``docs/webhook.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from volcano_metronome.catalog import Catalog, builtin
from volcano_metronome.core import fields, limits
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.limits import MAX_GBPS
from volcano_metronome.core.profile import Profile

# camelCase keys of a profile in a settings file or a claim, and the names core.profile uses.
_CAMEL = {"periodMs": "period_ms", "windows": "windows", "jitterMs": "jitter_ms"}
_CAMEL_WINDOW = {"startMs": "start_ms", "lenMs": "len_ms", "gbps": "gbps"}


@dataclass(frozen=True)
class TierLimit:
    """Set Volcano ``networkTopology.highestTierAllowed`` on gangs whose burst demand exceeds a threshold."""

    enabled: bool = False
    threshold_gbps: float = 100.0
    highest_tier_allowed: int = 1


@dataclass(frozen=True)
class Watch:
    """Which watch-fed caches the server keeps (the request path never calls the API)."""

    pod_groups: bool = True
    claims: bool = True


@dataclass(frozen=True)
class Settings:
    """Everything the admission logic is configured with."""

    line_rate_gbps: float = 100.0
    # The controller's hyperperiod cap (the chart passes the controller's maxHyperperiodMs): a longer
    # period could never be placed, so it is refused at admission.
    max_hyperperiod_ms: float = limits.DEFAULT_MAX_HYPERPERIOD_MS
    namespace_defaults: Mapping[str, Profile] = field(default_factory=dict)
    queue_defaults: Mapping[str, Profile] = field(default_factory=dict)
    tier_limit: TierLimit = TierLimit()
    watch: Watch = Watch()


def parse_settings(data: Any, catalog: Catalog | None = None) -> Settings:
    """Settings from the mapping a YAML file holds (``None`` or ``{}`` gives the defaults)."""
    catalog = catalog or builtin()
    if data is None:
        data = {}
    top = fields.mapping(data, "", {"lineRateGbps", "maxHyperperiodMs", "namespaceDefaults", "queueDefaults",
                                    "tierLimit", "watch"})
    line_rate = fields.number(top.get("lineRateGbps", 100.0), "lineRateGbps")
    if not 0.0 < line_rate <= MAX_GBPS:
        raise InvalidInput("lineRateGbps", line_rate, f"a NIC line rate in Gbps in (0, {MAX_GBPS:g}]")
    cap = limits.check_cap(fields.number(top.get("maxHyperperiodMs", limits.DEFAULT_MAX_HYPERPERIOD_MS),
                                         "maxHyperperiodMs"))
    defaults = {}
    for key in ("namespaceDefaults", "queueDefaults"):
        entries = fields.mapping(_or_empty(top.get(key)), key, None)
        for name, value in entries.items():
            if not isinstance(name, str) or not name:
                raise InvalidInput(key, name, "names (strings) as keys")
        defaults[key] = {name: parse_profile(value, f"{key}.{name}", catalog, line_rate) for name, value in entries.items()}
        for name, profile in defaults[key].items():
            limits.check_placeable(profile, cap, f"{key}.{name}.periodMs")
    tier = fields.mapping(_or_empty(top.get("tierLimit")), "tierLimit", {"enabled", "thresholdGbps", "highestTierAllowed"})
    threshold = fields.number(tier.get("thresholdGbps", 100.0), "tierLimit.thresholdGbps")
    if threshold < 0:
        raise InvalidInput("tierLimit.thresholdGbps", threshold, "a rate in Gbps >= 0")
    watch = fields.mapping(_or_empty(top.get("watch")), "watch", {"podGroups", "claims"})
    return Settings(
        line_rate_gbps=line_rate,
        max_hyperperiod_ms=cap,
        namespace_defaults=defaults["namespaceDefaults"],
        queue_defaults=defaults["queueDefaults"],
        tier_limit=TierLimit(
            enabled=fields.boolean(tier.get("enabled", False), "tierLimit.enabled"),
            threshold_gbps=threshold,
            highest_tier_allowed=fields.integer(tier.get("highestTierAllowed", 1), "tierLimit.highestTierAllowed", 0, 2**31 - 1),
        ),
        watch=Watch(pod_groups=fields.boolean(watch.get("podGroups", True), "watch.podGroups"),
                    claims=fields.boolean(watch.get("claims", True), "watch.claims")),
    )


def parse_profile(data: Any, where: str, catalog: Catalog, line_rate_gbps: float) -> Profile:
    """A profile written as ``{model: NAME [, jitterMs]}`` or ``{periodMs, windows: [{startMs, lenMs, gbps}], jitterMs}``."""
    if isinstance(data, dict) and "model" in data:
        entries = fields.mapping(data, where, {"model", "jitterMs"})
        name = entries["model"]
        profile = catalog.get(name, field=f"{where}.model").profile(line_rate_gbps)
        if "jitterMs" in entries:
            jitter = fields.number(entries["jitterMs"], f"{where}.jitterMs")
            try:
                profile = Profile(profile.period_ms, profile.windows, jitter)
            except InvalidInput as exc:
                raise InvalidInput(f"{where}.jitterMs", jitter, exc.expected) from None
        return profile
    return profile_from_camel(data, where)


def profile_from_camel(data: Any, where: str, extra_keys: frozenset[str] = frozenset()) -> Profile:
    """A profile in camelCase form ``{periodMs, windows: [{startMs, lenMs, gbps}], jitterMs}``; ``extra_keys``
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
    try:
        return Profile.from_mapping(snake, field=where)
    except InvalidInput as exc:
        raise InvalidInput(_camel_field(exc.field, where), exc.value, _camel_field(exc.expected, where)) from None


def _camel_field(name: str, where: str) -> str:
    """Rename core.profile's snake_case field names to the camelCase keys of the input."""
    if name.startswith("profile."):  # core.profile.validate names fields without the caller's prefix
        name = where + name[len("profile"):]
    for snake, camel in (("period_ms", "periodMs"), ("jitter_ms", "jitterMs"), ("start_ms", "startMs"),
                         ("len_ms", "lenMs")):
        name = name.replace(snake, camel)
    return name


def _or_empty(value: Any) -> Any:
    """A key present with no value (``watch:`` in YAML) means its defaults."""
    return {} if value is None else value
