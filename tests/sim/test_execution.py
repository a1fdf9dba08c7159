"""Execution noise: two-sided iteration noise, stragglers, start-up delay; deterministic per seed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.sim.engine import Engine
from volcano_metronome.sim.workload import parse_sim

PROFILE = {"period_ms": 200, "windows": [{"start_ms": 150, "len_ms": 50, "gbps": 50}], "jitter_ms": 0}


def scenario(execution: dict[str, Any], jobs: int = 1) -> Any:
    return parse_sim({"name": "t", "topology": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 8, "nic_gbps": 100},
                      "execution": execution,
                      "jobs": [{"name": f"j{i}", "workers": 2, "gpus_per_worker": 8, "iterations": 400,
                                "profile": PROFILE} for i in range(jobs)]})


def test_noise_is_two_sided_stragglers_are_rare_and_slow_and_alone_time_follows() -> None:
    sim = scenario({"noise_cv": 0.05, "straggler_probability": 0.02, "straggler_slowdown": 3.0})
    job = Engine(sim, sim.jobs(0), "volcano-topology", seed=3).run().jobs[0]
    slow = np.array(job.slow)
    assert (slow < 0.97).any() and (slow > 1.03).any()  # two-sided
    stragglers = slow > 2.0
    assert 0 < stragglers.sum() < 30
    # A job alone runs exactly its time alone (noise and all).
    assert job.end_s - job.start_s == pytest.approx(job.isolated_s, rel=1e-9)
    assert job.isolated_s > 400 * 0.2  # stragglers cost more than the noise gives back


def test_start_up_delay_holds_the_gpus_then_the_job_runs_alone() -> None:
    sim = scenario({"startup_s": [5.0, 10.0]})
    job = Engine(sim, sim.jobs(0), "default", seed=0).run().jobs[0]
    assert 5.0 <= job.startup_s <= 10.0
    assert job.end_s == pytest.approx(job.startup_s + 400 * 0.2)
    assert job.isolated_s == pytest.approx(job.end_s)


def test_same_seed_same_draws_other_seed_other_draws_and_no_noise_by_default() -> None:
    sim = scenario({"noise_cv": 0.05, "startup_s": [0, 30]}, jobs=2)
    a, b, c = (Engine(sim, sim.jobs(0), "metronome", seed=s).run() for s in (1, 1, 2))
    assert [j.end_s for j in a.jobs] == [j.end_s for j in b.jobs]
    assert [j.end_s for j in a.jobs] != [j.end_s for j in c.jobs]
    plain = scenario({})
    assert all(j.slow is None and j.startup_s == 0 for j in Engine(plain, plain.jobs(0), "default").run().jobs)


@pytest.mark.parametrize("execution, field", [
    ({"noise_cv": -0.1}, "execution.noise_cv"),
    ({"straggler_probability": 1.5}, "execution.straggler_probability"),
    ({"straggler_slowdown": 0.5}, "execution.straggler_slowdown"),
    ({"startup_s": [10, 5]}, "execution.startup_s[1]"),
    ({"startup_s": 5}, "execution.startup_s"),
    ({"stragglers": 1}, "execution.stragglers"),
])
def test_bad_execution_is_refused_naming_the_field(execution: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        scenario(execution)
    assert err.value.field == field
