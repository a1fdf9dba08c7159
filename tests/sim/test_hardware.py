"""Modelled hardware: several NICs per node, compute on named GPUs, overlap of all-reduce with compute."""

from __future__ import annotations

import pytest

from volcano_metronome.catalog import GPU_PEAK_TFLOPS, builtin, compute_scale
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.scenario import parse_topology
from volcano_metronome.sim.workload import parse_sim

TOPO = {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 8, "nic_gbps": 200}


def test_several_nics_reach_the_core_as_one_link_of_their_aggregate_capacity() -> None:
    spec = parse_topology({**TOPO, "nics_per_node": 4})
    assert {link.capacity_gbps for link in spec.build().links} == {800.0}
    # A whole-node worker sends through all 4 NICs, a 4-GPU worker through 2, a 1-GPU worker through 1.
    assert [spec.rails(g) for g in (8, 4, 2, 1, 0)] == [4, 2, 1, 1, 1]
    resnet = builtin().get("resnet50")
    assert spec.profile(resnet, 8) == resnet.profile(800.0)
    assert spec.profile(resnet, 1) == resnet.profile(200.0)


def test_compute_scales_with_the_named_gpu_and_its_mfu() -> None:
    bert = builtin().get("bert-base")  # 108 ms of compute at 25 TFLOPS, 77 ms of all-reduce at 100 Gbps
    scale = compute_scale(bert, "h100", 0.5)
    assert scale == pytest.approx(25.0 / (GPU_PEAK_TFLOPS["h100"] * 0.5))
    profile = bert.profile(100.0, scale)
    window = profile.windows[0]
    assert window.len_ms == pytest.approx(77.0)  # communication does not change
    assert window.start_ms == pytest.approx(123.0 * scale)  # the compute before it does
    assert profile.period_ms == pytest.approx(200.0 * scale + 77.0 * (1 - scale))
    assert profile.duty_cycle > bert.profile(100.0).duty_cycle  # faster GPUs: communication's share grows
    assert compute_scale(bert, None, None) == 1.0


def test_overlap_hides_part_of_the_all_reduce_under_compute_but_never_all_of_it() -> None:
    resnet = builtin().get("resnet50")  # 176 ms compute, then 24 ms of all-reduce (overlap 0.5)
    hidden = resnet.profile(100.0, 1.0, overlap=True)
    assert hidden.windows[0].len_ms == pytest.approx(2.4)  # 0.5 x 176 > 24: only the last 10 % is exposed
    assert hidden.period_ms == pytest.approx(176.0 + 2.4)
    partly = resnet.profile(100.0, 0.1, overlap=True)  # 17.6 ms of compute hides 8.8 ms of 24
    assert partly.windows[0].len_ms == pytest.approx(24.0 - 8.8)
    dlrm = builtin().get("dlrm")  # the embedding all-to-alls block: nothing of them hides
    assert [w.len_ms for w in dlrm.profile(100.0, 1.0, True).windows[:2]] == [13.0, 13.0]


@pytest.mark.parametrize("topology, field", [
    ({**TOPO, "gpu": "v100", "mfu": 0.4}, "topology.gpu"),
    ({**TOPO, "gpu": "a100"}, "topology.mfu"),
    ({**TOPO, "gpu": "a100", "mfu": 1.5}, "topology.mfu"),
    ({**TOPO, "nics_per_node": 0}, "topology.nics_per_node"),
])
def test_bad_hardware_is_refused_naming_the_field(topology: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_topology(topology)
    assert err.value.field == field


def test_explicit_model_jobs_follow_the_hardware_and_overlap() -> None:
    sim = parse_sim({"name": "t", "topology": {**TOPO, "nics_per_node": 8, "gpu": "a100", "mfu": 0.4},
                     "execution": {"overlap": True},
                     "jobs": [{"name": "a", "workers": 2, "gpus_per_worker": 8, "model": "gpt2"}]})
    entry = builtin().get("gpt2")
    assert sim.jobs()[0].profile == entry.profile(1600.0, compute_scale(entry, "a100", 0.4), True)
