"""Sampling a NIC's transmit byte counter into a trace (``profile record``): the I/O and clock side of profiling.

The counter is ``/sys/class/net/IF/statistics/tx_bytes``, re-read from offset 0 of one open file
descriptor at every tick of an absolute schedule (``start + k / hz``), so that a slow tick does not
shift the ones after it; ticks that a stall made impossible are skipped, not bunched up. Each row
carries the time the counter was actually read, so the fitter sees the real, possibly irregular,
sampling.
"""

from __future__ import annotations

import os
import pathlib
import time
from dataclasses import dataclass
from typing import Callable, TextIO

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.trace import HEADER, row

SYS_CLASS_NET = pathlib.Path("/sys/class/net")
#: Fastest sampling asked for: the kernel's timer slack and Python's per-sample cost make more meaningless.
MAX_HZ = 10_000.0
#: Longest recording (a day).
MAX_SECONDS = 86_400.0
#: Rows keep microseconds (``profiling.trace.row``).
ROW_RESOLUTION_S = 1e-6


@dataclass(frozen=True)
class Recording:
    """What a recording achieved."""

    interface: str
    samples: int
    seconds: float  # from the first sample to the last
    asked_hz: float
    longest_gap_ms: float
    skipped: int  # ticks of the schedule a stall made impossible; samples + skipped is every tick due

    @property
    def achieved_hz(self) -> float:
        """Samples per second actually taken."""
        return (self.samples - 1) / self.seconds if self.seconds > 0 else 0.0


def interfaces(root: pathlib.Path = SYS_CLASS_NET) -> list[str]:
    """The network interfaces that exist (names under ``/sys/class/net``)."""
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def counter_path(interface: str, root: pathlib.Path = SYS_CLASS_NET) -> pathlib.Path:
    """The ``tx_bytes`` file of ``interface``; an unknown interface names the ones that exist."""
    known = interfaces(root)
    if interface not in known or "/" in interface or interface in {".", ".."}:
        raise InvalidInput("--interface", interface,
                           f"one of the interfaces that exist: {', '.join(known) if known else '(none found under ' + str(root) + ')'}")
    path = root / interface / "statistics" / "tx_bytes"
    if not path.is_file():
        raise InvalidInput("--interface", interface, f"an interface with a byte counter ({path} is missing)")
    return path


def check_rate(hz: float, seconds: float) -> None:
    """Refuse a sampling rate or a duration ``record`` cannot keep (before anything is opened or written)."""
    if not 0.0 < hz <= MAX_HZ:
        raise InvalidInput("--hz", hz, f"a sampling rate in (0, {MAX_HZ:g}] samples per second")
    if not 0.0 < seconds <= MAX_SECONDS:
        raise InvalidInput("--seconds", seconds, f"a duration in (0, {MAX_SECONDS:g}] seconds")


def record(path: pathlib.Path, hz: float, seconds: float, out: TextIO, *, interface: str = "",
           clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep) -> Recording:
    """Write the trace header and one row per tick for ``seconds`` at ``hz`` into ``out``."""
    check_rate(hz, seconds)
    period = 1.0 / hz
    ticks = int(seconds * hz + 1e-9) + 1  # due at start + k * period for k = 0 .. ticks - 1
    out.write(HEADER + "\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        start = clock()
        tick, samples, skipped, first, last, longest = 0, 0, 0, start, start, 0.0
        while tick < ticks:
            due = start + tick * period
            wait = due - clock()
            if wait > 0:
                sleep(wait)
            now = clock()
            value = int(os.pread(fd, 32, 0))
            out.write(row(now - start, value))
            if samples:
                longest = max(longest, now - last)
            else:
                first = now
            samples, last = samples + 1, now
            # After a stall, go on from the next tick still ahead rather than firing the missed ones at once.
            # "Ahead" by more than a row's microsecond: a tick due within it would repeat this row's time
            # (a fake clock hit exactly that), and the parser refuses repeated times.
            after = clock() - start
            ahead = max(tick + 1, int(after / period) + 1)
            while ahead * period <= after + ROW_RESOLUTION_S:
                ahead += 1
            skipped += min(ahead, ticks) - tick - 1
            tick = ahead
    finally:
        os.close(fd)
    return Recording(interface or path.parent.parent.name, samples, last - first, hz, longest * 1000.0, skipped)
