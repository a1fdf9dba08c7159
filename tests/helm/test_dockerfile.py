"""The Dockerfile, read as text (there is no Docker engine here to build it): a slim Python base,
a builder stage that makes wheels, a final stage with no build tools that installs the webhook and
controller extras, runs as the non-root uid the chart expects, and starts `volcano-metronome`."""

from __future__ import annotations

import configparser
import json
import re
from dataclasses import dataclass, field

import pytest

from tests.helm.chart import CHART, REPO

BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|clang|make|build-essential|python3?-dev|libc6-dev|apt-get|apk|curl|wget|git)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        return [args for key, args in self.instructions if key == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages of a Dockerfile (continuation lines joined, comments dropped)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continuation"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.IGNORECASE)
            assert match, line
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], match.group(1))
            stages.append(Stage(base=base, name=match.group(2)))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM: {line}"
            name, _, default = args.partition("=")
            global_args[name.strip()] = default.strip()
        else:
            stages[-1].instructions.append((keyword, args.strip()))
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse((REPO / "Dockerfile").read_text())[1]


def test_two_stages_on_python_311_slim(stages: list[Stage]) -> None:
    assert len(stages) == 2
    assert all(re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", stage.base) for stage in stages), \
        [stage.base for stage in stages]  # pinned by digest: a rebuild gets the same base image
    assert stages[0].name == "builder" and stages[1].name is None


def test_builder_makes_wheels(stages: list[Stage]) -> None:
    runs = " ".join(stages[0].args_of("RUN"))
    assert "pip wheel" in runs and "[webhook,controller]" in runs


def test_final_stage_installs_the_extras_from_the_builders_wheels_only(stages: list[Stage]) -> None:
    final = stages[-1]
    runs = " ".join(final.args_of("RUN"))
    assert "--mount=type=bind,from=builder" in runs
    assert "--no-index" in runs and '"volcano-metronome[webhook,controller]"' in runs
    assert not final.args_of("COPY") and not final.args_of("ADD"), "the final stage must not copy sources or wheels in"
    extras = configparser.ConfigParser()
    extras.read(REPO / "setup.cfg")
    declared = {line.split("=")[0].strip() for line in extras["options.extras_require"]}
    assert {"webhook", "controller"} <= declared


def test_final_stage_has_no_build_tools(stages: list[Stage]) -> None:
    for keyword, args in stages[-1].instructions:
        assert not BUILD_TOOLS.search(args), f"{keyword} {args}"


def test_runs_as_the_non_root_user_the_chart_expects(stages: list[Stage]) -> None:
    (user,) = stages[-1].args_of("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f"runAsUser: {uid}" in helpers and f"runAsGroup: {gid}" in helpers
    last = stages[-1].instructions
    assert [k for k, _ in last].index("USER") > max(i for i, (k, _) in enumerate(last) if k == "RUN")


def test_entrypoint_is_the_console_script(stages: list[Stage]) -> None:
    (entrypoint,) = stages[-1].args_of("ENTRYPOINT")
    assert json.loads(entrypoint) == ["volcano-metronome"]
    extras = configparser.ConfigParser()
    extras.read(REPO / "setup.cfg")
    assert "volcano-metronome = volcano_metronome.cli:main" in extras["options.entry_points"]["console_scripts"]


def test_dockerignore_lets_in_only_the_package() -> None:
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {"volcano_metronome", "webhooks", "setup.cfg", "pyproject.toml"} <= allowed
    assert not allowed & {"tests", "helm", "crds", ".git", "tools"}


def test_parser_sees_through_continuations() -> None:
    text = "ARG B=python:3.11-slim\nFROM ${B} AS x\n# c\nRUN a \\\n  # inner\n  && b\nUSER 1:1\n"
    args, parsed = parse(text)
    assert args == {"B": "python:3.11-slim"}
    assert parsed[0].instructions == [("RUN", "a  && b"), ("USER", "1:1")]
