"""Bandwidth profiles: a period and the on-windows in which a gang's workers communicate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.fields import number
from volcano_metronome.core.limits import MAX_GBPS as MAX_GBPS
from volcano_metronome.core.limits import MAX_PERIOD_MS as MAX_PERIOD_MS
from volcano_metronome.core.limits import MAX_WINDOWS as MAX_WINDOWS


#: How a gang's traffic spreads over the links between its workers (see ``core.traffic``).
RING = "ring"
ALL_TO_ALL = "all-to-all"
COLLECTIVES = (RING, ALL_TO_ALL)


@dataclass(frozen=True)
class Window:
    """One on-window: each worker sends (and receives) ``gbps`` on its NIC from ``start_ms`` for ``len_ms``."""

    start_ms: float
    len_ms: float
    gbps: float


@dataclass(frozen=True)
class Profile:
    """A periodic communication pattern: ``windows`` repeat every ``period_ms``, the longest usual iteration
    (the one a locked gang is held to); an iteration may be up to ``jitter_ms`` shorter, its bursts then
    early and padded to their slot. A measurement reports the mean and the spread instead: ``slow_end``."""

    period_ms: float
    windows: tuple[Window, ...]
    jitter_ms: float = 0.0
    collective: str = RING  # ring all-reduce, or all-to-all (MoE experts, DLRM embeddings)

    def __post_init__(self) -> None:
        validate(self)

    def slow_end(self) -> "Profile":
        """This profile read as a measurement (``profile fit``, the runtime's stopwatch, the node agent:
        mean period, jitter = spread of iteration lengths) in the core's terms: the period and every
        window later by half the spread, so a locked gang's slot comes after its slow iterations."""
        half = self.jitter_ms / 2.0
        if not half:
            return self
        return self._relaid(self.period_ms + half,
                            [(w.start_ms + half, w.start_ms + w.len_ms + half, w.gbps) for w in self.windows])

    def throttled(self, gbps: float) -> "Profile":
        """This profile where no worker can send faster than ``gbps``: a faster window moves the same volume
        at ``gbps``, so it lasts longer and pushes the later windows and the period back by as much."""
        if gbps >= self.peak_gbps:
            return self
        shift, edges = 0.0, []
        for w in self.windows:
            length = w.len_ms * w.gbps / gbps if w.gbps > gbps else w.len_ms
            edges.append((w.start_ms + shift, w.start_ms + shift + length, min(w.gbps, gbps)))
            shift += length - w.len_ms
        return self._relaid(self.period_ms + shift, edges)

    def _relaid(self, period_ms: float, edges: list[tuple[float, float, float]]) -> "Profile":
        """This profile at ``period_ms`` with windows ``(start, end, gbps)``, rounded to the nanosecond so that the
        sums carry no float residue into annotations. The edges are rounded, not the start and the length apart: a
        window that ends where the period does (compute, then all-reduce) would otherwise end up to 1 ns past it,
        an invalid profile."""
        period, windows = round(period_ms, 6), []
        for start_ms, end_ms, gbps in edges:
            start, end = round(start_ms, 6), round(end_ms, 6)
            period = max(period, end)
            windows.append(Window(start, round(end - start, 6), gbps))
        return replace(self, period_ms=period, windows=tuple(windows))

    @property
    def duty_cycle(self) -> float:
        """Fraction of the period during which the gang communicates."""
        return sum(w.len_ms for w in self.windows) / self.period_ms

    @property
    def mean_gbps(self) -> float:
        """Average rate per worker over one period."""
        return sum(w.len_ms * w.gbps for w in self.windows) / self.period_ms

    @property
    def peak_gbps(self) -> float:
        """Highest rate of any window."""
        return max(w.gbps for w in self.windows)

    def to_dict(self) -> dict[str, Any]:
        """The canonical mapping form (the one ``from_mapping`` reads and the webhook writes)."""
        return {
            "period_ms": _num(self.period_ms),
            "windows": [
                {"start_ms": _num(w.start_ms), "len_ms": _num(w.len_ms), "gbps": _num(w.gbps)} for w in self.windows
            ],
            "jitter_ms": _num(self.jitter_ms),
        } | ({} if self.collective == RING else {"collective": self.collective})

    @classmethod
    def from_mapping(cls, data: Any, field: str = "profile") -> "Profile":
        """Parse ``{"period_ms", "windows": [{"start_ms", "len_ms", "gbps"}], "jitter_ms"}``, naming the bad field."""
        if not isinstance(data, Mapping):
            raise InvalidInput(field, data, "a mapping with period_ms and windows")
        unknown = sorted(set(data) - {"period_ms", "windows", "jitter_ms", "collective"})
        if unknown:
            raise InvalidInput(f"{field}.{unknown[0]}", data[unknown[0]],
                               "one of period_ms, windows, jitter_ms, collective")
        period = number(data.get("period_ms"), f"{field}.period_ms")
        if not 0.0 < period <= MAX_PERIOD_MS:
            raise InvalidInput(f"{field}.period_ms", period, f"a number in (0, {MAX_PERIOD_MS:.0f}]")
        raw_windows = data.get("windows")
        if not isinstance(raw_windows, list) or not raw_windows or len(raw_windows) > MAX_WINDOWS:
            raise InvalidInput(f"{field}.windows", raw_windows,
                               f"a list of 1 to {MAX_WINDOWS} windows {{start_ms, len_ms, gbps}}")
        windows = tuple(window_from_mapping(w, f"{field}.windows[{i}]") for i, w in enumerate(raw_windows))
        jitter = number(data.get("jitter_ms", 0.0), f"{field}.jitter_ms")
        collective = data.get("collective", RING)
        if collective not in COLLECTIVES:
            raise InvalidInput(f"{field}.collective", collective, f"one of {', '.join(COLLECTIVES)}")
        return cls(period_ms=period, windows=_sorted_checked(windows, period, field), jitter_ms=jitter,
                   collective=collective)

    @classmethod
    def from_duty_cycle(cls, period_ms: float, duty_cycle: float, gbps: float, jitter_ms: float = 0.0,
                        field: str = "profile") -> "Profile":
        """The shorthand: one window at the end of the period (compute first, then all-reduce)."""
        if not 0.0 < duty_cycle <= 1.0:
            raise InvalidInput(f"{field}.duty_cycle", duty_cycle, "a number in (0, 1]")
        length = period_ms * duty_cycle
        if period_ms > 0 and length < 1e-3:  # a window under a microsecond vanishes when placed against the period
            raise InvalidInput(f"{field}.duty_cycle", duty_cycle,
                               f"a number in (0, 1] whose window lasts 1 us or more (here {length:.3g} ms of the "
                               f"{period_ms:g} ms period)")
        return cls(period_ms, (Window(period_ms - length, length, gbps),), jitter_ms)


