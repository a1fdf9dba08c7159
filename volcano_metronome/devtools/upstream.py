"""The upstream test data (CRDs and example manifests of Volcano, Kueue and scheduler-plugins), gathered
from the upstream versions this project pins, the way the Go ecosystem ships them.

Each part (``crds/volcano``, ``examples/kueue``, ...) is copied into one directory of the user's cache,
laid out like ``shared/upstream`` (``crds/<project>/*.yaml``, ``examples/<project>/*.yaml``), from:

- **Volcano** v1.15.1 (``tools/volcano/source.json``): the ``volcano.sh/volcano`` module, else the
  source archive (:mod:`~volcano_metronome.devtools.gosource`); CRDs from ``config/crd/volcano/bases``
  and ``config/crd/jobflow/bases``, examples from ``example/``;
- **Kueue** (the ``sigs.k8s.io/kueue`` version ``tools/kueue/go.mod`` requires): its module's
  ``config/components/crd/bases``;
- **scheduler-plugins** (:data:`SCHEDULER_PLUGINS`): its module, where the proxy serves it;
- the training operators **JobSet**, Kubeflow's **training-operator**, **mpi-operator** and **Trainer**
  (``tools/<project>/source.json``, the versions Kueue's go.mod selects): their modules' CRDs and samples;

and, for a part none of those provides, from ``$METRONOME_UPSTREAM_DIR`` or ``../shared/upstream``
beside the checkout. ``SOURCES.json`` in the gathered directory says where each file came from. The
CRD parts are required: when one has no source at all, :func:`gather` raises one error naming every
missing part and where it was looked for. The example parts are optional (Kueue's examples live in its
site/, which no Go module ships): :func:`gather` leaves a missing one out and records it in
``MISSING.json``, which :func:`missing_examples` reads, so that the tests needing it can be left out.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
from dataclasses import dataclass
from typing import Callable, Iterable

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.devtools import binaries, gosource, recipes

SCHEDULER_PLUGINS = ("sigs.k8s.io/scheduler-plugins", "v0.34.7")
OVERRIDE_VARIABLE = "METRONOME_UPSTREAM_DIR"
_FORMAT = "2"  # bump when the gathering changes in a way the pins do not show
_COMPLETE = "SOURCES.json"
_MISSING = "MISSING.json"  # example part -> where it was looked for (written before _COMPLETE)


class UpstreamDataMissing(MetronomeError):
    """Some upstream test data has no source on this machine; the message names each missing part."""


@dataclass(frozen=True)
class Part:
    """One directory of the gathered data and, per file, where it lies in its project's source."""

    name: str  # e.g. crds/volcano
    project: str  # volcano | kueue | scheduler-plugins | jobset | training-operator | mpi-operator | trainer
    files: tuple[tuple[str, str], ...] = ()  # (file name here, path in the project's tree; "a|b": a or b)
    globs: tuple[str, ...] = ()  # every *.yaml under these directories of the project's tree

    @property
    def optional(self) -> bool:
        """Examples may be missing (the tests needing them are left out); CRDs may not."""
        return self.name.startswith("examples/")


