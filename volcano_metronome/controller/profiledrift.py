"""Profile drift: a gang's measured profile (claim ``status.measuredProfile``) against its declared one.

Pure like ``reconcile`` (but :func:`record`, which logs and sets metrics): the cycle calls :func:`assess` on the observed world and gets back

* the world to plan with: under ``profilePolicy: adopt``, a drifted gang's profile is the measured
  one (recorded as ``status.adoptedProfile``), its claim's period snapped anew and its epoch moved to
  the first lattice epoch ``reconfigureLeadMs`` ahead, so this cycle's re-optimisation and pod
  annotations already use them;
* the QueuePolicies whose re-optimisation is due because a gang adopted (or dropped) a profile;
* the claim writes and Events, merged into the cycle's plan by :meth:`Assessment.amend`.

A measured profile has drifted when its period moved by more than ``profileTolerance.period`` (a
fraction of the declared period), its duty cycle by more than ``duty`` (absolute), or its peak rate
by more than ``rate`` (a fraction of the declared peak). The claim's condition ``ProfileDrift`` says
which (reason ``PeriodMoved``, ``DutyMoved``, ``RateMoved`` or a combination such as
``PeriodAndRateMoved``; ``AsDeclared`` once back within tolerance), written once per change, with a
Warning Event ``ProfileDrift``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from volcano_metronome.controller import objects, reconcile
from volcano_metronome.controller.metrics import Metrics
from volcano_metronome.controller.views import ClaimView, GangKey, GangView, World
from volcano_metronome.controller.writes import ClaimStatus, Event, GangWrites, Plan
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile
from volcano_metronome.shapes import JSON
from volcano_metronome.controller.epochs import epoch_at_or_after, relative_offset
from volcano_metronome.shapes.profiles import profile_from_spec, profile_to_spec

PROFILE_DRIFT = "ProfileDrift"
AS_DECLARED = "AsDeclared"
OBSERVE, ADOPT = "observe", "adopt"
#: Keys of status.measuredProfile about the measurement rather than the profile.
MEASUREMENT_KEYS = frozenset({"source", "node", "measuredAt", "confidence", "periods"})
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tolerance:
    """``spec.profileTolerance``: how far a measured profile may move before it is drift."""

    period: float = 0.1  # relative change of the period
    duty: float = 0.1  # absolute change of the duty cycle
    rate: float = 0.2  # relative change of the peak rate


@dataclass(frozen=True)
class ProfilePolicy:
    """``spec.profilePolicy`` and ``spec.profileTolerance`` of one QueuePolicy."""

    mode: str = OBSERVE
    tolerance: Tolerance = field(default_factory=Tolerance)


def profile_policy(obj: Mapping[str, Any]) -> ProfilePolicy:
    """A QueuePolicy's drift settings; a bad value raises :class:`InvalidInput` naming the field."""
    spec = obj.get("spec") or {}
    where = f"QueuePolicy {objects.name(obj)}: spec"
    mode = spec.get("profilePolicy", OBSERVE)
    if mode not in (OBSERVE, ADOPT):
        raise InvalidInput(f"{where}.profilePolicy", mode, f"{OBSERVE} or {ADOPT}")
    raw = spec.get("profileTolerance") or {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where}.profileTolerance", raw, "a mapping {period, duty, rate}")
    base = Tolerance()
    values = {}
    for key in ("period", "duty", "rate"):
        # The CRD's bounds: duty is an absolute change of a fraction, the others relative changes.
        values[key] = fields.number(raw.get(key, getattr(base, key)), f"{where}.profileTolerance.{key}",
                                    minimum=0.0, maximum=1.0 if key == "duty" else 10.0)
    return ProfilePolicy(mode, Tolerance(**values))


def moved(declared: Profile, measured: Profile, tol: Tolerance) -> tuple[str, ...]:
    """What moved beyond tolerance, in order: period, duty, rate (empty: within tolerance)."""
    out = []
    if abs(measured.period_ms - declared.period_ms) > tol.period * declared.period_ms:
        out.append("period")
    if abs(measured.duty_cycle - declared.duty_cycle) > tol.duty:
        out.append("duty")
    if abs(measured.peak_gbps - declared.peak_gbps) > tol.rate * declared.peak_gbps:
        out.append("rate")
    return tuple(out)


