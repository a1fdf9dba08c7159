"""A real Prometheus server scrapes the node agent and the controller, and its HTTP API returns what they export.

Prometheus is a program of the ``extra`` tier, which CI never builds: this test runs where
`volcano-metronome tools build prometheus` has cached it and is otherwise deselected, with one line
saying so (tests/conftest.py). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pytest
import yaml

from tests.agent.process import Samples, free_port, scrape, start_agent, start_timed_loop, stop
from tests.controller import builders as b
from tests.controller.cluster import Cluster, ControllerProcess, start_controller, wait_until
from volcano_metronome import kube
from volcano_metronome.controller import objects
from volcano_metronome.devtools import binaries

pytestmark = pytest.mark.programs("prometheus")


@pytest.fixture
def queue(cluster: Cluster) -> Iterator[str]:
    """A Volcano queue governed by a QueuePolicy that reports drift (observe)."""
    name = f"observe-{cluster.tag}"
    cluster.k.create(kube.QUEUE_POLICIES, b.queue_policy(name, volcanoQueues=[name], profilePolicy="observe"))
    yield name
    cluster.k.delete(kube.QUEUE_POLICIES, None, name)


class Prometheus:
    """``prometheus`` scraping ``targets`` (job name -> host:port) every second, its API on 127.0.0.1."""

    def __init__(self, work: pathlib.Path, targets: dict[str, str]) -> None:
        self.port = free_port()
        self.log = work / "prometheus.log"
        config = work / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                               for job, target in targets.items()]}))
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([str(binaries.binary_path("prometheus")), f"--config.file={config}",
                                          f"--storage.tsdb.path={work / 'tsdb'}",
                                          f"--web.listen-address=127.0.0.1:{self.port}"],
                                         stdout=out, stderr=subprocess.STDOUT, cwd=work)
        wait_until(self.ready, 60, lambda: f"Prometheus ready\n{self.log.read_text()[-3000:]}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now (``/api/v1/query``)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        assert answer["data"]["resultType"] == "vector", answer
        return list(answer["data"]["result"])

    def value(self, promql: str) -> float | None:
        """The one sample's value (None when the vector is empty)."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_measured_period_and_bandwidth_the_agent_and_controller_export(
        cluster: Cluster, tmp_path: pathlib.Path, controllers: list[ControllerProcess], queue: str) -> None:
    cluster.nodes(1)
    ns = cluster.namespace()
    cluster.k.create(kube.PODGROUPS, b.podgroup(ns, "a", 1, queue=queue, gpus=8), ns)
    for p in b.gang_pods(ns, "a", 1, gpus=8):
        cluster.k.create(kube.PODS, p, ns)
    ctl = start_controller(cluster, tmp_path, controllers, ns)
    wait_until(lambda: cluster.ungated(ns), 60, lambda: f"ungated pods\n{ctl.logs()}")
    (node,) = cluster.claims(ns)["podgroup-a"]["status"]["nodes"]

    reports = tmp_path / "measured"
    loop = start_timed_loop(reports, ns, "a", 300.0, 30.0, tmp_path / "loop.log")
    agent_port = free_port()
    agent = start_agent(cluster.kubeconfig, node, tmp_path / "agent.log", agent_port, ["--runtime-dir", str(reports)])
    logs = lambda: "\n".join(f"{p.name}:\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))  # noqa: E731
    prometheus = None
    try:
        prometheus = Prometheus(tmp_path, {"agent": f"127.0.0.1:{agent_port}", "controller": f"127.0.0.1:{ctl.port}"})

        def drifted() -> bool:
            cond = objects.condition(cluster.claims(ns)["podgroup-a"], "ProfileDrift")
            return cond is not None and cond["status"] == "True"

        wait_until(drifted, 60, lambda: f"ProfileDrift\n{logs()}")
        for job in ("agent", "controller"):
            wait_until(lambda: prometheus.value(f'up{{job="{job}"}}') == 1.0, 30, lambda: f"{job} scraped\n{logs()}")

        series = {
            "period": ('metronome_agent_period_ms{{namespace="{ns}",claim="podgroup-a",source="runtime"}}',
                       ("metronome_agent_period_ms", (("claim", "podgroup-a"), ("namespace", ns), ("source", "runtime")))),
            "bandwidth": ('metronome_agent_measured_gbps{{interface="lo"}}',
                          ("metronome_agent_measured_gbps", (("interface", "lo"),))),
            "drifted": ("metronome_controller_profile_drifted_gangs", ("metronome_controller_profile_drifted_gangs", ())),
        }
        agent_url, controller_url = f"http://127.0.0.1:{agent_port}/metrics", f"http://127.0.0.1:{ctl.port}/metrics"

        def agreed() -> dict[str, float] | None:
            """Prometheus's latest sample of each series equals the exporter's value, read before and after the
            query, and the period the claim holds (the agent writes every 5 s, and the runtime's mean period
            moves by tenths of a ms as iterations accumulate: an agreement across a change would prove nothing)."""
            claimed = cluster.claims(ns)["podgroup-a"]["status"].get("measuredProfile", {}).get("periodMs")
            before: Samples = {**scrape(agent_url), **scrape(controller_url)}
            stored = {name: prometheus.value(promql.format(ns=ns)) for name, (promql, _) in series.items()}
            after: Samples = {**scrape(agent_url), **scrape(controller_url)}
            exported = {name: after.get(key) for name, (_, key) in series.items()}
            if all(before.get(key) == exported[name] == stored[name] is not None
                   for name, (_, key) in series.items()) and claimed == stored["period"]:
                return {name: value for name, value in stored.items() if value is not None}
            return None

        # Prometheus scrapes every second: its latest sample catches up with a changed value within a scrape.
        values = wait_until(agreed, 60, lambda: f"Prometheus agreeing with the exporters\n{logs()}", interval=0.5)
        # A history at the 1 s scrape interval, not only the latest sample (the series may have begun with the
        # agent's first trace just before the agreement).

        def history() -> float:
            (counted,) = prometheus.query('count_over_time(metronome_agent_measured_gbps{interface="lo"}[1h])')
            return float(counted["value"][1])

        wait_until(lambda: history() >= 3, 15, lambda: f"3 samples of the rate in Prometheus\n{logs()}")
    finally:
        processes = [agent, loop] + ([prometheus.proc] if prometheus is not None else [])
        stop(*processes)
    assert cluster.claims(ns)["podgroup-a"]["status"]["measuredProfile"]["source"] == "runtime"
    assert values["period"] == pytest.approx(300.0, rel=0.05)
    assert values["bandwidth"] > 0  # the NIC's mean rate: the API server's and the scrapes' traffic on lo at least
    assert values["drifted"] == 1.0
