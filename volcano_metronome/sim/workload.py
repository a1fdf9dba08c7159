"""Simulator scenarios: the ``plan`` scenario format plus ``generate:`` for synthetic workloads.

Extra top-level keys (``scenario.parse`` leaves them to us):

``description``
    one line shown by ``volcano-metronome scenarios``.
``seeds``
    how many seeds ``simulate`` runs by default (1 when absent; ``demo`` runs ``--seeds``, 1 by default).
``generate``
    ``{count, seed, arrival: {process: poisson, rate_per_min, start_s}, mix: {MODEL: weight},
    workers: [choices] | {choice: weight}, gpus_per_worker, iterations: [min, max],
    priorities: {priority: weight}}``. Instead of ``workers`` and ``gpus_per_worker``, ``shapes``
    draws both together: ``[{workers, gpus_per_worker, weight}, ...]`` (e.g. gangs of single-GPU
    workers beside gangs of whole-node 8-GPU workers). Seed ``s`` of a run draws the workload with
    ``generate.seed + s``; explicit ``jobs:`` are kept as they are beside the generated ones.

Parsing is pure and every error names the field, the value and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from volcano_metronome.catalog import Catalog
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core import fields
from volcano_metronome.core.model import MAX_TRAFFIC_CLASSES
from volcano_metronome.core.profile import Profile
from volcano_metronome.scenario import (MAX_ITERATIONS, MAX_PRIORITY, MAX_TIME_S, MAX_WORKERS, MIN_PRIORITY, JobSpec,
                                        Scenario, model_profile, parse)

EXTRA_KEYS = frozenset({"description", "seeds", "generate", "execution"})
ARRIVAL_PROCESSES = ("poisson",)
#: Most jobs a ``generate`` block may draw (100 times the largest built-in scenario).
MAX_GENERATED = 100_000
#: Largest weight of a choice (weights are relative; the bound keeps their sum a finite number).
MAX_WEIGHT = 1e9
#: Largest coefficient of variation of compute noise (each iteration's compute is at least half its mean).
MAX_NOISE_CV = 1.0
#: Largest straggler slowdown: a straggling iteration at most 100 times its usual compute.
MAX_SLOWDOWN = 100.0
#: Who gives each gang its traffic class (``Execution.classes_from``).
CLASSES_FROM = ("scheduler", "start-order")


@dataclass(frozen=True)
class Generate:
    """How to draw a synthetic workload."""

    count: int
    seed: int
    rate_per_min: float
    start_s: float
    mix: tuple[tuple[str, float], ...]
    shapes: tuple[tuple[tuple[int, int], float], ...]  # ((workers, gpus_per_worker), weight)
    iterations: tuple[int, int]
    priorities: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Execution:
    """How jobs run beyond their profile (all off by default; see docs/simulator.md, "Execution").

    Every iteration's compute is multiplied by ``max(0.5, 1 + noise_cv z)``, ``z`` standard normal
    (two-sided noise), and with probability ``straggler_probability`` by ``straggler_slowdown`` too.
    A placed gang starts computing after a start-up delay drawn uniformly in ``startup_s``. With
    ``overlap`` catalog models hide part of their all-reduce under compute (``ModelWindow.overlap``).
    With ``traffic_classes`` above 1 the network serves that many classes in strict priority; 1 is plain
    max-min fair sharing. ``classes_from`` says who picks each gang's class: ``scheduler`` (the policy, as
    metronome publishes one and every other policy none, which leaves its gangs in class 0) or
    ``start-order`` (the fabric itself, for every policy, by start order alone: ``core.classes.next_class``,
    what any scheduler would get if something handed its gangs classes that way).
    """

    noise_cv: float = 0.0
    straggler_probability: float = 0.0
    straggler_slowdown: float = 1.0
    startup_s: tuple[float, float] = (0.0, 0.0)
    overlap: bool = False
    traffic_classes: int = 1
    classes_from: str = "scheduler"

    @property
    def random(self) -> bool:
        """Whether runs draw anything beyond the profile's jitter."""
        return self.noise_cv > 0 or self.straggler_probability > 0 or self.startup_s[1] > 0


