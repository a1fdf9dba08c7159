"""Exact periods off the grid (``SlotGrid.exact``, ``Decision.periods``) against the in-memory API.

A lattice epoch is a multiple of the hyperperiod cap (25,200 ms), which 205 ms (41 slots) does not divide:
the offset written next to an epoch must be the core's (Unix-epoch relative) offset folded for that epoch,
so that ``epoch + offset + k * period`` lands on the core's phase. The fabric and gangs are those of
``test_lock_on_demand`` (two gangs of 200 ms sharing a NIC); the core's answers are bent to an exact period.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from tests.controller.test_lock_on_demand import (NOW, NS, PERIOD, SETTINGS, add_gang, assert_pods_follow, claim,
                                                   controller, converge, events, fake, pods)
from volcano_metronome import api, kube
from volcano_metronome.controller import deciding, objects
from volcano_metronome.controller.deciding import Reoptimised
from volcano_metronome.controller.epochs import epoch_at_or_after, epoch_at_or_before, relative_offset
from volcano_metronome.controller.observe import claim_view
from volcano_metronome.controller.profiledrift import _repoint
from volcano_metronome.controller.writes import LOCKED
from volcano_metronome.core import holding
from volcano_metronome.core.decision import Decision
from volcano_metronome.core.reoptimize import Move
from volcano_metronome.shapes.profiles import profile_from_spec

__all__ = ["fake"]  # the fixture, shared with test_lock_on_demand

EXACT = 205.0  # 41 slots of 5 ms: at least the profile's 200 ms, and no divisor of 25,200 ms


def lands(epoch: int, offset: float, origin: float, period: float) -> bool:
    """``epoch + offset + k * period`` meets the Unix-epoch phase ``origin``."""
    return (epoch + offset - origin) % period == pytest.approx(0.0, abs=1e-6) or (
        (epoch + offset - origin) % period == pytest.approx(period, abs=1e-6))


def pod_timing(p: dict) -> tuple[float, float, int]:
    ann = objects.annotations_of(p)
    return float(ann[api.PERIOD_MS]), float(ann[api.OFFSET_MS]), int(ann[api.EPOCH])


def exact_decisions(monkeypatch: pytest.MonkeyPatch, gang: str, offset_ms: float | None = None,
                    relay: str | None = None) -> list[Decision]:
    """Make the core decide ``gang`` at the exact period (at ``offset_ms`` when given), re-laying the
    running gang ``relay`` at it when the decision locks it; the decisions made are returned."""
    real = holding.decide
    made: list[Decision] = []

    def exact(snap: Any, g: Any, pol: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(snap, g, pol, *args, **kwargs)
        if not isinstance(result, Decision) or not g.name.endswith(f"/{gang}"):
            return result
        fields: dict[str, Any] = {"period_ms": EXACT}
        if offset_ms is not None:
            fields["offset_ms"], fields["offset_slots"] = offset_ms, round(offset_ms / SETTINGS.grid.slot_ms)
        if relay is not None:
            uid = f"{NS}/podgroup-{relay}"
            assert uid in result.locks, "the fabric arithmetic is wrong: the newcomer does not lock it"
            fields["periods"] = ((uid, EXACT),)
        made.append(dataclasses.replace(result, **fields))
        return made[-1]

    monkeypatch.setattr(holding, "decide", exact)  # what the controller's decide_or_hold calls
    return made


def test_relative_offset_folds_only_periods_off_the_grid() -> None:
    epoch = epoch_at_or_before(NOW * 1000, SETTINGS)
    assert relative_offset(40.0, epoch, PERIOD) == 40.0  # a grid period divides every lattice epoch
    assert epoch % EXACT != 0
    folded = relative_offset(40.0, epoch, EXACT)
    assert 0 <= folded < EXACT and folded != 40.0 and lands(epoch, folded, 40.0, EXACT)
    assert relative_offset(-5.0, 0, PERIOD) == 195.0 and relative_offset(EXACT, 0, EXACT) == 0.0


def test_a_decision_at_an_exact_period_is_written_relative_to_its_epoch(fake: FakeApi,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", lockOnDemand=False))  # locked: pods carry the offset
    made = exact_decisions(monkeypatch, "a", offset_ms=40.0)
    add_gang(fake, "a")
    converge(controller(fake))
    d = made[-1]
    status = claim(fake, "a")["status"]
    epoch = epoch_at_or_before(NOW * 1000, SETTINGS)
    assert status["periodMs"] == EXACT and status["epoch"] == epoch and status["locked"] is True
    assert status["offsetMs"] == relative_offset(d.offset_ms, epoch, EXACT) != d.offset_ms
    assert claim_view(claim(fake, "a")).origin_offset_ms() == pytest.approx(d.offset_ms)
    assert_pods_follow(fake, "a")
    for p in pods(fake, "a"):
        period, offset, at = pod_timing(p)
        assert period == EXACT and lands(at, offset, d.offset_ms, EXACT), (period, offset, at)
    plan, _ = controller(fake, NOW + 1).cycle()  # a restart agrees with what is written
    assert plan.writes == 0


def test_a_lock_re_lays_a_free_gang_at_the_period_it_shares(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Decision.periods``: the lock writes the new period with the offset folded for the lock's future
    epoch (the gang's phase on the Unix epoch's axis stays), then its pods get the new period."""
    add_gang(fake, "a")
    converge(controller(fake))
    first = claim_view(claim(fake, "a"))
    assert first.locked is False and first.period_ms == PERIOD
    origin = first.origin_offset_ms()
    exact_decisions(monkeypatch, "b", relay="a")
    add_gang(fake, "b")
    later = NOW + 100
    ctl = controller(fake, later)
    converge(ctl)
    a = claim(fake, "a")["status"]
    future = epoch_at_or_after(later * 1000 + SETTINGS.reconfigure_lead_ms, SETTINGS)
    assert future % EXACT != 0  # else nothing would need folding
    assert a["locked"] is True and a["periodMs"] == EXACT and a["epoch"] == future
    assert a["offsetMs"] == relative_offset(origin, future, EXACT) and lands(future, a["offsetMs"], origin, EXACT)
    assert claim_view(claim(fake, "a")).origin_offset_ms() == pytest.approx(origin)
    assert a["decidedAt"] == first.status["decidedAt"]  # locked and re-laid, never decided again
    assert_pods_follow(fake, "a")
    assert {pod_timing(p)[0] for p in pods(fake, "a")} == {EXACT}
    assert claim(fake, "b")["status"]["periodMs"] == EXACT and claim(fake, "b")["status"]["locked"] is True
    assert_pods_follow(fake, "b")
    shares = f"period {PERIOD:g} -> {EXACT:g} ms, in step with {NS}/PodGroup/b's"
    note = next(c for c in a["conditions"] if c["type"] == "Reconfigured")["message"]
    assert note.startswith(shares) and note.endswith(f"(re-laid to lock with {NS}/PodGroup/b)"), note
    locked = [e["note"] for e in fake.events if e["reason"] == LOCKED]
    assert len(locked) == 1 and locked[0].endswith(shares), locked
    assert events(fake, LOCKED) == ["a"]
    # The lock (with its period) is written before the deciding gang's claim, in one status write.
    statuses = [name for verb, plural, name in fake.writes if (verb, plural) == ("patch/status", api.CLAIMS)]
    assert statuses == ["podgroup-a", "podgroup-a", "podgroup-b"]
    plan, _ = controller(fake, later + 1).cycle()  # a restart agrees with what is written
    assert plan.writes == 0


