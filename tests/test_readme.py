"""The README's two set-up commands stay true: CI runs exactly the test command it shows."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_readme_opens_with_the_demo_and_the_test_command():
    commands = readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("volcano-metronome demo")
    assert "pytest" in commands[1]


def test_ci_runs_exactly_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    between = script.split("# test-command-begin\n", 1)[1].split("# test-command-end", 1)[0].strip()
    assert between == readme_commands()[1]