def reason(what: Sequence[str]) -> str:
    """The condition reason naming what moved, e.g. ``PeriodAndRateMoved``."""
    return "And".join(w.capitalize() for w in what) + "Moved" if what else AS_DECLARED


def describe(declared: Profile, measured: Profile) -> str:
    """Declared against measured period, duty cycle and peak rate, for a condition message."""
    return (f"period {declared.period_ms:g} -> {measured.period_ms:g} ms, duty cycle {declared.duty_cycle:.3g} -> "
            f"{measured.duty_cycle:.3g}, peak {declared.peak_gbps:g} -> {measured.peak_gbps:g} Gbps")


@dataclass(frozen=True)
class ClaimChange:
    """What the drift pass writes on one claim: status fields, the ProfileDrift condition, and Events."""

    claim: ClaimView
    fields: JSON
    condition: tuple[str, str, str] | None  # (status, reason, message)
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Assessment:
    """The world to plan with, the policies to re-optimise now, and the claim writes to add to the plan."""

    world: World
    replan: frozenset[str] = frozenset()
    changes: Mapping[str, ClaimChange] = field(default_factory=dict)  # gang key -> change
    drifted: int = 0  # placed gangs whose measured profile departs from the declared one
    adopted: tuple[str, ...] = ()  # gangs that adopted a measured profile this cycle
    warnings: tuple[str, ...] = ()
    now_s: float = 0.0

    def amend(self, plan: Plan) -> Plan:
        """``plan`` with the drift writes merged into each gang's claim status patch (one write per claim)."""
        if not self.changes:
            return plan
        gangs: list[GangWrites] = []
        done: set[str] = set()
        for g in plan.gangs:
            change = self.changes.get(g.gang)
            if change is None or any(not isinstance(w, ClaimStatus) for w in g.claim):
                gangs.append(g)
                continue
            done.add(g.gang)
            gangs.append(self._merge(g, change))
        for key, change in sorted(self.changes.items()):
            if key not in done:
                gangs.append(self._merge(GangWrites(key), change))
        return dataclasses.replace(plan, gangs=tuple(gangs))

    def _merge(self, g: GangWrites, change: ClaimChange) -> GangWrites:
        claim = change.claim
        theirs = next((w for w in reversed(g.claim) if isinstance(w, ClaimStatus) and w.name == claim.name), None)
        status: JSON = {**change.fields, **(theirs.status if theirs is not None else {})}
        if change.condition is not None:
            base = (theirs.status.get("conditions") if theirs is not None else None) or claim.conditions
            status["conditions"] = objects.set_condition(base, PROFILE_DRIFT, *change.condition, self.now_s)
        write = ClaimStatus(claim.namespace, claim.name, claim.resource_version, status)
        writes = tuple(w for w in g.claim if w is not theirs) + (write,)
        return dataclasses.replace(g, claim=writes, after=g.after + change.events)


def measured_profile(claim: ClaimView) -> Profile | None:
    """``status.measuredProfile`` as a profile (None when absent); broken input raises InvalidInput."""
    data = claim.status.get("measuredProfile")
    if not data:
        return None
    where = f"STBandwidthClaim {claim.namespace}/{claim.name}: status.measuredProfile"
    if not isinstance(data, Mapping):
        raise InvalidInput(where, data, "a mapping {periodMs, windows, jitterMs, source, ...}")
    return profile_from_spec({k: v for k, v in data.items() if k not in MEASUREMENT_KEYS}, where)


def _adopted(claim: ClaimView) -> Profile | None:
    data = claim.status.get("adoptedProfile")
    try:
        return profile_from_spec(data, "status.adoptedProfile") if data else None
    except InvalidInput:
        return None  # written by us; a broken one is replaced


def assess(world: World, queue_policies: Sequence[Mapping[str, Any]], settings: Settings, now_s: float) -> Assessment:
    """Compare every placed gang's measured profile with its declared one (see the module docstring)."""
    return Drift().assess(world, queue_policies, settings, now_s)