@dataclass(frozen=True)
class SimScenario:
    """A scenario as the simulator reads it."""

    scenario: Scenario
    description: str = ""
    seeds: int = 1
    generate: Generate | None = None
    execution: Execution = Execution()

    @property
    def name(self) -> str:
        """The scenario's name."""
        return self.scenario.name

    def jobs(self, seed: int = 0) -> tuple[JobSpec, ...]:
        """The explicit jobs plus, with ``generate:``, the ones drawn for ``seed``; by arrival, then name."""
        jobs = list(self.scenario.jobs)
        if self.generate is not None:
            jobs += draw(self.generate, self.scenario, self.generate.seed + seed, self.execution.overlap)
        if self.execution.noise_cv > 0:
            jobs = [replace(j, measured=measured(j.profile, self.execution.noise_cv)) for j in jobs]
        names = [j.name for j in jobs]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidInput("jobs[].name", dup, "a name no generated or explicit job already has")
        return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.name)))

    def materialised(self, seed: int = 0) -> Scenario:
        """The plain scenario (for ``plan``) with the jobs of ``seed`` written out."""
        return replace(self.scenario, jobs=self.jobs(seed))


#: The 97.5th percentile of a standard normal draw: ``profile fit`` reports the 2.5th to 97.5th
#: percentile of iteration lengths as the jitter.
SLOW_SIGMAS = 1.959964


def measured(profile: Profile, noise_cv: float) -> Profile:
    """What the scheduler is told of a job whose compute is noisy (modelled): as the core reads a profile,
    its period is the slow end of the iteration spread (97.5th percentile), and its jitter the spread,
    so a locked gang's slot comes after its slowest usual iteration. Each window moves by the slow end
    of the compute before it; stragglers (rarer than 1 in 40) lie beyond the percentiles."""
    def slow(compute_ms: float) -> float:
        return SLOW_SIGMAS * noise_cv * compute_ms

    windows, before = [], 0.0
    for w in profile.windows:
        windows.append(replace(w, start_ms=w.start_ms + slow(w.start_ms - before)))
        before += w.len_ms
    compute_ms = profile.period_ms - before
    jitter = min(profile.jitter_ms + 2 * slow(compute_ms), 0.5 * profile.period_ms)
    return replace(profile, period_ms=profile.period_ms + slow(compute_ms), windows=tuple(windows), jitter_ms=jitter)


def parse_sim(data: Any, catalog: Catalog | None = None) -> SimScenario:
    """Parse a simulator scenario mapping."""
    scenario = parse(data, catalog, extra_keys=EXTRA_KEYS)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise InvalidInput("description", description, "a string")
    seeds = fields.integer(data.get("seeds", 1), "seeds", 1)
    execution = parse_execution(data.get("execution", {}))
    generate = parse_generate(data["generate"], scenario, execution) if "generate" in data else None
    if generate is None and not scenario.jobs:
        raise InvalidInput("jobs", [], "a non-empty list of jobs (or a generate: section)")
    jobs = []
    for i, job in enumerate(scenario.jobs):
        where = f"jobs[{i}]"
        check_fits(job.workers, job.gpus_per_worker, scenario, where)
        if job.model and execution.overlap:
            job = replace(job, profile=model_profile(scenario.topology, scenario.catalog, scenario.grid, job.model,
                                                     job.gpus_per_worker, f"{where}.model", True))
        if job.model:
            _told(job.profile, execution, scenario, f"{where}.model", job.model)
        else:
            _told(job.profile, execution, scenario, f"{where}.profile.period_ms", job.profile.period_ms)
        if generate is not None and _generated_name(job.name, generate):
            raise InvalidInput(f"{where}.name", job.name, "a name generate: does not give its jobs (MODEL-NNNN)")
        jobs.append(job)
    return SimScenario(replace(scenario, jobs=tuple(jobs)), description, seeds, generate, execution)


def _told(profile: Profile, execution: Execution, scenario: Scenario, field: str, value: Any) -> None:
    """Refuse a job whose profile, as the scheduler is told it under ``execution``'s noise, is no valid profile."""
    if not execution.noise_cv:
        return
    noise = f"execution.noise_cv {execution.noise_cv:g}"
    try:
        told = measured(profile, execution.noise_cv)
    except InvalidInput as exc:
        raise InvalidInput(field, value,
                           f"a job whose measured profile under {noise} is valid; there its {exc}") from None
    cap = scenario.grid.max_hyperperiod_ms
    if told.period_ms > cap:
        raise InvalidInput(field, value, f"a job whose measured period under {noise} ({told.period_ms:g} ms) is at "
                                         f"most max_hyperperiod_ms ({cap:g} ms)")


