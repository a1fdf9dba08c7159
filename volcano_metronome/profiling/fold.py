"""Folding a rate series at a period: one row per complete iteration, one column per phase bin.

Alignment: each iteration's row is circularly cross-correlated with the mean profile; its lateness
(sub-bin, by a parabola through the correlation peak) is the burst timing of that iteration. Rows
shifted back by their lateness average to a sharp profile even when the jitter is longer than a
window; the spread of the latenesses is the jitter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


#: Bins over which rows are averaged before copies are compared (sub-sample edge shapes cancel out).
SMOOTH_BINS = 5


@dataclass(frozen=True, eq=False)
class Folded:
    """``rows[k, b]``: mean rate in phase bin ``b`` of iteration ``k`` (NaN where no sample fell)."""

    period: float  # in samples (may be fractional)
    rows: np.ndarray  # float64, shape (iterations, bins)

    @property
    def bins(self) -> int:
        """Phase bins per period."""
        return int(self.rows.shape[1])

    @property
    def iterations(self) -> int:
        """Complete iterations in the series."""
        return int(self.rows.shape[0])

    def profile(self) -> np.ndarray:
        """The mean rate in every phase bin over all iterations."""
        return _nanmean(self.rows)

    def filled(self) -> np.ndarray:
        """The rows with every empty cell set to the profile's value there."""
        return np.where(np.isnan(self.rows), self.profile()[None, :], self.rows)


@dataclass(frozen=True, eq=False)
class Aligned:
    """The rows shifted back by their lateness, their mean profile and its standard error, each row's lateness in bins."""

    rows: np.ndarray
    profile: np.ndarray
    stderr: np.ndarray
    lateness: np.ndarray


