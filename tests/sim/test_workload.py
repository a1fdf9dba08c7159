"""Scenario parsing for the simulator: generated workloads, and errors that name field, value, expected."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.sim.workload import parse_sim

BASE: dict[str, Any] = {
    "name": "t",
    "topology": {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nic_gbps": 100, "uplink_gbps": 100},
    "generate": {
        "count": 30, "seed": 3, "arrival": {"process": "poisson", "rate_per_min": 60},
        "mix": {"resnet50": 2, "bert-base": 1}, "workers": [2, 4], "iterations": [10, 20],
        "priorities": {10: 1, 0: 3},
    },
}


def with_(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[last] = value
    return data


def test_generated_jobs_follow_the_spec_and_are_seeded() -> None:
    sim = parse_sim(BASE)
    jobs = sim.jobs(0)
    assert len(jobs) == 30
    assert jobs[0].arrival_s == 0.0 and all(a.arrival_s <= b.arrival_s for a, b in zip(jobs, jobs[1:]))
    assert {j.model for j in jobs} <= {"resnet50", "bert-base"}
    assert {j.workers for j in jobs} <= {2, 4} and all(10 <= j.iterations <= 20 for j in jobs)
    assert {j.priority for j in jobs} <= {0, 10}
    # Rates come from the catalog at the topology's NIC line rate.
    resnet = next(j for j in jobs if j.model == "resnet50")
    assert resnet.profile.peak_gbps == pytest.approx(80.0)
    assert sim.jobs(0) == jobs and sim.jobs(1) != jobs
    # Poisson at 60/min: the mean gap is about a second.
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(jobs, jobs[1:])]
    assert 0.4 < sum(gaps) / len(gaps) < 2.5


def test_explicit_jobs_are_kept_beside_generated_ones() -> None:
    data = with_("jobs", [{"name": "mine", "model": "vgg11", "workers": 2, "arrival_s": 5}])
    names = [j.name for j in parse_sim(data).jobs(0)]
    assert "mine" in names and len(names) == 31


def test_a_scenario_with_neither_jobs_nor_generate_is_refused() -> None:
    data = copy.deepcopy(BASE)
    del data["generate"]
    with pytest.raises(InvalidInput, match=r"^jobs: got \[\], expected a non-empty list"):
        parse_sim(data)


@pytest.mark.parametrize(("path", "value", "message"), [
    ("generate.count", 0, r"^generate.count: got 0, expected an integer in \[1, 100000\]"),
    ("generate.count", 10**12, r"^generate.count: got 1000000000000, expected an integer in \[1, 100000\]"),
    ("generate.arrival.process", "bursty", r"^generate.arrival.process: got 'bursty', expected one of poisson"),
    ("generate.arrival.rate_per_min", -1, r"^generate.arrival.rate_per_min: got -1, expected a number > 0"),
    ("generate.mix", {"resnet51": 1}, r"^generate.mix.resnet51: got 'resnet51', expected a catalog model, one of"),
    ("generate.mix", {"resnet50": 0}, r"^generate.mix.resnet50: got 0, expected a weight > 0"),
    ("generate.mix", [], r"^generate.mix: got \[\], expected a non-empty mapping of choice to weight"),
    ("generate.workers", [2, 17], r"^generate.workers.17.workers: got 17, expected a gang that fits the cluster's 16 GPUs"),
    ("generate.gpus_per_worker", 8, r"^generate.workers.2.gpus_per_worker: got 8, expected at most the 4 GPUs of one node"),
    ("generate.iterations", [20, 10], r"^generate.iterations\[1\]: got 10, expected an integer in \[20, 1000000\]"),
    ("generate.iterations", [20, 10**12], r"^generate.iterations\[1\]: got 1000000000000, expected an integer in \[20, 1000000\]"),
    ("generate.iterations", 5, r"^generate.iterations: got 5, expected a range \[min, max\]"),
    ("generate.priorities", {"high": 1}, r"^generate.priorities.high: got 'high', expected an integer choice"),
    ("generate.speed", 1, r"^generate.speed: got 1, expected one of \["),
    ("seeds", 0, r"^seeds: got 0, expected an integer >= 1"),
    ("description", 5, r"^description: got 5, expected a string"),
    ("colour", "red", r"^colour: got 'red', expected one of the scenario keys \["),
    # Found by an adversarial pass over the format (2026-11-29): each of these used to raise a traceback,
    # or run with NaN arrival times.
    ("generate.workers", [[2, 4]], r"^generate.workers\[0\]: got \[2, 4\], expected an integer in \[1, 102400\]"),
    ("generate.mix", {"resnet50": 1e308, "bert-base": 1e308},
     r"^generate.mix.resnet50: got 1e\+308, expected a weight > 0 and <= 1e\+09"),
    ("generate.priorities", {10**400: 1}, r"^generate.priorities.1000.*expected an integer in \[-2147483648, 2147483647\]"),
    ("generate.arrival.rate_per_min", 1e-310,
     r"^generate.arrival.rate_per_min: got 1e-310, expected at least 5.52e-05 per minute: 30 arrivals from 0 s"),
    ("generate.arrival.start_s", 1e300, r"^generate.arrival.start_s: got 1e\+300, expected a number in \[0, 3.1536e\+07\]"),
    ("execution", {"startup_s": [0, 1e300]}, r"^execution.startup_s\[1\]: got 1e\+300, expected a number in \[0, 3.15"),
    ("execution", {"straggler_probability": 1, "straggler_slowdown": 1e300},
     r"^execution.straggler_slowdown: got 1e\+300, expected a number in \[1, 100\]"),
    ("execution", {"noise_cv": 1000}, r"^execution.noise_cv: got 1000, expected a number in \[0, 1\]"),
    ("execution", {"traffic_classes": 0}, r"^execution.traffic_classes: got 0, expected an integer in \[1, 16\]"),
    ("execution", {"traffic_classes": 17}, r"^execution.traffic_classes: got 17, expected an integer in \[1, 16\]"),
    ("execution", {"traffic_classes": "4"}, r"^execution.traffic_classes: got '4', expected an integer in \[1, 16\]"),
    ("execution", {"traffic_classes": True}, r"^execution.traffic_classes: got True, expected an integer in \[1, 16\]"),
    ("execution", {"classes_from": "network"},
     r"^execution.classes_from: got 'network', expected one of scheduler, start-order"),
    ("topology.uplink_gbps", 1e-6, r"^topology.uplink_gbps: got 1e-06, expected a number >= 0.001"),
    ("topology.uplink_gbps", "1.0e12", r"^topology.uplink_gbps: got '1.0e12', expected .*write a dot and the exponent's sign"),
    ("topology", {"racks": 100000, "nodes_per_rack": 100000, "gpus_per_node": 8, "nic_gbps": 100, "uplink_gbps": 100},
     r"^topology.nodes_per_rack: got 100000, expected at most 102,400 nodes in all \(100000 racks of 100000 make"),
    ("generate.mix", {"ResNet50": 1, "resnet50": 1},
     r"^generate.mix.resnet50: got 'resnet50', expected a model not already in the mix \(as ResNet50\)"),
    # Valid on its own, a catalog model can ask too much of a cluster: named by the mix entry, not "profile".
    ("max_hyperperiod_ms", 50, r"^generate.mix.resnet50: got 'resnet50', expected a model whose period on workers of "
                               r"1 GPU of this topology \(200 ms\) is at most max_hyperperiod_ms \(50 ms\): no longer period can be "
                               r"placed \(the scenario may raise max_hyperperiod_ms up to 500000 ms, 100,000 slots "
                               r"of slot_ms\)$"),
    ("topology.nic_gbps", 9000, r"^generate.mix.resnet50: got 'resnet50', expected a model whose profile on workers "
                                r"of 1 GPU of this topology is valid; there its profile.windows\[0\].gbps: got 7200.0"),
])
def test_validator_errors_name_field_value_and_expected_form(path: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_sim(with_(path, value))


def test_a_cap_of_too_many_slots_names_the_keys_the_file_has() -> None:
    with pytest.raises(InvalidInput, match=r"^max_hyperperiod_ms: got 20000.0, expected between 1 and 100,000 slots "
                                           r"of slot_ms \(0.1 ms\): at most 10000 ms"):
        parse_sim({**copy.deepcopy(BASE), "slot_ms": 0.1, "max_hyperperiod_ms": 20000})


@pytest.mark.parametrize(("job", "extra", "message"), [
    ({"model": None}, {}, r"^jobs\[0\].model: got None, expected a non-empty string"),
    ({"priority": 2**31}, {}, r"^jobs\[0\].priority: got 2147483648, expected an integer in \[-2147483648, 2147483647\]"),
    ({"arrival_s": 1e300}, {}, r"^jobs\[0\].arrival_s: got 1e\+300, expected a number in \[0, 3.1536e\+07\]"),
    ({"workers": 10**12, "gpus_per_worker": 0}, {}, r"^jobs\[0\].workers: got 1000000000000, expected an integer in"),
    ({"name": "a\x00b"}, {}, r"^jobs\[0\].name: got 'a\\x00b', expected a non-empty string of printable characters"),
    # A name generate: gives one of its jobs would collide on some seed: refused whatever the seed.
    ({"name": "bert-base-0029"}, {}, r"^jobs\[0\].name: got 'bert-base-0029', expected a name generate: does not give"),
    ({"profile": {"period_ms": 30000, "windows": [{"start_ms": 0, "len_ms": 10, "gbps": 10}]}}, {},
     r"^jobs\[0\].profile.period_ms: got 30000.0, expected at most max_hyperperiod_ms \(25200 ms\): .* may raise "
     r"max_hyperperiod_ms up to 500000 ms"),
    ({"profile": {"period_ms": 20000, "windows": [{"start_ms": 0, "len_ms": 10, "gbps": 10}]}},
     {"execution": {"noise_cv": 1.0}},
     r"^jobs\[0\].profile.period_ms: got 20000.0, expected a job whose measured period under execution.noise_cv 1 "),
])
def test_an_explicit_job_out_of_bounds_is_refused_by_its_field(job: dict[str, Any], extra: dict[str, Any],
                                                               message: str) -> None:
    data = {**copy.deepcopy(BASE), **extra, "jobs": [{"name": "j", "model": "vgg11", "workers": 2, **job}]}
    if "profile" in job:
        del data["jobs"][0]["model"]
    with pytest.raises(InvalidInput, match=message):
        parse_sim(data)


def test_names_generate_does_not_give_are_free_for_explicit_jobs() -> None:
    data = {**copy.deepcopy(BASE), "jobs": [{"name": n, "model": "vgg11", "workers": 2}
                                            for n in ("bert-base-0030", "bert-base-7", "vgg11-0001", "bert-base-00001")]}
    assert len(parse_sim(data).jobs(0)) == 34


def test_explicit_job_that_no_cluster_could_hold_is_refused() -> None:
    data = with_("jobs", [{"name": "huge", "model": "vgg11", "workers": 9, "gpus_per_worker": 2}])
    with pytest.raises(InvalidInput, match=r"^jobs\[0\].workers: got 9, expected a gang that fits the cluster's 16 GPUs"):
        parse_sim(data)


def test_shapes_draw_worker_count_and_gpus_per_worker_together() -> None:
    data = copy.deepcopy(BASE)
    del data["generate"]["workers"]
    data["generate"]["shapes"] = [{"workers": 8, "gpus_per_worker": 1, "weight": 1},
                                  {"workers": 2, "gpus_per_worker": 4, "weight": 1}]
    jobs = parse_sim(data).jobs(0)
    assert {(j.workers, j.gpus_per_worker) for j in jobs} == {(8, 1), (2, 4)}


@pytest.mark.parametrize(("shapes", "message"), [
    ([], r"^generate.shapes: got \[\], expected a non-empty list of \{workers, gpus_per_worker, weight\}"),
    ([{"workers": 2, "weight": 1}], r"^generate.shapes\[0\]: got .*, expected a mapping with exactly workers"),
    ([{"workers": 2, "gpus_per_worker": 8, "weight": 1}],
     r"^generate.shapes\[0\].gpus_per_worker: got 8, expected at most the 4 GPUs of one node"),
    ([{"workers": 5, "gpus_per_worker": 4, "weight": 1}],
     r"^generate.shapes\[0\].workers: got 5, expected a gang that fits the cluster's 16 GPUs"),
    ([{"workers": 2, "gpus_per_worker": 1, "weight": 0}], r"^generate.shapes\[0\].weight: got 0, expected a weight > 0"),
])
def test_bad_shapes_name_the_field(shapes: Any, message: str) -> None:
    data = copy.deepcopy(BASE)
    del data["generate"]["workers"]
    data["generate"]["shapes"] = shapes
    with pytest.raises(InvalidInput, match=message):
        parse_sim(data)


def test_shapes_and_workers_together_are_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^generate.shapes: got .*, expected either shapes or workers"):
        parse_sim(with_("generate.shapes", [{"workers": 2, "gpus_per_worker": 1, "weight": 1}]))


def test_offered_load_is_arrival_rate_times_mean_gpu_seconds_over_cluster_gpus() -> None:
    from volcano_metronome.sim.workload import offered_load

    sim = parse_sim(with_("generate.mix", {"resnet50": 1}))
    assert sim.generate is not None
    # 60/min = 1/s; workers 2 or 4 (mean 3) x 1 GPU; 15 iterations on average of 200 ms (100 Gbps = reference).
    assert offered_load(sim.generate, sim.scenario) == pytest.approx(1.0 * 3 * 15 * 0.2 / 16)


def test_the_built_in_cluster_256_regimes_offer_the_loads_their_documentation_states() -> None:
    from volcano_metronome.commands.files import load_sim_scenario
    from volcano_metronome.sim.workload import offered_load

    busy, light = load_sim_scenario("cluster-256"), load_sim_scenario("cluster-256-light")
    assert busy.generate is not None and light.generate is not None
    assert offered_load(busy.generate, busy.scenario) == pytest.approx(0.90, abs=0.01)
    assert offered_load(light.generate, light.scenario) == pytest.approx(0.65, abs=0.01)
    assert busy.generate.count == light.generate.count == 300
    assert {gpus for (_, gpus), _ in busy.generate.shapes} == {1, 8}


@pytest.mark.parametrize("name, gpu, nics", [("multi-tenant", "a100", 1), ("oversubscribed-racks", "a100", 8),
                                             ("llm-heavy", "h100", 4), ("multi-tenant-128", "a100", 1),
                                             ("moe-racks", "a100", 8)])
def test_issue12_scenarios_are_at_the_documented_load_and_hardware(name: str, gpu: str, nics: int) -> None:
    from volcano_metronome.commands.files import load_sim_scenario
    from volcano_metronome.sim.workload import offered_load

    sim = load_sim_scenario(name)
    assert sim.generate is not None and sim.execution.overlap and sim.execution.noise_cv == 0.02
    assert offered_load(sim.generate, sim.scenario, True) == pytest.approx(0.90, abs=0.01)
    topo = sim.scenario.topology
    assert (topo.gpu, topo.nics_per_node) == (gpu, nics)