def _generated_name(name: str, gen: Generate) -> bool:
    """Whether ``generate:`` could give one of its jobs ``name`` (``draw`` names them MODEL-NNNN)."""
    model, _, number = name.rpartition("-")
    return (any(model == m for m, _ in gen.mix) and re.fullmatch(r"[0-9]{4,6}", number) is not None
            and int(number) < gen.count and number == f"{int(number):04d}")


def parse_execution(data: Any) -> Execution:
    """Parse ``execution: {noise_cv, straggler_probability, straggler_slowdown, startup_s: [lo, hi], overlap,
    traffic_classes, classes_from}``."""
    keys = {"noise_cv", "straggler_probability", "straggler_slowdown", "startup_s", "overlap", "traffic_classes",
            "classes_from"}
    _mapping(data, "execution", keys)
    startup = data.get("startup_s", [0.0, 0.0])
    if not (isinstance(startup, list) and len(startup) == 2):
        raise InvalidInput("execution.startup_s", startup, "a range [min, max] of seconds")
    low = fields.number(startup[0], "execution.startup_s[0]", minimum=0.0, maximum=MAX_TIME_S)
    high = fields.number(startup[1], "execution.startup_s[1]", minimum=0.0, maximum=MAX_TIME_S)
    if high < low:
        raise InvalidInput("execution.startup_s[1]", high, f"a maximum >= the minimum {low}")
    probability = fields.nonnegative(data.get("straggler_probability", 0.0), "execution.straggler_probability")
    if probability > 1:
        raise InvalidInput("execution.straggler_probability", probability, "a probability in [0, 1]")
    slowdown = fields.number(data.get("straggler_slowdown", 1.0), "execution.straggler_slowdown", minimum=1.0,
                             maximum=MAX_SLOWDOWN)
    return Execution(
        noise_cv=fields.number(data.get("noise_cv", 0.0), "execution.noise_cv", minimum=0.0, maximum=MAX_NOISE_CV),
        straggler_probability=probability, straggler_slowdown=slowdown, startup_s=(low, high),
        overlap=fields.boolean(data.get("overlap", False), "execution.overlap"),
        traffic_classes=fields.integer(data.get("traffic_classes", 1), "execution.traffic_classes", 1, MAX_TRAFFIC_CLASSES),
        classes_from=fields.choice(data.get("classes_from", "scheduler"), "execution.classes_from", CLASSES_FROM),
    )


