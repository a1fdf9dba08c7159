"""The slot grid: time is cut into slots, and periods are snapped so that hyperperiods stay bounded.

Every snapped period is a divisor of ``max_hyperperiod_slots``, so the least common multiple of any
set of snapped periods (the hyperperiod of a link, and of the whole cluster) divides it too. The
default cap, 5040 slots (25.2 s at 5 ms), is a highly composite number (60 divisors), which keeps
the snapping error small for periods between 100 ms and a few seconds. Periods are snapped *up*:
a runtime can always pad an iteration to a longer period, never shorten it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from volcano_metronome.core import limits
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.limits import DEFAULT_MAX_HYPERPERIOD_SLOTS as DEFAULT_MAX_HYPERPERIOD_SLOTS
from volcano_metronome.core.limits import DEFAULT_SLOT_MS as DEFAULT_SLOT_MS
from volcano_metronome.core.profile import Profile


@dataclass(frozen=True)
class SnappedPeriod:
    """A period on the grid and how far it is from the requested one."""

    slots: int
    requested_ms: float
    slot_ms: float

    @property
    def ms(self) -> float:
        """The snapped period in milliseconds."""
        return self.slots * self.slot_ms

    @property
    def error(self) -> float:
        """Relative snapping error, ``(snapped - requested) / requested`` (never negative)."""
        return (self.ms - self.requested_ms) / self.requested_ms


@dataclass(frozen=True)
class SlotGrid:
    """Slot width and the hyperperiod cap every snapped period divides."""

    slot_ms: float = DEFAULT_SLOT_MS
    max_hyperperiod_slots: int = DEFAULT_MAX_HYPERPERIOD_SLOTS

    def __post_init__(self) -> None:
        if not (isinstance(self.slot_ms, (int, float)) and limits.MIN_SLOT_MS <= self.slot_ms <= limits.MAX_SLOT_MS):
            raise InvalidInput("slot_ms", self.slot_ms,
                               f"a number of milliseconds in [{limits.MIN_SLOT_MS:g}, {limits.MAX_SLOT_MS:g}]")
        if not (isinstance(self.max_hyperperiod_slots, int)
                and 1 <= self.max_hyperperiod_slots <= limits.MAX_HYPERPERIOD_SLOTS):
            raise InvalidInput("max_hyperperiod_slots", self.max_hyperperiod_slots,
                               f"an integer in [1, {limits.MAX_HYPERPERIOD_SLOTS}]")

    @classmethod
    def from_ms(cls, slot_ms: float = DEFAULT_SLOT_MS, max_hyperperiod_ms: float | None = None) -> "SlotGrid":
        """A grid whose hyperperiod cap is given in milliseconds (a whole number of slots)."""
        if max_hyperperiod_ms is None:
            return cls(slot_ms)
        slots = max_hyperperiod_ms / slot_ms
        if not math.isclose(slots, round(slots)) or round(slots) < 1:
            raise InvalidInput("max_hyperperiod_ms", max_hyperperiod_ms, f"a positive multiple of slot_ms={slot_ms:g}")
        return cls(slot_ms, int(round(slots)))

    @property
    def max_hyperperiod_ms(self) -> float:
        """The hyperperiod cap in milliseconds."""
        return self.max_hyperperiod_slots * self.slot_ms

    @cached_property
    def periods(self) -> np.ndarray:
        """Every period the grid allows, in slots, ascending (the divisors of the cap)."""
        n = self.max_hyperperiod_slots
        small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
        return np.array(sorted(set(small + [n // d for d in small])), dtype=np.int64)

    def snap(self, period_ms: float, field: str = "period_ms") -> SnappedPeriod:
        """The smallest grid period at least ``period_ms`` long."""
        exact = period_ms / self.slot_ms
        index = int(np.searchsorted(self.periods, exact - 1e-9, side="left"))
        if index >= len(self.periods):
            raise limits.beyond_cap(field, period_ms, self.max_hyperperiod_ms)
        return SnappedPeriod(int(self.periods[index]), period_ms, self.slot_ms)

    def commensurate(self, period_ms: float, others: np.ndarray) -> SnappedPeriod | None:
        """The smallest grid period at least ``period_ms`` long that divides, or is a multiple of, each of ``others``.

        ``others`` are the periods (slots) of the gangs a gang shares contended links with: at such a
        period their common (local) hyperperiod is the longest of them, so the gang's bursts meet
        theirs at fixed phases instead of sweeping every phase, and an offset without overflow can
        exist. None when no grid period qualifies.
        """
        periods = self.periods[self.periods >= period_ms / self.slot_ms - 1e-9]
        others = np.asarray(others, dtype=np.int64)
        if len(others):
            ok = ((periods[:, None] % others[None, :] == 0) | (others[None, :] % periods[:, None] == 0)).all(axis=1)
            periods = periods[ok]
        return SnappedPeriod(int(periods[0]), period_ms, self.slot_ms) if len(periods) else None

    def exact(self, period_ms: float, field: str = "period_ms") -> SnappedPeriod:
        """The whole number of slots covering ``period_ms``: no snapping beyond the slot.

        Off the grid in general, so only for gangs whose contended neighbours all hold it or a period that
        divides it or is a multiple of it (such gangs meet at fixed phases whatever their period), and only
        while the snapshot's hyperperiod stays within the cap (``core.decision._exact``)."""
        slots = max(1, self.slots(period_ms))
        if slots > self.max_hyperperiod_slots:
            raise limits.beyond_cap(field, period_ms, self.max_hyperperiod_ms)
        return SnappedPeriod(slots, period_ms, self.slot_ms)

    def fitting(self, period_ms: float, hyperperiod: int) -> SnappedPeriod | None:
        """The shortest whole-slot period at least ``period_ms`` whose least common multiple with ``hyperperiod``
        stays within the cap, or None. Needed only beside exact periods (off the grid), where a grid period can
        take the hyperperiod past the cap."""
        need = max(1, self.slots(period_ms))
        found = next((p for p in range(need, self.max_hyperperiod_slots + 1)
                      if math.lcm(hyperperiod, p) <= self.max_hyperperiod_slots), None)
        return None if found is None else SnappedPeriod(found, period_ms, self.slot_ms)

    def held(self, period_ms: float, published_ms: float | None, field: str = "period_ms") -> SnappedPeriod:
        """The period a running gang holds: the one published for it when that is a whole number of slots,
        at least ``period_ms`` and within the cap (a grid snap, a local snap or an exact period), else the
        snap of ``period_ms`` (what every claim carried before local snapping, and all a changed profile can
        still use)."""
        if published_ms is not None:
            slots = published_ms / self.slot_ms
            whole = int(round(slots))
            if (math.isclose(slots, whole) and whole * self.slot_ms >= period_ms - 1e-6
                    and 1 <= whole <= self.max_hyperperiod_slots):
                return SnappedPeriod(whole, period_ms, self.slot_ms)
        return self.snap(period_ms, field)

    def slots(self, ms: float) -> int:
        """Whole slots covering ``ms`` (rounded up: guards are conservative)."""
        return int(math.ceil(ms / self.slot_ms - 1e-9))


