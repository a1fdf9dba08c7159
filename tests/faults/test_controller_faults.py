"""The controller under faults, against a real kube-apiserver + etcd: a gang no decision exists for
beside a normal one, and a leader frozen mid-write while a standby takes over."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import time

from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, wait_until
from volcano_metronome import api, kube
from volcano_metronome.controller import objects

FAST_LEASE = {"leaseDurationSeconds": 6, "renewDeadlineSeconds": 5, "retryPeriodSeconds": 1}
# 30 s iterations: longer than the hyperperiod cap (25.2 s), so no decision can exist for this gang.
POISON = {"period_ms": 30000, "windows": [{"start_ms": 0, "len_ms": 100, "gbps": 10}], "jitter_ms": 0}


def start(cluster: Cluster, tmp_path: pathlib.Path, started: list[ControllerProcess], ns: str,
          **kw: object) -> ControllerProcess:
    ctl = ControllerProcess(cluster, tmp_path, lease="metronome", lease_namespace=ns, **kw).start()  # type: ignore[arg-type]
    started.append(ctl)
    return ctl


def test_a_poison_gang_does_not_stop_a_normal_gang(cluster: Cluster, tmp_path: pathlib.Path,
                                                   controllers: list[ControllerProcess]) -> None:
    cluster.nodes(4)
    ns = cluster.namespace()
    # As a controller-made object would come in past the webhook (which marks it): the profile is there.
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, "poison", 2, profile=POISON), ns)
    for p in b.gang_pods(ns, "poison", 2, profile=POISON):
        cluster.k.create(kube.PODS, p, ns)
    cluster.gang(ns, "good", 2)
    ctl = start(cluster, tmp_path, controllers, ns, args=["--no-leader-elect"])
    wait_until(lambda: cluster.ungated(ns, ["good"]), 60, lambda: f"the normal gang\n{ctl.logs()}")
    # Placed by the first cycle that decided anything, beside the poison gang's no-fit.
    first = re.search(r"cycle: (\d+) decided \((\d+) placed\)", ctl.logs())
    print(f"FAULT-BENCH poison gang: first deciding cycle: {first.group(0) if first else None}")
    assert first is not None and first.groups() == ("2", "1"), ctl.logs()
    claim = wait_until(lambda: (c := cluster.claims(ns).get("podgroup-poison")) and objects.condition(c, "NoFit")
                       and c, 30, "the poison gang's claim condition")
    cond = objects.condition(claim, "NoFit")
    assert cond["status"] == "True" and cond["reason"] == "Undecidable" and "25200 ms" in cond["message"]
    assert all(objects.gated_by_us(p) for p in cluster.pods(ns)
               if objects.annotations_of(p)[api.GANG_NAME] == "poison")
    events = [e for e in cluster.k.list(kube.EVENTS, ns)["items"] if e["reason"] == "NoFit"]
    assert events and "30000" in events[0]["note"]
    assert ctl.metric("metronome_controller_cycle_failures_total") == 0
    assert wait_until(lambda: ctl.metric('metronome_controller_no_fits_total'), 10, "metrics")
    cluster.check_consistent(ns)


def _versions(cluster: Cluster, ns: str) -> dict[str, str]:
    out = {}
    for resource in (kube.PODS, kube.CLAIMS):
        for obj in cluster.k.list(resource, ns)["items"]:
            out[f"{resource.plural}/{objects.name(obj)}"] = objects.resource_version(obj)
    return out


def _settled(cluster: Cluster, ns: str, timeout: float = 30.0) -> dict[str, str]:
    """The resourceVersions of the namespace's pods and claims once two looks a second apart agree."""
    seen = [_versions(cluster, ns)]

    def same() -> bool:
        seen.append(_versions(cluster, ns))
        return seen[-1] == seen[-2]

    wait_until(same, timeout, "the new leader's last writes", interval=1.0)
    return seen[-1]


def test_a_leader_frozen_mid_write_never_writes_after_the_standby_took_over(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess]) -> None:
    cluster.nodes(24)
    ns = cluster.namespace()
    for i in range(12):
        cluster.gang(ns, f"g{i}", 2)
    settings = {"leaderElection": {"leaseName": "metronome", **FAST_LEASE}}
    first = start(cluster, tmp_path, controllers, ns, extra_settings=settings)
    wait_until(lambda: first.metric("metronome_controller_leader") == 1, 30, lambda: f"leadership\n{first.logs()}")
    second = start(cluster, tmp_path, controllers, ns, extra_settings=settings)
    wait_until(lambda: second.metric("metronome_controller_leader") == 0, 30, "the standby")
    wait_until(lambda: any(not objects.gated_by_us(p) for p in cluster.pods(ns)), 60, "the first ungated pod",
               interval=0.01)
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGSTOP)  # frozen with its plan half written
    stopped = time.monotonic()
    try:
        wait_until(lambda: second.metric("metronome_controller_leader") == 1, 30,
                   lambda: f"the standby's takeover\n{second.logs()}")
        took_over = time.monotonic() - stopped
        wait_until(lambda: cluster.ungated(ns), 60, lambda: f"convergence by the new leader\n{second.logs()}")
        settled = _settled(cluster, ns)
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    assert first.wait(30) == 1, first.logs()  # it finds its lease gone and exits
    late = sum(1 for key, rv in _versions(cluster, ns).items() if settled.get(key) != rv)
    print(f"FAULT-BENCH frozen leader: standby led {took_over:.1f} s after SIGSTOP; objects written after SIGCONT: "
          f"{late}; old leader exit code {first.proc.returncode}")
    assert _versions(cluster, ns) == settled, "the old leader wrote after the standby took over"
    claims = cluster.check_consistent(ns)
    assert len(claims) == 12
    used: dict[str, str] = {}
    for name, claim in claims.items():
        for node in claim["status"]["nodes"]:
            assert node not in used, f"{node} given to {used.get(node)} and {name}"  # 8 GPUs per pod
            used[node] = name
