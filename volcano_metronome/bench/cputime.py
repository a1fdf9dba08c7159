"""CPU time the service benchmarks bill: a process and its descendants (Linux /proc), or this process alone."""

from __future__ import annotations

import os
import pathlib


def own() -> float:
    """User + system CPU seconds so far of this process alone (its children are billed apart)."""
    times = os.times()
    return times.user + times.system


def process_tree(pid: int) -> float:
    """User + system CPU seconds so far of ``pid`` and every descendant (gunicorn's workers); 0 without /proc.

    A process that exits while the tree is read is passed over: its time is lost, not an error."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = pathlib.Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            for task in pathlib.Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(child) for child in (task / "children").read_text().split())
        except (OSError, IndexError, ValueError):
            continue
    return total