def mbps(gbps: float) -> int:
    """Rates are kept as whole Mbps so that loads add and subtract exactly."""
    return max(1, int(round(gbps * 1000.0)))


@dataclass(frozen=True, eq=False)
class Pattern:
    """A profile laid on the grid: the per-worker rate (Mbps) in each slot of one snapped period, twice."""

    period: SnappedPeriod
    rates: np.ndarray  # int64, shape (period.slots,): a slot a window covers in part carries that part of its rate
    guard_slots: int  # jitter expressed in slots; the policy's cushion adds to it when scoring
    whole: np.ndarray  # int64, shape (period.slots,): every slot a window touches carries its full rate

    @property
    def slots(self) -> int:
        """Length of the period in slots."""
        return self.period.slots


def lay_out(profile: Profile, grid: SlotGrid, period: SnappedPeriod | None = None) -> Pattern:
    """Lay ``profile`` on ``grid`` at ``period`` (default: its snap), rates in Mbps: by volume (``rates``, a slot a
    window covers in part carries that part of its rate) and by the slots it touches (``whole``).

    Link loads, overflow and the collisions a gang can expect follow ``rates``: whole slots at full rate
    overstated what short bursts send (up to 33 times in ``oversubscribed-racks``), and the core held and locked
    gangs against collisions the bursts could not have (round 33). The guarded fit keeps clear of every slot a
    burst touches (``whole``, widened by ``dilate``), as it did before."""
    period = period or grid.snap(profile.period_ms, "profile.period_ms")
    rates = np.zeros(period.slots, dtype=np.int64)
    whole = np.zeros(period.slots, dtype=np.int64)
    for w in profile.windows:
        rate = mbps(w.gbps)
        lo, hi = w.start_ms / grid.slot_ms, (w.start_ms + w.len_ms) / grid.slot_ms
        start = int(math.floor(lo + 1e-9))
        end = min(period.slots, max(int(math.ceil(hi - 1e-9)), start + 1))
        # Every slot in between is covered whole; only the first and the last can be covered in part. Plain
        # arithmetic on those two: lay_out runs for every period a decision tries.
        rates[start:end] += rate
        whole[start:end] = np.maximum(whole[start:end], rate)
        for slot in {start, end - 1}:
            covered = min(max(min(slot + 1.0, hi) - max(float(slot), lo), 0.0), 1.0)
            rates[slot] += max(1, math.ceil(rate * covered - 1e-6)) - rate
    return Pattern(period, rates, grid.slots(profile.jitter_ms), whole)


def dilate(rates: np.ndarray, slots: int) -> np.ndarray:
    """Circularly widen every window by ``slots`` on each side (guard slots around bursts)."""
    out = rates.copy()
    for k in range(1, min(slots, len(rates)) + 1):
        np.maximum(out, np.roll(rates, k), out=out)
        np.maximum(out, np.roll(rates, -k), out=out)
    return out
