"""Upstream test data: gathered from the pinned modules, each part falling back to shared/upstream, one
error naming every CRD part that has no source, and example parts without a source left out and recorded."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.devtools import gosource, sources, upstream


@pytest.fixture()
def no_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    """No module served and no archive: only what a test provides as trees or fallbacks."""
    trees: dict[str, pathlib.Path] = {}

    def module_tree(module: str, version: str, environ: object = None) -> tuple[pathlib.Path | None, str]:
        found = trees.get(module)
        return found, "" if found else f"Go module proxy: {module}@{version}: 403 Forbidden"

    monkeypatch.setattr(gosource, "module_tree", module_tree)
    monkeypatch.setattr(gosource, "archive_tree", lambda *a, **k: (None, ["volcano-src/volcano-v1.15.1-src.tar.gz: not found"]))
    monkeypatch.setenv("METRONOME_UPSTREAM_CACHE", str(tmp_path / "cache"))
    return trees


def _env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    """The environment a lookup sees: the test's own cache, never the user's."""
    return {"METRONOME_UPSTREAM_CACHE": str(tmp_path / "cache"), **extra}


def _checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    """A checkout whose tools/ pins are the real ones, with nothing beside it."""
    real = sources.repo_root() / "tools"
    checkout = tmp_path / "elsewhere" / "clone"
    pins = [("volcano", ("source.json",)), ("kueue", ("go.mod",))] + [(g, ("source.json",)) for g in upstream.OPERATORS]
    for group, files in pins:
        (checkout / "tools" / group).mkdir(parents=True)
        for name in files:
            (checkout / "tools" / group / name).write_bytes((real / group / name).read_bytes())
    return checkout


def _shared(base: pathlib.Path) -> pathlib.Path:
    for part in upstream.PARTS:
        (base / part.name).mkdir(parents=True)
        (base / part.name / "from-shared.yaml").write_text(f"# {part.name}\n")
    return base


def test_missing_parts_are_named_in_one_error(tmp_path: pathlib.Path, no_sources: dict[str, pathlib.Path]) -> None:
    checkout = _checkout(tmp_path)
    with pytest.raises(MetronomeError) as failure:
        sources.upstream_dir(_env(tmp_path), root=checkout)
    message = str(failure.value)
    for part in upstream.PARTS:
        assert (f"{part.name} (" in message) == (not part.optional)
    assert "sigs.k8s.io/kueue@v0.18.4: 403 Forbidden" in message
    assert str(tmp_path / "elsewhere" / "shared" / "upstream" / "crds" / "kueue") in message
    assert "METRONOME_UPSTREAM_DIR" in message


def test_modules_first_then_the_override_per_part(tmp_path: pathlib.Path, no_sources: dict[str, pathlib.Path]) -> None:
    kueue = tmp_path / "kueue-module"
    (kueue / "config" / "components" / "crd" / "bases").mkdir(parents=True)
    (kueue / "config" / "components" / "crd" / "bases" / "kueue.x-k8s.io_workloads.yaml").write_text("kind: CRD\n")
    no_sources["sigs.k8s.io/kueue"] = kueue
    shared = _shared(tmp_path / "data")
    gathered = sources.upstream_dir(_env(tmp_path, METRONOME_UPSTREAM_DIR=str(shared)), root=_checkout(tmp_path))
    assert [p.name for p in sources.kueue_crd_files(gathered)] == ["kueue.x-k8s.io_workloads.yaml"]
    assert [p.name for p in sources.volcano_crd_files(gathered)] == ["from-shared.yaml"]
    provenance = json.loads((gathered / "SOURCES.json").read_text())
    assert provenance["crds/kueue/kueue.x-k8s.io_workloads.yaml"] == \
        "module sigs.k8s.io/kueue@v0.18.4: config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"
    assert provenance["examples/kueue/from-shared.yaml"] == f"fallback: {shared.resolve()}/examples/kueue/from-shared.yaml"
    # Gathered once: a second lookup reuses it even with the sources gone.
    no_sources.clear()
    again = sources.upstream_dir(_env(tmp_path, METRONOME_UPSTREAM_DIR=str(shared)), root=_checkout(tmp_path / "again"))
    assert again == gathered


def test_a_clone_made_elsewhere_falls_back_to_shared_beside_its_origin(
        tmp_path: pathlib.Path, no_sources: dict[str, pathlib.Path]) -> None:
    _shared(tmp_path / "work" / "shared" / "upstream")
    origin, clone = tmp_path / "work" / "main", _checkout(tmp_path)
    origin.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "remote", "add", "origin", str(origin)], check=True)
    gathered = sources.upstream_dir(_env(tmp_path), root=clone)
    assert (gathered / "examples" / "volcano" / "from-shared.yaml").is_file()


def test_missing_example_parts_are_left_out_and_recorded(
        tmp_path: pathlib.Path, no_sources: dict[str, pathlib.Path]) -> None:
    shared = _shared(tmp_path / "data")
    for name in ("examples/kueue", "examples/scheduler-plugins"):
        (shared / name / "from-shared.yaml").unlink()
    environ = _env(tmp_path, METRONOME_UPSTREAM_DIR=str(shared))
    gathered = sources.upstream_dir(environ, root=_checkout(tmp_path))
    missing = sources.missing_upstream_examples(gathered)
    assert sorted(missing) == ["examples/kueue", "examples/scheduler-plugins"]
    assert "sigs.k8s.io/kueue@v0.18.4: 403 Forbidden" in missing["examples/kueue"]
    assert f"{shared.resolve()}/examples/kueue: not there" in missing["examples/kueue"]
    assert (gathered / "examples" / "volcano" / "from-shared.yaml").is_file()
    assert not (gathered / "examples" / "kueue").exists()
    assert all(not name.startswith("examples/kueue/") for name in json.loads((gathered / "SOURCES.json").read_text()))
    # Reused while nothing new is provided; gathered again once the fallback holds a missing part.
    assert sources.upstream_dir(environ, root=_checkout(tmp_path / "again")) == gathered
    assert sources.missing_upstream_examples(gathered) == missing
    (shared / "examples" / "kueue" / "sample-job.yaml").write_text("# now provided\n")
    regathered = sources.upstream_dir(environ, root=_checkout(tmp_path / "third"))
    assert regathered == gathered
    assert sorted(sources.missing_upstream_examples(regathered)) == ["examples/scheduler-plugins"]
    assert (regathered / "examples" / "kueue" / "sample-job.yaml").is_file()


def test_a_missing_crd_part_still_stops_the_run(tmp_path: pathlib.Path, no_sources: dict[str, pathlib.Path]) -> None:
    shared = _shared(tmp_path / "data")
    (shared / "crds" / "kueue" / "from-shared.yaml").unlink()
    with pytest.raises(MetronomeError, match=r"upstream test data missing: crds/kueue \(") as failure:
        sources.upstream_dir(_env(tmp_path, METRONOME_UPSTREAM_DIR=str(shared)), root=_checkout(tmp_path))
    assert "examples/kueue" not in str(failure.value)
    assert not list((tmp_path / "cache").glob("*/SOURCES.json"))


def test_the_pinned_upstream_data_is_here() -> None:
    """This checkout's data: Volcano's CRDs of v1.15.1 (jobflow included), Kueue's of its pinned module."""
    gathered = sources.upstream_dir()
    names = {p.name for p in sources.upstream_crd_files(gathered)}
    assert {"batch.volcano.sh_jobs.yaml", "flow.volcano.sh_jobflows.yaml", "kueue.x-k8s.io_clusterqueues.yaml"} <= names
    provenance = json.loads((gathered / "SOURCES.json").read_text())
    assert "v1.15.1" in provenance["crds/volcano/batch.volcano.sh_jobs.yaml"]
    assert "sigs.k8s.io/kueue@v0.18.4" in provenance["crds/kueue/kueue.x-k8s.io_workloads.yaml"]
