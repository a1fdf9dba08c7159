"""A profile from the training loop's own timings: iteration marks and communication bursts.

Pure: the runtime helper (:class:`volcano_metronome.runtime.Stopwatch`) records, on its clock, when
each iteration reached the all-reduce and when each collective began and ended (and, when told,
how many bytes it sent); :func:`measure` turns them into the fitter's terms (period, windows,
jitter), or a :class:`~volcano_metronome.profiling.fit.Refusal` saying why they do not support one.

Unlike the NIC counter, these timings belong to one process of one gang: nothing else on the node
mixes in. But a burst is the time the collective call took, which includes waiting for the slowest
rank; its rate is only known when the caller says how many bytes the call sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import MAX_GBPS, MAX_WINDOWS, Profile, Window
from volcano_metronome.profiling.fit import JITTER_PERCENTILES, MIN_PERIODS, Refusal


@dataclass(frozen=True)
class Burst:
    """One collective call: start and end (ms on the helper's clock) and the bytes it sent, if known."""

    start_ms: float
    end_ms: float
    nbytes: int | None = None


@dataclass(frozen=True)
class MeasuredWindow:
    """A window in the fitter's terms; ``gbps`` is None when the bursts' bytes were not given."""

    start_ms: float
    len_ms: float
    gbps: float | None


@dataclass(frozen=True)
class Measured:
    """The loop's own profile: mean iteration, windows (origin: start of the longest quiet stretch), jitter."""

    period_ms: float
    windows: tuple[MeasuredWindow, ...]
    jitter_ms: float
    periods: int  # iterations measured
    padding_ms: float  # mean time per iteration the helper padded to the slot (excluded from the rest)

    def profile(self) -> Profile | None:
        """The core profile, or None while a window's rate is unknown (no bytes given)."""
        if any(w.gbps is None for w in self.windows):
            return None
        return Profile(self.period_ms, tuple(Window(w.start_ms, w.len_ms, float(w.gbps or 0.0))
                                             for w in self.windows), self.jitter_ms)

    def to_dict(self) -> dict[str, Any]:
        """The same keys as ``profile fit --json`` where they apply, plus ``padding_ms``."""
        return {"period_ms": self.period_ms,
                "windows": [{"start_ms": w.start_ms, "len_ms": w.len_ms, "gbps": w.gbps} for w in self.windows],
                "jitter_ms": self.jitter_ms, "periods": self.periods, "padding_ms": self.padding_ms,
                "source": "runtime"}


def measure(marks_ms: Sequence[float], bursts: Sequence[Burst], padding_ms: float = 0.0) -> Measured | Refusal:
    """The profile of a loop that marked each iteration at ``marks_ms`` and communicated in ``bursts``.

    Iteration ``k`` is ``[marks[k], marks[k+1])``; only complete iterations count. Iterations with the
    most common number of bursts are folded (one with an extra checkpoint write would otherwise
    shift the windows): window ``j`` is the median offset and length of every such iteration's
    ``j``-th burst. The period is the slope of the marks over their index (the mean iteration).
    """
    marks = np.asarray(marks_ms, dtype=np.float64)
    steps = np.diff(marks)
    if steps.size and not np.all(steps > 0):
        k = int(np.argmin(steps > 0)) + 1
        raise InvalidInput(f"marks_ms[{k}]", f"{marks[k]:g}", f"a time after the previous mark ({marks[k - 1]:g} ms)")
    iterations = marks.size - 1
    if iterations < MIN_PERIODS:
        return Refusal("too-short", f"{max(iterations, 0)} complete iterations timed; at least {MIN_PERIODS} "
                                    "are needed")
    index = np.arange(marks.size, dtype=np.float64)
    slope = np.polyfit(index, marks, 1)[0]
    period = float(slope)
    per: list[list[Burst]] = [[] for _ in range(iterations)]
    for b in sorted(bursts, key=lambda b: b.start_ms):
        k = int(np.searchsorted(marks, b.start_ms, side="right")) - 1
        if 0 <= k < iterations:
            per[k].append(b)
    counts = np.bincount([len(p) for p in per])
    typical = int(np.argmax(counts))
    if typical == 0:
        return Refusal("aperiodic", f"most of the {iterations} iterations timed had no communication burst")
    kept = [(k, p) for k, p in enumerate(per) if len(p) == typical]
    if len(kept) < MIN_PERIODS:
        return Refusal("too-short", f"only {len(kept)} iterations have the usual {typical} bursts; at least "
                                    f"{MIN_PERIODS} are needed")
    offsets = np.array([[b.start_ms - marks[k] for b in p] for k, p in kept])
    lengths = np.array([[b.end_ms - b.start_ms for b in p] for k, p in kept])
    starts = np.median(offsets, axis=0)
    lens = np.minimum(np.median(lengths, axis=0), period)
    rates: list[float | None] = []
    for j in range(typical):
        sent = [p[j].nbytes for _, p in kept]
        total_ms = float(np.sum(lengths[:, j]))
        if any(n is None for n in sent) or total_ms <= 0:
            rates.append(None)
        else:
            rates.append(min(MAX_GBPS, sum(int(n or 0) for n in sent) * 8.0 / (total_ms * 1e6)))
    # Jitter: the spread of the iterations' lengths around the mean, i.e. how late a burst comes after
    # a slot the previous one was padded to. (Lateness around the whole run's trend would grow like a
    # random walk in a free-running loop, where each late iteration shifts all the later ones.)
    steps = np.diff(marks)
    low, high = np.percentile(steps - np.median(steps), JITTER_PERCENTILES)
    windows = _rotated(list(zip(starts.tolist(), lens.tolist(), rates)), period)
    jitter = min(round(float(high - low), 1), round(period - 0.1, 1))
    return Measured(round(period, 1), windows, max(0.0, jitter), iterations, round(padding_ms, 1))


def _rotated(raw: list[tuple[float, float, float | None]], period: float) -> tuple[MeasuredWindow, ...]:
    """Windows put in the fitter's frame: origin where the longest quiet stretch begins, overlaps merged."""
    merged: list[list[Any]] = []
    for start, length, gbps in sorted(((s % period, n, g) for s, n, g in raw), key=lambda w: w[0]):
        if merged and start <= merged[-1][0] + merged[-1][1]:  # overlapping calls are one window
            last = merged[-1]
            end = max(last[0] + last[1], start + length)
            before: float | None = last[2]
            last[2] = None if before is None or gbps is None else (before * last[1] + gbps * length) / (end - last[0])
            last[1] = end - last[0]
        else:
            merged.append([start, length, gbps])
    merged = _merge_closest(merged)
    gaps = [((merged[(i + 1) % len(merged)][0] - (w[0] + w[1])) % period, i) for i, w in enumerate(merged)]
    _, after = max(gaps)
    origin = merged[after][0] + merged[after][1] - period
    out = []
    for start, length, gbps in merged[after + 1:] + merged[: after + 1]:
        begin = round((start - origin) % period, 1)
        rate = None if gbps is None else float(f"{gbps:.4g}")
        out.append(MeasuredWindow(min(begin, round(period - 0.1, 1)),
                                  max(0.1, round(min(length, period - begin), 1)), rate))
    return tuple(out)


def _merge_closest(windows: list[list[Any]]) -> list[list[Any]]:
    """Merge the two windows with the shortest gap between them until the CRD's limit holds."""
    while len(windows) > MAX_WINDOWS:
        i = min(range(len(windows) - 1), key=lambda i: windows[i + 1][0] - windows[i][0] - windows[i][1])
        a, b = windows[i], windows[i + 1]
        end = b[0] + b[1]
        rate = None if a[2] is None or b[2] is None else (a[2] * a[1] + b[2] * b[1]) / (end - a[0])
        windows[i: i + 2] = [[a[0], end - a[0], rate]]
    return windows


def describe(result: Measured | Refusal) -> str:
    """One line for a log: the measured period and windows, or the refusal."""
    if isinstance(result, Refusal):
        return f"no profile measured ({result})"
    parts = ", ".join(f"{w.start_ms:g}+{w.len_ms:g} ms" + ("" if w.gbps is None else f" at {w.gbps:g} Gbps")
                      for w in result.windows)
    return (f"period {result.period_ms:g} ms over {result.periods} iterations, windows {parts}; "
            f"jitter {result.jitter_ms:g} ms" + (f"; padded {result.padding_ms:g} ms per iteration"
                                                 if result.padding_ms else ""))


__all__ = ["Burst", "Measured", "MeasuredWindow", "measure", "describe"]
