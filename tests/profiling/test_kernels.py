"""The vectorised profiling kernels against their slow references (tests/profiling/reference.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.profiling import reference
from volcano_metronome.profiling import period
from volcano_metronome.profiling.fold import _shift_back, fold
from volcano_metronome.profiling.trace import Trace, uniform

values = st.floats(0.0, 1000.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(2, 80), elements=values))
@example(np.array([3.6e-158] + [0.0] * 23))  # found by hypothesis: products of a tiny signal fell into subnormals
def test_autocorrelation_matches_the_loop(x):
    assert np.allclose(period.autocorrelation(x), reference.autocorrelation(list(x)), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.integers(2, 80), elements=st.integers(0, 1000).map(float)),
       st.sampled_from([1e-300, 1e-158, 1e150]))
def test_autocorrelation_does_not_depend_on_scale(x, scale):  # whole numbers: x * scale stays a normal float
    assert np.allclose(period.autocorrelation(x * scale), period.autocorrelation(x), atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(8, 120), elements=values), st.floats(2.0, 30.0), st.integers(2, 40))
def test_fold_matches_the_loop(rate, length, bins):
    if rate.size < length:
        return
    got = fold(rate, length, bins).rows
    want = reference.fold(list(rate), length, bins)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.allclose(np.nan_to_num(got), np.nan_to_num(want))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 30)), elements=values), st.data())
def test_fractional_shift_matches_the_loop(rows, data):
    lateness = np.array([data.draw(st.floats(-40.0, 40.0)) for _ in range(rows.shape[0])])
    got = _shift_back(rows, lateness)
    for k in range(rows.shape[0]):
        assert np.allclose(got[k], reference.shift_back(list(rows[k]), float(lateness[k])))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0005, 0.003), st.integers(0, 10**6)), min_size=2, max_size=40))
def test_uniform_rate_matches_the_loop_and_keeps_every_byte(steps):
    times = np.cumsum([0.0] + [s for s, _ in steps])
    counts = np.cumsum([10**9] + [b for _, b in steps]).astype(np.float64)
    rate = uniform(Trace(times, counts))
    want = reference.rate_from_counter(list(times), list(counts), rate.dt_s)
    assert np.allclose(rate.gbps, want)
    covered = rate.gbps.size * rate.dt_s
    sent = np.interp(times[0] + covered, times, counts) - counts[0]
    assert np.isclose(rate.gbps.sum() * rate.dt_s * 1e9 / 8, sent, rtol=1e-9, atol=1e-3)
