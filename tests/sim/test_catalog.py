"""The 13 modelled models: complete, derived, consistent with their derivations, on the default grid."""

from __future__ import annotations

import math

import pytest

from volcano_metronome.catalog import builtin
from volcano_metronome.catalog.models import ALLREDUCE, MODELS
from volcano_metronome.core.grid import SlotGrid, lay_out

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