def window_from_mapping(data: Any, field: str) -> Window:
    """Parse one ``{"start_ms", "len_ms", "gbps"}`` mapping."""
    if not isinstance(data, Mapping):
        raise InvalidInput(field, data, "a mapping {start_ms, len_ms, gbps}")
    unknown = sorted(set(data) - {"start_ms", "len_ms", "gbps"})
    if unknown:
        raise InvalidInput(f"{field}.{unknown[0]}", data[unknown[0]], "one of start_ms, len_ms, gbps")
    return Window(
        start_ms=number(data.get("start_ms"), f"{field}.start_ms"),
        len_ms=number(data.get("len_ms"), f"{field}.len_ms"),
        gbps=number(data.get("gbps"), f"{field}.gbps"),
    )


def validate(profile: Profile) -> None:
    """Raise :class:`InvalidInput` unless every window lies inside the period and none overlap."""
    if not 0.0 < profile.period_ms <= MAX_PERIOD_MS:
        raise InvalidInput("profile.period_ms", profile.period_ms, f"a number in (0, {MAX_PERIOD_MS:.0f}]")
    if not 0.0 <= profile.jitter_ms < profile.period_ms:
        raise InvalidInput("profile.jitter_ms", profile.jitter_ms, f"a number in [0, period_ms={profile.period_ms:g})")
    if not 1 <= len(profile.windows) <= MAX_WINDOWS:
        raise InvalidInput("profile.windows", len(profile.windows), f"1 to {MAX_WINDOWS} windows")
    _sorted_checked(profile.windows, profile.period_ms, "profile")
    if profile.collective not in COLLECTIVES:
        raise InvalidInput("profile.collective", profile.collective, f"one of {', '.join(COLLECTIVES)}")
    if tuple(sorted(profile.windows, key=lambda w: w.start_ms)) != profile.windows:
        raise InvalidInput("profile.windows", [w.start_ms for w in profile.windows], "windows sorted by start_ms")


def _sorted_checked(windows: tuple[Window, ...], period_ms: float, field: str) -> tuple[Window, ...]:
    indexed = sorted(enumerate(windows), key=lambda iw: iw[1].start_ms)
    end = 0.0
    for i, w in indexed:
        where = f"{field}.windows[{i}]"
        if not 0.0 <= w.start_ms < period_ms:
            raise InvalidInput(f"{where}.start_ms", w.start_ms, f"a number in [0, period_ms={period_ms:g})")
        if not 0.0 < w.len_ms or w.start_ms + w.len_ms > period_ms + 1e-9:
            raise InvalidInput(f"{where}.len_ms", w.len_ms,
                               f"a positive number with start_ms + len_ms <= period_ms={period_ms:g}")
        if not 0.0 < w.gbps <= MAX_GBPS:
            raise InvalidInput(f"{where}.gbps", w.gbps, f"a number in (0, {MAX_GBPS:.0f}]")
        if w.start_ms < end - 1e-9:
            raise InvalidInput(f"{where}.start_ms", w.start_ms, f"no overlap with the window ending at {end:g} ms")
        end = w.start_ms + w.len_ms
    return tuple(w for _, w in indexed)


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x
