"""Shared fixtures of the simulator tests."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from volcano_metronome.commands.files import load_sim_scenario
from volcano_metronome.sim.workload import SimScenario, parse_sim

HERE = pathlib.Path(__file__).resolve().parent


def scenario_file(name: str) -> pathlib.Path:
    """A scenario kept with the tests."""
    return HERE / "scenarios" / f"{name}.yaml"


@pytest.fixture(scope="session")
def small() -> SimScenario:
    """A small contended cluster (tests/sim/scenarios/small.yaml)."""
    return parse_sim(yaml.safe_load(scenario_file("small").read_text()))


@pytest.fixture(scope="session")
def sanity() -> SimScenario:
    """The built-in sanity-2jobs scenario."""
    return load_sim_scenario("sanity-2jobs")
