"""Fitting profiles to synthetic traces: known answers, harmonics, irregular sampling, refusals, targets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.profiling.accuracy import LENGTH_TOLERANCE, PERIOD_TOLERANCE, RATE_TOLERANCE, corner, errors, jobs
from tests.profiling.synth import Spec, csv
from volcano_metronome import api
from volcano_metronome.admission.annotations import read_request
from volcano_metronome.catalog import builtin
from volcano_metronome.cli import main
from volcano_metronome.core.profile import Profile
from volcano_metronome.profiling.fit import MIN_PERIODS, Fit, Refusal, fit
from volcano_metronome.profiling.trace import HEADER, Trace, parse, row


def fitted(spec: Spec, seed: int = 1) -> Fit:
    result = fit(parse(csv(spec, seed)))
    assert isinstance(result, Fit), result
    return result


def test_a_clean_single_window_comes_back_exactly():
    result = fitted(Spec(200.0, ((170.0, 30.0, 80.0),)))
    assert result.profile == Profile.from_mapping(
        {"period_ms": 200, "windows": [{"start_ms": 170, "len_ms": 30, "gbps": 80}], "jitter_ms": 0})
    assert result.confidence > 0.99
    assert result.periods == 19  # 20 periods from sample 0: the fold starts in the first quiet stretch


def test_windows_are_rotated_so_the_longest_gap_comes_first():
    # Bursts at 10 ms and 60 ms of a 300 ms period: the long quiet stretch (80..310) opens the period.
    result = fitted(Spec(300.0, ((10.0, 20.0, 100.0), (60.0, 20.0, 50.0))), seed=3)
    (a, b) = result.profile.windows
    assert (a.gbps, b.gbps) == pytest.approx((100.0, 50.0), rel=0.01)
    assert b.start_ms + b.len_ms == pytest.approx(300.0, abs=0.2)
    assert b.start_ms - a.start_ms == pytest.approx(50.0, abs=0.5)


def test_a_single_burst_is_not_reported_at_twice_its_period():
    for seed in range(5):
        result = fitted(Spec(120.0, ((0.0, 15.0, 40.0),), jitter_ms=4.0, rate_noise=0.1, periods=30), seed)
        assert result.profile.period_ms == pytest.approx(120.0, rel=0.01)


def test_unequal_bursts_half_a_period_apart_are_not_reported_at_half_the_period():
    result = fitted(Spec(200.0, ((20.0, 20.0, 50.0), (120.0, 20.0, 30.0)), jitter_ms=5.0, rate_noise=0.05))
    assert result.profile.period_ms == pytest.approx(200.0, rel=0.01)
    assert sorted(w.gbps for w in result.profile.windows) == pytest.approx([30.0, 50.0], rel=0.05)


def test_equal_bursts_half_a_period_apart_are_the_shorter_period():
    """Two identical bursts 100 ms apart repeat every 100 ms: that is the honest answer."""
    result = fitted(Spec(200.0, ((20.0, 20.0, 50.0), (120.0, 20.0, 50.0)), rate_noise=0.02))
    assert result.profile.period_ms == pytest.approx(100.0, rel=0.01)
    assert len(result.profile.windows) == 1


def test_irregular_sampling_background_and_jitter():
    spec = Spec(250.0, ((30.0, 40.0, 25.0), (150.0, 10.0, 90.0)), hz=1000.0, jitter_ms=4.0, rate_noise=0.05,
                background_gbps=0.5, irregular=0.45, periods=24, phase_ms=77.0)
    result = fitted(spec)
    e = errors(spec, result)
    assert e.period <= 0.005 and e.length <= 0.01 and e.rate <= 0.05 and e.placement <= 0.01, e
    assert result.baseline_gbps == pytest.approx(0.5, rel=0.2)
    assert result.longest_gap_ms > 1.3  # irregular: some intervals near 1.45 ms


def test_jitter_is_the_spread_of_burst_lateness():
    result = fitted(Spec(200.0, ((100.0, 40.0, 60.0),), jitter_ms=10.0, periods=60), seed=7)
    # Uniform lateness over 10 ms: the 2.5..97.5 percentile spread is 9.5 ms.
    assert 7.5 <= result.profile.jitter_ms <= 11.0
    assert result.profile.windows[0].len_ms == pytest.approx(40.0, abs=1.0)


def test_jitter_longer_than_the_window_still_gives_its_length():
    result = fitted(Spec(400.0, ((100.0, 12.0, 60.0),), jitter_ms=20.0, periods=40), seed=2)
    assert result.profile.period_ms == pytest.approx(400.0, rel=0.01)
    assert result.profile.windows[0].len_ms == pytest.approx(12.0, abs=2.0)


# The same examples on every run (none replayed from a local database): near its corner the domain's targets hold
# for all but about 1 trace in 1,000 (docs/profiles.md), which a search that draws new examples every run finds
# now and then. The corner's miss rate has its own test below; `python3 -m tests.profiling.accuracy` draws anew.
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_targets_hold_on_noisy_jittered_jobs(job):
    """Issue 16's targets: period within 2 %, window length within 10 % of the period, rate within 10 %."""
    spec, seed = job
    result = fit(parse(csv(spec, seed)))
    assert isinstance(result, Fit), result
    e = errors(spec, result)
    assert e.windows_found == e.windows_true, (e, result.profile)
    assert e.period <= PERIOD_TOLERANCE, e
    assert e.length <= LENGTH_TOLERANCE, e
    assert e.rate <= RATE_TOLERANCE, e
    assert e.placement <= LENGTH_TOLERANCE, e


