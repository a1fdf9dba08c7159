"""Lock on demand against the in-memory API: a gang alone runs free; a gang placed on its links locks
it (claim, then pods, after the deciding gang's claim); a re-optimisation pass unlocks it again.

The fabric: 3 nodes of 8 GPUs in one rack, gangs of 3 members of 4 GPUs. A gang needs two nodes
(2 + 1 members) and loads their NICs; the second gang takes the 12 GPUs left, on the node the first
half fills and the free node, so the two always share one NIC. Each bursts 80 Gbps for 24 ms of
200 ms on 100 Gbps NICs: sharing a NIC, their windows must not overlap.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest

from tests.controller import builders as b
from tests.controller.cluster import timing
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import deciding, objects
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.observe import claim_view
from volcano_metronome.controller.queuepolicy import parse
from volcano_metronome.controller.writes import LOCKED, UNLOCKED
from volcano_metronome.controller.epochs import epoch_at_or_after, epoch_at_or_before
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.kube import Unavailable
from volcano_metronome.controller.deciding import Decided
from volcano_metronome.shapes.slots import number_text

NS = "lock"
NOW = 1_700_000_000.0
SETTINGS = Settings(write_concurrency=4)
PERIOD, WINDOW = 200.0, 24.0


@pytest.fixture
def fake() -> FakeApi:
    f = FakeApi()
    for i in range(3):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    return f


def controller(f: FakeApi, now: float = NOW, mono: list[float] | None = None) -> Controller:
    clock = mono if mono is not None else [0.0]
    return f.controller(now, SETTINGS, monotonic=lambda: clock[0])


def converge(ctl: Controller, limit: int = 10) -> None:
    for _ in range(limit):
        plan, _ = ctl.cycle()
        if not plan.writes:
            return
    raise AssertionError(f"no fixed point after {limit} cycles")


def add_gang(f: FakeApi, name: str, gbps: float = 80.0) -> None:
    profile = {"period_ms": PERIOD, "windows": [{"start_ms": 176, "len_ms": WINDOW, "gbps": gbps}], "jitter_ms": 0}
    f.put(kube.PODGROUPS, b.podgroup(NS, name, 3, gpus=4, profile=profile))
    for p in b.gang_pods(NS, name, 3, gpus=4, profile=profile):
        f.put(kube.PODS, p)


def remove_gang(f: FakeApi, name: str) -> None:
    for p in pods(f, name):
        f.delete(kube.PODS, NS, objects.name(p))
    f.delete(kube.PODGROUPS, NS, name)


def claim(f: FakeApi, gang: str) -> dict:
    return f.obj(kube.CLAIMS, NS, f"podgroup-{gang}")


def pods(f: FakeApi, gang: str) -> list[dict]:
    return [p for p in f.all(kube.PODS) if objects.annotations_of(p).get(api.GANG_NAME) == gang]


def assert_pods_follow(f: FakeApi, gang: str) -> None:
    """Every pod of the gang ungated, with the claim's timing: all three keys when locked, the period alone when not."""
    status = claim(f, gang)["status"]
    want = {api.PERIOD_MS: number_text(status["periodMs"])}
    if status["locked"]:
        want.update({api.OFFSET_MS: number_text(status["offsetMs"]), api.EPOCH: str(status["epoch"])})
    for p in pods(f, gang):
        assert not objects.gated_by_us(p) and timing(p) == want, (objects.name(p), timing(p), want)


def assert_interleaved(f: FakeApi) -> None:
    a, c = claim(f, "a")["status"], claim(f, "b")["status"]
    assert set(a["nodes"]) & set(c["nodes"]), "the fabric arithmetic above is wrong: no shared node"
    gap = ((c["epoch"] + c["offsetMs"]) - (a["epoch"] + a["offsetMs"])) % PERIOD
    assert WINDOW <= gap <= PERIOD - WINDOW, (a, c)


def events(f: FakeApi, reason: str) -> list[str]:
    return [e["regarding"]["name"] for e in f.events if e["reason"] == reason]


def metric(ctl: Controller, name: str) -> float:
    return ctl.metrics.registry.get_sample_value(name) or 0.0