def parse_generate(data: Any, scenario: Scenario, execution: Execution = Execution()) -> Generate:
    """Parse the ``generate:`` mapping (see the module docstring); every model it may draw must run, in every
    shape it may draw, on this cluster under ``execution``."""
    keys = {"count", "seed", "arrival", "mix", "workers", "gpus_per_worker", "shapes", "iterations", "priorities"}
    _mapping(data, "generate", keys)
    arrival = data.get("arrival", {})
    _mapping(arrival, "generate.arrival", {"process", "rate_per_min", "start_s"})
    process = arrival.get("process", "poisson")
    if process not in ARRIVAL_PROCESSES:
        raise InvalidInput("generate.arrival.process", process, f"one of {', '.join(ARRIVAL_PROCESSES)}")
    mix = _weights(data.get("mix"), "generate.mix", str)
    seen: dict[str, str] = {}
    for name, _ in mix:
        scenario.catalog.get(name, f"generate.mix.{name}")
        if name.lower() in seen:  # the catalog's names are case-insensitive
            raise InvalidInput(f"generate.mix.{name}", name,
                               f"a model not already in the mix (as {seen[name.lower()]})")
        seen[name.lower()] = name
    shapes = _shapes(data, scenario)
    for name, _ in mix:
        for gpus in sorted({g for (_, g), _ in shapes}):
            field = f"generate.mix.{name}"
            profile = model_profile(scenario.topology, scenario.catalog, scenario.grid, name, gpus, field,
                                    execution.overlap)
            _told(profile, execution, scenario, field, name)
    iterations = data.get("iterations", [100, 100])
    if not (isinstance(iterations, list) and len(iterations) == 2):
        raise InvalidInput("generate.iterations", iterations, "a range [min, max] of whole iterations")
    low = fields.integer(iterations[0], "generate.iterations[0]", 1, MAX_ITERATIONS)
    high = fields.integer(iterations[1], "generate.iterations[1]", low, MAX_ITERATIONS)
    count = fields.integer(data.get("count"), "generate.count", 1, MAX_GENERATED)
    start = fields.number(arrival.get("start_s", 0.0), "generate.arrival.start_s", minimum=0.0, maximum=MAX_TIME_S)
    # The mean arrival time of the last job must be a time a scenario may name too.
    slowest = 60.0 * (count - 1) / (MAX_TIME_S - start) if count > 1 and start < MAX_TIME_S else 0.0
    rate = fields.number(arrival.get("rate_per_min"), "generate.arrival.rate_per_min", above=0.0)
    if rate < slowest:
        raise InvalidInput("generate.arrival.rate_per_min", rate,
                           f"at least {slowest:.3g} per minute: {count} arrivals from {start:g} s within "
                           f"{MAX_TIME_S:.0f} s (a year)")
    priorities = _weights(data.get("priorities", {0: 1}), "generate.priorities", int)
    for priority, _ in priorities:
        fields.integer(priority, f"generate.priorities.{priority}", MIN_PRIORITY, MAX_PRIORITY)
    return Generate(
        count=count,
        seed=fields.integer(data.get("seed", 0), "generate.seed", 0),
        rate_per_min=rate,
        start_s=start,
        mix=mix,
        shapes=shapes,
        iterations=(low, high),
        priorities=priorities,
    )