def test_at_the_domain_s_corner_the_targets_are_missed_rarely():
    """Two 8-sample bursts of 1 and 0.5 Gbps half a period apart, late by up to a quarter and a third of their
    length (the domain's edge): 200 fixed traces each, of which 1 and 2 miss a target today (docs/profiles.md)."""
    for name, figures in corner(traces=10, shares=(0.25, 1.0 / 3.0)).items():
        assert figures["traces"] == 200 and figures["missed"] <= 4, (name, figures)


def test_the_annotations_are_accepted_by_the_webhook_as_they_are():
    result = fitted(Spec(200.0, ((20.0, 20.0, 50.0), (120.0, 20.0, 30.0)), jitter_ms=5.0, rate_noise=0.05))
    request = read_request(result.annotations(), builtin(), 100.0)
    assert result.profile.jitter_ms > 0
    assert request.profile == result.profile.slow_end()  # declared at the slow end: held after slow iterations
    assert request.profile.period_ms == result.profile.period_ms + result.profile.jitter_ms / 2
    assert set(result.annotations()) == {api.PERIOD_MS, api.WINDOWS, api.JITTER_MS}


def test_more_than_32_bursts_are_merged_into_32_windows():
    gaps = np.random.default_rng(5).uniform(3.0, 8.0, 40)  # 40 irregularly spaced bursts in a 600 ms period
    windows = tuple((float(i * 5.0 + gaps[:i].sum()), 5.0, 10.0 + 2.0 * i) for i in range(40))
    spec = Spec(600.0, windows, hz=2000.0, periods=12)
    result = fitted(spec)
    assert len(result.profile.windows) == 32
    sent = sum(w.len_ms * w.gbps for w in result.profile.windows)
    assert sent == pytest.approx(sum(n * g for _, n, g in windows), rel=0.03)  # merging keeps the bytes


def refusal(spec: Spec, seed: int = 1) -> Refusal:
    result = fit(parse(csv(spec, seed)))
    assert isinstance(result, Refusal), result
    return result


def test_too_short_a_trace_is_refused_with_what_to_record():
    result = refusal(Spec(200.0, ((170.0, 30.0, 80.0),), periods=3.5))
    assert result.reason == "too-short"
    assert f"at least {MIN_PERIODS} are needed" in result.detail and "repeats about every 20" in result.detail


def test_a_trace_shorter_than_two_periods_is_refused_as_aperiodic_or_longer():
    result = refusal(Spec(200.0, ((170.0, 30.0, 80.0),), periods=1.5))
    assert result.reason == "aperiodic"
    assert "or its period is longer" in result.detail


def test_too_coarse_a_trace_is_refused_with_the_rate_needed():
    result = refusal(Spec(100.0, ((10.0, 12.0, 80.0),), hz=200.0, periods=30))
    assert result.reason == "too-coarse"
    assert "slower than a quarter of the shortest window" in result.detail and "--hz" in result.detail


