"""Where the local clusters find their inputs: the checkout, its CRDs and chart, and ``shared/upstream``."""

from __future__ import annotations

import os
import pathlib
import subprocess

from volcano_metronome.devtools import binaries
from volcano_metronome.devtools.controlplane import ControlPlaneError


def repo_root() -> pathlib.Path:
    """The checkout this package runs from (the parent of ``tools/``)."""
    return binaries.tools_dir().parent


def upstream_dir(environ: dict[str, str] | None = None, root: pathlib.Path | None = None) -> pathlib.Path:
    """``shared/upstream``: ``$METRONOME_UPSTREAM_DIR``, else beside the checkout, else beside the checkout
    it was cloned from (a clean clone made elsewhere, e.g. in a temporary directory, still finds it)."""
    env = os.environ if environ is None else environ
    override = env.get("METRONOME_UPSTREAM_DIR")
    checkout = root or repo_root()
    candidates = [pathlib.Path(override).expanduser()] if override else [
        base.parent / "shared" / "upstream" for base in (checkout, _local_origin(checkout)) if base is not None]
    for path in candidates:
        if (path / "crds").is_dir():
            return path
    raise ControlPlaneError(f"no upstream CRDs in {' or '.join(str(p / 'crds') for p in candidates)}; "
                            f"set METRONOME_UPSTREAM_DIR to the shared/upstream directory")


def _local_origin(checkout: pathlib.Path) -> pathlib.Path | None:
    """The checkout ``origin`` names, when it is a directory on this machine (a clone of a local path)."""
    try:
        url = subprocess.run(["git", "-C", str(checkout), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = pathlib.Path(url.removeprefix("file://")).expanduser() if url else None
    return path.resolve() if path is not None and path.is_absolute() and path.is_dir() else None


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
