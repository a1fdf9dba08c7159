"""Where the local clusters find their inputs: the checkout, its CRDs and chart, and the upstream test data."""

from __future__ import annotations

import pathlib

from volcano_metronome.devtools import binaries
from volcano_metronome.devtools import upstream as upstream_data
from volcano_metronome.devtools.processes import ControlPlaneError


def repo_root() -> pathlib.Path:
    """The checkout this package runs from (the parent of ``tools/``)."""
    return binaries.tools_dir().parent


def upstream_dir(environ: dict[str, str] | None = None, root: pathlib.Path | None = None) -> pathlib.Path:
    """The upstream CRDs and examples at the pinned versions, laid out like ``shared/upstream``
    (:func:`volcano_metronome.devtools.upstream.gather`; ``.ci/prepare`` gathers them first)."""
    try:
        return upstream_data.gather(checkout=root, environ=environ)
    except upstream_data.UpstreamDataMissing as exc:
        raise ControlPlaneError(str(exc)) from exc


def missing_upstream_examples(upstream: pathlib.Path | None = None) -> dict[str, str]:
    """The optional example parts (``examples/kueue``, ...) missing from the gathered data, and where they were looked for."""
    return upstream_data.missing_examples(upstream or upstream_dir())


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