def draw(gen: Generate, scenario: Scenario, seed: int, overlap: bool = False) -> list[JobSpec]:
    """The ``gen.count`` jobs of one seed: Poisson arrivals, then model, size, length and priority."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(60.0 / gen.rate_per_min, gen.count)
    arrivals = gen.start_s + np.cumsum(gaps) - gaps[0]
    models = _pick(rng, gen.mix, gen.count)
    shapes = _pick(rng, gen.shapes, gen.count)
    iterations = rng.integers(gen.iterations[0], gen.iterations[1] + 1, gen.count)
    priorities = _pick(rng, gen.priorities, gen.count)
    jobs = []
    for i in range(gen.count):
        model = str(models[i])
        jobs.append(JobSpec(
            name=f"{model}-{i:04d}", arrival_s=round(float(arrivals[i]), 3), workers=int(shapes[i][0]),
            gpus_per_worker=int(shapes[i][1]), iterations=int(iterations[i]), priority=int(priorities[i]),
            profile=scenario.topology.profile(scenario.catalog.get(model), int(shapes[i][1]), overlap), model=model))
    return jobs


def _shapes(data: Mapping[str, Any], scenario: Scenario) -> tuple[tuple[tuple[int, int], float], ...]:
    """``shapes``, or ``workers`` with one ``gpus_per_worker``, as ((workers, gpus_per_worker), weight)."""
    if "shapes" in data:
        if "workers" in data or "gpus_per_worker" in data:
            raise InvalidInput("generate.shapes", data["shapes"], "either shapes or workers/gpus_per_worker, not both")
        raw = data["shapes"]
        if not isinstance(raw, list) or not raw:
            raise InvalidInput("generate.shapes", raw, "a non-empty list of {workers, gpus_per_worker, weight}")
        out = []
        for i, shape in enumerate(raw):
            where = f"generate.shapes[{i}]"
            if not isinstance(shape, Mapping) or set(shape) != {"workers", "gpus_per_worker", "weight"}:
                raise InvalidInput(where, shape, "a mapping with exactly workers, gpus_per_worker, weight")
            workers = fields.integer(shape["workers"], f"{where}.workers", 1, MAX_WORKERS)
            gpus = fields.integer(shape["gpus_per_worker"], f"{where}.gpus_per_worker", 0)
            check_fits(workers, gpus, scenario, where)
            out.append(((workers, gpus), _weight(shape["weight"], f"{where}.weight")))
        return tuple(out)
    gpus = fields.integer(data.get("gpus_per_worker", 1), "generate.gpus_per_worker", 0)
    raw_workers = data.get("workers")
    if isinstance(raw_workers, list):
        raw_workers = {fields.integer(w, f"generate.workers[{i}]", 1, MAX_WORKERS): 1
                       for i, w in enumerate(raw_workers)}
    choices = _weights(raw_workers, "generate.workers", int)
    for w, _ in choices:
        fields.integer(w, f"generate.workers.{w}", 1, MAX_WORKERS)
        check_fits(w, gpus, scenario, f"generate.workers.{w}")
    return tuple(((int(w), gpus), weight) for w, weight in choices)


def offered_load(gen: Generate, scenario: Scenario, overlap: bool = False) -> float:
    """Expected GPU demand over cluster GPUs: arrival rate x mean GPU-seconds of a job alone / GPUs.

    A job alone lasts ``iterations x period`` (the catalog period on the topology's NICs, before
    grid snapping); model, shape and length are drawn independently, so the means multiply.
    """
    mix_w = sum(w for _, w in gen.mix)
    shape_w = sum(w for _, w in gen.shapes)
    # GPU-seconds per iteration, averaged over model and shape (the period depends on both: rails).
    gpu_s = sum(wm * ws * workers * per * scenario.topology.profile(scenario.catalog.get(m), per, overlap).period_ms
                / 1000.0 for m, wm in gen.mix for (workers, per), ws in gen.shapes) / (mix_w * shape_w)
    iterations = (gen.iterations[0] + gen.iterations[1]) / 2.0
    cluster = scenario.topology.nodes * scenario.topology.gpus_per_node
    return gen.rate_per_min / 60.0 * gpu_s * iterations / cluster


def check_fits(workers: int, gpus_per_worker: int, scenario: Scenario, field: str) -> None:
    """Refuse a gang no empty cluster could hold (it would wait for ever)."""
    topo = scenario.topology
    if gpus_per_worker > topo.gpus_per_node:
        raise InvalidInput(f"{field}.gpus_per_worker", gpus_per_worker,
                           f"at most the {topo.gpus_per_node} GPUs of one node")
    if workers * gpus_per_worker > topo.nodes * topo.gpus_per_node:
        raise InvalidInput(f"{field}.workers", workers,
                           f"a gang that fits the cluster's {topo.nodes * topo.gpus_per_node} GPUs")


def _pick(rng: np.random.Generator, weighted: tuple[tuple[Any, float], ...], count: int) -> np.ndarray:
    values = np.empty(len(weighted), dtype=object)
    values[:] = [v for v, _ in weighted]
    weights = np.array([w for _, w in weighted], dtype=float)
    return values[rng.choice(len(values), size=count, p=weights / weights.sum())]


def _weights(data: Any, field: str, kind: type) -> tuple[tuple[Any, float], ...]:
    if not isinstance(data, Mapping) or not data:
        raise InvalidInput(field, data, "a non-empty mapping of choice to weight")
    out = []
    for key, weight in data.items():
        if kind is int and (isinstance(key, bool) or not isinstance(key, int)):
            raise InvalidInput(f"{field}.{key}", key, "an integer choice")
        if kind is str and not isinstance(key, str):
            raise InvalidInput(f"{field}.{key}", key, "a catalog model name")
        out.append((key, _weight(weight, f"{field}.{key}")))
    return tuple(out)


def _weight(value: Any, field: str) -> float:
    try:
        return fields.number(value, field, above=0.0, maximum=MAX_WEIGHT)
    except InvalidInput:
        raise InvalidInput(field, value, f"a weight > 0 and <= {MAX_WEIGHT:g}") from None


def _mapping(data: Any, field: str, keys: set[str]) -> None:
    if not isinstance(data, Mapping):
        raise InvalidInput(field, data, f"a mapping with keys {sorted(keys)}")
    unknown = sorted(set(data) - keys, key=str)
    if unknown:
        raise InvalidInput(f"{field}.{unknown[0]}", data[unknown[0]], f"one of {sorted(keys)}")
