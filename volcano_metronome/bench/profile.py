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


def fold(text: str, without: str = "") -> tuple[int, Counter[str], Counter[str]]:
    """Collapsed stacks (``frame;frame;... count``) -> (samples, inclusive, self) counts per function.

    A frame is py-spy's ``function (file:line)``; lines are dropped so a function counts once per stack.
    py-spy leaves idle threads out (without ``--idle``). Stacks holding a function whose name starts
    with ``without`` are left out altogether.
    """
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_function(frame) for frame in stack.split(";") if frame and not frame.startswith("process ")]
        if not frames or (without and any(frame.startswith(without) for frame in frames)):
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
    """The top functions of ``directory/stacks.txt``, inclusive and self, in percent of the samples;
    and the same without the samples inside ``SSLSocket.send``.

    Why the second view: on loopback, a send runs the delivery to the client and wakes it, and on a
    busy machine the kernel often switches to the client right there, so the server's thread sits
    runnable inside ``send`` without running; py-spy counts that time (it is not idle). The CPU the
    server really spends is the benchmark's ``server_cpu_ms_per_request`` (from /proc).
    """
    text = (directory / "stacks.txt").read_text()
    total, inclusive, own = fold(text)
    rest, rest_inclusive, rest_own = fold(text, without="SSLSocket.send ")

    def table(counts: Counter[str], n_samples: int) -> list[list[Any]]:
        return [[frame, round(100.0 * n / max(n_samples, 1), 1)] for frame, n in counts.most_common(top)]

    return {"samples": total, "flame_graph": str(directory / "flame.svg"),
            "inclusive_percent": table(inclusive, total), "self_percent": table(own, total),
            "send_percent": round(100.0 * (total - rest) / max(total, 1), 1), "samples_without_send": rest,
            "without_send_inclusive_percent": table(rest_inclusive, rest),
            "without_send_self_percent": table(rest_own, rest)}
