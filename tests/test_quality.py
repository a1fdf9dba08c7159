"""The layering contracts, pyflakes and the type checker, as part of the one test command."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_import_contracts_hold():
    """core and admission stay pure; only volcano_metronome.kube imports the kubernetes client."""
    result = run(sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; "
                 "sys.argv = ['lint-imports', '--no-cache']; c()")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean():
    result = run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_pyflakes_finds_nothing():
    """No unused imports or names, no shadowed loop variables, no undefined names."""
    result = run(sys.executable, "-m", "pyflakes", "volcano_metronome", "webhooks", "tests")
    assert result.returncode == 0, result.stdout + result.stderr
