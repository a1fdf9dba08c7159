"""The pipeline benchmark's pure parts: the workload it submits, the metrics it reads, the ratios it reports."""

from __future__ import annotations

import pytest

from volcano_metronome import api
from volcano_metronome.bench import pipeline, workload
from volcano_metronome.bench.workload import Shape

METRICS_BEFORE = """\
# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 50
"""
METRICS_AFTER = """\
# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 26
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 20
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 16
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 130
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 900
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 12
"""


def test_writes_count_write_verbs_only_and_leave_heartbeats_and_dry_runs_out_of_the_workload():
    figures = workload.writes(workload.request_counts(METRICS_BEFORE), workload.request_counts(METRICS_AFTER))
    assert figures["by_resource"] == {"pods": 32, "leases": 30, "pods/binding": 16}
    assert figures["total"] == 78 and figures["workload"] == 48
    assert figures["rejected"] == {"events": 12}  # refused writes (a deleted namespace's Events) apart


def test_histogram_totals_sum_over_labels():
    text = ("# TYPE c histogram\nc_bucket{le=\"+Inf\"} 3\nc_sum 0.6\nc_count 3\n")
    assert workload.histogram_totals(text, "c") == (0.6, 3.0)
    assert workload.histogram_totals("", "c") == (0.0, 0.0)


@pytest.mark.parametrize(("values", "q", "expected"), [([], 50, None), ([3.0], 99, 3.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
                                                       ([float(x) for x in range(101)], 99, 99.0)])
def test_percentile_interpolates_like_numpy(values, q, expected):
    assert workload.percentile(values, q) == expected


def test_ratios_against_the_issues_targets():
    alone = {"gangs_per_s": 10.0, "p99_s": 2.0, "writes": {"workload": 800}}
    good = {"gangs_per_s": 8.0, "p99_s": 2.55, "writes": {"workload": 1680}}
    ratios = workload.ratios(alone, good, pods=800, cycle_s=0.06)
    assert ratios["throughput"] == {"ratio": 0.8, "target": ">= 0.8", "met": True}
    assert ratios["p99"]["limit_s"] == 2.56 and ratios["p99"]["met"]
    assert ratios["extra_writes_per_pod"]["value"] == 1.1 and ratios["extra_writes_per_pod"]["met"]
    slow = {"gangs_per_s": 7.9, "p99_s": 2.6, "writes": {"workload": 1681}}
    ratios = workload.ratios(alone, slow, pods=800, cycle_s=0.06)
    assert not ratios["throughput"]["met"] and not ratios["p99"]["met"] and not ratios["extra_writes_per_pod"]["met"]
    empty = workload.ratios({**alone, "gangs_per_s": None, "p99_s": None}, good, pods=800, cycle_s=0.0)
    assert empty["throughput"]["ratio"] is None and not empty["p99"]["met"]


def test_the_metronome_arm_alone_carries_a_profile_and_both_arms_ask_for_the_same_pods():
    for scheduler in workload.SCHEDULERS:
        shape = Shape(scheduler, gangs=2, size=16, gpus_per_pod=2)
        alone, ours = (workload.gang(shape, arm, "ns", 1) for arm in workload.ARMS)
        assert ours["metadata"]["annotations"] == {api.MODEL: "resnet50"} and alone["metadata"]["annotations"] == {}
        assert {k: v for k, v in alone.items() if k != "metadata"} == {k: v for k, v in ours.items() if k != "metadata"}
    volcano = workload.gang(Shape("volcano", 1, 16, 1), "alone", "ns", 0)
    assert volcano["spec"]["minAvailable"] == 16 and volcano["spec"]["tasks"][0]["replicas"] == 16
    kueue = workload.gang(Shape("kueue", 1, 16, 1), "alone", "ns", 0)
    assert kueue["metadata"]["labels"] == {api.KUEUE_QUEUE_NAME: workload.LOCAL_QUEUE}
    assert kueue["spec"]["parallelism"] == kueue["spec"]["completions"] == 16


def test_only_the_metronome_cluster_queue_lists_our_check():
    (_, _, alone), _ = workload.kueue_queues("alone", "ns", 64)
    (_, check, ours), local = workload.kueue_queues("metronome", "ns", 64)
    assert "admissionChecksStrategy" not in alone["spec"]
    assert ours["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": check["metadata"]["name"]}]}
    assert check["spec"]["controllerName"] == api.ADMISSION_CHECK_CONTROLLER
    assert local["spec"]["clusterQueue"] == "bench-metronome"


def test_nodes_needed_counts_whole_nodes_per_gang():
    assert Shape("volcano", 50, 16, 1).nodes_needed(8) == 100
    assert Shape("volcano", 3, 5, 2).nodes_needed(8) == 6


@pytest.mark.parametrize(("argv", "field"), [
    (["--scheduler", "volcano", "--gangs", "0"], "gangs: got 0"),
    (["--scheduler", "kueue", "--size", "-1"], "size: got -1"),
    (["--scheduler", "kueue", "--gpus-per-pod", "9"], "--gpus-per-pod: got 9"),
    (["--scheduler", "volcano", "--rounds", "0"], "--rounds"),
])
def test_bad_arguments_name_the_field(argv, field, capsys):
    assert pipeline.main(argv) == 2
    assert field in capsys.readouterr().err


def test_an_unknown_scheduler_is_refused():
    with pytest.raises(SystemExit):
        pipeline.build_parser().parse_args(["--scheduler", "slurm"])
    with pytest.raises(ValueError, match="scheduler: got 'slurm'"):
        Shape("slurm", 1, 1, 1)


WEBHOOK_METRICS = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.metronome.dev",operation="CREATE",rejected="false",type="admit",le="+Inf"} {n}
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.metronome.dev",operation="CREATE",rejected="false",type="admit"} {s}
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.metronome.dev",operation="CREATE",rejected="false",type="admit"} {n}
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.metronome.dev",operation="CREATE",rejected="true",type="admit",le="+Inf"} 1
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.metronome.dev",operation="CREATE",rejected="true",type="admit"} 0.5
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.metronome.dev",operation="CREATE",rejected="true",type="admit"} 1
apiserver_admission_webhook_admission_duration_seconds_bucket{name="idle.example",operation="CREATE",rejected="false",type="admit",le="+Inf"} 3
apiserver_admission_webhook_admission_duration_seconds_sum{name="idle.example",operation="CREATE",rejected="false",type="admit"} 0.3
apiserver_admission_webhook_admission_duration_seconds_count{name="idle.example",operation="CREATE",rejected="false",type="admit"} 3
"""


def test_webhook_calls_per_name_between_two_readings():
    before = workload.webhook_admission(WEBHOOK_METRICS.replace("{n}", "10").replace("{s}", "1.0"))
    after = workload.webhook_admission(WEBHOOK_METRICS.replace("{n}", "110").replace("{s}", "3.0"))
    assert before["pods.metronome.dev"] == (1.5, 11.0)  # summed over the label sets
    assert workload.webhook_calls(before, after) == {
        "pods.metronome.dev": {"calls": 100, "mean_s": 0.02, "total_s": 2.0}}  # idle.example made no call
    assert workload.webhook_calls({}, {}) == {} and workload.webhook_admission("") == {}
