"""``bench pipeline`` runs both arms on the e2e stack and prints the promised JSON (its targets are not asserted)."""

from __future__ import annotations

import json

import pytest

from volcano_metronome.bench import pipeline, workload
from volcano_metronome.devtools.stack import Stack

pytestmark = pytest.mark.e2e
ARM_KEYS = {"complete", "gangs_bound", "pods_bound", "span_s", "gangs_per_s", "p50_s", "p99_s", "max_s", "submit_s",
            "writes", "writes_per_pod", "cpu_s", "controller", "loadavg_before", "loadavg_after"}


@pytest.mark.parametrize("scheduler", workload.SCHEDULERS)
def test_pipeline_benchmark_measures_both_arms(stack: Stack, scheduler: str, capsys: pytest.CaptureFixture[str]) -> None:
    gangs, size = 2, 3
    status = pipeline.main(["--scheduler", scheduler, "--gangs", str(gangs), "--size", str(size), "--seed", "7",
                            "--timeout", "180", "--json", "--stack-dir", str(stack.directory)])
    out, err = capsys.readouterr()
    assert status == 0, err
    result = json.loads(out)
    assert (result["scheduler"], result["pods_per_arm"], result["seed"]) == (scheduler, gangs * size, 7)
    (entry,) = result["rounds"]
    assert sorted(entry["order"]) == sorted(workload.ARMS)
    for arm in workload.ARMS:
        figures = entry[arm]
        assert set(figures) == ARM_KEYS, arm
        # Every gang had every pod bound, and each latency lies within the arm's span.
        assert figures["complete"] and figures["gangs_bound"] == gangs and figures["pods_bound"] == gangs * size
        assert 0 < figures["p50_s"] <= figures["p99_s"] <= figures["max_s"] <= figures["span_s"]
        assert figures["gangs_per_s"] == pytest.approx(gangs / figures["span_s"], rel=0.01)
        # The API server saw at least the gangs' creations, a binding and a status write per pod.
        by_resource = figures["writes"]["by_resource"]
        assert by_resource["jobs"] >= gangs and by_resource["pods/binding"] == gangs * size
        assert figures["writes"]["workload"] <= figures["writes"]["total"]
        assert figures["cpu_s"]["kube-apiserver"] > 0 and all(v >= 0 for v in figures["cpu_s"].values())
    # Only the metronome arm is managed: the controller wrote claims, and pinned (patched) every pod.
    assert "stbandwidthclaims" in entry["metronome"]["writes"]["by_resource"]
    assert "stbandwidthclaims" not in entry["alone"]["writes"]["by_resource"]
    assert entry["metronome"]["controller"]["cycles"] >= 1
    assert set(entry["ratios"]) == {"throughput", "p99", "extra_writes_per_pod"}
    # The extra writes are the two arms' difference per pod (it may be negative on 6 pods: the schedulers'
    # own status writes vary by more than what a gang this small adds).
    extra = (entry["metronome"]["writes"]["workload"] - entry["alone"]["writes"]["workload"]) / (gangs * size)
    assert entry["ratios"]["extra_writes_per_pod"]["value"] == pytest.approx(extra, abs=0.001)
    # The timeline: every gang of each arm passed the marks its scheduler has, metronome's own marks in its arm only.
    stages = entry["stages"]
    expected = {"volcano": {"podgroup", "inqueue"}, "kueue": {"workload", "quota_reserved", "admitted", "unsuspended"}}
    common = {"submitted", "created", "pods_first", "pods_last", "ungated_last", "bound_last"} | expected[scheduler]
    for arm in workload.ARMS:
        section = stages[arm]
        assert section["gangs"] == gangs and common <= set(section["marks"]), (arm, section["marks"])
        assert all(s["n"] + s["missing"] + s["out_of_order"] == gangs for s in section["stages"])
        # submitted -> bound_last is the latency the figures report (two readings of one clock, microseconds apart).
        assert section["total"]["stage"] == "submitted->bound_last" and section["total"]["n"] == gangs
        assert section["total"]["p50_s"] == pytest.approx(entry[arm]["p50_s"], abs=0.05)
    assert {"claim", "claim_decided"} <= set(stages["metronome"]["marks"])
    assert not {"claim", "claim_decided", "check_ready"} & set(stages["alone"]["marks"])
    if scheduler == "kueue":
        assert "check_ready" in stages["metronome"]["marks"]
    assert [row["stage"] for row in stages["compared"]][0] == "submitted->created"
    assert "submitted->created" in err  # the human table on stderr
    # Our webhooks were called in the metronome arm only (the API server's own admission histogram).
    hooks = stages["admission_webhooks"]
    assert any(name.endswith(".metronome.dev") for name in hooks["metronome"])
    assert not any(name.endswith(".metronome.dev") for name in hooks["alone"])
    # The webhook is registered again afterwards, for the tests that follow.
    from volcano_metronome.devtools import probes
    from volcano_metronome.devtools.apply import ApiClient

    assert probes.webhook_mutates_podgroups(ApiClient.from_kubeconfig(stack.kubeconfig_path))