@dataclass(frozen=True)
class _Result:
    """What the pass makes of one gang: the gang to plan with, and what to write and say about it."""

    planned: GangView
    change: ClaimChange | None = None
    drifted: bool = False
    adopted: bool = False
    replan: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def steady(self) -> bool:
        """Nothing to write or say: the same gang gives the same result next cycle (no clock involved)."""
        return self.change is None and not self.adopted and not self.replan and not self.warnings


class Drift:
    """:func:`assess` kept from cycle to cycle: a gang is assessed again only when its view changed
    (``World.changed``: its claim's measured or adopted profile, its declared profile or its policy), when
    the QueuePolicies' drift settings changed, or while it has something to write or say."""

    def __init__(self) -> None:
        self._serial = -1
        self._pols: Mapping[str, ProfilePolicy] | None = None
        self._results: dict[GangKey, _Result] = {}
        self._active: set[GangKey] = set()  # gangs whose result is not steady: assessed every cycle
        self._replaced: dict[GangKey, GangView] = {}  # gangs planned with another view than the observed one
        self._drifted = 0

    def assess(self, world: World, queue_policies: Sequence[Mapping[str, Any]], settings: Settings,
               now_s: float) -> Assessment:
        """:func:`assess`, reworking only what changed since the world before (see the class docstring)."""
        warnings: list[str] = []
        pols: dict[str, ProfilePolicy] = {}
        for obj in queue_policies:
            try:
                pols[objects.name(obj)] = profile_policy(obj)
            except InvalidInput as exc:
                warnings.append(str(exc))
        full = world.changed is None or world.serial != self._serial + 1 or pols != self._pols
        self._serial, self._pols = world.serial, pols
        index = world.index if world.index or not world.gangs else {g.key: g for g in world.gangs}
        if full:
            self._results, self._active, self._replaced, self._drifted = {}, set(), {}, 0
            keys: Sequence[GangKey] = list(index)
        else:
            assert world.changed is not None
            keys = list(world.changed | self._active)
        moved_keys: set[GangKey] = set()
        for key in keys:
            old = self._results.pop(key, None)
            if old is not None:
                self._drifted -= old.drifted
            gang = index.get(key)
            if gang is None:
                self._active.discard(key)
                self._replaced.pop(key, None)
                continue
            r = _assess_one(gang, pols, settings, now_s)
            self._results[key] = r
            self._drifted += r.drifted
            (self._active.discard if r.steady else self._active.add)(key)
            if r.planned is gang:
                self._replaced.pop(key, None)
            else:
                self._replaced[key] = r.planned
            if old is None or old.planned is not r.planned:
                moved_keys.add(key)
        changes: dict[str, ClaimChange] = {}
        replan: set[str] = set()
        adopted: list[str] = []
        for key in sorted(self._active):  # the gangs' order (GangKey's), as a pass over world.gangs meets them
            r = self._results[key]
            warnings.extend(r.warnings)
            if r.change is not None:
                changes[str(key)] = r.change
            if r.adopted:
                adopted.append(str(key))
            if r.replan:
                replan.add(r.planned.policy)
        new_world = world
        if self._replaced or moved_keys:  # the world to plan with; what changed in it since the last one planned
            replaced = self._replaced
            new_world = dataclasses.replace(
                world, gangs=tuple(replaced.get(g.key, g) for g in world.gangs) if replaced else world.gangs,
                index={**index, **replaced} if replaced else index,
                changed=None if world.changed is None or full else world.changed | moved_keys)
        return Assessment(new_world, frozenset(replan), changes, self._drifted, tuple(adopted), tuple(warnings), now_s)


