"""The webhook benchmark runs end to end and prints the promised JSON (its figures are not asserted)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from volcano_metronome.bench.webhook import request_bodies

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_request_mix_is_well_formed_http():
    bodies = request_bodies()
    assert len(bodies) == 12
    for raw in bodies:
        head, _, body = raw.partition(b"\r\n\r\n")
        length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"Content-Length:")).split(b":")[1])
        assert length == len(body) and json.loads(body)["kind"] == "AdmissionReview"


@pytest.mark.slow  # starts a server and runs the real benchmark for a second: about 5 s
def test_benchmark_prints_its_json():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-m", "volcano_metronome.bench", "webhook", "--rps", "100", "--seconds", "0.5",
         "--warmup", "0.2", "--connections", "2", "--json"],
        capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert {"rps_target", "rps_achieved", "p50_ms", "p99_ms", "p999_ms", "errors"} <= set(figures)
    assert figures["rps_target"] == 100.0 and figures["errors"] == 0 and figures["requests"] == 50


def test_the_volcano_mix_goes_to_each_kinds_path_on_volcanos_server_and_to_mutate_on_ours():
    theirs, ours = request_bodies("volcano", "volcano"), request_bodies("volcano", "ours")
    assert len(theirs) == len(ours) == 6
    kinds = [json.loads(raw.partition(b"\r\n\r\n")[2])["request"]["kind"]["kind"] for raw in theirs]
    assert sorted(kinds) == ["Job", "Pod", "Pod", "Pod", "Pod", "PodGroup"]
    paths = {kind: raw.split(b" ", 2)[1].split(b"?")[0].decode() for kind, raw in zip(kinds, theirs)}
    assert paths == {"Job": "/jobs/mutate", "PodGroup": "/podgroups/mutate", "Pod": "/pods/mutate"}
    assert all(raw.startswith(b"POST /mutate?") for raw in ours)
    # The same reviews either way: only the request line differs.
    assert [raw.partition(b"\r\n\r\n")[2] for raw in theirs] == [raw.partition(b"\r\n\r\n")[2] for raw in ours]
