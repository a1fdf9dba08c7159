"""The training-side helper that aligns bursts to the published slot."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.runtime import Metronome, next_start_ms


@given(st.floats(0, 1e9), st.floats(0, 1e9), st.floats(1, 10_000), st.floats(0, 10_000))
def test_next_start_is_the_first_aligned_instant_not_before_now(now, epoch, period, offset):
    start = next_start_ms(now, epoch, period, offset)
    assert start >= now - 1e-6 * max(1.0, now)
    assert start - now < period + 1e-6 * max(1.0, now)
    k = (start - epoch - offset) / period
    assert abs(k - round(k)) < 1e-6 * max(1.0, abs(k))


def test_wait_pads_when_early_goes_at_once_when_late_and_skips_a_whole_missed_period():
    slept: list[float] = []
    # Clock readings in seconds; slot m starts at 50 ms + m x 200 ms.
    times = iter([100.200, 100.300, 100.600, 101.090, 101.300, 101.400])
    m = Metronome(period_ms=200.0, offset_ms=50.0, epoch_ms=0.0, clock=lambda: next(times), sleep=slept.append)
    assert m.wait() == pytest.approx(50.0)  # first burst: pad to slot 501 (100.250)
    assert m.wait() == pytest.approx(150.0)  # slot 502 (100.450)
    assert m.wait() == pytest.approx(50.0)  # slot 503 (100.650)
    assert m.wait() == 0.0 and m.slot == 505  # slot 504 (100.850) is over a period behind: skip to 505
    assert m.wait() == 0.0 and m.slot == 506  # 50 ms late for slot 506: go at once...
    assert m.wait() == pytest.approx(50.0) and m.slot == 507  # ...and the next burst is back on its slot
    assert slept == pytest.approx([0.05, 0.15, 0.05, 0.05])


def test_from_env_reads_the_downward_api_variables_and_refuses_garbage():
    env = {"METRONOME_PERIOD_MS": "200", "METRONOME_OFFSET_MS": "100", "METRONOME_EPOCH": "1700000000000"}
    m = Metronome.from_env(env)
    assert m is not None and (m.period_ms, m.offset_ms, m.epoch_ms) == (200.0, 100.0, 1.7e12)
    assert Metronome.from_env({}) is None
    assert Metronome.from_env({**env, "METRONOME_OFFSET_MS": ""}) is None  # gang not placed yet
    with pytest.raises(InvalidInput, match="METRONOME_EPOCH"):
        Metronome.from_env({**env, "METRONOME_EPOCH": "soon"})
    with pytest.raises(InvalidInput, match="METRONOME_PERIOD_MS"):
        Metronome.from_env({**env, "METRONOME_PERIOD_MS": "0"})
