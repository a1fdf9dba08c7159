"""Run a scenario under several policies and seeds (the same workload per seed for every policy)."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Sequence, TextIO

from volcano_metronome.sim.engine import Engine, RunResult
from volcano_metronome.sim.report import compare
from volcano_metronome.sim.workload import SimScenario

#: ``say(line, last)``: a progress line, ``last`` when it closes one run.
Say = Callable[[str, bool], None]


def run_all(sim: SimScenario, policies: Sequence[str], seeds: Sequence[int],
            say: Say | None = None) -> dict[str, list[RunResult]]:
    """Every policy on every seed."""
    runs: dict[str, list[RunResult]] = {p: [] for p in policies}
    for s, seed in enumerate(seeds):
        jobs = sim.jobs(seed)
        for policy in policies:
            label = f"seed {seed} ({s + 1}/{len(seeds)})  {policy:<16}"
            started = time.perf_counter()

            def progress(done: int, total: int, now: float, label: str = label, started: float = started) -> None:
                if say is not None:
                    say(f"{label} {done:>4}/{total} jobs done, {now:7.0f} s simulated, "
                        f"{time.perf_counter() - started:6.1f} s wall", done == total)

            runs[policy].append(Engine(sim, jobs, policy, seed, progress=progress if say else None).run())
    return runs


def simulate(sim: SimScenario, policies: Sequence[str], seeds: Sequence[int],
             say: Say | None = None) -> tuple[dict[str, Any], dict[str, list[RunResult]]]:
    """The JSON report and the raw runs (for plots)."""
    runs = run_all(sim, policies, seeds, say)
    report = compare(sim.name, seeds, runs)
    if sim.execution.traffic_classes > 1:  # the fabric every policy ran on: only where it is not the fair one
        report["traffic_classes"] = sim.execution.traffic_classes
        report["classes_from"] = sim.execution.classes_from
    return report, runs


def terminal_progress(stream: TextIO | None = None) -> Say:
    """Progress (on stderr by default) rewritten in place on a terminal, one line per update otherwise."""
    out = stream if stream is not None else sys.stderr
    tty = out.isatty()

    def say(line: str, last: bool) -> None:
        stream = out
        if tty:
            stream.write("\r\033[K" + line + ("\n" if last else ""))
        else:
            stream.write(line + "\n")
        stream.flush()

    return say
