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
from volcano_metronome.shapes.profiles import parse_profile


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


def _or_empty(value: Any) -> Any:
    """A key present with no value (``watch:`` in YAML) means its defaults."""
    return {} if value is None else value
