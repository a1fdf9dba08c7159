"""Lease-based leader election against the in-memory API, on a fake clock."""

from __future__ import annotations

from tests.controller.fake import FakeApi
from volcano_metronome import kube
from volcano_metronome.controller.leader import LeaderElector, LeaseConfig
from volcano_metronome.kube import Unavailable


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def pair(api: FakeApi, clock: Clock) -> tuple[LeaderElector, LeaderElector]:
    cfg = dict(namespace="ns", name="lease", lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
    return (LeaderElector(api, LeaseConfig(identity="a", **cfg), clock=clock),  # type: ignore[arg-type]
            LeaderElector(api, LeaseConfig(identity="b", **cfg), clock=clock))  # type: ignore[arg-type]


def test_exactly_one_of_two_candidates_leads() -> None:
    api, clock = FakeApi(), Clock()
    a, b = pair(api, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(20):  # a renews every 2 s; b never gets it
        clock.t += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
        assert a.is_leader() and not b.is_leader()
    lease = api.obj(kube.LEASES, "ns", "lease")["spec"]
    assert lease["holderIdentity"] == "a" and lease["leaseDurationSeconds"] == 15


def test_a_silent_leader_is_replaced_after_the_lease_duration_and_stops_leading_first() -> None:
    api, clock = FakeApi(), Clock()
    a, b = pair(api, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b starts observing a's record now
    clock.t += 10.5
    assert not a.is_leader()  # past the renew deadline: a must already have stopped acting
    assert not b.try_acquire_or_renew()  # but the lease (15 s) has not run out for b
    clock.t += 5
    assert b.try_acquire_or_renew() and b.is_leader()
    spec = api.obj(kube.LEASES, "ns", "lease")["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # the old leader does not steal it back


def test_renew_failures_past_the_deadline_lose_the_lease() -> None:
    api, clock = FakeApi(), Clock()
    a, _ = pair(api, clock)
    assert a.try_acquire_or_renew()
    for _ in range(6):
        clock.t += 2
        api.fail(lambda verb, plural, name: plural == "leases", Unavailable("down"))
        a.try_acquire_or_renew()
    assert not a.is_leader()


def test_release_hands_over_at_once() -> None:
    api, clock = FakeApi(), Clock()
    a, b = pair(api, clock)
    assert a.try_acquire_or_renew()
    a.release()
    assert not a.is_leader()
    assert b.try_acquire_or_renew()


def test_concurrent_takeover_has_one_winner() -> None:
    api, clock = FakeApi(), Clock()
    a, b = pair(api, clock)
    lease = {"metadata": {"name": "lease", "namespace": "ns"},
             "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 15, "renewTime": "2020-01-01T00:00:00.000000Z"}}
    api.put(kube.LEASES, lease)
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    clock.t += 16
    # Both read the same expired record; the conditional update lets only the first through.
    stale = api.get(kube.LEASES, "ns", "lease")
    assert a.try_acquire_or_renew()
    original_get = api.get
    api.get = lambda *args, **kw: stale  # type: ignore[method-assign]
    try:
        assert not b.try_acquire_or_renew()
    finally:
        api.get = original_get  # type: ignore[method-assign]
    assert api.obj(kube.LEASES, "ns", "lease")["spec"]["holderIdentity"] == "a"


def test_remaining_is_the_time_to_the_renew_deadline() -> None:
    api, clock = FakeApi(), Clock()
    a, b = pair(api, clock)
    assert a.remaining() == 0.0  # never led
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b sees a's renewal
    clock.t += 3
    assert a.remaining() == 7.0
    clock.t += 7.5
    assert a.remaining() < 0 and not a.is_leader()
    clock.t += 4
    assert not b.try_acquire_or_renew()  # a's writes stopped 4.5 s ago; the lease has not passed yet
    clock.t += 1  # b takes over only now, 15 s after it saw a's renewal: 5 s after a's fence
    assert b.try_acquire_or_renew()