@pytest.mark.parametrize("seed", range(4))
def test_a_sliver_beside_a_burst_is_not_a_window_too_short_to_sample(seed):
    """The real all-reduce under CPU contention: a 6 ms trickle at a quarter of the burst's rate ahead of it.

    Sampled every 4 ms it is a run too short to place and carrying 4 % of the burst's bytes: without
    the sliver rule the trace was refused as too coarse; the burst itself is resolved and fitted.
    """
    spec = Spec(500.0, ((420.0, 6.0, 2.0), (450.0, 40.0, 8.0)), hz=250.0, periods=16, jitter_ms=2.0,
                rate_noise=0.1)
    (window,) = fitted(spec, seed).profile.windows
    assert window.len_ms == pytest.approx(40.0, rel=0.05) and window.gbps == pytest.approx(8.0, rel=0.05)


@pytest.mark.parametrize("windows", [((420.0, 6.0, 20.0), (450.0, 40.0, 8.0)), ((450.0, 6.0, 8.0),)],
                         ids=["short-window-with-a-third-of-the-bytes", "only-a-short-window"])
def test_a_short_window_carrying_material_bytes_is_still_too_coarse(windows):
    result = refusal(Spec(500.0, windows, hz=250.0, periods=16, jitter_ms=2.0, rate_noise=0.1))
    assert result.reason == "too-coarse", result


def test_random_traffic_is_refused_as_aperiodic():
    rng = np.random.default_rng(0)
    bursts = tuple((float(s), float(n), float(g)) for s, n, g in
                   zip(np.sort(rng.uniform(0, 9000, 60)), rng.uniform(5, 40, 60), rng.uniform(10, 100, 60)))
    spec = Spec(10_000.0, tuple(b for i, b in enumerate(bursts) if i == 0 or b[0] > bursts[i - 1][0] + 41), periods=1.0)
    result = refusal(spec)
    assert result.reason == "aperiodic"


def random_traffic(kind: str, seed: int) -> Trace:
    """A 8 s trace at 1 kHz of traffic with no period (Gbps per millisecond into a byte counter)."""
    rng = np.random.default_rng(seed)
    if kind == "white":
        gbps = rng.normal(10.0, 1.0, 8000).clip(0.0)
    elif kind == "poisson":
        gbps = rng.exponential(1.0, 8000) * (rng.uniform(size=8000) < 0.05)
    elif kind == "ar1":  # slowly wandering rate, correlated over ~30 ms
        gbps = 20.0 + np.convolve(rng.normal(0.0, 1.0, 8000), 0.97 ** np.arange(200))[:8000]
    else:
        gbps = np.zeros(8000)
        for start in rng.uniform(0, 7950, 80).astype(int):
            gbps[start: start + rng.integers(5, 40)] += rng.uniform(10.0, 100.0)
    counter = np.concatenate(([0.0], np.cumsum(np.floor(gbps.clip(0.0) * 1e9 / 8 / 1000))))
    return Trace(np.arange(8001) / 1000.0, counter)


@pytest.mark.parametrize("kind", ["white", "poisson", "ar1", "bursts"])
def test_random_traffic_of_several_kinds_is_refused_as_aperiodic(kind):
    for seed in range(3):
        result = fit(random_traffic(kind, seed))
        assert isinstance(result, Refusal) and result.reason == "aperiodic", (kind, seed, result)


def test_silence_is_refused_as_aperiodic():
    text = HEADER + "\n" + "".join(row(i / 1000, 7) for i in range(5000))
    assert fit(parse(text)).reason == "aperiodic"


def test_a_handful_of_samples_is_too_short():
    assert fit(Trace(np.arange(5.0), np.arange(5.0))).reason == "too-short"


# The command line.

def write(tmp_path, text):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return str(path)


def test_cli_prints_the_profile_and_the_annotations_to_paste(tmp_path, capsys):
    path = write(tmp_path, csv(Spec(200.0, ((170.0, 30.0, 80.0),)), 1))
    assert main(["profile", "fit", path]) == 0
    out = capsys.readouterr().out
    assert "period 200 ms over 19 periods" in out
    assert "metronome.dev/period-ms: '200'" in out
    assert """metronome.dev/windows: '[{"start_ms":170,"len_ms":30,"gbps":80}]'""" in out
    assert "metronome.dev/jitter-ms: '0'" in out