def test_a_gang_alone_runs_free_and_a_gang_sharing_its_nics_locks_it(fake: FakeApi) -> None:
    add_gang(fake, "a")
    converge(controller(fake))
    first = claim(fake, "a")["status"]
    assert first["locked"] is False and len(first["nodes"]) == 2
    placed = next(c for c in first["conditions"] if c["type"] == "Placed")
    assert "shares no contended link: runs free" in placed["message"]
    assert_pods_follow(fake, "a")  # the period only: its runtime runs free

    add_gang(fake, "b")
    later = NOW + 100
    ctl = controller(fake, later)
    converge(ctl)
    a, c = claim(fake, "a")["status"], claim(fake, "b")["status"]
    assert c["locked"] is True and c["epoch"] == epoch_at_or_before(later * 1000, SETTINGS)
    # The first gang keeps its offset, which the second was fitted around, from a future epoch.
    assert a["locked"] is True and a["offsetMs"] == first["offsetMs"] and a["decidedAt"] == first["decidedAt"]
    assert a["epoch"] == epoch_at_or_after(later * 1000 + SETTINGS.reconfigure_lead_ms, SETTINGS) > later * 1000
    assert_pods_follow(fake, "a")
    assert_pods_follow(fake, "b")
    assert_interleaved(fake)
    assert events(fake, LOCKED) == ["a"] and events(fake, "Placed") == ["a", "b"]
    assert metric(ctl, "metronome_controller_locks_total") == 1
    # The deciding gang's claim is written after the lock its decision takes: a's lock, then b's claim.
    statuses = [name for verb, plural, name in fake.writes if (verb, plural) == ("patch/status", api.CLAIMS)]
    assert statuses == ["podgroup-a", "podgroup-a", "podgroup-b"]
    plan, _ = controller(fake, later + 1).cycle()  # a restart agrees with what is written
    assert plan.writes == 0


def test_gangs_decided_in_one_cycle_are_both_placed_locked(fake: FakeApi) -> None:
    add_gang(fake, "a")
    add_gang(fake, "b")
    ctl = controller(fake)
    converge(ctl)
    for gang in ("a", "b"):
        status = claim(fake, gang)["status"]
        assert status["locked"] is True and status["epoch"] == epoch_at_or_before(NOW * 1000, SETTINGS)
        assert_pods_follow(fake, gang)
    assert_interleaved(fake)
    assert events(fake, LOCKED) == [] and metric(ctl, "metronome_controller_locks_total") == 0


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 6, 9])
def test_a_crash_between_the_lock_writes_converges(fake: FakeApi, crash_after: int) -> None:
    add_gang(fake, "a")
    converge(controller(fake))
    first = claim(fake, "a")["status"]
    add_gang(fake, "b")
    # The cycle that decides b writes: a's claim (lock), b's claim (create, status), then six pods.
    ctl = controller(fake, NOW + 100)
    count = itertools.count(1)
    ctl.writer.after_write = lambda: (_ for _ in ()).throw(SystemExit) if next(count) == crash_after else None
    with pytest.raises(SystemExit):
        ctl.cycle()
    ctl.close()
    recorded = {g: fake.get(kube.CLAIMS, NS, f"podgroup-{g}") for g in ("a", "b")}
    restarted = controller(fake, NOW + 3600)
    converge(restarted)
    a, c = claim(fake, "a")["status"], claim(fake, "b")["status"]
    assert a["locked"] is True and c["locked"] is True
    assert a["offsetMs"] == first["offsetMs"] and a["decidedAt"] == first["decidedAt"]  # never decided again
    assert a["epoch"] > (NOW + 100) * 1000  # a future epoch when the lock was (re)written
    for gang, before in recorded.items():
        if before is not None and (before.get("status") or {}).get("locked"):
            assert claim(fake, gang)["status"] == before["status"], f"{gang}: the recorded lock was rewritten"
    assert_pods_follow(fake, "a")
    assert_pods_follow(fake, "b")
    assert_interleaved(fake)
    assert len(fake.all(kube.CLAIMS)) == 2


