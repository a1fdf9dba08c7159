"""``bench decide`` runs the real decision path and prints its figures."""

from __future__ import annotations

import json

from volcano_metronome.bench import decide


def test_decide_bench_prints_its_figures(capsys) -> None:
    assert decide.main(["--nodes", "64", "--running", "40", "--gang", "4", "--repeat", "15", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 64 and doc["running"] == 40 and doc["repeat"] == 15
    assert doc["feasible_decisions"] == 15  # 8 whole nodes are kept free: every new gang of 4 fits
    assert 0 < doc["p50_ms"] <= doc["p99_ms"]
    assert doc["first_ms"] > 0  # the cold first decision, timed apart from the percentiles