def test_cli_json_is_the_profile_plus_its_figures(tmp_path, capsys):
    path = write(tmp_path, csv(Spec(200.0, ((170.0, 30.0, 80.0),), jitter_ms=3.0, rate_noise=0.05), 1))
    assert main(["profile", "fit", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert Profile.from_mapping({k: doc[k] for k in ("period_ms", "windows", "jitter_ms")}).period_ms == \
        pytest.approx(200.0, rel=0.01)
    assert 0.0 <= doc["confidence"] <= 1.0 and doc["periods"] >= MIN_PERIODS
    assert float(doc["annotations"][api.PERIOD_MS]) == pytest.approx(doc["period_ms"] + doc["jitter_ms"] / 2, abs=1e-6)


def test_cli_refusal_exits_2_with_the_reason(tmp_path, capsys):
    path = write(tmp_path, csv(Spec(200.0, ((170.0, 30.0, 80.0),), periods=3.5), 1))
    assert main(["profile", "fit", path]) == 2
    assert "refused (too-short)" in capsys.readouterr().err
    assert main(["profile", "fit", path, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["refused"] == "too-short"


def test_cli_malformed_trace_exits_2_naming_line_and_column(tmp_path, capsys):
    path = write(tmp_path, HEADER + "\n0,1\n0.001,x\n")
    assert main(["profile", "fit", path]) == 2
    err = capsys.readouterr().err
    assert f"{path}: line 3, column tx_bytes: got 'x', expected a whole number of bytes" in err


def test_cli_missing_file_exits_2(tmp_path, capsys):
    assert main(["profile", "fit", str(tmp_path / "none.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_period_whose_first_autocorrelation_peak_is_lower_than_later_ones_is_still_found():
    """Jitter longer than the window: here the peak at P comes out under 0.8 of the highest, at 2P."""
    result = fitted(Spec(200.0, ((170.0, 10.0, 80.0),), jitter_ms=15.0, rate_noise=0.05), seed=2)
    assert result.profile.period_ms == pytest.approx(200.0, rel=0.01)
    assert result.profile.windows[0].len_ms == pytest.approx(10.0, abs=1.5)


def test_equal_bursts_at_twice_the_period_are_folded_to_the_period():
    """Found by the property above: one short burst with jitter over few periods read as two equal bursts
    at twice the period; equal, evenly spaced windows mean the shorter period."""
    spec = Spec(period_ms=116.5, windows=((0.0, 4.0, 1.0),), periods=14.0, hz=2000.0, jitter_ms=1.0,
                rate_noise=0.0, background_gbps=0.0, irregular=0.0, phase_ms=1.0)
    result = fitted(spec, seed=849)
    assert result.profile.period_ms == pytest.approx(116.5, rel=0.02)
    assert len(result.profile.windows) == 1


def test_a_burst_faster_than_any_node_is_refused_not_clamped():
    # It used to come back at 6,400 Gbps with its length kept: two thirds of its bytes gone, silently.
    result = refusal(Spec(200.0, ((170.0, 30.0, 20000.0),)))
    assert result.reason == "implausible" and "2e+04 Gbps" in result.detail


def test_a_trace_with_a_long_pause_is_refused_naming_the_pause():
    text = csv(Spec(200.0, ((170.0, 30.0, 80.0),), periods=20), 1)
    header, *rows = text.splitlines()
    # The recorder stalls for an hour after the tenth row: the fit used to resample the hour at 1 ms (GiBs).
    t, count = rows[-1].split(",")
    result = fit(parse("\n".join([header, *rows, row(float(t) + 3600.0, int(count) + 1).strip()]) + "\n"))
    assert isinstance(result, Refusal) and result.reason == "gap"
    assert result.detail.startswith("no sample for 3600 s after t = ")


def test_a_trace_of_more_intervals_than_a_fit_resamples_is_refused(monkeypatch):
    from volcano_metronome.profiling import fit as fit_module

    monkeypatch.setattr(fit_module, "MAX_STEPS", 1000)
    result = refusal(Spec(200.0, ((170.0, 30.0, 80.0),), periods=20))
    assert result.reason == "too-long" and "at most 1000" in result.detail
