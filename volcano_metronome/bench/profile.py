"""Sampling the webhook server under load with py-spy (``bench webhook --profile DIR``).

py-spy is a developer tool, not a dependency: it must be on PATH when ``--profile`` is asked for.
Two samplers run over the measured seconds, one writing a flame graph (``flame.svg``), one the
collapsed stacks (``stacks.txt``) that :func:`summary` folds into the top frames, inclusive (the
share of samples a frame is on the stack) and self (the share it is on top).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import time
from collections import Counter
from typing import Any

RATE = 250  # samples per second per process


def start(directory: pathlib.Path, pid: int, warmup: float, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Start py-spy on ``pid`` and its children after ``warmup`` seconds, for ``seconds``."""
    binary = shutil.which("py-spy")
    if binary is None:
        raise RuntimeError("--profile needs py-spy on PATH (pip install py-spy)")
    directory.mkdir(parents=True, exist_ok=True)
    time.sleep(warmup)
    common = [binary, "record", "--pid", str(pid), "--subprocesses", "--nonblocking", "--rate", str(RATE),
              "--duration", str(max(1, int(seconds)))]
    outputs = (("flamegraph", "flame.svg"), ("raw", "stacks.txt"))
    return [subprocess.Popen(common + ["--format", fmt, "--output", str(directory / name)],
                             stdout=subprocess.DEVNULL, stderr=(directory / f"{name}.log").open("wb"))
            for fmt, name in outputs]


def finish(samplers: list[subprocess.Popen[bytes]]) -> None:
    """Wait for the samplers to write their files."""
    for sampler in samplers:
        sampler.wait(timeout=120)


def fold(text: str) -> tuple[int, Counter[str], Counter[str]]:
    """Collapsed stacks (``frame;frame;... count``) -> (samples, inclusive, self) counts per function.

    A frame is py-spy's ``function (file:line)``; lines are dropped so a function counts once per stack.
    py-spy leaves idle threads out (without ``--idle``), so every sample is CPU work.
    """
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_function(frame) for frame in stack.split(";") if frame and not frame.startswith("process ")]
        if not frames:
            continue
        n = int(count)
        total += n
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    return total, inclusive, own


def _function(frame: str) -> str:
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})" if path else name


def summary(directory: pathlib.Path, top: int = 25) -> dict[str, Any]:
    """The top functions of ``directory/stacks.txt``, inclusive and self, in percent of the samples."""
    total, inclusive, own = fold((directory / "stacks.txt").read_text())

    def table(counts: Counter[str]) -> list[list[Any]]:
        return [[frame, round(100.0 * n / max(total, 1), 1)] for frame, n in counts.most_common(top)]

    return {"samples": total, "flame_graph": str(directory / "flame.svg"),
            "inclusive_percent": table(inclusive), "self_percent": table(own)}
