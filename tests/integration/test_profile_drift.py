"""ProfileDrift on a real kube-apiserver + etcd: the controller (a subprocess) reads a measured profile
from a claim's status (written as the node agent writes it, a status patch validated by the CRD's
schema and CEL rules) and reports the drift; under ``profilePolicy: adopt`` it re-plans the gang with
the measured profile (new period from a future epoch, published on the pods)."""

from __future__ import annotations

import pathlib
from typing import Any, Iterator

import pytest

from tests.agent.process import free_port, scrape, start_agent, start_paced_sender, start_timed_loop
from tests.agent.process import stop as stop_processes
from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, start_controller, wait_until
from volcano_metronome import api, kube
from volcano_metronome.controller import objects

# The gangs declare 80 Gbps for 24 ms every 200 ms (builders.PROFILE); the job now runs 300 ms iterations.
MEASURED = {"periodMs": 300.0, "windows": [{"startMs": 276.0, "lenMs": 24.0, "gbps": 80.0}], "jitterMs": 2.0,
            "source": "node-agent", "node": "somewhere", "confidence": 0.8, "periods": 40,
            "measuredAt": "2026-11-23T15:00:00Z"}


@pytest.fixture
def queues(cluster: Cluster) -> Iterator[dict[str, str]]:
    """Two Volcano queues, one governed by a QueuePolicy that observes drift, one by one that adopts."""
    names = {mode: f"{mode}-{cluster.tag}" for mode in ("observe", "adopt")}
    for mode, name in names.items():
        cluster.k.create(kube.QUEUE_POLICIES, b.queue_policy(name, volcanoQueues=[name], profilePolicy=mode,
                                                             profileTolerance={"period": 0.1}))
    yield names
    for name in names.values():
        try:
            cluster.k.delete(kube.QUEUE_POLICIES, None, name)
        except kube.KubeError:
            pass


def claim(cluster: Cluster, ns: str, gang: str) -> dict[str, Any]:
    return cluster.claims(ns)[f"podgroup-{gang}"]


def drift(cluster: Cluster, ns: str, gang: str) -> dict[str, Any] | None:
    cond = objects.condition(claim(cluster, ns, gang), "ProfileDrift")
    return cond if cond is not None and cond["status"] == "True" else None


def test_a_drifted_measured_profile_is_reported_and_with_adopt_replanned(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess],
        queues: dict[str, str]) -> None:
    cluster.nodes(4)
    ns = cluster.namespace()
    for gang, queue in (("watched", queues["observe"]), ("adopting", queues["adopt"])):
        cluster.k.create(kube.PODGROUPS, b.podgroup(ns, gang, 2, queue=queue, gpus=8), ns)
        for p in b.gang_pods(ns, gang, 2, gpus=8):
            cluster.k.create(kube.PODS, p, ns)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    before = {g: claim(cluster, ns, g)["status"] for g in ("watched", "adopting")}

    # The API server checks a measured profile like a declared one: a window past the period is refused.
    with pytest.raises(kube.Invalid) as refused:
        cluster.k.patch(kube.CLAIMS, ns, "podgroup-watched", {"status": {"measuredProfile": {
            **MEASURED, "windows": [{"startMs": 290.0, "lenMs": 24.0, "gbps": 80.0}]}}}, subresource="status")
    assert "inside the period" in str(refused.value)
    for gang in ("watched", "adopting"):
        cluster.k.patch(kube.CLAIMS, ns, f"podgroup-{gang}", {"status": {"measuredProfile": MEASURED}},
                        subresource="status")

    for gang in ("watched", "adopting"):
        cond = wait_until(lambda: drift(cluster, ns, gang), 30, lambda: f"ProfileDrift on {gang}\n{ctl.logs()}")
        assert cond["reason"] == "PeriodMoved" and "period 200 -> 301 ms" in cond["message"]  # the slow end: 300 + 2 / 2
    assert "reported only" in (drift(cluster, ns, "watched") or {})["message"]
    watched = claim(cluster, ns, "watched")["status"]
    assert "adoptedProfile" not in watched and watched["periodMs"] == before["watched"]["periodMs"]

    # adopt: planned with the measured profile, a new period from a future epoch, on the claim and the pods.
    adopted = claim(cluster, ns, "adopting")["status"]
    assert adopted["adoptedProfile"]["periodMs"] == 301.0
    assert adopted["periodMs"] >= 300.0 and adopted["epoch"] > before["adopting"]["epoch"]

    def pods_follow() -> bool:
        pods = [p for p in cluster.pods(ns) if objects.annotations_of(p).get(api.GANG_NAME) == "adopting"]
        return bool(pods) and all(objects.annotations_of(p).get(api.PERIOD_MS) == f"{adopted['periodMs']:g}"
                                  for p in pods)

    wait_until(pods_follow, 30, lambda: f"the adopting gang's pods on the new period\n{ctl.logs()}")
    warnings = wait_until(lambda: [e for e in cluster.k.list(kube.EVENTS, ns)["items"]
                                   if e["reason"] == "ProfileDrift"], 30, lambda: f"ProfileDrift Events\n{ctl.logs()}")
    assert {e["type"] for e in warnings} == {"Warning"}