def fold(rate: np.ndarray, period: float, bins: int | None = None) -> Folded:
    """Fold ``rate`` (one value per sample) at ``period`` samples: about one sample per bin per iteration by default."""
    bins = max(4, int(math.floor(period))) if bins is None else bins
    iterations = int(math.floor(rate.size / period))
    centres = np.arange(rate.size) + 0.5
    iteration = np.floor(centres / period).astype(np.int64)
    keep = iteration < iterations
    phase = np.minimum((np.mod(centres[keep], period) / period * bins).astype(np.int64), bins - 1)
    cell = iteration[keep] * bins + phase
    sums = np.bincount(cell, weights=rate[keep], minlength=iterations * bins)
    counts = np.bincount(cell, minlength=iterations * bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        rows = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return Folded(period, rows.reshape(iterations, bins))


def explained(folded: Folded) -> float:
    """Share of the folded series' variance that the mean profile explains (1: every iteration alike)."""
    rows = folded.rows
    seen = ~np.isnan(rows)
    values = rows[seen]
    total = float(np.sum((values - values.mean()) ** 2))
    if total <= 0.0:
        return 0.0
    residual = float(np.sum((rows - folded.profile()[None, :])[seen] ** 2))
    return max(0.0, 1.0 - residual / total)


def align(folded: Folded, rounds: int = 2) -> Aligned:
    """Each iteration's lateness against the mean profile, and the profile of the rows shifted back by it."""
    rows = folded.filled()
    bins, iterations = folded.bins, folded.iterations
    template = folded.profile()
    lateness = np.zeros(iterations)
    shifted = rows
    for _ in range(rounds):
        spectrum = np.fft.rfft(template - template.mean())
        row_spectra = np.fft.rfft(rows - rows.mean(axis=1, keepdims=True), axis=1)
        corr = np.fft.irfft(row_spectra * np.conj(spectrum)[None, :], n=bins, axis=1)
        peak = np.argmax(corr, axis=1)
        left = corr[np.arange(iterations), (peak - 1) % bins]
        centre = corr[np.arange(iterations), peak]
        right = corr[np.arange(iterations), (peak + 1) % bins]
        lateness = peak + _vertices(left, centre, right)
        lateness = np.where(lateness > bins / 2, lateness - bins, lateness)
        shifted = _shift_back(rows, lateness)
        template = shifted.mean(axis=0)
    stderr = shifted.std(axis=0, ddof=1) / np.sqrt(iterations) if iterations > 1 else np.zeros(bins)
    return Aligned(shifted, template, stderr, lateness)


def _shift_back(rows: np.ndarray, lateness: np.ndarray) -> np.ndarray:
    """Row ``k`` read from ``lateness[k]`` bins on (circularly), linear between bins.

    Whole-bin shifts would leave each row's sub-bin offset behind, and those offsets cycle with the
    iterations when the period is near a ratio of whole samples; linear interpolation has no ringing.
    """
    bins = rows.shape[1]
    whole = np.floor(lateness).astype(np.int64)
    fraction = (lateness - whole)[:, None]
    index = (np.arange(bins)[None, :] + whole[:, None]) % bins
    shifted = (1.0 - fraction) * np.take_along_axis(rows, index, axis=1) + \
        fraction * np.take_along_axis(rows, (index + 1) % bins, axis=1)
    return np.asarray(shifted, dtype=np.float64)


def repeats_within(folded: Folded, parts: int, *, materiality: float = 0.08) -> bool:
    """Whether every ``parts``-th iteration of ``folded`` is alike, up to noise and to a material difference.

    ``False`` means the true period is ``parts`` times the folded one: iterations ``k`` and
    ``k + 1`` differ (two unequal bursts half a period apart, folded at half the period). The rows
    are aligned first (jitter common to an iteration would drown a real difference) and grouped by
    ``k mod parts``. The groups' mean profiles differ *significantly* when their spread is more than
    the bound below times what the variation within the groups explains, and *materially* when its
    RMS is more than ``materiality`` of the profile's standard deviation. Only a significant and
    material difference says the copies differ. Rows are smoothed over five bins first: where the
    period is close to a ratio of whole samples, the sampling grid falls on the edges at a phase
    that cycles with the iterations, and the edge shapes that leaves (bytes moved by a fraction of a
    bin, after alignment) are not traffic.

    The significance bound is the 0.999 quantile of F(1, parts x (groups - 1)): a burst's rate
    varying from one iteration to the next moves all its bins together, so the spread may rest on a
    single degree of freedom however many bins there are.
    """
    groups = folded.iterations // parts
    if groups < 2:
        return True
    aligned = align(folded).rows
    smooth = np.mean([np.roll(aligned, k, axis=1) for k in range(-(SMOOTH_BINS // 2), SMOOTH_BINS // 2 + 1)], axis=0)
    rows = smooth[: groups * parts].reshape(groups, parts, folded.bins)
    sub = rows.mean(axis=0)  # (parts, bins)
    spread = float(np.mean(np.var(sub, axis=0)))
    # Were the groups alike, each group mean would be the same profile plus its own standard error.
    noise = float(np.mean(np.var(rows, axis=0, ddof=1))) / groups * (parts - 1) / parts
    scale = float(np.std(sub))
    if scale <= 0.0:
        return True
    significant = spread > _f_999(parts * (groups - 1)) * max(noise, 1e-300)
    material = math.sqrt(spread) > materiality * scale
    return not (significant and material)


# Student's t at 0.9995 (two-sided 0.999) by degrees of freedom; F(1, d) is its square.
_T_9995 = ((1, 636.6), (2, 31.60), (3, 12.92), (4, 8.610), (5, 6.869), (6, 5.959), (7, 5.408), (8, 5.041),
           (9, 4.781), (10, 4.587), (12, 4.318), (15, 4.073), (20, 3.850), (30, 3.646), (60, 3.460),
           (120, 3.373), (1_000_000, 3.291))


def _f_999(dof: int) -> float:
    """The 0.999 quantile of F(1, dof), interpolated in 1/dof from the t table (conservative between rows)."""
    for (low, t_low), (high, t_high) in zip(_T_9995, _T_9995[1:]):
        if low <= dof <= high:
            weight = (1.0 / low - 1.0 / dof) / (1.0 / low - 1.0 / high)
            return float((t_low + weight * (t_high - t_low)) ** 2)
    return _T_9995[0][1] ** 2 if dof < 1 else _T_9995[-1][1] ** 2


def _nanmean(rows: np.ndarray) -> np.ndarray:
    seen = ~np.isnan(rows)
    counts = seen.sum(axis=0)
    sums = np.where(seen, rows, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / counts
    if np.any(counts == 0):  # a bin no iteration saw: take its neighbours' level
        idx = np.arange(mean.size)
        good = counts > 0
        mean = np.interp(idx, idx[good], mean[good], period=mean.size)
    return np.asarray(mean, dtype=np.float64)


def _vertices(left: np.ndarray, centre: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Sub-bin offsets in [-0.5, 0.5] of the parabolas through three equally spaced points."""
    curvature = left - 2.0 * centre + right
    with np.errstate(invalid="ignore", divide="ignore"):
        offset = np.where(curvature < 0.0, 0.5 * (left - right) / np.where(curvature < 0.0, curvature, -1.0), 0.0)
    return np.clip(offset, -0.5, 0.5)