def test_a_decision_is_not_recorded_without_its_lock(fake: FakeApi) -> None:
    """A controller killed at the lock leaves the deciding gang undecided, never decided without its lock.

    The core leaves gangs free on contended links where a lock would not pay, so a missing lock could not
    be told from a deliberate one later: the lock is written first and the decision waits for it.
    """
    add_gang(fake, "a")
    converge(controller(fake))
    first = claim(fake, "a")["status"]
    add_gang(fake, "b")
    fake.fail(lambda verb, plural, name: verb == "patch/status" and name == "podgroup-a", SystemExit())
    with pytest.raises(SystemExit):
        controller(fake, NOW + 100).cycle()
    assert fake.get(kube.CLAIMS, NS, "podgroup-b") is None and claim(fake, "a")["status"]["locked"] is False
    ctl = controller(fake, NOW + 200)
    plan, _ = ctl.cycle()
    deciding = next(g for g in plan.gangs if g.placed)
    assert deciding.requires == (f"{NS}/PodGroup/a",)  # b is decided again, after a's lock
    converge(ctl)
    a = claim(fake, "a")["status"]
    assert a["locked"] is True and claim(fake, "b")["status"]["locked"] is True
    assert a["offsetMs"] == first["offsetMs"] and a["decidedAt"] == first["decidedAt"]
    assert_pods_follow(fake, "a")
    assert_interleaved(fake)


def test_the_decision_waits_for_the_lock(fake: FakeApi) -> None:
    add_gang(fake, "a")
    converge(controller(fake))
    add_gang(fake, "b")
    fake.fail(lambda verb, plural, name: verb == "patch/status" and name == "podgroup-a", Unavailable("down"))
    ctl = controller(fake, NOW + 100)
    _, outcome = ctl.cycle()
    assert outcome.errors == 1 and outcome.locked == [] and outcome.placed == []
    assert fake.get(kube.CLAIMS, NS, "podgroup-b") is None  # no decision recorded without the lock it takes
    assert all(p["spec"].get("schedulingGates") for p in pods(fake, "b"))  # b's pods stay gated
    converge(ctl)
    assert claim(fake, "a")["status"]["locked"] is True and claim(fake, "b")["status"]["locked"] is True
    assert_pods_follow(fake, "a")
    assert_interleaved(fake)


@pytest.mark.parametrize("queue_policy", [True, False])
def test_the_reoptimisation_pass_unlocks_a_gang_left_alone(fake: FakeApi, queue_policy: bool) -> None:
    """With a QueuePolicy, or without any: the built-in policy is the CRD's defaults, re-optimisation every
    60 s included."""
    if queue_policy:
        fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", reoptimization={"enabled": True,
                                                                                "intervalSeconds": 60}))
    add_gang(fake, "a")
    add_gang(fake, "b")
    mono = [0.0]
    ctl = controller(fake, mono=mono)
    converge(ctl)
    assert claim(fake, "a")["status"]["locked"] and claim(fake, "b")["status"]["locked"]
    remove_gang(fake, "b")
    converge(ctl)
    assert fake.get(kube.CLAIMS, NS, "podgroup-b") is None
    mono[0] = 59.0
    plan, _ = ctl.cycle()
    assert plan.writes == 0 and claim(fake, "a")["status"]["locked"] is True  # only a re-optimisation pass unlocks
    mono[0] = 61.0
    plan, outcome = ctl.cycle()
    assert [g.transition for g in plan.gangs if g.transition] == [UNLOCKED] and outcome.unlocked
    status = claim(fake, "a")["status"]
    assert status["locked"] is False and status["nodes"]  # still placed, offset kept as provisional
    assert_pods_follow(fake, "a")  # offset-ms and epoch removed: its runtime runs free
    assert events(fake, UNLOCKED) == ["a"]
    assert metric(ctl, "metronome_controller_unlocks_total") == 1
    mono[0] = 200.0
    plan, _ = ctl.cycle()  # the next pass finds nothing to do
    assert plan.writes == 0


