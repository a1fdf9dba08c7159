"""The epoch lattice: epochs written on claims and pods are points ``k * step`` (``step`` the hyperperiod cap,
in whole milliseconds), and every offset is written relative to its epoch (:func:`relative_offset`), so offsets
from different decisions compose, also for exact periods that do not divide the cap. PURE."""

from __future__ import annotations

import math

from volcano_metronome.controller.settings import Settings


def epoch_step_ms(settings: Settings) -> int:
    """The lattice step: the smallest whole-millisecond multiple of the hyperperiod cap."""
    h = settings.max_hyperperiod_ms
    for k in range(1, 10001):
        if abs(h * k - round(h * k)) < 1e-6:
            return int(round(h * k))
    return int(round(h))


def epoch_at_or_before(now_ms: float, settings: Settings) -> int:
    """The latest lattice epoch not after ``now_ms``."""
    step = epoch_step_ms(settings)
    return int(now_ms // step) * step


def epoch_at_or_after(t_ms: float, settings: Settings) -> int:
    """The first lattice epoch not before ``t_ms``."""
    step = epoch_step_ms(settings)
    return int(math.ceil(t_ms / step)) * step


def relative_offset(origin_offset_ms: float, epoch_ms: int, period_ms: float) -> float:
    """The offset to write next to ``epoch_ms``: ``(origin_offset_ms - epoch_ms) mod period_ms``, in [0, period).

    The core's offsets are relative to the Unix epoch; a lattice epoch is congruent to 0 modulo a grid
    period (the offset is written unchanged) but not modulo an exact period off the grid (say 195 ms),
    so the offset is folded: ``epoch + offset + k * period`` then lands on the core's phase for every period.
    """
    if period_ms <= 0:
        return origin_offset_ms
    offset = math.fmod(origin_offset_ms - math.fmod(float(epoch_ms), period_ms), period_ms)
    if offset < 0:
        offset += period_ms
    return 0.0 if offset >= period_ms or offset == 0 else offset
