"""The training-side helper that aligns bursts to the published slot, from env vars or live files."""

from __future__ import annotations

import os
import pathlib
import shutil
import warnings
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window
from volcano_metronome.runtime import (SLOT_FILES, Metronome, Stopwatch, Timing, aim, aim_and_arm, apply_traffic_class,
                                       next_start_ms, stretched)
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.engine import Engine, JobRun


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


def test_wait_late_by_more_than_half_a_period_waits_for_the_next_slot():
    slept: list[float] = []
    # Slot m starts at 50 ms + m x 200 ms.
    times = iter([100.200, 100.550, 100.960])
    m = Metronome(period_ms=200.0, offset_ms=50.0, epoch_ms=0.0, clock=lambda: next(times), sleep=slept.append)
    assert m.wait() == pytest.approx(50.0) and m.slot == 501  # pad to 100.250
    assert m.wait() == 0.0 and m.slot == 502  # 100 ms late for 100.450: no later than half a period, go at once
    # 110 ms past slot 504 (100.850; 503 is long gone): slot 505 (101.050) is nearer, so wait for it
    # rather than run into whatever holds the link in the slot that follows this gang's own.
    assert m.wait() == pytest.approx(90.0) and m.slot == 505
    assert slept == pytest.approx([0.05, 0.09])


def test_after_a_collision_a_burst_more_than_a_quarter_period_late_waits_for_the_next_slot():
    # Slot m starts at m x 200 ms. 60 ms past slot 1: a slow step goes at once (up to half a period);
    # after a burst another gang stretched, the gang it collided with is late too, and a burst going
    # 60 ms late into the slot after its own meets it again: wait for slot 2.
    assert aim(260.0, 0.0, 200.0, 0) == 1
    assert aim(260.0, 0.0, 200.0, 0, collided=True) == 2
    assert aim(240.0, 0.0, 200.0, 0, collided=True) == 1  # up to a quarter period late: at once
    assert aim(150.0, 0.0, 200.0, 0, collided=True) == 1  # early: pads, as ever


def test_a_collision_holds_one_burst_back_then_none_until_an_iteration_without_one():
    # Slot m at m x 200 ms; every burst here is 60 ms late for slot previous + 1.
    assert aim_and_arm(260.0, 0.0, 200.0, 0, collided=True, armed=True) == (2, False)  # held back, disarmed
    # Stretched again at once (a neighbour that does not align): goes at once, as a slow step would.
    assert aim_and_arm(460.0, 0.0, 200.0, 1, collided=True, armed=False) == (2, False)
    assert aim_and_arm(660.0, 0.0, 200.0, 2, collided=False, armed=False) == (3, True)  # clean: armed again
    assert aim_and_arm(240.0, 0.0, 200.0, 0, collided=True, armed=True) == (1, True)  # not held: stays armed


def test_a_burst_collided_when_it_took_over_5_percent_longer_than_the_shortest_of_its_size():
    assert not stretched(102.0, 100.0) and stretched(106.0, 100.0)
    assert not stretched(10.0, 0.0)  # a 0 ms burst: nothing to compare to
    clock = [0.0]
    stopwatch = Stopwatch(clock=lambda: clock[0])

    def iteration(*bursts: tuple[float, int | None]) -> bool:
        stopwatch.iteration()
        for took_ms, nbytes in bursts:
            with stopwatch.burst(nbytes):
                clock[0] += took_ms / 1000.0
            clock[0] += 0.1
        clock[0] += 0.1
        stopwatch.iteration()
        return stopwatch.collided()

    assert not iteration((100.0, 8), (10.0, 1))  # the first of each size sets its shortest
    assert not iteration((102.0, 8), (10.0, 1))  # 2 % longer: no collision
    assert iteration((100.0, 8), (12.0, 1))  # the small one 20 % longer: stretched
    assert not iteration((90.0, 8))  # a shorter one is the new shortest
    assert iteration((100.0, 8))  # and 100 ms is now 11 % longer than it