def _assess_one(gang: GangView, pols: Mapping[str, ProfilePolicy], settings: Settings, now_s: float) -> _Result:
    claim = gang.claim
    if not gang.placed or gang.finished or claim is None or gang.profile is None:
        return _Result(gang)
    warnings: list[str] = []
    pol = pols.get(gang.policy, ProfilePolicy())
    try:
        measured = measured_profile(claim)
    except InvalidInput as exc:
        warnings.append(str(exc))
        measured = None
    if measured is not None:  # timing is measured, the traffic pattern is not: the declared collective stands
        # A measurement is a mean and a spread; the core holds a locked gang to its slow end.
        measured = dataclasses.replace(measured.slow_end(), collective=gang.profile.collective)
    what = moved(gang.profile, measured, pol.tolerance) if measured is not None else ()
    change = _condition(gang, claim, measured, what, pol, settings)
    plan_with, fields = gang.profile, {}
    current = _adopted(claim)
    adopted = replan = False
    if pol.mode == ADOPT and what and measured is not None:
        if current is None or moved(current, measured, pol.tolerance):
            try:
                fields = {**_repoint(claim, measured, settings, now_s),
                          "adoptedProfile": profile_to_spec(measured)}
            except InvalidInput as exc:  # e.g. a period beyond the hyperperiod cap: keep the declared one
                warnings.append(f"gang {gang.key}: measured profile not adopted: {exc}")
            else:
                plan_with = measured
                adopted = replan = True
        else:
            plan_with = current
    elif current is not None:  # back within tolerance, or no longer adopting: the declared profile again
        fields = {**_repoint(claim, gang.profile, settings, now_s), "adoptedProfile": None}
        replan = True
    claim_change = None
    if fields or change is not None:
        events = change[1] if change is not None else ()
        cond = change[0] if change is not None else None
        claim_change = ClaimChange(claim, fields, cond, events)
    return _Result(_planned(gang, plan_with, fields), claim_change, bool(what), adopted, replan, tuple(warnings))


def _condition(gang: GangView, claim: ClaimView, measured: Profile | None, what: tuple[str, ...], pol: ProfilePolicy,
               settings: Settings) -> tuple[tuple[str, str, str], tuple[Event, ...]] | None:
    """The ProfileDrift condition to write (and its Event), or None when the claim already shows it."""
    shown = next((c for c in claim.conditions if c.get("type") == PROFILE_DRIFT), None)
    if measured is None or gang.profile is None:
        return None
    if what:
        verb = "planned with the measured profile (profilePolicy adopt)" if pol.mode == ADOPT else \
            "reported only (profilePolicy observe)"
        message = (f"measured profile departs from the declared one beyond tolerance (period {pol.tolerance.period:g}, "
                   f"duty {pol.tolerance.duty:g}, rate {pol.tolerance.rate:g}): {describe(gang.profile, measured)}; "
                   f"{verb}")
        if shown is not None and shown.get("status") == "True" and shown.get("message") == message:
            return None
        events = (Event(reconcile.regarding(gang), PROFILE_DRIFT, message, type="Warning"),) if settings.events else ()
        return ("True", reason(what), message), events
    if shown is not None and shown.get("status") == "True":
        return ("False", AS_DECLARED, f"measured profile within tolerance: {describe(gang.profile, measured)}"), ()
    return None


def _repoint(claim: ClaimView, profile: Profile, settings: Settings, now_s: float) -> JSON:
    """Status fields that put the claim on ``profile``'s snapped period from a future epoch."""
    period = settings.grid.snap(profile.period_ms, "status.measuredProfile.periodMs").ms
    if period == claim.period_ms:
        return {}
    epoch = epoch_at_or_after(now_s * 1000.0 + settings.reconfigure_lead_ms, settings)
    # Its phase on the Unix epoch's axis stays; the offset is written relative to the new epoch.
    return {"periodMs": period, "epoch": epoch, "offsetMs": relative_offset(claim.origin_offset_ms(), epoch, period)}


def _planned(gang: GangView, profile: Profile, fields: Mapping[str, Any]) -> GangView:
    """The gang as this cycle plans it: ``profile``, and its claim on the period and epoch just written."""
    if profile is gang.profile and not fields:
        return gang
    claim = gang.claim
    assert claim is not None
    if "periodMs" in fields:
        claim = dataclasses.replace(claim, period_ms=float(fields["periodMs"]), epoch_ms=int(fields["epoch"]),
                                    offset_ms=float(fields["offsetMs"]))
    return dataclasses.replace(gang, profile=profile, claim=claim)


def record(assessment: Assessment, metrics: Metrics) -> None:
    """Log the pass's warnings and adoptions; set the drift gauge, count the adoptions."""
    for warning in assessment.warnings:
        log.warning("%s", warning)
    for gang in assessment.adopted:
        log.info("gang %s: measured profile adopted for planning", gang)
    metrics.profile_drifted_gangs.set(assessment.drifted)
    metrics.profile_adoptions.inc(len(assessment.adopted))
