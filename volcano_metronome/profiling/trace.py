"""NIC byte-counter traces: the CSV ``time_s,tx_bytes`` that ``profile record`` writes and ``profile fit`` reads.

A trace is a cumulative transmit counter (as read from ``/sys/class/net/IF/statistics/tx_bytes``)
sampled at a fixed or irregular rate, rows in time order. Parsing takes text, not a file, and every
refusal names the line, the column, the value and what was expected. A counter that goes back (an
interface reset, or a 32-bit counter that wrapped) is refused rather than guessed across: the bytes
sent over that interval are unknown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput

HEADER = "time_s,tx_bytes"
COLUMNS = ("time_s", "tx_bytes")
_COUNT = re.compile(r"[0-9]{1,20}")  # ASCII digits, at most a 64-bit counter's 20
_BITS_PER_BYTE = 8.0


@dataclass(frozen=True, eq=False)
class Trace:
    """Samples of a cumulative byte counter: ``time_s`` strictly increasing, ``tx_bytes`` never decreasing.

    ``tx_bytes`` counts from the first sample (the counter minus its first value), so a 64-bit
    counter far above 2**53 still gives exact differences.
    """

    time_s: np.ndarray  # float64, shape (n,)
    tx_bytes: np.ndarray  # float64, bytes sent since the first sample, shape (n,)

    @property
    def samples(self) -> int:
        """Number of rows."""
        return int(self.time_s.size)

    @property
    def span_s(self) -> float:
        """Time from the first to the last sample."""
        return float(self.time_s[-1] - self.time_s[0]) if self.samples else 0.0

    @property
    def interval_s(self) -> float:
        """The sampling interval: the median time between consecutive samples."""
        return float(np.median(np.diff(self.time_s))) if self.samples > 1 else math.inf

    @property
    def longest_gap_s(self) -> float:
        """The longest time between consecutive samples."""
        return float(np.max(np.diff(self.time_s))) if self.samples > 1 else math.inf


@dataclass(frozen=True, eq=False)
class Rate:
    """A trace resampled on a uniform grid: ``gbps[i]`` is the mean rate over ``[i * dt_s, (i + 1) * dt_s)``."""

    dt_s: float
    gbps: np.ndarray  # float64, shape (n,)


def parse(text: str, source: str = "trace") -> Trace:
    """Read the CSV text of a trace; ``source`` (a file name) prefixes every error."""
    lines = text.splitlines()
    if not lines or lines[0].strip().lstrip("\ufeff") != HEADER:
        raise InvalidInput(f"{source}: line 1", lines[0] if lines else "", f"the header {HEADER!r}")
    times: list[float] = []
    counts: list[int] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue  # a blank line carries no sample
        cells = line.split(",")
        if len(cells) != 2:
            raise InvalidInput(f"{source}: line {number}", line, f"two comma-separated columns {HEADER}")
        time_s = _time(cells[0].strip(), f"{source}: line {number}, column time_s")
        count = _count(cells[1].strip(), f"{source}: line {number}, column tx_bytes")
        if times and not time_s > times[-1]:
            raise InvalidInput(f"{source}: line {number}, column time_s", cells[0].strip(),
                               f"a time after the previous row's {times[-1]!r} s (rows in time order, no repeats)")
        if counts and count < counts[-1]:
            raise InvalidInput(f"{source}: line {number}, column tx_bytes", count,
                               f"at least the previous row's {counts[-1]} (a cumulative counter): it went back, "
                               "so the interface was reset or a 32-bit counter wrapped; fit the rows before or "
                               "after this line, or record again")
        times.append(time_s)
        counts.append(count)
    if len(times) < 2:
        raise InvalidInput(f"{source}: rows", len(times), "at least two samples below the header")
    return Trace(np.asarray(times, dtype=np.float64), np.asarray([c - counts[0] for c in counts], dtype=np.float64))


def row(time_s: float, tx_bytes: int) -> str:
    """One CSV row (with its newline) as ``parse`` reads it back: microsecond times, whole bytes."""
    return f"{time_s:.6f},{tx_bytes}\n"


def uniform(trace: Trace) -> Rate:
    """The mean rate over consecutive intervals of one sampling interval (linear interpolation of the counter).

    Interpolating the cumulative counter, not the rate, keeps every byte: irregular samples and gaps
    spread their bytes evenly over the time they cover.
    """
    dt = trace.interval_s
    steps = int(math.floor(trace.span_s / dt + 1e-9))
    grid = trace.time_s[0] + dt * np.arange(steps + 1)
    counter = np.interp(grid, trace.time_s, trace.tx_bytes)
    return Rate(dt, np.diff(counter) * _BITS_PER_BYTE / dt / 1e9)


def _time(text: str, field: str) -> float:
    if not fields.DECIMAL.fullmatch(text):
        raise InvalidInput(field, text, "a number of seconds such as 0.001")
    value = float(text)
    if not math.isfinite(value):
        raise InvalidInput(field, text, "a finite number of seconds")
    return value


def _count(text: str, field: str) -> int:
    if not _COUNT.fullmatch(text):
        raise InvalidInput(field, text, "a whole number of bytes >= 0 such as 123456 (at most 20 digits)")
    return int(text)