def stretched_second_burst() -> tuple[Metronome, list[float]]:
    """A helper with a stopwatch (slot m at 50 ms + m x 200 ms) after two timed bursts, the second 40 % longer."""
    clock = [100.200]
    stopwatch = Stopwatch(clock=lambda: clock[0])
    m = Metronome(period_ms=200.0, offset_ms=50.0, epoch_ms=0.0, clock=lambda: clock[0], sleep=lambda s: None,
                  stopwatch=stopwatch)
    for ready, burst_ms in ((100.200, 100.0), (100.420, 140.0)):
        clock[0] = ready
        m.wait()
        start = max(ready, 0.050 + (m.slot or 0) * 0.2)
        clock[0] = start
        with stopwatch.burst(8):
            clock[0] = start + burst_ms / 1000.0
    clock[0] = 100.710  # 60 ms after slot 503
    return m, clock


def test_wait_after_a_stretched_burst_holds_the_gang_to_a_quarter_period_late():
    m, _ = stretched_second_burst()
    assert m.wait() == pytest.approx(140.0) and m.slot == 504  # the stopwatch saw the collision
    m, _ = stretched_second_burst()
    assert m.wait(collided=False) == 0.0 and m.slot == 503  # an explicit answer overrides it: a slow step


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


# ----------------------------------------------------------------------------- the traffic class
CLASS_ENV = '{"NCCL_IB_SL":"2","NCCL_IB_TC":"74"}'


def test_apply_traffic_class_without_a_class_changes_nothing():
    for env in ({}, {"METRONOME_TRAFFIC_CLASS": "", "METRONOME_TRAFFIC_CLASS_ENV": ""}):  # absent; annotation absent
        before = dict(env)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert apply_traffic_class(env) == {}
        assert env == before