def test_gangs_whose_bursts_cannot_collide_stay_free_through_cycles_and_passes(fake: FakeApi) -> None:
    """Sharing a NIC at 40 + 50 Gbps of 100: no phase of theirs can overflow it, so neither is locked, and
    the rule that locks gangs left unlocked agrees with the rule that unlocks them (no flip-flop)."""
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", reoptimization={"enabled": True, "intervalSeconds": 60}))
    add_gang(fake, "a", gbps=40.0)
    mono = [0.0]
    ctl = controller(fake, mono=mono)
    converge(ctl)
    add_gang(fake, "b", gbps=50.0)
    converge(ctl)
    assert set(claim(fake, "a")["status"]["nodes"]) & set(claim(fake, "b")["status"]["nodes"])
    for gang in ("a", "b"):
        assert claim(fake, gang)["status"]["locked"] is False
        assert_pods_follow(fake, gang)
    mono[0] = 61.0
    plan, _ = ctl.cycle()
    assert plan.writes == 0 and events(fake, LOCKED) == events(fake, UNLOCKED) == []


def test_a_policy_without_lock_on_demand_locks_every_gang(fake: FakeApi) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", lockOnDemand=False))
    add_gang(fake, "a")
    converge(controller(fake))
    assert claim(fake, "a")["status"]["locked"] is True
    assert_pods_follow(fake, "a")


def test_lock_on_demand_is_read_from_the_queue_policy_strictly() -> None:
    grid = SlotGrid()
    assert parse(b.queue_policy("p"), grid, 100.0).policy.lock_on_demand is True
    assert parse(b.queue_policy("p", lockOnDemand=False), grid, 100.0).policy.lock_on_demand is False
    view = parse(b.queue_policy("p", lockOnDemand="no"), grid, 100.0)
    assert "QueuePolicy p: spec.lockOnDemand" in view.error and "'no'" in view.error and "true or false" in view.error


def test_a_claim_without_locked_reads_as_locked() -> None:
    """Claims written before lock on demand: every placed gang aligned then."""
    base = {"metadata": {"name": "c", "namespace": NS}, "spec": {},
            "status": {"nodes": ["n0"], "members": [1], "offsetMs": 5, "periodMs": 200, "epoch": 0}}
    assert claim_view(base).locked is True
    assert claim_view({**base, "status": {**base["status"], "locked": False}}).locked is False


@pytest.mark.parametrize("newcomer", ["b", "c"])
def test_a_gang_the_core_relocates_gets_the_new_offset(fake: FakeApi, monkeypatch: pytest.MonkeyPatch,
                                                        newcomer: str) -> None:
    """``Decision.relocations``: the controller publishes the offset the core moved a gang to, whether the
    decision locks it (b: a ran free) or it was locked before (c: a re-arrangement for a newcomer)."""
    add_gang(fake, "a")
    if newcomer == "c":
        add_gang(fake, "b")
    converge(controller(fake))
    first = claim(fake, "a")["status"]
    assert first["locked"] is (newcomer == "c")
    real = deciding.decide
    moved_to = math.fmod(first["offsetMs"] + PERIOD / 2, PERIOD)
    done: list[str] = []

    def relocating(world: Any, settings: Any, now_s: float, *rest: Any) -> Decided:
        decided = real(world, settings, now_s, *rest)
        if done or not any(g.key.name == newcomer for g in world.gangs):
            return decided  # once, in the first cycle that sees the newcomer (c never fits: no GPUs left)
        uid = next(g.uid for g in world.gangs if g.key.name == "a")
        assert (uid in decided.locks) is (newcomer == "b")
        done.append(uid)
        by = next(g.uid for g in world.gangs if g.key.name == newcomer)
        return dataclasses.replace(decided, relocations={uid: moved_to}, moved_by={uid: by})

    monkeypatch.setattr(deciding, "decide", relocating)
    add_gang(fake, newcomer)
    later = NOW + 100
    converge(controller(fake, later))
    a = claim(fake, "a")["status"]
    assert a["locked"] is True and a["offsetMs"] == moved_to != first["offsetMs"]
    assert a["epoch"] == epoch_at_or_after(later * 1000 + SETTINGS.reconfigure_lead_ms, SETTINGS)
    note = next(c for c in a["conditions"] if c["type"] == "Reconfigured")["message"]
    assert note.endswith("(moved to lock with lock/PodGroup/b)" if newcomer == "b" else
                         "(moved to make room for lock/PodGroup/c)"), note
    assert_pods_follow(fake, "a")
