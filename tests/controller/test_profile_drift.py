"""ProfileDrift: a claim's measured profile (status.measuredProfile, as the node agent writes it) against
the declared one; observe only reports, adopt also plans with the measured profile."""

from __future__ import annotations

from typing import Any

import pytest

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from volcano_metronome import api, kube
from volcano_metronome.controller import objects, profiledrift
from volcano_metronome.controller.profiledrift import AS_DECLARED, PROFILE_DRIFT, Tolerance, moved, profile_policy
from volcano_metronome.controller.settings import Settings
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.profile import Profile, Window

NS = "pdrift"
NOW = 1_700_000_000.0
SETTINGS = Settings(write_concurrency=4)
DECLARED = {"period_ms": 200.0, "windows": [{"start_ms": 176, "len_ms": 24, "gbps": 80.0}], "jitter_ms": 0}
SLOWER = {"periodMs": 300.0, "windows": [{"startMs": 276.0, "lenMs": 24.0, "gbps": 80.0}], "jitterMs": 2.0,
          "source": "node-agent", "node": "n0"}
SLOW_END_MS = 301.0  # a measurement's mean period plus half its spread: what a locked gang is held to


def fake_with(policy: dict[str, Any] | None) -> FakeApi:
    f = FakeApi()
    for i in range(3):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    if policy is not None:
        f.put(kube.QUEUE_POLICIES, b.queue_policy("p", **policy))
    f.put(kube.PODGROUPS, b.podgroup(NS, "a", 3, gpus=4, profile=DECLARED))
    for p in b.gang_pods(NS, "a", 3, gpus=4, profile=DECLARED):
        f.put(kube.PODS, p)
    return f


def converge(f: FakeApi, at: float = NOW) -> None:
    ctl = f.controller(at, SETTINGS, monotonic=lambda: 0.0)
    for _ in range(10):
        plan, _ = ctl.cycle()
        if not plan.writes:
            return
    raise AssertionError("no fixed point after 10 cycles")


def claim(f: FakeApi) -> dict[str, Any]:
    return f.obj(kube.CLAIMS, NS, "podgroup-a")


def measure(f: FakeApi, measured: dict[str, Any] | None) -> None:
    """Write status.measuredProfile as the node agent does (a status patch)."""
    f.patch(kube.CLAIMS, NS, "podgroup-a", {"status": {"measuredProfile": measured}}, subresource="status")


def drift_events(f: FakeApi) -> list[str]:
    return [e["note"] for e in f.events if e["reason"] == PROFILE_DRIFT]


def test_observe_reports_the_drift_once_and_clears_it() -> None:
    f = fake_with({})
    converge(f)
    assert objects.condition(claim(f), PROFILE_DRIFT) is None
    period = claim(f)["status"]["periodMs"]
    measure(f, SLOWER)
    converge(f)
    cond = objects.condition(claim(f), PROFILE_DRIFT)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "PeriodMoved"
    assert "period 200 -> 301 ms" in cond["message"] and "reported only (profilePolicy observe)" in cond["message"]
    assert len(drift_events(f)) == 1
    # observe: nothing is re-planned
    assert claim(f)["status"]["periodMs"] == period and "adoptedProfile" not in claim(f)["status"]
    converge(f)
    assert len(drift_events(f)) == 1  # once per change
    measure(f, {**SLOWER, "periodMs": 205.0, "windows": [{"startMs": 181.0, "lenMs": 24.0, "gbps": 82.0}]})
    converge(f)
    cond = objects.condition(claim(f), PROFILE_DRIFT)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == AS_DECLARED


def test_adopt_plans_with_the_measured_profile_and_republishes_the_period() -> None:
    f = fake_with({"profilePolicy": "adopt"})
    converge(f)
    before = claim(f)["status"]
    measure(f, SLOWER)
    converge(f, NOW + 1)
    status = claim(f)["status"]
    cond = objects.condition(claim(f), PROFILE_DRIFT)
    assert cond is not None and cond["reason"] == "PeriodMoved" and "planned with the measured profile" in cond["message"]
    assert status["adoptedProfile"]["periodMs"] == SLOW_END_MS
    assert status["periodMs"] != before["periodMs"] and status["periodMs"] >= 300.0
    assert status["epoch"] > before["epoch"]  # from a future epoch, as a move
    for p in f.all(kube.PODS):  # the pods follow the new period
        assert objects.annotations_of(p)[api.PERIOD_MS] == f"{status['periodMs']:g}"
    # back within tolerance of the declared profile: the declared one is planned with again
    measure(f, None)
    converge(f, NOW + 2)
    status = claim(f)["status"]
    assert "adoptedProfile" not in status and status["periodMs"] == before["periodMs"]


