"""The vectorised offset kernels equal the slow reference loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core import reference
from volcano_metronome.core import phasing


@st.composite
def link_case(draw, with_higher=False):
    period = draw(st.integers(1, 12))
    reps = draw(st.integers(1, 3))
    links = draw(st.integers(1, 3))
    hyper = period * reps
    base = np.array(draw(st.lists(st.integers(0, 150), min_size=links * hyper, max_size=links * hyper)),
                    dtype=np.int64).reshape(links, hyper)
    capacity = np.array(draw(st.lists(st.integers(1, 200), min_size=links, max_size=links)), dtype=np.int64)
    # Ring multipliers are 1; all-to-all ones are k (n - k) / (n - 1), whole or not.
    multiplier = np.array(draw(st.lists(st.integers(2, 9).flatmap(lambda n: st.integers(1, n - 1).map(
        lambda k: k * (n - k) / (n - 1))), min_size=links, max_size=links)))
    rates = np.array(draw(st.lists(st.sampled_from([0, 0, 10, 40, 100]), min_size=period, max_size=period)),
                     dtype=np.int64)
    higher = None
    if with_higher:
        higher = np.minimum(base, np.array(draw(st.lists(st.integers(0, 150), min_size=links * hyper,
                                                         max_size=links * hyper))).reshape(links, hyper))
    return base, capacity, multiplier, rates, higher


@given(link_case())
@settings(max_examples=150, deadline=None)
def test_fits_equals_reference(case):
    base, capacity, multiplier, rates, _ = case
    peak_load = phasing.fold(base, len(rates)).max(axis=1)
    got = phasing.fits(phasing.WindowMaxima.of(peak_load, phasing.longest_run(rates)), capacity, multiplier, rates)
    np.testing.assert_array_equal(got, reference.fits(base, capacity, multiplier, rates))


@given(link_case())
@settings(max_examples=150, deadline=None)
def test_added_overflow_equals_reference(case):
    base, capacity, multiplier, rates, _ = case
    got = phasing.added_overflow(phasing.fold(base, len(rates)), capacity, multiplier, rates)
    np.testing.assert_array_equal(got, reference.added_overflow(base, capacity, multiplier, rates))


@given(link_case(with_higher=True))
@settings(max_examples=100, deadline=None)
def test_damage_equals_reference(case):
    base, capacity, multiplier, rates, higher = case
    period = len(rates)
    got = phasing.damage(phasing.fold(base, period), phasing.fold(higher, period), capacity, multiplier, rates)
    np.testing.assert_allclose(got, reference.damage(base, higher, capacity, multiplier, rates), atol=1e-9)


@given(link_case())
@settings(max_examples=150, deadline=None)
def test_peak_equals_reference(case):
    base, capacity, multiplier, rates, _ = case
    peak_load = phasing.fold(base, len(rates)).max(axis=1)
    maxima = phasing.WindowMaxima.of(peak_load, len(rates))  # a table longer than the runs answers the same
    got = phasing.peak_utilisation(peak_load, maxima, capacity, multiplier, rates)
    np.testing.assert_allclose(got, reference.peak_utilisation(base, capacity, multiplier, rates))


@given(st.lists(st.integers(-50, 50), min_size=1, max_size=20), st.data())
@settings(max_examples=200, deadline=None)
def test_circular_windows_equal_reference(values, data):
    arr = np.array(values, dtype=np.int64)[None, :].repeat(2, axis=0)
    arr[1] = arr[1][::-1]
    start = data.draw(st.integers(0, len(values) - 1))
    length = data.draw(st.integers(1, len(values)))
    longest = data.draw(st.integers(length, 2 * len(values)))
    np.testing.assert_array_equal(phasing.WindowMaxima.of(arr, longest).window(start, length),
                                  reference.circular_window(arr, start, length, np.maximum))
    np.testing.assert_array_equal(phasing.circular_window_sum(arr, start, length),
                                  reference.circular_window(arr, start, length, np.add))


def test_window_maxima_refuse_a_window_longer_than_the_table():
    with pytest.raises(ValueError, match="window of 9 slots: the table holds windows of 1 to 7 slots"):
        phasing.WindowMaxima.of(np.arange(12)[None, :], 4).window(0, 9)


@given(st.lists(st.sampled_from([0, 1, 5]), min_size=1, max_size=30))
def test_runs_rebuild_the_pattern(values):
    rates = np.array(values, dtype=np.int64)
    rebuilt = np.zeros_like(rates)
    for run in phasing.runs(rates):
        assert run.value != 0
        assert (rebuilt[run.start:run.start + run.length] == 0).all()
        rebuilt[run.start:run.start + run.length] = run.value
    np.testing.assert_array_equal(rebuilt, rates)


def test_fold_refuses_a_period_that_does_not_divide():
    try:
        phasing.fold(np.zeros((1, 10)), 3)
    except ValueError as exc:
        assert "does not divide" in str(exc)
    else:
        raise AssertionError("fold accepted a period that does not divide the hyperperiod")
