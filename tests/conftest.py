"""Suite-wide rules.

- The upstream test data (CRDs and examples of the pinned Volcano, Kueue and scheduler-plugins) must be
  there before anything is collected; otherwise one message says what is missing and where it was looked for.
  The example parts are the exception (Kueue's come from its site/, which no Go module ships): without one,
  the tests marked ``upstream_examples(<project>, ...)`` that need it are deselected (not skipped), tests
  parametrized over every example simply get fewer cases, and the run says so in one line naming the
  missing parts, where they were looked for and how to provide them.

- In CI a skipped test is a failure (nothing counts as passed that did not run).
- Tests marked ``e2e`` (every test under ``tests/e2e/``, and any other test carrying the marker) need
  programs the normal CI run does not build. They run with ``METRONOME_E2E=1``, and without it when every
  program of the e2e tier is already in the binary cache; ``METRONOME_E2E=0`` turns them off. Otherwise
  they are deselected, not skipped (so that the rule above does not fail the normal run), and the run
  says so in one line naming what is not built.
- Tests marked ``programs(<name>, ...)`` need programs of the ``extra`` tier (Prometheus), which CI never
  builds: they run where every named program is in the binary cache, and are otherwise deselected (not
  skipped), the run saying so in one line with the command that builds them.
"""

from __future__ import annotations

import os
import pathlib

import pytest

_E2E_DIR = pathlib.Path(__file__).resolve().parent / "e2e"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The upstream CRDs and examples the tests read, at the pinned versions: gathered (or found in the
    cache) once, before collection; without them the run stops here with one message naming what is missing."""
    from volcano_metronome.core.errors import MetronomeError
    from volcano_metronome.devtools import sources

    try:
        session.config.stash[_MISSING_EXAMPLES] = sources.missing_upstream_examples(sources.upstream_dir())
    except MetronomeError as exc:
        pytest.exit(f"cannot run the tests: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


_MISSING_EXAMPLES = pytest.StashKey[dict[str, str]]()


def _needs_missing_examples(item: pytest.Item, missing: dict[str, str]) -> bool:
    """Whether ``item`` reads an upstream example part (``examples/<project>``) that was not gathered."""
    from volcano_metronome.devtools.upstream import PARTS

    needed = {project for mark in item.iter_markers("upstream_examples") for project in mark.args}
    known = {part.project for part in PARTS if part.optional}
    if needed - known:
        raise pytest.UsageError(f"{item.nodeid}: upstream_examples{tuple(sorted(needed - known))}: "
                                f"expected projects among {sorted(known)}")
    return any(f"examples/{project}" in missing for project in needed)


def _examples_note(dropped: int, missing: dict[str, str]) -> str:
    from volcano_metronome.devtools.upstream import OVERRIDE_VARIABLE

    looked = ", ".join(f"{name} ({where})" for name, where in sorted(missing.items()))
    return (f"upstream examples: {dropped} test(s) deselected, missing {looked}; "
            f"{OVERRIDE_VARIABLE}=<dir laid out like shared/upstream, with examples/<project>/*.yaml> provides them")


def _e2e_missing() -> list[str]:
    """The programs of the e2e tier not in the binary cache (none: the tier can run)."""
    from volcano_metronome.devtools import binaries

    missing = []
    for name in binaries.default_names({"METRONOME_E2E": "1"}):
        try:
            binaries.binary_path(name)
        except (binaries.MissingBinary, binaries.BuildFailed):
            missing.append(name)
    return missing


def _programs_missing(item: pytest.Item, cache: dict[str, bool]) -> list[str]:
    """The programs ``item``'s ``programs(...)`` marker names that are not in the binary cache."""
    from volcano_metronome.devtools import binaries

    missing = []
    for name in (name for mark in item.iter_markers("programs") for name in mark.args):
        if name not in binaries.TOOLS:
            raise pytest.UsageError(f"{item.nodeid}: programs({name!r}): expected one of {sorted(binaries.TOOLS)}")
        if name not in cache:
            try:
                binaries.binary_path(name)
                cache[name] = True
            except (binaries.MissingBinary, binaries.BuildFailed):
                cache[name] = False
        if not cache[name]:
            missing.append(name)
    return missing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = os.environ.get("METRONOME_E2E")
    missing = _e2e_missing() if choice is None else []
    run_e2e = choice == "1" or (choice is None and not missing)
    reason = "METRONOME_E2E=0" if choice == "0" else f"not built: {', '.join(missing)}"
    missing_examples = config.stash.get(_MISSING_EXAMPLES, {})
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    without_examples: list[pytest.Item] = []
    without_programs: list[pytest.Item] = []
    built: dict[str, bool] = {}
    not_built: set[str] = set()
    for item in items:
        if _E2E_DIR in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
        if not run_e2e and item.get_closest_marker("e2e") is not None:
            dropped.append(item)
        elif _needs_missing_examples(item, missing_examples):
            without_examples.append(item)
        elif programs := _programs_missing(item, built):
            not_built.update(programs)
            without_programs.append(item)
        else:
            keep.append(item)
    if dropped or without_examples or without_programs:
        config.hook.pytest_deselected(items=dropped + without_examples + without_programs)
        items[:] = keep
    if without_programs:
        names = " ".join(sorted(not_built))
        config.stash[_PROGRAMS_NOTE] = (f"programs: {len(without_programs)} test(s) deselected (not built: {names}; "
                                        f"`volcano-metronome tools build {names}` builds them, see README)")
    if dropped:
        config.stash[_E2E_NOTE] = (f"e2e tier: {len(dropped)} test(s) deselected ({reason}; "
                                   f"`METRONOME_E2E=1 volcano-metronome tools build` builds them)")
    if missing_examples:
        config.stash[_EXAMPLES_NOTE] = _examples_note(len(without_examples), missing_examples)


_E2E_NOTE = pytest.StashKey[str]()
_EXAMPLES_NOTE = pytest.StashKey[str]()
_PROGRAMS_NOTE = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    for key in (_E2E_NOTE, _EXAMPLES_NOTE, _PROGRAMS_NOTE):
        note = config.stash.get(key, None)
        if note:
            terminalreporter.write_line(note)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and reporter is not None and session.exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"CI: {skipped} test(s) skipped; in CI every selected test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
