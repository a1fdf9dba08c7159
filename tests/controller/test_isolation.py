"""One gang the core cannot decide must not stop the others (in-memory API; the real-API twin is in tests/faults)."""

from __future__ import annotations

import threading

from tests.controller import builders as b
from tests.controller.fake import FakeApi
from tests.controller.test_controller import NS, NOW, add_gang, claim_of, controller, pods_of
from volcano_metronome import kube
from volcano_metronome.controller import loop, objects
from volcano_metronome.core import holding
from volcano_metronome.core.decision import NoFit
from volcano_metronome.controller.deciding import UNDECIDABLE

# 30 s iterations: longer than the default hyperperiod cap (25.2 s), so no decision can exist.
POISON = {"period_ms": 30000, "windows": [{"start_ms": 0, "len_ms": 100, "gbps": 10}], "jitter_ms": 0}


def _fake() -> FakeApi:
    f = FakeApi()
    for i in range(4):
        f.put(kube.NODES, b.node(f"n{i}", gpus=8, rack="r0"))
    return f


def test_poison_gang_does_not_block_a_normal_gang_in_the_same_cycle() -> None:
    fake = _fake()
    fake.put(kube.PODGROUPS, b.podgroup(NS, "poison", 2, profile=POISON))
    for p in b.gang_pods(NS, "poison", 2, profile=POISON):
        fake.put(kube.PODS, p)
    add_gang(fake, "good", 2)
    ctl = controller(fake)
    plan, outcome = ctl.cycle()
    assert not outcome.errors
    good = claim_of(fake, "good")
    assert objects.condition_true(good, "Placed")
    assert all(not objects.gates(p) for p in pods_of(fake, "good"))
    poison = claim_of(fake, "poison")
    cond = next(c for c in poison["status"]["conditions"] if c["type"] == "NoFit")
    assert cond["reason"] == UNDECIDABLE and "hyperperiod cap 25200 ms" in cond["message"]
    assert all(objects.gates(p) for p in pods_of(fake, "poison"))
    warnings = [e for e in fake.events if e["reason"] == "NoFit"]
    assert len(warnings) == 1 and "30000" in warnings[0]["note"]
    text = ctl.metrics.exposition().decode()
    assert 'metronome_controller_no_fits_total{reason="Undecidable"} 1.0' in text


def test_a_core_failure_on_one_gang_is_that_gangs_no_fit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = _fake()
    add_gang(fake, "bad", 1)
    add_gang(fake, "good", 1)
    real = holding.decide

    def flaky(snap, gang, pol, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "bad" in gang.name:
            raise IndexError("boom")
        return real(snap, gang, pol, *args, **kwargs)

    monkeypatch.setattr(holding, "decide", flaky)  # what the controller's decide_or_hold calls
    ctl = controller(fake)
    plan, _ = ctl.cycle()
    results = {r.uid: r for r in plan.decisions} if plan.decisions else {}
    assert objects.condition_true(claim_of(fake, "good"), "Placed")
    assert "IndexError: boom" in str(claim_of(fake, "bad")["status"]["conditions"])
    assert all(not isinstance(r, NoFit) or "boom" in r.reason for r in results.values())


def test_cycles_that_keep_failing_make_the_controller_not_ready(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = _fake()
    ctl = controller(fake)

    def broken(*_: object) -> None:
        raise RuntimeError("broken world")

    monkeypatch.setattr(loop, "observe", broken)
    synced = threading.Event()
    synced.set()
    stop = threading.Event()
    runner = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    runner.start()
    try:
        for _ in range(200):
            if ctl.failing >= loop.FAILING_CYCLES:
                break
            threading.Event().wait(0.05)
        assert "cycles failed" in loop.not_ready(ctl, {}, synced)
        monkeypatch.undo()
        for _ in range(200):
            if ctl.failing == 0:
                break
            ctl.notify()
            threading.Event().wait(0.05)
        assert loop.not_ready(ctl, {}, synced) == ""
    finally:
        stop.set()
        runner.join(10)
    assert NOW and NS