_VOLCANO_EXAMPLES = (
    ("job.yaml", "example/job.yaml"),
    ("job-plugin.yaml", "example/job-plugin.yaml"),
    ("mpi-example.yaml", "example/integrations/mpi/mpi-example.yaml"),
    ("tf-dist-mnist-example.yaml", "example/integrations/tensorflow/dist-mnist/tf-dist-mnist-example.yaml"),
    ("hierarchical-queues.yaml", "example/hierarchical-jobs/queues.yaml"),
    ("hierarchical-jobs.yaml", "example/hierarchical-jobs/jobs.yaml"),
    ("queue.yaml", "example/deployment/queue.yaml"),
    # In Volcano's tree under staging/, which its module leaves out (a module of its own: volcano.sh/apis).
    ("podgroup.yaml", "staging/src/volcano.sh/apis/artifacts/podgroup.yaml|artifacts/podgroup.yaml"),
)
_KUEUE_EXAMPLES = (
    ("single-clusterqueue-setup.yaml", "site/static/examples/admin/single-clusterqueue-setup.yaml"),
    ("sample-job.yaml", "site/static/examples/jobs/sample-job.yaml"),
    ("sample-pytorchjob.yaml", "site/static/examples/jobs/sample-pytorchjob.yaml"),
    ("tas-sample-queues.yaml", "site/static/examples/tas/sample-queues.yaml"),
    ("tas-sample-job-required.yaml", "site/static/examples/tas/sample-job-required.yaml"),
    ("tas-sample-job-preferred.yaml", "site/static/examples/tas/sample-job-preferred.yaml"),
    ("kueue-pod-group.yaml", "site/static/examples/pods-kueue/kueue-pod-group.yaml"),
    ("kueueviz-00-resource-flavor.yaml", "cmd/kueueviz/examples/00-resource-flavor.yaml"),
    ("kueueviz-01-cluster-queues.yaml", "cmd/kueueviz/examples/01-cluster-queues.yaml"),
    ("kueueviz-02-local-queues.yaml", "cmd/kueueviz/examples/02-local-queues.yaml"),
    ("kueueviz-03-agi-job.yaml", "cmd/kueueviz/examples/03-agi-job.yaml"),
    ("kueueviz-07-workload-priority-classes.yaml", "cmd/kueueviz/examples/07-workload-priority-classes.yaml"),
)
# The training operators, at the versions tools/<project>/source.json pins (those Kueue's go.mod selects).
OPERATORS = ("jobset", "training-operator", "mpi-operator", "trainer")
_OPERATOR_PARTS = (
    Part("crds/jobset", "jobset", files=(("jobset.x-k8s.io_jobsets.yaml", recipes.JOBSET_CRD),)),
    Part("crds/training-operator", "training-operator",
         files=tuple((path.rsplit("/", 1)[-1], path) for path in recipes.TRAINING_OPERATOR_CRDS)),
    Part("crds/mpi-operator", "mpi-operator", files=(("kubeflow.org_mpijobs.yaml", recipes.MPI_CRD),)),
    Part("crds/trainer", "trainer", files=tuple((path.rsplit("/", 1)[-1], path) for path in recipes.TRAINER_CRDS)),
    # JobSet's module ships no example beyond an empty sample; Trainer's runtimes carry real JobSet templates.
    Part("examples/trainer", "trainer", files=(
        ("torch-distributed.yaml", "manifests/base/runtimes/torch_distributed.yaml"),
        ("deepspeed-distributed.yaml", "manifests/base/runtimes/deepspeed_distributed.yaml"),
    )),
    Part("examples/training-operator", "training-operator", files=(
        ("pytorch-simple.yaml", "examples/pytorch/simple.yaml"),
        ("pytorch-cpu-demo.yaml", "examples/pytorch/cpu-demo/demo.yaml"),
    )),
    Part("examples/mpi-operator", "mpi-operator", files=(("pi.yaml", "examples/v2beta1/pi/pi.yaml"),)),
)
PARTS = (
    Part("crds/volcano", "volcano", globs=("config/crd/volcano/bases", "config/crd/jobflow/bases")),
    Part("crds/kueue", "kueue", globs=("config/components/crd/bases",)),
    Part("crds/scheduler-plugins", "scheduler-plugins", files=(
        ("appgroup.diktyo.x-k8s.io_appgroups.yaml", "manifests/appgroup/crd.yaml"),
        ("networktopology.diktyo.x-k8s.io_networktopologies.yaml", "manifests/networktopology/crd.yaml"),
        ("scheduling.x-k8s.io_podgroups.yaml", "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"),
    )),
    Part("examples/volcano", "volcano", files=_VOLCANO_EXAMPLES),
    Part("examples/kueue", "kueue", files=_KUEUE_EXAMPLES),
    Part("examples/scheduler-plugins", "scheduler-plugins", files=(
        ("appGroup-example.yaml", "manifests/appgroup/appGroup-example.yaml"),
        ("networkTopology-example.yaml", "manifests/networktopology/networkTopology-example.yaml"),
    )),
    *_OPERATOR_PARTS,
)


