"""Which bandwidth profile an object gets, and where it came from.

Order (the first that applies wins):

1. user profile annotations (``metronome.dev/model``, ``period-ms`` + ``windows`` or ``duty-cycle`` +
   ``gbps``, ``claim``) on the object, else on its pod templates in order; a named STBandwidthClaim
   is read from the watch-fed cache (never from the API on the request path);
2. a profile the webhook already resolved (``metronome.dev/profile``, e.g. inherited by a PodGroup
   from its Volcano Job or by a Workload from its Job's pod template), with its recorded source;
3. the settings' default for the object's queue (Volcano queue or Kueue LocalQueue), then for its
   namespace;
4. otherwise the object is not managed.

A profile the controller could never place (a period beyond its hyperperiod cap, ``core.limits``)
is an error naming where it came from, whichever of these found it.

When several places carry user annotations they must agree: one gang has one profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.annotations import (
    ClaimRef,
    Explicit,
    has_user_keys,
    profile_json,
    read_request,
    read_resolved,
)
from volcano_metronome.admission.settings import Settings
from volcano_metronome.shapes.profiles import profile_from_spec
from volcano_metronome.catalog import Catalog, builtin
from volcano_metronome.core import limits
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile

#: ``(namespace, name) -> object or None``: a read-only view of one watch-fed cache.
Lookup = Callable[[str, str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Lookups:
    """The caches the admission logic may consult; ``None`` means that cache is not kept."""

    pod_group: Lookup | None = None
    claim: Lookup | None = None


@dataclass(frozen=True)
class Context:
    """Everything a decision depends on besides the request itself."""

    settings: Settings = field(default_factory=Settings)
    catalog: Catalog = field(default_factory=builtin)
    lookups: Lookups = Lookups()


@dataclass(frozen=True)
class Resolved:
    """A profile and where it came from (one of ``api.PROFILE_SOURCES``)."""

    profile: Profile
    source: str

    @property
    def json(self) -> str:
        """The value of ``metronome.dev/profile``."""
        return profile_json(self.profile)


@dataclass(frozen=True)
class Place:
    """Annotations that may carry a profile: ``where`` is empty for the object itself, else e.g. ``spec.template``."""

    where: str
    annotations: Mapping[str, Any]


def resolve(places: Sequence[Place], *, namespace: str, queue: str | None, ctx: Context,
            defaults: bool = True) -> Resolved | None:
    """The profile of the object whose annotation ``places`` are given, ``None`` when it is not managed."""
    with_keys = [place for place in places if has_user_keys(place.annotations)]
    if with_keys:
        first = with_keys[0]
        chosen = _from_request(first, namespace, ctx)
        for other in with_keys[1:]:
            theirs = _from_request(other, namespace, ctx)
            if theirs.profile != chosen.profile:
                raise InvalidInput(f"{other.where}: profile annotations", theirs.json,
                                   f"the same profile as {first.where or 'the object'}, {chosen.json} (one gang, one profile)")
        return _placeable(chosen, _period_field(first, namespace), ctx.settings)
    for place in places:
        resolved = read_resolved(place.annotations, place.where)
        if resolved is not None:
            at = f"{place.where}: {api.PROFILE}" if place.where else api.PROFILE
            return _placeable(Resolved(resolved.profile, resolved.source), f"{at} period_ms", ctx.settings)
    if defaults:
        found = default_for(namespace, queue, ctx.settings)
        return None if found is None else _placeable(found, f"default profile of {namespace}", ctx.settings)
    return None


def _placeable(resolved: Resolved, field: str, settings: Settings) -> Resolved:
    limits.check_placeable(resolved.profile, settings.max_hyperperiod_ms, field)
    return resolved


def _period_field(place: Place, namespace: str) -> str:
    """Where the period of a user's profile was written: the annotation, or the model or claim it names."""
    at = f"{place.where}: " if place.where else ""
    if api.PERIOD_MS in place.annotations:
        return at + api.PERIOD_MS
    if api.MODEL in place.annotations:
        return f"{at}{api.MODEL} {place.annotations[api.MODEL]!r} period"
    return f"{at}{api.CLAIM}: STBandwidthClaim {namespace}/{place.annotations.get(api.CLAIM)} spec.profile.periodMs"


def default_for(namespace: str, queue: str | None, settings: Settings) -> Resolved | None:
    """The settings' default profile for ``queue``, else for ``namespace``."""
    if queue is not None and queue in settings.queue_defaults:
        return Resolved(settings.queue_defaults[queue], "default")
    if namespace in settings.namespace_defaults:
        return Resolved(settings.namespace_defaults[namespace], "default")
    return None


def _from_request(place: Place, namespace: str, ctx: Context) -> Resolved:
    request = read_request(place.annotations, ctx.catalog, ctx.settings.line_rate_gbps, place.where)
    if isinstance(request, Explicit):
        return Resolved(request.profile, request.source)
    assert isinstance(request, ClaimRef)  # has_user_keys held, so read_request returned something
    at = f"{place.where}: {api.CLAIM}" if place.where else api.CLAIM
    return Resolved(claim_profile(request.name, namespace, ctx.lookups.claim, at), "claim")


def claim_profile(name: str, namespace: str, lookup: Lookup | None, at: str) -> Profile:
    """The profile of STBandwidthClaim ``namespace/name``: its ``spec.profile`` ``{periodMs, windows, jitterMs}``."""
    if lookup is None:
        raise InvalidInput(at, name, "no claim: this webhook does not watch STBandwidthClaims (settings watch.claims "
                                     "is false); set the profile with annotations instead")
    claim = lookup(namespace, name)
    if claim is None:
        raise InvalidInput(at, name, f"the name of an existing STBandwidthClaim in namespace {namespace!r} "
                                     "(create the claim first)")
    spec = claim.get("spec") if isinstance(claim, dict) else None
    profile = spec.get("profile") if isinstance(spec, dict) else None
    return profile_from_spec(profile, f"STBandwidthClaim {namespace}/{name} spec.profile")
