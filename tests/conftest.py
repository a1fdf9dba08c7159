"""Suite-wide rules: in CI a skipped test is a failure (nothing counts as passed that did not run)."""

from __future__ import annotations

import os

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and session.exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"CI: {skipped} test(s) skipped; in CI every selected test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
