"""The 13 modelled models: complete, derived, consistent with their derivations, on the default grid."""

from __future__ import annotations

import math

import pytest

from volcano_metronome.catalog import builtin, compute_scale
from volcano_metronome.catalog.models import ALLREDUCE, MODELS
from volcano_metronome.core.grid import SlotGrid, lay_out
from volcano_metronome.sim.workload import measured

NAMES = {"vgg11", "vgg16", "vgg19", "resnet50", "wideresnet101", "bert-base", "roberta-base", "xlm", "camembert",
         "gpt1", "gpt2", "gpt3", "dlrm"}

#: Parameter counts (millions) of the data-parallel entries, as their derivations state them.
PARAMS_M = {"vgg11": 132.9, "vgg16": 138.4, "vgg19": 143.7, "wideresnet101": 126.9, "bert-base": 110,
            "roberta-base": 125, "xlm": 665, "camembert": 110, "gpt1": 117, "gpt2": 355}


def test_the_thirteen_models_are_there_with_their_derivations() -> None:
    assert {m.name for m in MODELS} == NAMES
    assert set(builtin().names()) >= NAMES
    for m in MODELS:
        assert len(m.derivation) > 100, m.name
        assert all(0 < w.fraction <= 1 for w in m.windows)
    assert sum(len(m.windows) > 1 for m in MODELS) == 2  # GPT-3 (hybrid) and DLRM (all-to-all + all-reduce)


@pytest.mark.parametrize("name", sorted(PARAMS_M))
def test_all_reduce_windows_follow_from_the_parameter_count(name: str) -> None:
    entry = builtin().get(name)
    (window,) = entry.windows
    assert window.fraction == ALLREDUCE
    assert window.len_ms == math.ceil(0.7 * PARAMS_M[name])  # 0.7 ms per million parameters at 80 Gbps
    assert window.start_ms + window.len_ms == entry.period_ms  # the all-reduce closes the iteration
    assert f"{PARAMS_M[name]:g} M parameters" in entry.derivation


@pytest.mark.parametrize("entry", MODELS, ids=lambda m: m.name)
def test_catalog_periods_sit_on_the_default_grid(entry: object) -> None:
    profile = entry.profile(100.0)  # type: ignore[attr-defined]
    pattern = lay_out(profile, SlotGrid())
    assert pattern.period.error == 0.0
    assert 0 < profile.jitter_ms <= 0.05 * profile.period_ms


@pytest.mark.parametrize("entry", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("line_rate", [50.0, 200.0, 400.0])
def test_a_faster_nic_keeps_every_window_volume_and_the_compute_time(entry: object, line_rate: float) -> None:
    ref = entry.profile(entry.reference_gbps)  # type: ignore[attr-defined]
    other = entry.profile(line_rate)  # type: ignore[attr-defined]
    assert [w.len_ms * w.gbps for w in other.windows] == pytest.approx([w.len_ms * w.gbps for w in ref.windows])
    assert [w.gbps / line_rate for w in other.windows] == pytest.approx([w.gbps / 100.0 for w in ref.windows])

    def gaps(p: object) -> list[float]:
        ends = [0.0] + [w.start_ms + w.len_ms for w in p.windows]  # type: ignore[attr-defined]
        return [w.start_ms - e for w, e in zip(p.windows, ends)] + [p.period_ms - ends[-1]]  # type: ignore[attr-defined]

    assert gaps(other) == pytest.approx(gaps(ref))  # compute between and after windows unchanged
    comm = sum(w.len_ms for w in ref.windows)
    assert other.period_ms == pytest.approx(ref.period_ms - comm + comm * 100.0 / line_rate)
    assert other.jitter_ms == ref.jitter_ms


def test_resnet50_on_200_gbps_nics_worked_example() -> None:
    # 24 ms of all-reduce at 80 Gbps on the reference NIC = 1.92 Gb; at 160 Gbps that is 12 ms, after the same
    # 176 ms of compute: the period is 188 ms, which the default grid snaps up to 200 ms (40 slots).
    profile = builtin().get("resnet50").profile(200.0)
    (window,) = profile.windows
    assert (window.start_ms, window.len_ms, window.gbps, profile.period_ms) == (176.0, 12.0, 160.0, 188.0)
    assert lay_out(profile, SlotGrid()).period.ms == 200.0


def test_all_to_all_entries_spread_their_traffic_all_to_all_and_move_each_gpus_own_volume() -> None:
    from volcano_metronome.catalog.models import ALL_TO_ALL_MODELS, ALLTOALL, DLRM
    from volcano_metronome.scenario import TopologySpec

    assert {m.name for m in ALL_TO_ALL_MODELS} == {"dlrm-a2a", "moe-gpt"}
    assert builtin().get("dlrm").collective == "ring"  # the 13 keep the model their figures were measured with
    topo = TopologySpec(racks=2, nodes_per_rack=4, gpus_per_node=8, nic_gbps=200, uplink_gbps=3200, nics_per_node=8)
    for entry in ALL_TO_ALL_MODELS:
        assert entry.collective == "all-to-all" and len(entry.derivation) > 100
        assert all(w.per_gpu == (w.fraction == ALLTOALL) and (w.overlap == 0) == w.per_gpu for w in entry.windows)
        one, eight = topo.profile(entry, 1), topo.profile(entry, 8)
        assert one.collective == eight.collective == "all-to-all"
        for w1, w8, mw in zip(one.windows, eight.windows, entry.windows):
            # 1 GPU: 1 rail; 8 GPUs: 8 rails. An all-to-all window moves 8 x the volume at 8 x the rate.
            assert w8.len_ms == pytest.approx(w1.len_ms if mw.per_gpu else w1.len_ms / 8)
    a2a = builtin().get("dlrm-a2a")
    assert [w.len_ms for w in a2a.windows] == [w.len_ms for w in DLRM.windows]


def test_a_user_entry_may_name_its_collective_and_a_bad_one_is_named() -> None:
    from volcano_metronome.catalog import entry_from_mapping
    from volcano_metronome.core.errors import InvalidInput

    data = {"period_ms": 100, "windows": [{"start_ms": 50, "len_ms": 10, "fraction": 0.6}]}
    assert entry_from_mapping("m", data | {"collective": "all-to-all"}, "catalog.m").profile(100.0).collective == \
        "all-to-all"
    with pytest.raises(InvalidInput, match="collective.*tree|tree"):
        entry_from_mapping("m", data | {"collective": "tree"}, "catalog.m")


@pytest.mark.parametrize("name", sorted(builtin().names()))
def test_every_profile_the_simulator_draws_reads_at_its_slow_end_throttles_and_lays_out(name: str) -> None:
    # Round 24: windows that end with the period (compute, then all-reduce) on named hardware passed the rounded
    # period by up to 1 ns once read at their slow end or throttled, and raised (12 of these 15 models did).
    entry, grid = builtin().get(name), SlotGrid()
    for gpu, mfu in ((None, None), ("a100", 0.35), ("h100", 0.3), ("h100", 0.5)):
        scale = compute_scale(entry, gpu, mfu)
        for rate in (25.0, 100.0, 400.0):
            for overlap in (False, True):
                for noise in (0.0, 0.02, 0.05):
                    profile = measured(entry.profile(rate, scale, overlap, 2.0), noise)
                    for cap in (rate / 1.7, rate / 3.3, rate / 7.1):
                        throttled = profile.slow_end().throttled(cap).slow_end()
                        assert throttled.period_ms > profile.period_ms
                        if throttled.period_ms <= grid.max_hyperperiod_ms:
                            assert lay_out(throttled, grid, grid.exact(throttled.period_ms)).slots > 0
