"""Suite-wide rules.

- In CI a skipped test is a failure (nothing counts as passed that did not run).
- Tests marked ``e2e`` (every test under ``tests/e2e/``, and any other test carrying the marker) run
  only with ``METRONOME_E2E=1``: they need programs the normal CI run does not build. They are
  deselected, not skipped, so that the rule above does not fail the normal run.
"""

from __future__ import annotations

import os
import pathlib

import pytest

_E2E_DIR = pathlib.Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_e2e = os.environ.get("METRONOME_E2E") == "1"
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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and session.exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"CI: {skipped} test(s) skipped; in CI every selected test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
