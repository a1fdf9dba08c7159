"""``profile record``: the sampler on a fake counter file, its errors, and for real on loopback traffic."""

from __future__ import annotations

import io
import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from volcano_metronome import sampler
from volcano_metronome.cli import main
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.fit import Fit, fit
from volcano_metronome.profiling.trace import parse

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fake_net(tmp_path: pathlib.Path, name: str = "fake0", value: int = 123) -> pathlib.Path:
    stats = tmp_path / "net" / name / "statistics"
    stats.mkdir(parents=True, exist_ok=True)  # hypothesis examples share one tmp_path
    (stats / "tx_bytes").write_text(f"{value}\n")
    return tmp_path / "net"


def test_unknown_interface_names_it_and_the_ones_that_exist(tmp_path):
    root = fake_net(tmp_path)
    with pytest.raises(InvalidInput) as caught:
        sampler.counter_path("eth9", root)
    assert caught.value.field == "--interface" and caught.value.value == "eth9"
    assert "one of the interfaces that exist: fake0" in caught.value.expected


def test_cli_unknown_interface_exits_2(tmp_path, capsys):
    assert main(["profile", "record", "--interface", "no-such-if0", "--seconds", "1",
                 "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert "--interface: got 'no-such-if0', expected one of the interfaces that exist:" in err and "lo" in err


@pytest.mark.parametrize("hz, seconds, field", [(0, 1, "--hz"), (20_000, 1, "--hz"), (100, 0, "--seconds"),
                                                (100, 10**6, "--seconds")])
def test_out_of_range_rate_or_duration_is_refused(tmp_path, hz, seconds, field):
    path = sampler.counter_path("fake0", fake_net(tmp_path))
    with pytest.raises(InvalidInput) as caught:
        sampler.record(path, hz, seconds, io.StringIO())
    assert caught.value.field == field


def test_record_writes_a_trace_the_parser_reads_and_reports_the_rate_achieved(tmp_path):
    path = sampler.counter_path("fake0", fake_net(tmp_path, value=2**40))
    out = io.StringIO()
    done = sampler.record(path, 200.0, 0.25, out, interface="fake0")
    trace = parse(out.getvalue())
    assert trace.samples == done.samples
    # 200 Hz over 0.25 s: 51 ticks on an absolute schedule, each read once or skipped after a stall. How many a
    # loaded machine skips is not for a unit test to bound (one CI run skipped 17, with a 49 ms gap).
    assert done.samples >= 2 and done.samples + done.skipped == 51
    assert done.longest_gap_ms == pytest.approx(trace.longest_gap_s * 1000.0, abs=0.002)  # rows keep microseconds
    assert done.achieved_hz == pytest.approx((done.samples - 1) / trace.span_s, rel=1e-3)
    assert set(trace.tx_bytes) == {0.0}  # the counter did not move


def test_a_stall_skips_ticks_instead_of_bunching_them(tmp_path):
    path = sampler.counter_path("fake0", fake_net(tmp_path))
    now = [0.0]

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if 0.0995 < now[0] < 0.1005:
            now[0] += 0.05  # the process was descheduled for 50 ms at t = 0.1 s

    done = sampler.record(path, 100.0, 0.3, io.StringIO(), clock=clock, sleep=sleep)
    # 31 ticks from 0 to 0.3 s; the one due at 0.1 fires at 0.15 and the five due by then are skipped.
    assert done.samples == 31 - 5 and done.skipped == 5
    assert done.longest_gap_ms == pytest.approx(60.0)


@given(hz=st.sampled_from([50.0, 100.0, 333.0]), seconds=st.sampled_from([0.1, 0.25, 0.3]),
       stalls=st.lists(st.floats(0.0, 0.08), min_size=1, max_size=40))
@example(hz=50.0, seconds=0.1, stalls=[0.08])  # woke at 0.1 s, exactly when tick 5 was due: no row repeated
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_tick_due_is_read_once_or_skipped_whatever_the_stalls(tmp_path, hz, seconds, stalls):
    path = sampler.counter_path("fake0", fake_net(tmp_path))
    now, overshoot = [0.0], iter(stalls)

    def sleep(wait: float) -> None:
        now[0] += wait + next(overshoot, 0.0)  # each wake-up late by the next stall drawn

    out = io.StringIO()
    done = sampler.record(path, hz, seconds, out, clock=lambda: now[0], sleep=sleep)
    times = parse(out.getvalue()).time_s  # the parser refuses a time that repeats the row before
    due = math.floor(seconds * hz + 1e-9) + 1  # ticks at k / hz for k / hz <= seconds
    assert done.samples == times.size and done.samples + done.skipped == due
    assert times[0] == 0.0 and np.all(np.diff(times) > 0)


@pytest.mark.slow
def test_loopback_bursts_every_200_ms_are_recorded_and_fitted(tmp_path):
    """Real traffic on lo: 30 ms bursts of paced TCP every 200 ms while `profile record` samples tx_bytes.

    The sender (:mod:`tests.profiling.paced`) runs from before the recording starts until it ends: under
    load, starting the recorder (Python and its imports) took seconds, and a sender of a fixed number of
    bursts could be done before the trace was. Its bursts keep their length under load because the
    kernel paces them; only their starts wander, by how late the sender wakes.
    """
    out = tmp_path / "lo.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sender = subprocess.Popen([sys.executable, "-m", "tests.profiling.paced", "--period-ms", "200", "--burst-ms", "30"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        done = subprocess.run([sys.executable, "-m", "volcano_metronome", "profile", "record", "--interface", "lo",
                               "--hz", "1000", "--seconds", "4", "--out", str(out)],
                              capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    finally:
        sender.terminate()
        sent_out, sent_err = sender.communicate(timeout=30)
    assert sender.returncode == 0, sent_err
    sent = json.loads(sent_out)
    assert done.returncode == 0, done.stderr
    assert "Hz achieved (1000 Hz asked)" in done.stderr
    assert set(sent["queued"]) == {sent["burst_bytes"]}  # every burst queued whole: the kernel shaped each one
    result = fit(parse(out.read_text(), str(out)))
    assert isinstance(result, Fit), result
    # The sender's own interval: the slope of its start times (a late wake-up moves one start, not the slope).
    starts = np.asarray(sent["starts"])
    sent_every_ms = float(np.polyfit(np.arange(starts.size), starts, 1)[0]) * 1000.0
    assert sent_every_ms == pytest.approx(200.0, rel=0.01)
    assert result.profile.period_ms == pytest.approx(sent_every_ms, rel=0.05), result
    # The burst's window (the one carrying most bytes) has its length within 10 % of the period (the issue's
    # target for fitted windows).
    window = max(result.profile.windows, key=lambda w: w.len_ms * w.gbps)
    assert window.len_ms == pytest.approx(30.0, abs=0.1 * sent_every_ms), result


def test_a_refused_rate_leaves_the_trace_at_out_as_it_was(tmp_path, capsys):
    # The --out file used to be opened (emptied) before --hz was checked.
    out = tmp_path / "keep.csv"
    out.write_text("time_s,tx_bytes\n0,1\n")
    assert main(["profile", "record", "--interface", "lo", "--hz", "0", "--seconds", "1", "--out", str(out)]) == 2
    assert "--hz: got 0.0" in capsys.readouterr().err and out.read_text() == "time_s,tx_bytes\n0,1\n"


@pytest.mark.parametrize("argv, message", [(["--bind-address", "nope"], "--bind-address: got 'nope', expected an IP"),
                                           (["--metrics-port", "99999"], "--metrics-port: got 99999, expected a port")])
def test_the_agent_refuses_a_bad_metrics_address_before_it_starts(argv, message, capsys):
    assert main(["profile", "agent", "--interface", "lo", *argv]) == 2
    assert message in capsys.readouterr().err
