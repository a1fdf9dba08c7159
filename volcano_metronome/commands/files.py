"""Reading the files commands are given (the shell side of scenario parsing)."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from volcano_metronome.core.errors import InvalidInput, MetronomeError
from volcano_metronome.scenario import Scenario, parse


def read_yaml(path: str | pathlib.Path) -> Any:
    """Load one YAML document, with an error that names the file."""
    p = pathlib.Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MetronomeError(f"cannot read {p}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MetronomeError(f"{p}: not valid YAML: {exc}") from None


def load_scenario(path: str) -> Scenario:
    """Parse the scenario file at ``path``; errors name the file and the field."""
    try:
        return parse(read_yaml(path))
    except InvalidInput as exc:
        raise MetronomeError(f"{path}: {exc}") from None
