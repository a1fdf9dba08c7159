"""The node agent, the timed loop and a paced sender as subprocesses on loopback, for the integration tests."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import urllib.request
from typing import IO, Iterable

from prometheus_client.parser import text_string_to_metric_families

ROOT = pathlib.Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _module(module: str, args: Iterable[str], stdout: int | IO[bytes],
            env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``python -m module args`` from the checkout, which it imports first, stderr with stdout."""
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=stdout, stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def start_agent(kubeconfig: pathlib.Path, node: str, log: pathlib.Path, port: int,
                args: Iterable[str] = ()) -> subprocess.Popen[bytes]:
    """``profile agent`` sampling ``lo`` in 4 s traces every 5 s, /metrics on 127.0.0.1:``port``."""
    with log.open("ab") as out:
        return _module("volcano_metronome", ["profile", "agent", "--kubeconfig", str(kubeconfig), "--node", node,
                                             "--interface", "lo", "--seconds", "4", "--interval", "5",
                                             "--metrics-port", str(port), "--bind-address", "127.0.0.1", *args], out)


def start_paced_sender(period_ms: float, burst_ms: float, max_bursts: int) -> subprocess.Popen[bytes]:
    """:mod:`tests.profiling.paced`: bursts on ``lo`` that the kernel paces, so that they keep their shape on a loaded
    machine; it stops after ``max_bursts`` bursts or at SIGTERM."""
    return _module("tests.profiling.paced", ["--period-ms", f"{period_ms:g}", "--burst-ms", f"{burst_ms:g}",
                                             "--max-bursts", str(max_bursts)], subprocess.DEVNULL)


def start_timed_loop(directory: pathlib.Path, namespace: str, gang: str, period_ms: float, burst_ms: float,
                     log: pathlib.Path, seconds: float = 90.0) -> subprocess.Popen[bytes]:
    """:mod:`tests.agent.timed_loop` as gang ``gang``'s process ``<gang>-0``, publishing into ``directory``."""
    env = {"METRONOME_MEASURED_DIR": str(directory), "METRONOME_NAMESPACE": namespace,
           "METRONOME_GANG_KIND": "PodGroup", "METRONOME_GANG_NAME": gang, "METRONOME_POD": f"{gang}-0"}
    with log.open("ab") as out:
        return _module("tests.agent.timed_loop", ["--period-ms", f"{period_ms:g}", "--burst-ms", f"{burst_ms:g}",
                                                  "--seconds", f"{seconds:g}"], out, env)


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for proc in processes:
        proc.terminate()
    for proc in processes:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def scrape(url: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and sorted labels."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(response.read().decode())
                for s in family.samples}
