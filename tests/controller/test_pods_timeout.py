"""A claim decided for a Volcano PodGroup before its pods, released when no pod comes within podsTimeoutSeconds.

The controller decides the PodGroup of a Volcano Job before Volcano creates its pods (``test_before_pods.py``);
if Volcano never enqueues the group, the claim would hold its nodes in our accounting forever. The clock is
the controller's (``Controller.clock``): these tests move it.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.controller.fake import FakeApi
from tests.controller.test_before_pods import NOW, NS, controller, create_pods, group, webhook
from volcano_metronome import kube
from volcano_metronome.controller import objects
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.settings import Settings
from volcano_metronome.controller.views import PODS_TIMEOUT, GangKey

TIMEOUT = 300.0
KEY = GangKey(NS, "PodGroup", "vj")


class Clock:
    """The controller's wall clock, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def clocked(fake: FakeApi, clock: Clock, timeout: float = TIMEOUT) -> Controller:
    return Controller(fake, fake.stores(), Settings(write_concurrency=4, pods_timeout_s=timeout), identity="test",
                      clock=clock)


def claim(fake: FakeApi) -> dict:
    return fake.obj(kube.CLAIMS, NS, "podgroup-vj")


def held(fake: FakeApi) -> list[str]:
    return list(claim(fake)["status"]["nodes"])


def test_a_claim_whose_pods_never_come_is_released_after_the_timeout_and_the_gang_waits(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())  # Volcano keeps it Pending: its queue is full
    clock = Clock()
    ctl = clocked(fake, clock)
    plan, _ = ctl.cycle()
    assert len(held(fake)) == 2 and objects.condition(claim(fake), "Placed")["status"] == "True"
    decided = objects.condition(claim(fake), "Placed")  # decidedAt is written at whole seconds
    assert ctl.wake_at is not None and ctl.wake_at == pytest.approx(NOW + TIMEOUT, abs=1.0)
    clock.now = ctl.wake_at - 1.0  # just before: nothing is written, the nodes stay held
    plan, _ = ctl.cycle()
    assert plan.writes == 0 and len(held(fake)) == 2
    clock.now = ctl.wake_at
    plan, outcome = ctl.cycle()
    assert outcome.timed_out == ["team-a/PodGroup/vj"] and held(fake) == []
    placed = objects.condition(claim(fake), "Placed")
    assert placed["status"] == "False" and placed["reason"] == PODS_TIMEOUT and placed != decided
    assert "podsTimeoutSeconds (300 s)" in placed["message"]
    (event,) = [e for e in fake.events if e["reason"] == PODS_TIMEOUT]
    assert event["type"] == "Warning" and event["regarding"]["kind"] == "PodGroup"
    assert event["regarding"]["name"] == "vj" and event["note"] == placed["message"]
    assert "metronome_controller_pods_timeout_releases_total 1.0" in ctl.metrics.exposition().decode()
    assert ctl.wake_at is None
    # The gang now waits for its pods: not decided again before them, nothing written, however long it waits.
    for step in range(3):
        clock.now += TIMEOUT * (step + 1)
        plan, _ = ctl.cycle()
        assert plan.writes == 0 and held(fake) == []
    (gang,) = [g for g in ctl.last_world.gangs if g.key == KEY] if ctl.last_world else []
    assert not gang.pending and "none came within podsTimeoutSeconds" in gang.waiting_for


def test_the_released_gang_is_decided_again_once_its_pods_come(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    clock = Clock()
    ctl = clocked(fake, clock)
    ctl.cycle()
    clock.now += TIMEOUT + 1
    ctl.cycle()
    assert held(fake) == []
    # Volcano enqueues the group at last: its pods pass the webhook gated (the claim holds no nodes).
    fake.put(kube.PODGROUPS, group(phase="Inqueue"))
    pods = create_pods(fake, webhook(fake))
    assert all(objects.gated_by_us(p) for p in pods)
    for _ in range(3):
        clock.now += 10
        ctl.cycle()
    nodes = held(fake)
    assert len(nodes) == 2 and objects.condition(claim(fake), "Placed")["status"] == "True"
    for p in fake.all(kube.PODS):
        assert not objects.gates(p) and objects.pinned_nodes(p) == tuple(nodes)
    clock.now += 10 * TIMEOUT  # the gang has pods: its claim is never released for want of them
    plan, _ = ctl.cycle()
    assert held(fake) == nodes and ctl.wake_at is None


def test_pods_created_in_time_keep_the_claim(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    clock = Clock()
    ctl = clocked(fake, clock)
    ctl.cycle()
    nodes = held(fake)
    fake.put(kube.PODGROUPS, group(phase="Inqueue"))
    create_pods(fake, webhook(fake))  # admitted placed
    clock.now += TIMEOUT - 5
    ctl.cycle()
    assert ctl.wake_at is None
    clock.now += 10 * TIMEOUT
    plan, outcome = ctl.cycle()
    assert held(fake) == nodes and outcome.timed_out == [] and plan.writes == 0


def test_a_zero_timeout_holds_the_claim_until_the_pods_come(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    clock = Clock()
    ctl = clocked(fake, clock, timeout=0)
    ctl.cycle()
    nodes = held(fake)
    clock.now += 100 * TIMEOUT
    plan, outcome = ctl.cycle()
    assert held(fake) == nodes and outcome.timed_out == [] and ctl.wake_at is None


def test_the_default_timeout_is_five_minutes(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    ctl = controller(fake)  # default settings
    ctl.cycle()
    assert ctl.wake_at == pytest.approx(NOW + 300, abs=1.0)


def test_a_restarted_controller_counts_from_the_claims_decision(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    clock = Clock()
    clocked(fake, clock).cycle()
    nodes = held(fake)
    clock.now += TIMEOUT / 2
    successor = clocked(fake, clock)  # a new leader: nothing of its predecessor but the claim
    successor.cycle()
    assert held(fake) == nodes and successor.wake_at == pytest.approx(NOW + TIMEOUT, abs=1.0)
    clock.now += TIMEOUT / 2 + 1
    successor.cycle()
    assert held(fake) == []


def test_the_loop_wakes_for_the_release_without_an_event(fake: FakeApi) -> None:
    fake.put(kube.PODGROUPS, group())
    clock = Clock()
    ctl = Controller(fake, fake.stores(), Settings(write_concurrency=2, pods_timeout_s=TIMEOUT, resync_s=3600,
                                                   cycle_debounce_ms=0), identity="test", clock=clock)
    stop = threading.Event()
    loop = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while ctl.wake_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ctl.wake_at is not None and len(held(fake)) == 2
        clock.now = ctl.wake_at + 0.5  # no informer event, resync an hour away: only the deadline wakes it
        while held(fake) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert held(fake) == []
    finally:
        stop.set()
        loop.join(5)
        ctl.close()
