"""A gang across a rack uplink slower than its bursts is planned, published and locked as it runs there."""

from __future__ import annotations

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from tests.controller.test_controller import NS, NOW, converge
from volcano_metronome import api, kube
from volcano_metronome.controller.loop import Controller
from volcano_metronome.controller.settings import DefaultCapacities, Settings

# 40 ms at 100 Gbps a worker; the 50 Gbps uplinks carry it in 80 ms, so an iteration lasts 240 ms alone.
PROFILE = {"period_ms": 200, "windows": [{"start_ms": 100, "len_ms": 40, "gbps": 100}]}


def test_gangs_across_thin_uplinks_are_published_at_the_period_they_run_at_and_interleave() -> None:
    f = FakeApi()
    for rack in range(3):  # three racks of two 8-GPU nodes; a gang of three whole nodes spans two racks
        for i in range(2):
            f.put(kube.NODES, b.node(f"r{rack}n{i}", gpus=8, rack=f"r{rack}"))
    for gang in ("a", "b"):
        f.put(kube.PODGROUPS, b.podgroup(NS, gang, 3, profile=PROFILE))
        for p in b.gang_pods(NS, gang, 3, profile=PROFILE):
            f.put(kube.PODS, p)
    settings = Settings(write_concurrency=4, default_capacities=DefaultCapacities(100.0, {1: 50.0}))
    converge(Controller(f, f.stores(), settings, identity="test", clock=lambda: NOW))
    a, c = f.obj(kube.CLAIMS, NS, "podgroup-a")["status"], f.obj(kube.CLAIMS, NS, "podgroup-b")["status"]
    assert a["periodMs"] == c["periodMs"] == 240  # not the declared 200: the uplink stretches each burst to 80 ms
    assert a["locked"] and c["locked"] and a["feasible"] and c["feasible"]
    gap = ((c["epoch"] + c["offsetMs"]) - (a["epoch"] + a["offsetMs"])) % 240
    assert 80 <= gap <= 240 - 80, (a, c)  # the 80 ms bursts interleave on the uplink they share
    for p in f.all(kube.PODS):
        assert p["metadata"]["annotations"][api.PERIOD_MS] == "240"