@dataclass(frozen=True)
class _Tree:
    label: str  # e.g. "module sigs.k8s.io/kueue@v0.18.4"
    path: pathlib.Path


def cache_dir(environ: dict[str, str] | None = None) -> pathlib.Path:
    """Where gathered data lives: ``$METRONOME_UPSTREAM_CACHE`` or ``~/.cache/volcano-metronome/upstream``."""
    return binaries.user_cache_dir("upstream", "METRONOME_UPSTREAM_CACHE", environ)


def pins(tools: pathlib.Path) -> dict[str, tuple[str, str]]:
    """``project -> (module, version)`` of every project the data comes from."""
    volcano = gosource.Pin.read(tools / "volcano" / gosource.PIN_FILE)
    kueue_version = binaries.module_version((tools / "kueue" / "go.mod").read_text(), "sigs.k8s.io/kueue")
    operators = {project: gosource.Pin.read(tools / project / gosource.PIN_FILE) for project in OPERATORS}
    return {"volcano": (volcano.module, volcano.version), "kueue": ("sigs.k8s.io/kueue", kueue_version),
            "scheduler-plugins": SCHEDULER_PLUGINS, **{p: (pin.module, pin.version) for p, pin in operators.items()}}


def gather(
    *,
    checkout: pathlib.Path | None = None,
    environ: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> pathlib.Path:
    """The gathered directory for the current pins (gathered now unless already there)."""
    # ``environ`` holds our variables; `go` always runs in the process environment (GOPATH, GOPROXY...).
    env = dict(os.environ if environ is None else environ)
    tools = checkout / "tools" if checkout is not None else binaries.tools_dir(env)
    checkout = tools.parent
    fallbacks = _fallbacks(checkout, env)
    digest = hashlib.sha256(json.dumps([_FORMAT, pins(tools), [str(p) for p in fallbacks]]).encode())
    digest.update((tools / "volcano" / gosource.PIN_FILE).read_bytes())
    target = cache_dir(env) / digest.hexdigest()[:16]
    if (target / _COMPLETE).is_file() and not _newly_provided(missing_examples(target), fallbacks):
        return target
    if progress:
        progress(f"gathering upstream CRDs and examples into {target} ...")
    trees, why = _trees(tools, checkout, env)
    scratch = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    provenance: dict[str, str] = {}
    missing: list[str] = []
    optional: dict[str, str] = {}
    for part in PARTS:
        lacking = _from_trees(part, trees.get(part.project, []), scratch, provenance)
        if lacking is not None:
            reasons = [why.get(part.project) or f"{lacking} not in {' nor '.join(t.label for t in trees[part.project])}"]
            if not _from_fallback(part, fallbacks, scratch, provenance):
                reasons.append(" nor ".join(str(base / part.name) for base in fallbacks) + ": not there")
                if part.optional:
                    optional[part.name] = "; ".join(reasons)
                else:
                    missing.append(f"{part.name} ({'; '.join(reasons)})")
    if missing:
        shutil.rmtree(scratch, ignore_errors=True)
        raise UpstreamDataMissing(
            "upstream test data missing: " + "; ".join(missing)
            + f". Provide these parts in a directory laid out like shared/upstream (crds/<project>/, "
            f"examples/<project>/), beside the checkout as ../shared/upstream or named by {OVERRIDE_VARIABLE}")
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / _MISSING).write_text(json.dumps(optional, indent=1, sort_keys=True) + "\n")
    (scratch / _COMPLETE).write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(scratch, target)
    return target