def test_apply_traffic_class_sets_the_class_variables_and_returns_them():
    env = {"METRONOME_TRAFFIC_CLASS": "1", "METRONOME_TRAFFIC_CLASS_ENV": CLASS_ENV, "OTHER": "x"}
    assert apply_traffic_class(env) == {"NCCL_IB_SL": "2", "NCCL_IB_TC": "74"}
    assert env == {"METRONOME_TRAFFIC_CLASS": "1", "METRONOME_TRAFFIC_CLASS_ENV": CLASS_ENV, "OTHER": "x",
                   "NCCL_IB_SL": "2", "NCCL_IB_TC": "74"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply_traffic_class(env) == {"NCCL_IB_SL": "2", "NCCL_IB_TC": "74"}  # again: the same, no warning


def test_apply_traffic_class_keeps_a_users_different_value_with_a_warning():
    env = {"METRONOME_TRAFFIC_CLASS": "1", "METRONOME_TRAFFIC_CLASS_ENV": CLASS_ENV, "NCCL_IB_TC": "106"}
    with pytest.warns(RuntimeWarning) as caught:
        assert apply_traffic_class(env) == {"NCCL_IB_SL": "2"}
    assert env["NCCL_IB_TC"] == "106" and env["NCCL_IB_SL"] == "2"
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "NCCL_IB_TC" in message and "'106'" in message and "'74'" in message
    assert "traffic class is not applied for NCCL_IB_TC" in message


def test_apply_traffic_class_takes_a_users_equal_value_silently():
    env = {"METRONOME_TRAFFIC_CLASS_ENV": CLASS_ENV, "NCCL_IB_SL": "2"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply_traffic_class(env) == {"NCCL_IB_SL": "2", "NCCL_IB_TC": "74"}
    assert env["NCCL_IB_SL"] == "2" and env["NCCL_IB_TC"] == "74"


@pytest.mark.parametrize("raw", ["{", "nccl", '["NCCL_IB_SL", "2"]', '"2"', "null", '{"NCCL_IB_SL": 2}',
                                 '{"NCCL_IB_SL": "2", "NCCL_IB_TC": null}', '{"NCCL_IB_SL": {"v": "2"}}',
                                 '{"": "2"}', '{"A=B": "2"}', '{"NCCL_IB_SL": "2\\u0000"}', "[" * 100_000])
def test_apply_traffic_class_refuses_anything_but_an_object_of_strings(raw):
    env = {"METRONOME_TRAFFIC_CLASS_ENV": raw}
    with pytest.raises(InvalidInput, match="METRONOME_TRAFFIC_CLASS_ENV") as refused:
        apply_traffic_class(env)
    assert "expected a JSON object of environment variable names to string values" in str(refused.value)
    assert refused.value.value == raw
    assert env == {"METRONOME_TRAFFIC_CLASS_ENV": raw}  # all or nothing: no variable set before the bad one


# ----------------------------------------------------------------------------- the timing files
class KubeletVolume:
    """A downwardAPI volume as the kubelet's atomic writer keeps it: every update is a new hidden
    directory, published by renaming a fresh ``..data_tmp`` symlink over ``..data``; the visible files
    are symlinks through ``..data``; the previous directory is then removed."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.updates = 0

    def publish(self, period: str = "", offset: str = "", epoch: str = "") -> None:
        self.updates += 1
        data = self.root / f"..2026_01_01_00_00_00.{self.updates:09d}"
        data.mkdir()
        for name, value in zip(SLOT_FILES, (period, offset, epoch)):
            (data / name).write_text(value)  # an absent annotation projects as an empty file
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        os.symlink(data.name, self.root / "..data_tmp")
        os.rename(self.root / "..data_tmp", self.root / "..data")
        for name in SLOT_FILES:
            if not (self.root / name).is_symlink():
                os.symlink(f"..data/{name}", self.root / name)
        if old is not None:
            shutil.rmtree(self.root / old)


class Clock:
    def __init__(self, seconds: float) -> None:
        self.now = seconds
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def follow(path: pathlib.Path, clock: Clock) -> Metronome:
    m = Metronome.from_dir(path, clock=clock, sleep=clock.sleep)
    assert m is not None
    return m


def test_from_dir_runs_free_until_locked_then_aligns_from_the_epoch(tmp_path: pathlib.Path) -> None:
    volume, clock = KubeletVolume(tmp_path), Clock(100.0)
    volume.publish(period="200")  # placed alone on its links: the period only
    m = follow(tmp_path, clock)
    assert m.wait() == 0.0 and not m.aligned
    volume.publish(period="200", offset="50", epoch="110000")  # locked, from an epoch 10 s ahead
    clock.now = 104.321
    assert m.wait() == 0.0 and m.pending is not None  # still free until the epoch
    clock.now = 110.120
    assert m.wait() == pytest.approx(130.0)  # the first slot of the grid: 110.050 + 200 ms
    assert (m.period_ms, m.offset_ms, m.epoch_ms) == (200.0, 50.0, 110000.0)
    clock.now += 0.1
    assert m.wait() == pytest.approx(100.0) and m.slot == 2


def test_from_dir_reanchors_on_a_move_at_its_epoch_and_runs_free_once_unlocked(tmp_path: pathlib.Path) -> None:
    volume, clock = KubeletVolume(tmp_path), Clock(200.0)
    volume.publish(period="200", offset="50", epoch="0")
    m = follow(tmp_path, clock)
    assert m.wait() == pytest.approx(50.0)  # 200.050
    clock.now += 0.170  # 200.220
    assert m.wait() == pytest.approx(30.0)  # the old grid's next slot, 200.250
    volume.publish(period="200", offset="150", epoch="201600")  # moved, from 201.6 s
    clock.now = 200.400
    assert m.wait() == pytest.approx(50.0)  # the old grid until then: 200.450
    clock.now = 201.700
    # In effect: re-anchor at the first slot of the new grid (201.750), not one slot on from the old one.
    assert m.wait() == pytest.approx(50.0) and m.offset_ms == 150.0
    volume.publish(period="200")  # unlocked: offset and epoch withdrawn
    clock.now = 201.960
    slept = len(clock.slept)
    assert m.wait() == 0.0 and not m.aligned and len(clock.slept) == slept


def test_from_dir_checks_for_changes_once_per_wait_and_reads_only_on_change(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    volume, clock = KubeletVolume(tmp_path), Clock(100.0)
    volume.publish(period="200", offset="0", epoch="0")
    m = follow(tmp_path, clock)
    links, reads = [], []
    real_readlink, real_read_text = os.readlink, pathlib.Path.read_text
    monkeypatch.setattr(os, "readlink", lambda p, *a, **k: links.append(p) or real_readlink(p, *a, **k))
    monkeypatch.setattr(pathlib.Path, "read_text",
                        lambda self, *a, **k: reads.append(self) or real_read_text(self, *a, **k))
    for _ in range(5):
        m.wait()
    assert len(links) == 5 and reads == []
    volume.publish(period="200", offset="100", epoch="0")
    m.wait()
    assert len(reads) == 3 and m.offset_ms == 100.0


def test_from_dir_reads_one_consistent_set_and_retries_a_set_swapped_away(tmp_path: pathlib.Path) -> None:
    volume, clock = KubeletVolume(tmp_path), Clock(100.0)
    volume.publish(period="200", offset="20", epoch="0")
    m = follow(tmp_path, clock)
    os.symlink("..gone", tmp_path / "..data_tmp")  # the link names a directory removed meanwhile
    os.rename(tmp_path / "..data_tmp", tmp_path / "..data")
    assert m.files is not None and m.files.changed() is None
    volume.updates += 1
    (tmp_path / "..gone").mkdir()
    for name, value in zip(SLOT_FILES, ("200", "80", "0")):
        (tmp_path / "..gone" / name).write_text(value)
    assert m.files.changed() == Timing(200.0, 80.0, 0.0)  # read now that it is there


def test_from_dir_follows_a_plain_directory_by_its_files(tmp_path: pathlib.Path) -> None:
    clock = Clock(100.0)
    for name, value in zip(SLOT_FILES, ("200", "", "")):
        (tmp_path / name).write_text(value)
    m = follow(tmp_path, clock)
    assert m.wait() == 0.0 and not m.aligned
    for name, value in zip(SLOT_FILES, ("200", "60", "0")):
        (tmp_path / f".{name}.new").write_text(value)
        os.replace(tmp_path / f".{name}.new", tmp_path / name)  # a new inode: seen without relying on mtime
    assert m.wait() == pytest.approx(60.0) and m.aligned


def test_from_dir_refuses_garbage_at_start_and_ignores_it_later(tmp_path: pathlib.Path) -> None:
    assert Metronome.from_dir(tmp_path / "absent") is None  # no volume: the gang is not managed
    volume, clock = KubeletVolume(tmp_path), Clock(100.0)
    volume.publish(period="200", offset="soon", epoch="0")
    with pytest.raises(InvalidInput, match="offset-ms: got 'soon'"):
        Metronome.from_dir(tmp_path)
    volume.publish(period="200", offset="50", epoch="0")
    m = follow(tmp_path, clock)
    volume.publish(period="0", offset="50", epoch="0")
    with pytest.warns(RuntimeWarning, match="period-ms"):
        waited = m.wait()
    assert waited == pytest.approx(50.0) and m.period_ms == 200.0  # the previous slot stays


def test_from_dir_names_an_unreadable_timing_file_and_keeps_the_slot(tmp_path: pathlib.Path) -> None:
    (tmp_path / "period-ms").write_bytes(b"\xff200")
    with pytest.raises(InvalidInput, match=r"period-ms: got b'\\xff200', expected UTF-8 text"):
        Metronome.from_dir(tmp_path)
    for name, value in zip(SLOT_FILES, ("200", "50", "0")):
        (tmp_path / name).write_text(value)
    m = follow(tmp_path, Clock(100.0))
    os.remove(tmp_path / "offset-ms")
    (tmp_path / "offset-ms").mkdir()  # not a file any more: read fails with an OSError other than "missing"
    with pytest.warns(RuntimeWarning, match="offset-ms: got 'Is a directory', expected a readable file"):
        assert m.wait() == pytest.approx(50.0) and m.offset_ms == 50.0  # the training step goes on, on its slot


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.booleans()), min_size=1, max_size=30),
       st.sampled_from([0.2, 0.25, 0.39]), st.floats(0.0, 0.2))
def test_the_simulator_aims_every_burst_exactly_as_the_runtime_helper_does(readies, period, offset):
    # The simulator's runtime model (sim.engine) must not drift from the helper: both aim with
    # runtime.aim, so a gang's bursts ready at the same instants, after the same collisions, go at
    # the same instants.
    job = JobRun(JobSpec("j", 0.0, 2, 1, 10, 0, Profile(period * 1000.0, (Window(0.0, 10.0, 10.0),))), 0, 0)
    job.offset_s, job.grid_period_s, job.realign = offset, period, True
    engine = SimpleNamespace(policy=SimpleNamespace(collision_aware=True))
    clock = [0.0]
    helper = Metronome(period * 1000.0, offset * 1000.0, 0.0, clock=lambda: clock[0], sleep=lambda s: None)
    now = 0.0
    for gap, collided in readies:
        now += gap
        clock[0] = now
        waited = helper.wait(collided)
        job.collided = collided
        target = Engine._target(engine, job, now)  # type: ignore[arg-type]
        assert max(target, now) == pytest.approx(now + waited / 1000.0, abs=1e-6)