def test_an_all_to_all_gang_keeps_its_collective_in_its_claim_and_when_a_measured_profile_is_adopted() -> None:
    f = FakeApi()
    for i in range(3):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    f.put(kube.QUEUE_POLICIES, b.queue_policy("p", profilePolicy="adopt"))
    declared = {**DECLARED, "collective": "all-to-all"}
    f.put(kube.PODGROUPS, b.podgroup(NS, "a", 3, gpus=4, profile=declared))
    for p in b.gang_pods(NS, "a", 3, gpus=4, profile=declared):
        f.put(kube.PODS, p)
    converge(f)
    assert claim(f)["spec"]["profile"]["collective"] == "all-to-all"
    measure(f, SLOWER)  # the node agent measures timing only: no collective in it
    converge(f, NOW + 1)
    adopted = claim(f)["status"]["adoptedProfile"]
    assert adopted["periodMs"] == SLOW_END_MS and adopted["collective"] == "all-to-all"


def test_what_moved_names_period_duty_and_rate() -> None:
    base = Profile(100.0, (Window(80.0, 20.0, 10.0),))
    tol = Tolerance()
    assert moved(base, base, tol) == ()
    assert moved(base, Profile(115.0, (Window(95.0, 20.0, 10.0),)), tol) == ("period",)
    assert moved(base, Profile(100.0, (Window(60.0, 40.0, 10.0),)), tol) == ("duty",)
    assert moved(base, Profile(100.0, (Window(80.0, 20.0, 13.0),)), tol) == ("rate",)
    assert profiledrift.reason(("period", "rate")) == "PeriodAndRateMoved"


@pytest.mark.parametrize("spec, field", [({"profilePolicy": "ignore"}, "spec.profilePolicy"),
                                         ({"profileTolerance": {"rate": "x"}}, "spec.profileTolerance.rate"),
                                         ({"profileTolerance": [1]}, "spec.profileTolerance"),
                                         ({"profileTolerance": {"duty": 1.5}}, "spec.profileTolerance.duty"),
                                         ({"profileTolerance": {"period": 11}}, "spec.profileTolerance.period")])
def test_bad_settings_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        profile_policy(b.queue_policy("p", **spec))
    assert caught.value.field.endswith(field)


def test_a_broken_measured_profile_is_reported_not_used() -> None:
    f = fake_with({"profilePolicy": "adopt"})
    converge(f)
    measure(f, {"periodMs": 100.0, "windows": [{"startMs": 90.0, "lenMs": 20.0, "gbps": 5.0}]})  # past the period
    converge(f)
    assert objects.condition(claim(f), PROFILE_DRIFT) is None and "adoptedProfile" not in claim(f)["status"]


def test_a_measurement_whose_burst_ends_with_the_iteration_is_reported_at_its_slow_end() -> None:
    # Compute, then all-reduce to the end of the iteration, in the agent's float figures: its slow end (the
    # period and the window later by half the spread) once left the window 1 ns past the period, and the
    # controller's cycle raised on a valid measurement.
    f = fake_with({"profilePolicy": "adopt"})
    converge(f)
    measure(f, {"periodMs": 171.044164843276, "jitterMs": 3.3333333, "source": "node-agent", "node": "n0",
                "windows": [{"startMs": 12.933952507583417, "lenMs": 158.1102123356926, "gbps": 80.0}]})
    converge(f, NOW + 1)
    adopted = claim(f)["status"]["adoptedProfile"]
    assert adopted["periodMs"] == pytest.approx(171.044164843276 + 3.3333333 / 2, abs=1e-6)
    window = adopted["windows"][0]
    assert window["startMs"] + window["lenMs"] <= adopted["periodMs"] + 1e-9
    cond = objects.condition(claim(f), PROFILE_DRIFT)
    assert cond is not None and cond["status"] == "True"
