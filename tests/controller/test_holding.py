"""A gang held back against the in-memory API (core.holding): no claim of nodes while it waits, a
HeldForContention no-fit, a wake-up when its hold runs out, and then its placement; the hold's start kept in
the claim (``status.heldSince``), so that a new leader does not hold the gang again from the start.

The fabric of test_lock_on_demand: 3 nodes of 8 GPUs in one rack, gangs of 3 members of 4 GPUs; the
second gang takes the node the first half fills and the free node, so the two share one NIC. Each sends
at the NIC's 100 Gbps for 180 ms of every 200: sharing it, they collide at every phase.
"""

from __future__ import annotations

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import kube
from volcano_metronome.controller import deciding
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.decision import NoFit
from volcano_metronome.core.holding import HELD
from volcano_metronome.shapes.times import format_time

NS = "hold"
NOW = 1_700_000_000.0
PROFILE = {"period_ms": 200.0, "windows": [{"start_ms": 10, "len_ms": 180, "gbps": 100}], "jitter_ms": 0}
LIGHT = {"period_ms": 200.0, "windows": [{"start_ms": 10, "len_ms": 10, "gbps": 10}], "jitter_ms": 0}


def add_gang(f: FakeApi, name: str, profile: dict = PROFILE, gpus: int = 4, priority: int | None = None) -> None:
    f.put(kube.PODGROUPS, b.podgroup(NS, name, 3, gpus=gpus, profile=profile))
    for p in b.gang_pods(NS, name, 3, gpus=gpus, profile=profile, priority=priority):
        f.put(kube.PODS, p)


def status(f: FakeApi, gang: str) -> dict:
    claim = f.obj(kube.CLAIMS, NS, f"podgroup-{gang}") or {}
    return claim.get("status") or {}


def claimed_nodes(f: FakeApi, gang: str) -> list[str]:
    return list(status(f, gang).get("nodes") or [])


def controller(f: FakeApi, now: list[float]) -> Controller:
    """A controller on ``f`` whose clock reads ``now[0]``."""
    return Controller(f, f.stores(), Settings(write_concurrency=4), identity="t", clock=lambda: now[0])


def cluster() -> tuple[FakeApi, list[float], Controller]:
    """Three nodes of 8 GPUs in one rack, and a controller whose clock reads ``now[0]`` (NOW to start)."""
    f = FakeApi()
    for i in range(3):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    now = [NOW]
    return f, now, controller(f, now)


def second_held() -> tuple[FakeApi, list[float], Controller]:
    """``cluster()`` with gang ``first`` placed at NOW and gang ``second`` held from NOW + 1 s."""
    f, now, ctl = cluster()
    add_gang(f, "first")
    ctl.cycle()
    now[0] = NOW + 1.0
    add_gang(f, "second")
    ctl.cycle()
    return f, now, ctl


def test_a_gang_that_would_collide_at_every_phase_waits_then_is_placed_when_its_hold_runs_out() -> None:
    f, now, ctl = cluster()
    add_gang(f, "first")
    ctl.cycle()
    assert claimed_nodes(f, "first")

    now[0] = NOW + 1.0
    add_gang(f, "second")
    ctl.cycle()
    assert not claimed_nodes(f, "second")
    held = [r for r in ctl.think().decided.results.values() if isinstance(r, NoFit) and r.reason.startswith(HELD)]
    assert len(held) == 1 and deciding.no_fit_category(held[0].reason) == "HeldForContention"
    assert ctl.held == {held[0].uid: NOW + 1.0}
    assert ctl.wake_at == NOW + 61.0  # the loop wakes for it although nothing changes
    assert status(f, "second")["heldSince"] == format_time(NOW + 1.0)
    notes = [e["note"] for e in f.events if e["reason"] == "NoFit"]
    assert len(notes) == 1 and notes[0].endswith(held[0].reason)
    assert ctl.metrics.registry.get_sample_value("metronome_controller_held_gangs") == 1

    now[0] = NOW + 30.0  # still held, since the same moment, and not announced again
    ctl.cycle()
    assert not claimed_nodes(f, "second") and ctl.held == {held[0].uid: NOW + 1.0}
    assert len([e for e in f.events if e["reason"] == "NoFit"]) == 1

    now[0] = NOW + 61.0
    ctl.cycle()
    assert claimed_nodes(f, "second") and ctl.held == {}
    assert "heldSince" not in status(f, "second")  # cleared with the placement
    assert ctl.metrics.registry.get_sample_value("metronome_controller_held_gangs") == 0