def test_the_node_agent_measures_real_traffic_and_the_controller_reports_the_drift(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess],
        queues: dict[str, str]) -> None:
    """The agent (a subprocess sampling ``lo``) fits a real loopback sender bursting every 300 ms into
    the claim of a gang declared at 200 ms; the controller reports ProfileDrift on the period."""
    cluster.nodes(1)
    ns = cluster.namespace()
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, "a", 1, queue=queues["observe"], gpus=8), ns)
    for p in b.gang_pods(ns, "a", 1, gpus=8):
        cluster.k.create(kube.PODS, p, ns)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    (node,) = claim(cluster, ns, "a")["status"]["nodes"]

    sender = start_paced_sender(300.0, 30.0, max_bursts=400)  # 120 s at most, to 127.0.0.1 only
    port = free_port()  # the agent's /metrics
    agent = start_agent(cluster.kubeconfig, node, tmp_path / "agent.log", port)
    logs = lambda: f"{(tmp_path / 'agent.log').read_text()}\n{ctl.logs()}"  # noqa: E731

    def fitted() -> dict[str, Any] | None:
        """The claim's measured profile once it is the sender's period: a trace recorded while a loaded machine
        delays the sender can be misread (a CI run, 2026-11-29: 500.6 ms, three windows, in the first round);
        the agent refits every 5 s and the next round writes over it."""
        measured = (claim(cluster, ns, "a").get("status") or {}).get("measuredProfile") or {}
        return measured if abs(measured.get("periodMs", 0.0) - 300.0) <= 15.0 else None

    try:
        cond = wait_until(lambda: drift(cluster, ns, "a"), 60, lambda: f"ProfileDrift\n{logs()}")
        measured = wait_until(fitted, 60, lambda: f"a measured period of 300 ms\n{logs()}")
        scraped = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        stop_processes(agent, sender)
    assert measured["source"] == "node-agent" and measured["node"] == node
    assert cond["reason"].startswith("Period") and "period 200 -> " in cond["message"]
    # What the agent exports over HTTP: the last period it fitted for the claim, the NIC's mean rate.
    period = scraped[("metronome_agent_period_ms", (("claim", "podgroup-a"), ("namespace", ns),
                                                    ("source", "node-agent")))]
    assert period == pytest.approx(300.0, rel=0.05)
    assert scraped[("metronome_agent_measured_gbps", (("interface", "lo"),))] > 0
    assert scraped[("metronome_agent_fits_total", (("result", "written"),))] >= 1


def test_the_runtime_helpers_own_timing_reaches_the_claim_on_a_shared_nic(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess],
        queues: dict[str, str]) -> None:
    """Two gangs share one node, so its NIC mixes them and gives no profile; each gang's process times its
    own loop (the runtime Stopwatch, publishing into the agent's --runtime-dir), and the agent writes
    each gang's own period into its claim with source runtime; the controller reports both drifts."""
    cluster.nodes(1)
    ns = cluster.namespace()
    for gang in ("a", "b"):
        cluster.k.create(kube.PODGROUPS, b.podgroup(ns, gang, 1, queue=queues["observe"], gpus=4), ns)
        for p in b.gang_pods(ns, gang, 1, gpus=4):
            cluster.k.create(kube.PODS, p, ns)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns, ["a", "b"]) and len(cluster.pods(ns)) == 2, 60,
               lambda: f"ungated pods\n{ctl.logs()}")
    (node,) = claim(cluster, ns, "a")["status"]["nodes"]
    assert claim(cluster, ns, "b")["status"]["nodes"] == [node]  # one NIC, two gangs

    reports = tmp_path / "measured"
    loops = [start_timed_loop(reports, ns, gang, period, 30.0, tmp_path / f"loop-{gang}.log")
             for gang, period in (("a", 300.0), ("b", 400.0))]
    port = free_port()
    agent = start_agent(cluster.kubeconfig, node, tmp_path / "agent.log", port, ["--runtime-dir", str(reports)])
    logs = lambda: "\n".join(f"{p.name}:\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))  # noqa: E731
    try:
        conds = {gang: wait_until(lambda: drift(cluster, ns, gang), 60, lambda: f"ProfileDrift on {gang}\n{logs()}")
                 for gang in ("a", "b")}

        def period_metric(gang: str) -> tuple[str, tuple[tuple[str, str], ...]]:
            return "metronome_agent_period_ms", (("claim", f"podgroup-{gang}"), ("namespace", ns), ("source", "runtime"))

        def consistent() -> tuple[dict[str, Any], dict[Any, float]] | None:
            """The claims and the agent's metrics of one round: the agent writes every 5 s, and the runtime's
            mean period moves by tenths of a ms as iterations accumulate."""
            before = {gang: claim(cluster, ns, gang)["status"]["measuredProfile"] for gang in ("a", "b")}
            scraped = scrape(f"http://127.0.0.1:{port}/metrics")
            after = {gang: claim(cluster, ns, gang)["status"]["measuredProfile"] for gang in ("a", "b")}
            same = before == after and all(scraped.get(period_metric(g)) == after[g]["periodMs"] for g in after)
            return (after, scraped) if same else None

        profiles, scraped = wait_until(consistent, 30, lambda: f"claims and metrics of one round\n{logs()}")
    finally:
        stop_processes(agent, *loops)
    for gang, period in (("a", 300.0), ("b", 400.0)):
        measured = profiles[gang]
        assert measured["source"] == "runtime" and measured["node"] == node, measured
        assert measured["periodMs"] == pytest.approx(period, rel=0.05), measured
        (window,) = measured["windows"]
        assert 29.0 <= window["lenMs"] < 60.0 and window["gbps"] > 0  # a sleep of 30 ms, never shorter
        assert conds[gang]["reason"].startswith("Period") and "period 200 -> " in conds[gang]["message"]
    assert scraped[("metronome_agent_gangs_on_node", ())] == 2
    assert scraped[("metronome_agent_fits_total", (("result", "shared"),))] >= 1  # the NIC fit nothing
