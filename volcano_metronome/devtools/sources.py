"""Where the local clusters find their inputs: the checkout, its CRDs and chart, and ``shared/upstream``."""

from __future__ import annotations

import os
import pathlib

from volcano_metronome.devtools import binaries
from volcano_metronome.devtools.controlplane import ControlPlaneError


def repo_root() -> pathlib.Path:
    """The checkout this package runs from (the parent of ``tools/``)."""
    return binaries.tools_dir().parent


def upstream_dir(environ: dict[str, str] | None = None) -> pathlib.Path:
    """``shared/upstream`` beside the checkout (``METRONOME_UPSTREAM_DIR`` overrides)."""
    env = os.environ if environ is None else environ
    override = env.get("METRONOME_UPSTREAM_DIR")
    path = pathlib.Path(override).expanduser() if override else repo_root().parent / "shared" / "upstream"
    if not (path / "crds").is_dir():
        raise ControlPlaneError(f"no upstream CRDs in {path / 'crds'}; set METRONOME_UPSTREAM_DIR to the shared/upstream directory")
    return path


def volcano_crd_files(upstream: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The upstream Volcano CRDs."""
    return sorted(((upstream or upstream_dir()) / "crds" / "volcano").glob("*.yaml"))


def kueue_crd_files(upstream: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The upstream Kueue CRDs (a running Kueue manager gets those of its own build instead)."""
    return sorted(((upstream or upstream_dir()) / "crds" / "kueue").glob("*.yaml"))


def upstream_crd_files(upstream: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The Volcano and Kueue CRDs our product works with."""
    return volcano_crd_files(upstream) + kueue_crd_files(upstream)


def our_crd_files(root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """Every ``crds/*.yaml`` of the checkout (examples in sub-directories are not CRDs)."""
    return sorted(((root or repo_root()) / "crds").glob("*.yaml"))


def chart_dir(root: pathlib.Path | None = None) -> pathlib.Path:
    """The Helm chart of the checkout."""
    return (root or repo_root()) / "helm" / "volcano-metronome"
