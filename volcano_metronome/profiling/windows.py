"""From a folded profile to on-windows: half-height edges and byte-true rates.

Works on the aligned profile (``fold.align``), whose bursts are sharp even when the jitter is longer
than a window. The baseline is the median rate outside the bursts. A burst is a run of bins above
the baseline by more than a tenth of the tallest burst and more than four standard errors, whose
bytes above the baseline are more than four standard errors of their sum (a flicker of a bin or two
at the noise level is not a window); runs closer than two bins are one. A window's edges are where its rate crosses half its own height
(linear between bins), so edges smeared by residual jitter or by sampling still give the true
length; its rate is the baseline plus the bytes above baseline in the run and up to half its length
around it (never past half-way to a neighbour) over that length, so no byte is lost to the edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A burst must rise above the baseline by this share of the tallest burst's height.
MIN_SHARE = 0.1
#: ... and by this many standard errors of the mean profile.
MIN_SIGMAS = 4.0
#: Runs of bins closer than this are one burst.
MERGE_GAP_BINS = 2
#: Bins on each side of a run whose bytes still belong to it, at least (edge smear); half the run's length at most.
EDGE_BINS = 2


@dataclass(frozen=True)
class Burst:
    """One window in bins of the folded period: ``start`` and ``length`` fractional, ``start`` in [0, bins)."""

    start: float
    length: float
    gbps: float


def bursts(profile: np.ndarray, stderr: np.ndarray) -> tuple[list[Burst], float]:
    """The windows of ``profile`` (one value per bin) and the baseline rate between them."""
    bins = profile.size
    baseline = float(np.percentile(profile, 10))
    runs = _runs(profile, stderr, baseline)
    if runs:  # the median outside the bursts is a fairer baseline than a low percentile
        outside = np.ones(bins, dtype=bool)
        for start, length in runs:
            outside[(start - EDGE_BINS + np.arange(length + 2 * EDGE_BINS)) % bins] = False
        if outside.any():
            baseline = float(np.median(profile[outside]))
            runs = _runs(profile, stderr, baseline)
    found = []
    for i, (start, length) in enumerate(runs):
        previous_end = runs[i - 1][0] + runs[i - 1][1] - bins * (i == 0)
        next_start = runs[(i + 1) % len(runs)][0] + bins * (i == len(runs) - 1)
        found.append(_measure(profile, baseline, start, length, previous_end, next_start))
    return [b for b in found if b is not None], baseline


def quietest(profile: np.ndarray) -> int:
    """The bin in the middle of the longest stretch below the burst threshold (where a period should begin).

    Folding from there keeps every burst, early or late, inside its own iteration's row.
    """
    baseline = float(np.percentile(profile, 10))
    height = float(np.max(profile)) - baseline
    above = profile > baseline + MIN_SHARE * height
    if above.all() or not above.any():
        return int(np.argmin(profile))
    bins = profile.size
    first_low = int(np.argmin(above))
    rolled = np.roll(~above, -first_low).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], rolled, [0]))))
    starts, ends = edges[::2], edges[1::2]
    if len(starts) > 1 and ends[-1] == bins and starts[0] == 0:  # the stretch wraps around
        starts, ends = np.append(starts[1:-1], starts[-1]), np.append(ends[1:-1], ends[0] + bins)
    longest = int(np.argmax(ends - starts))
    return int((first_low + (starts[longest] + ends[longest]) // 2) % bins)


def _runs(profile: np.ndarray, stderr: np.ndarray, baseline: float) -> list[tuple[int, int]]:
    """Circular runs ``(start, length)`` of bins above the detection threshold, close runs merged."""
    height = float(np.max(profile)) - baseline
    if height <= 0.0:
        return []
    threshold = baseline + max(MIN_SHARE * height, MIN_SIGMAS * float(np.median(stderr)))
    above = profile > threshold
    if above.all() or not above.any():
        return []
    bins = profile.size
    first_low = int(np.argmin(above))  # rotate so that the series starts below the threshold
    rolled = np.roll(above, -first_low)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], rolled.astype(np.int8), [0]))))
    runs = [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2])]
    merged = [runs[0]]
    for a, b in runs[1:]:
        if a - merged[-1][1] < MERGE_GAP_BINS:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    if len(merged) > 1 and merged[0][0] + bins - merged[-1][1] < MERGE_GAP_BINS:
        merged[0][0] = merged[-1][0] - bins
        merged.pop()
    # Unwrapped starts, ascending over one cycle, so that neighbours are simply the runs either side.
    return [(a + first_low, b - a) for a, b in merged
            if _significant(profile, stderr, baseline, (first_low + np.arange(a, b)) % bins)]


def _significant(profile: np.ndarray, stderr: np.ndarray, baseline: float, where: np.ndarray) -> bool:
    """Whether a run's bytes above baseline exceed MIN_SIGMAS standard errors of their sum (not a flicker)."""
    excess = float(np.sum(profile[where] - baseline))
    return excess > MIN_SIGMAS * float(np.sqrt(np.sum(stderr[where] ** 2)))


def _measure(profile: np.ndarray, baseline: float, start: int, length: int, previous_end: int,
             next_start: int) -> Burst | None:
    """Half-height edges of one run and its rate from the bytes above baseline around it."""
    bins = profile.size
    values = profile[(start + np.arange(length)) % bins]
    height = float(np.percentile(values, 75)) - baseline
    if height <= 0.0:
        return None
    half = baseline + height / 2.0
    inside = np.flatnonzero(values >= half)
    if inside.size == 0:
        return None
    first, last = int(inside[0]), int(inside[-1])
    before = float(profile[(start + first - 1) % bins])
    after = float(profile[(start + last + 1) % bins])
    at_first, at_last = float(values[first]), float(values[last])
    # Bin centres sit at index + 0.5; the edges are where the rate crosses half height between them.
    left = first - 0.5 + _crossing(before, at_first, half)
    right = last + 0.5 + (1.0 - _crossing(after, at_last, half))
    span = right - left
    # Bytes smeared past the run (residual misalignment, or tails under the detection threshold of a
    # low burst) still belong to it: reach half its length out, but never past half-way to a neighbour.
    edge = max(EDGE_BINS, length // 2)
    reach_low = max(start - edge, (previous_end + start) // 2)
    reach_high = min(start + length + edge, (start + length + next_start + 1) // 2)
    around = profile[np.arange(reach_low, reach_high) % bins]
    excess = float(np.sum(around - baseline))
    gbps = baseline + max(excess, 0.0) / span
    return Burst((start + left) % bins, span, gbps)


def _crossing(low: float, high: float, level: float) -> float:
    """Where between a point at ``low`` (position 0) and one at ``high`` (position 1) the line crosses ``level``."""
    if high <= low:
        return 0.0
    return float(np.clip((level - low) / (high - low), 0.0, 1.0))