def missing_examples(directory: pathlib.Path) -> dict[str, str]:
    """The example parts (``examples/kueue``, ...) :func:`gather` found no source for, and where it looked."""
    try:
        missing: dict[str, str] = json.loads((directory / _MISSING).read_text())
    except FileNotFoundError:
        return {}
    return missing


def _newly_provided(missing: dict[str, str], fallbacks: Iterable[pathlib.Path]) -> bool:
    """Whether a fallback directory now holds a part missing when the cache was gathered (gather again)."""
    return any(next((base / name).glob("*.yaml"), None) is not None for name in missing for base in fallbacks)


def _fallbacks(checkout: pathlib.Path, env: dict[str, str]) -> list[pathlib.Path]:
    override = env.get(OVERRIDE_VARIABLE)
    if override:
        return [pathlib.Path(override).expanduser().resolve()]
    return [path.resolve() for path in gosource.beside_checkout(checkout, "shared/upstream") if path.is_dir()] or \
        gosource.beside_checkout(checkout, "shared/upstream")[:1]


def _trees(tools: pathlib.Path, checkout: pathlib.Path, env: dict[str, str]) -> tuple[dict[str, list[_Tree]], dict[str, str]]:
    """Every source tree of each project available here, and why a project has none."""
    trees: dict[str, list[_Tree]] = {}
    why: dict[str, str] = {}
    for project, (module, version) in pins(tools).items():
        found: list[_Tree] = []
        path, reason = gosource.module_tree(module, version)
        if path is not None:
            found.append(_Tree(f"module {module}@{version}", path))
        if project == "volcano":  # the archive holds what the module lacks (staging/) and vice versa (example/)
            apis, _ = gosource.module_tree("volcano.sh/apis", version)
            if apis is not None:
                found.append(_Tree(f"module volcano.sh/apis@{version}", apis))
            pin = gosource.Pin.read(tools / "volcano" / gosource.PIN_FILE)
            archive, tried = gosource.archive_tree(pin, checkout=checkout, cache=binaries.user_cache_dir("src", "METRONOME_SRC_DIR", env), environ=env)
            if archive is not None:
                found.append(_Tree(f"archive {pin.archive}", archive))
            else:
                reason += "; archive: " + "; ".join(tried)
        trees[project] = found
        if not found:
            why[project] = reason
    return trees, why


def _from_trees(part: Part, trees: Iterable[_Tree], scratch: pathlib.Path, provenance: dict[str, str]) -> str | None:
    """Copy ``part`` from the first tree holding each of its files; None, or (nothing copied) what is missing."""
    trees = list(trees)
    chosen: dict[str, tuple[pathlib.Path, str]] = {}
    for directory in part.globs:
        tree = next((t for t in trees if (t.path / directory).is_dir()), None)
        if tree is None:
            return f"{directory}/"
        for source in sorted((tree.path / directory).glob("*.yaml")):
            chosen[source.name] = (source, f"{tree.label}: {directory}/{source.name}")
    for name, alternatives in part.files:
        found = next(((t, r) for t in trees for r in alternatives.split("|") if (t.path / r).is_file()), None)
        if found is None:
            return alternatives.replace("|", " or ")
        tree, relative = found
        chosen[name] = (tree.path / relative, f"{tree.label}: {relative}")
    if not chosen:
        return "any file"
    for name, (source, origin) in chosen.items():
        _copy(source, scratch / part.name / name)
        provenance[f"{part.name}/{name}"] = origin
    return None


def _from_fallback(part: Part, fallbacks: Iterable[pathlib.Path], scratch: pathlib.Path, provenance: dict[str, str]) -> bool:
    for base in fallbacks:
        files = sorted((base / part.name).glob("*.yaml"))
        if files:
            for source in files:
                _copy(source, scratch / part.name / source.name)
                provenance[f"{part.name}/{source.name}"] = f"fallback: {source}"
            return True
    return False


def _copy(source: pathlib.Path, destination: pathlib.Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    os.chmod(destination, 0o644)