def test_a_move_of_a_gang_at_an_exact_period_keeps_the_origin_phase(fake: FakeApi,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", lockOnDemand=False,
                                                 reoptimization={"enabled": True, "intervalSeconds": 60}))
    exact_decisions(monkeypatch, "a", offset_ms=40.0)
    add_gang(fake, "a")
    mono = [0.0]
    ctl = controller(fake, mono=mono)
    converge(ctl)
    before = claim_view(claim(fake, "a"))
    assert before.period_ms == EXACT and before.locked
    uid = f"{NS}/podgroup-a"
    move = Move(uid, 8, 30, 150.0)  # the core's offsets are the Unix epoch's
    monkeypatch.setattr(deciding, "reoptimise_running",
                        lambda world, settings, due, decided: Reoptimised((move,)) if due else Reoptimised())
    mono[0] = 61.0
    ctl.cycle()
    a = claim(fake, "a")["status"]
    future = epoch_at_or_after(NOW * 1000 + SETTINGS.reconfigure_lead_ms, SETTINGS)
    assert future % EXACT != 0  # else nothing would need folding
    assert a["epoch"] == future and a["periodMs"] == EXACT and a["locked"] is True
    assert a["offsetMs"] == relative_offset(move.offset_ms, future, EXACT)
    assert claim_view(claim(fake, "a")).origin_offset_ms() == pytest.approx(move.offset_ms)
    assert_pods_follow(fake, "a")
    for p in pods(fake, "a"):
        assert lands(pod_timing(p)[2], pod_timing(p)[1], move.offset_ms, EXACT)


def test_a_new_period_from_a_measured_profile_keeps_the_origin_phase() -> None:
    """``profilePolicy: adopt`` re-points a claim at an exact period onto a grid one from a future epoch."""
    epoch = epoch_at_or_before(NOW * 1000, SETTINGS)
    status = {"nodes": ["n0"], "members": [1], "offsetMs": relative_offset(40.0, epoch, EXACT), "periodMs": EXACT,
              "epoch": epoch}
    old = claim_view({"metadata": {"name": "c", "namespace": NS}, "spec": {}, "status": status})
    assert old.origin_offset_ms() == pytest.approx(40.0)
    profile = profile_from_spec({"periodMs": 240, "windows": [{"startMs": 200, "lenMs": 24, "gbps": 80}]}, "test")
    fields = _repoint(old, profile, SETTINGS, NOW)
    new = dataclasses.replace(old, period_ms=fields["periodMs"], epoch_ms=fields["epoch"], offset_ms=fields["offsetMs"])
    assert SETTINGS.grid.max_hyperperiod_slots * SETTINGS.grid.slot_ms % fields["periodMs"] == 0  # a grid period
    assert fields["epoch"] > NOW * 1000 and new.origin_offset_ms() == pytest.approx(40.0)