def test_a_new_leader_counts_the_hold_from_the_claim_not_from_its_own_start() -> None:
    """A restart (or a leader change) forgets the in-memory holds; the claim's heldSince keeps the bound one
    maxHoldSeconds after the first hold, not one after the new leader's first cycle."""
    f, now, _ = second_held()
    assert not claimed_nodes(f, "second") and status(f, "second")["heldSince"] == format_time(NOW + 1.0)

    now[0] = NOW + 40.0
    successor = controller(f, now)
    successor.cycle()
    assert not claimed_nodes(f, "second")  # still held: 39 s of its 60
    assert successor.held == {f"{NS}/podgroup-second": NOW + 1.0}
    assert successor.wake_at == NOW + 61.0

    now[0] = NOW + 61.0
    successor.cycle()
    assert claimed_nodes(f, "second") and "heldSince" not in status(f, "second")


def test_a_gang_takes_a_rack_no_gang_uses_rather_than_wait() -> None:
    """Two racks of three 2-GPU nodes: binpacking keeps the untouched rack whole, so the second gang's candidates
    would share a NIC with the first at every phase; before holding it, the untouched rack is offered, and taken."""
    f = FakeApi()
    for rack in range(2):
        for i in range(3):
            f.put(kube.NODES, b.node(f"r{rack}n{i}", gpus=2, rack=f"r{rack}"))
    now = [NOW]
    ctl = controller(f, now)
    for name in ("first", "second"):
        add_gang(f, name, gpus=1)
        ctl.cycle()
        now[0] += 1.0
    first, second = claimed_nodes(f, "first"), claimed_nodes(f, "second")
    assert {n[:2] for n in first} == {"r0"} and {n[:2] for n in second} == {"r1"}, (first, second)
    assert ctl.held == {} and "heldSince" not in status(f, "second")


def test_a_held_gang_keeps_its_first_hold_while_it_does_not_fit() -> None:
    """The bound runs from the first hold, as in the simulator: a cycle in which the gang does not fit at all
    neither restarts nor ends it."""
    f, now, ctl = second_held()
    (uid,) = ctl.held
    # A light third gang takes every free GPU: the held one no longer fits, and keeps its hold's start.
    add_gang(f, "light", LIGHT)
    now[0] = NOW + 10.0
    ctl.cycle()
    assert claimed_nodes(f, "light")
    decided = ctl.think().decided
    assert decided.results[uid].reason.startswith("insufficient GPUs") and ctl.held == {uid: NOW + 1.0}
    assert decided.hold_until is None  # nothing to wake for: it waits for room, like any gang


@pytest.mark.parametrize("light_priority, overtaken", [(0, True), (10, False)])
def test_a_lower_priority_that_takes_a_held_gangs_room_is_announced(light_priority: int, overtaken: bool) -> None:
    """As above, with the held gang of priority 10: the light gang takes the GPUs it waits for. Of a lower
    priority, that is announced on the held gang (a Warning Event naming it) and counted; of the same, not."""
    f, now, ctl = cluster()
    add_gang(f, "first")
    ctl.cycle()
    now[0] = NOW + 1.0
    add_gang(f, "second", priority=10)
    ctl.cycle()
    (uid,) = ctl.held
    add_gang(f, "light", LIGHT, priority=light_priority)
    now[0] = NOW + 10.0
    ctl.cycle()
    assert claimed_nodes(f, "light") and not claimed_nodes(f, "second") and ctl.held == {uid: NOW + 1.0}
    notes = [e["note"] for e in f.events if e["reason"] == "HoldOvertaken"]
    counted = ctl.metrics.registry.get_sample_value("metronome_controller_holds_overtaken_total")
    if overtaken:
        assert len(notes) == 1 and f"{NS}/podgroup-light of priority 0 was placed on GPUs its best node set" in notes[0]
        assert notes[0].startswith("held back for contention at priority 10")
        assert [e["type"] for e in f.events if e["reason"] == "HoldOvertaken"] == ["Warning"]
        assert counted == 1
    else:
        assert notes == [] and counted == 0


def test_a_held_kueue_workload_keeps_its_quota_pending_not_retry() -> None:
    """Retry would make Kueue give the quota back and requeue the Workload behind its backoff, for longer than
    the hold; a held gang fits, so its check stays Pending with the reason, and turns Ready once placed."""
    f, now, ctl = cluster()
    f.put(kube.ADMISSION_CHECKS, b.admission_check("metronome"))
    f.put(kube.CLUSTER_QUEUES, b.cluster_queue("cq", "metronome"))
    for name in ("first", "second"):
        wl = b.workload(NS, name, 3, gpus=4, profile=PROFILE)
        wl["status"] = b.quota_reserved_status("cq", 3, gpus=4)
        f.put(kube.WORKLOADS, wl)
        for _ in range(3):
            ctl.cycle()
        now[0] += 1.0

    def entry(name: str) -> dict:
        wl = f.obj(kube.WORKLOADS, NS, name)
        return next(e for e in wl["status"]["admissionChecks"] if e["name"] == "metronome")

    assert entry("first")["state"] == "Ready"
    assert entry("second")["state"] == "Pending" and entry("second")["message"].startswith(HELD)
    now[0] = NOW + 62.0
    for _ in range(3):
        ctl.cycle()
    assert entry("second")["state"] == "Ready"
