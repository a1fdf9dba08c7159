"""Suite-wide rules.

- The upstream test data (CRDs and examples of the pinned Volcano, Kueue and scheduler-plugins) must be
  there before anything is collected; otherwise one message says what is missing and where it was looked for.

- In CI a skipped test is a failure (nothing counts as passed that did not run).
- Tests marked ``e2e`` (every test under ``tests/e2e/``, and any other test carrying the marker) need
  programs the normal CI run does not build. They run with ``METRONOME_E2E=1``, and without it when every
  program of the e2e tier is already in the binary cache; ``METRONOME_E2E=0`` turns them off. Otherwise
  they are deselected, not skipped (so that the rule above does not fail the normal run), and the run
  says so in one line naming what is not built.
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
        sources.upstream_dir()
    except MetronomeError as exc:
        pytest.exit(f"cannot run the tests: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = os.environ.get("METRONOME_E2E")
    missing = _e2e_missing() if choice is None else []
    run_e2e = choice == "1" or (choice is None and not missing)
    reason = "METRONOME_E2E=0" if choice == "0" else f"not built: {', '.join(missing)}"
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        if _E2E_DIR in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
        if not run_e2e and item.get_closest_marker("e2e") is not None:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        config.stash[_E2E_NOTE] = (f"e2e tier: {len(dropped)} test(s) deselected ({reason}; "
                                   f"`METRONOME_E2E=1 volcano-metronome tools build` builds them)")


_E2E_NOTE = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    note = config.stash.get(_E2E_NOTE, None)
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
