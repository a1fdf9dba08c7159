"""Scenario files: a cluster, a policy and a list of jobs, as ``plan`` and the simulator read them.

Parsing is pure (a mapping in, frozen values out); every error names the field, e.g.
``jobs[2].workers: got 0, expected an integer >= 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from volcano_metronome.catalog import GPU_PEAK_TFLOPS, Catalog, CatalogEntry, builtin, compute_scale, entry_from_mapping
from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import DEFAULT_SLOT_MS, SlotGrid
from volcano_metronome.core.limits import MAX_HYPERPERIOD_SLOTS
from volcano_metronome.core.model import MAX_HOLD_S, Gang, Ordering, Policy
from volcano_metronome.core.profile import Profile
from volcano_metronome.core.topology import Topology, leaf_spine

#: Most iterations a job may run: the simulator draws each one's jitter up front (8 bytes each), and a
#: million 200 ms iterations is 55 hours of training.
MAX_ITERATIONS = 1_000_000
#: The latest time a scenario may name (an arrival, a start-up delay): a year of seconds, far beyond any
#: training queue, and it keeps the simulator's clock in slots and its report's columns in range.
MAX_TIME_S = 365 * 24 * 3600.0
#: Job priorities are a Kubernetes PriorityClass value: a 32-bit integer.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
#: The slowest link a topology may have: 1 Mbps, the unit the core counts bandwidth in.
MIN_GBPS = 0.001
#: The largest cluster and gang a scenario may describe: 100 times ``scale-1k``'s 1,024 nodes (a topology of
#: 10^10 nodes used to run out of memory building its arrays), and as many workers.
MAX_NODES = 102_400
MAX_WORKERS = MAX_NODES
#: Most GPUs and NICs per node (a DGX has 8 of each).
MAX_PER_NODE = 64
TOP_LEVEL_KEYS = {"name", "slot_ms", "max_hyperperiod_ms", "topology", "policy", "jobs", "catalog"}


@dataclass(frozen=True)
class TopologySpec:
    """A leaf-spine cluster: racks x nodes, GPUs and NICs per node, NIC and rack-uplink capacities, GPU model.

    Several NICs per node (``nics_per_node``, each of ``nic_gbps``) reach the core as one node link
    of their aggregate capacity. A gang's ring leaves a node through the NICs of one worker's GPUs
    (``rails``), so its catalog profile is taken at ``rails x nic_gbps``. ``gpu`` and ``mfu`` (the
    model-FLOPs utilisation it sustains) scale catalog compute times (``catalog.compute_scale``).
    """

    racks: int
    nodes_per_rack: int
    gpus_per_node: int
    nic_gbps: float
    uplink_gbps: float | None = None
    nics_per_node: int = 1
    gpu: str | None = None
    mfu: float | None = None

    def build(self) -> Topology:
        """The topology value the core works on."""
        return leaf_spine(self.racks, self.nodes_per_rack, self.nic_gbps * self.nics_per_node, self.uplink_gbps)

    def rails(self, gpus_per_worker: int) -> int:
        """NICs a worker of ``gpus_per_worker`` GPUs sends through (its GPUs' share of the node's NICs, at least 1)."""
        if not self.gpus_per_node:
            return 1
        return max(1, min(self.nics_per_node, gpus_per_worker * self.nics_per_node // self.gpus_per_node))

    def profile(self, entry: CatalogEntry, gpus_per_worker: int, overlap: bool = False) -> Profile:
        """``entry``'s profile for a worker of ``gpus_per_worker`` GPUs on this cluster's NICs and GPUs.

        A ring all-reduce moves a worker's gradients once whatever its GPUs (NCCL splits them over one ring
        per rail); in an all-to-all window (``ModelWindow.per_gpu``) every GPU exchanges its own tokens or
        embeddings, so a worker of ``g`` GPUs moves ``g`` times a GPU's volume (modelled).
        """
        volume = float(max(1, gpus_per_worker))
        return entry.profile(self.rails(gpus_per_worker) * self.nic_gbps, compute_scale(entry, self.gpu, self.mfu),
                             overlap, volume)

    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return self.racks * self.nodes_per_rack


@dataclass(frozen=True)
class JobSpec:
    """One training job of a scenario."""

    name: str
    arrival_s: float
    workers: int
    gpus_per_worker: int
    iterations: int
    priority: int
    profile: Profile
    model: str | None = None
    measured: Profile | None = None  # what the scheduler is told, when not ``profile`` (the simulator's noise)

    def gang(self) -> Gang:
        """The gang the scheduler sees (uid = job name)."""
        return self._gang

    @cached_property
    def _gang(self) -> Gang:
        # Every scheduling cycle orders the whole queue by its gangs: built once, not once per cycle.
        return Gang(uid=self.name, name=self.name, size=self.workers, gpus_per_member=self.gpus_per_worker,
                    profile=self.measured or self.profile, priority=self.priority, created_s=self.arrival_s)


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario."""

    name: str
    grid: SlotGrid
    topology: TopologySpec
    policy: Policy
    jobs: tuple[JobSpec, ...]
    catalog: Catalog = field(default_factory=builtin, compare=False)


def parse(data: Any, catalog: Catalog | None = None, extra_keys: frozenset[str] = frozenset()) -> Scenario:
    """Parse a scenario mapping; ``extra_keys`` are top-level keys a caller (the simulator) reads itself."""
    if not isinstance(data, Mapping):
        raise InvalidInput("scenario", data, "a mapping with name, topology and jobs")
    unknown = sorted(set(data) - TOP_LEVEL_KEYS - extra_keys)
    if unknown:
        raise InvalidInput(unknown[0], data[unknown[0]], f"one of the scenario keys {sorted(TOP_LEVEL_KEYS | extra_keys)}")
    name = data.get("name", "scenario")
    if not isinstance(name, str) or not name:
        raise InvalidInput("name", name, "a non-empty string")
    catalog = catalog or builtin()
    user = data.get("catalog", {})
    if not isinstance(user, Mapping):
        raise InvalidInput("catalog", user, "a mapping of model name to {period_ms, windows, jitter_ms}")
    catalog = catalog.with_entries(entry_from_mapping(str(k), v, f"catalog.{k}") for k, v in user.items())
    grid = parse_grid(data)
    topology = parse_topology(data.get("topology"))
    policy = parse_policy(data.get("policy", {}), grid)
    raw_jobs = data.get("jobs", [])
    if not isinstance(raw_jobs, list) or (not raw_jobs and not (extra_keys & set(data))):
        raise InvalidInput("jobs", raw_jobs, "a non-empty list of jobs")
    jobs = tuple(parse_job(j, f"jobs[{i}]", topology, catalog, grid) for i, j in enumerate(raw_jobs))
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise InvalidInput(f"jobs[{i}].name", job.name, "a name no other job has")
        seen.add(job.name)
    return Scenario(name, grid, topology, policy, jobs, catalog)


def parse_grid(data: Mapping[str, Any]) -> SlotGrid:
    """The slot grid of ``slot_ms`` and ``max_hyperperiod_ms``, its errors naming those keys."""
    slot_ms = fields.number(data.get("slot_ms", DEFAULT_SLOT_MS), "slot_ms")
    hyper = data.get("max_hyperperiod_ms")
    cap = None if hyper is None else fields.number(hyper, "max_hyperperiod_ms")
    try:
        return SlotGrid.from_ms(slot_ms, cap)
    except InvalidInput as exc:
        if exc.field != "max_hyperperiod_slots":
            raise
        # The cap is held in slots: a fine grid and a long cap together can exceed their bound.
        raise InvalidInput("max_hyperperiod_ms", cap, f"between 1 and {MAX_HYPERPERIOD_SLOTS:,} slots of slot_ms "
                           f"({slot_ms:g} ms): at most {MAX_HYPERPERIOD_SLOTS * slot_ms:g} ms") from None


def parse_topology(data: Any) -> TopologySpec:
    """Parse ``topology: {racks, nodes_per_rack, gpus_per_node, nic_gbps, uplink_gbps, nics_per_node, gpu, mfu}``."""
    keys = {"racks", "nodes_per_rack", "gpus_per_node", "nic_gbps", "uplink_gbps", "nics_per_node", "gpu", "mfu"}
    fields.mapping(data, "topology", keys)
    racks = fields.integer(data.get("racks", 1), "topology.racks", 1, MAX_NODES)
    if racks > 1 and "uplink_gbps" not in data:
        raise InvalidInput("topology.uplink_gbps", None, "the rack uplink capacity in Gbps (needed when racks > 1)")
    spec = TopologySpec(
        racks=racks,
        nodes_per_rack=fields.integer(data.get("nodes_per_rack"), "topology.nodes_per_rack", 1, MAX_NODES),
        gpus_per_node=fields.integer(data.get("gpus_per_node"), "topology.gpus_per_node", 0, MAX_PER_NODE),
        nic_gbps=fields.number(data.get("nic_gbps"), "topology.nic_gbps", minimum=MIN_GBPS),
        uplink_gbps=None if racks == 1 and "uplink_gbps" not in data
        else fields.number(data.get("uplink_gbps"), "topology.uplink_gbps", minimum=MIN_GBPS),
        nics_per_node=fields.integer(data.get("nics_per_node", 1), "topology.nics_per_node", 1, MAX_PER_NODE),
        gpu=_gpu(data.get("gpu")),
        mfu=None if data.get("mfu") is None else fields.number(data.get("mfu"), "topology.mfu"),
    )
    if spec.nodes > MAX_NODES:
        raise InvalidInput("topology.nodes_per_rack", spec.nodes_per_rack,
                           f"at most {MAX_NODES:,} nodes in all ({spec.racks} racks of {spec.nodes_per_rack} make "
                           f"{spec.nodes:,})")
    if (spec.gpu is None) != (spec.mfu is None):
        raise InvalidInput("topology.mfu" if spec.gpu else "topology.gpu", spec.mfu if spec.gpu else spec.gpu,
                           "gpu and mfu given together (or neither)")
    if spec.mfu is not None and not 0.0 < spec.mfu <= 1.0:
        raise InvalidInput("topology.mfu", spec.mfu, "a model-FLOPs utilisation in (0, 1]")
    return spec


def _gpu(value: Any) -> str | None:
    if value is None:
        return None
    return fields.choice(value, "topology.gpu", GPU_PEAK_TFLOPS)


def parse_policy(data: Any, grid: SlotGrid) -> Policy:
    """Parse ``policy: {ordering, aging_per_minute, priority_weight, cushion_slots, overflow_tolerance, max_candidates,
    lock_on_demand, max_hold_s}``."""
    keys = {"ordering", "aging_per_minute", "priority_weight", "cushion_slots", "overflow_tolerance", "max_candidates",
            "lock_on_demand", "max_hold_s"}
    fields.mapping(data, "policy", keys)
    defaults = Policy()
    ordering = fields.choice(data.get("ordering", defaults.ordering.value), "policy.ordering",
                             (o.value for o in Ordering))
    return Policy(
        ordering=Ordering(ordering),
        aging_per_minute=fields.number(data.get("aging_per_minute", defaults.aging_per_minute),
                                       "policy.aging_per_minute"),
        priority_weight=fields.number(data.get("priority_weight", defaults.priority_weight), "policy.priority_weight"),
        cushion_slots=fields.integer(data.get("cushion_slots", defaults.cushion_slots), "policy.cushion_slots", 0),
        overflow_tolerance=fields.number(data.get("overflow_tolerance", defaults.overflow_tolerance),
                                         "policy.overflow_tolerance"),
        max_candidates=fields.integer(data.get("max_candidates", defaults.max_candidates), "policy.max_candidates", 1),
        lock_on_demand=fields.boolean(data.get("lock_on_demand", defaults.lock_on_demand), "policy.lock_on_demand"),
        max_hold_s=fields.number(data.get("max_hold_s", defaults.max_hold_s), "policy.max_hold_s", minimum=0.0,
                                 maximum=MAX_HOLD_S),
        grid=grid,
    )


def parse_job(data: Any, field: str, topology: TopologySpec, catalog: Catalog, grid: SlotGrid) -> JobSpec:
    """Parse one job; its profile is given inline or named by ``model`` (at the topology's NIC rate)."""
    keys = {"name", "arrival_s", "workers", "gpus_per_worker", "iterations", "priority", "profile", "model"}
    fields.mapping(data, field, keys)
    name = data.get("name")
    if not isinstance(name, str) or not name or not name.isprintable():
        raise InvalidInput(f"{field}.name", name, "a non-empty string of printable characters")
    if ("profile" in data) == ("model" in data):
        raise InvalidInput(f"{field}", sorted(set(data) & {"profile", "model"}), "exactly one of profile or model")
    model = None
    if "model" in data:
        model = fields.string(data["model"], f"{field}.model")
        gpus = fields.integer(data.get("gpus_per_worker", 1), f"{field}.gpus_per_worker", 0)
        profile = model_profile(topology, catalog, grid, model, gpus, f"{field}.model")
    else:
        profile = _profile(data["profile"], f"{field}.profile")
        if profile.period_ms > grid.max_hyperperiod_ms:
            raise InvalidInput(f"{field}.profile.period_ms", profile.period_ms, _within_cap(grid))
    return JobSpec(
        name=name,
        arrival_s=fields.number(data.get("arrival_s", 0.0), f"{field}.arrival_s", minimum=0.0, maximum=MAX_TIME_S),
        workers=fields.integer(data.get("workers"), f"{field}.workers", 1, MAX_WORKERS),
        gpus_per_worker=fields.integer(data.get("gpus_per_worker", 1), f"{field}.gpus_per_worker", 0),
        iterations=fields.integer(data.get("iterations", 100), f"{field}.iterations", 1, MAX_ITERATIONS),
        priority=fields.integer(data.get("priority", 0), f"{field}.priority", MIN_PRIORITY, MAX_PRIORITY),
        profile=profile,
        model=model,
    )


def model_profile(topology: TopologySpec, catalog: Catalog, grid: SlotGrid, model: str, gpus_per_worker: int,
                  field: str, overlap: bool = False) -> Profile:
    """``model``'s profile for workers of ``gpus_per_worker`` GPUs on ``topology``, or an error naming ``field``:
    a catalog entry valid on its own can still ask more of these NICs than a profile may, or take longer
    than the hyperperiod cap (``max_hyperperiod_ms``) on these GPUs."""
    entry = catalog.get(model, field)
    here = f"on workers of {gpus_per_worker} GPU{'' if gpus_per_worker == 1 else 's'} of this topology"
    try:
        profile = topology.profile(entry, gpus_per_worker, overlap)
    except InvalidInput as exc:
        raise InvalidInput(field, model, f"a model whose profile {here} is valid; there its {exc}") from None
    if profile.period_ms > grid.max_hyperperiod_ms:
        raise InvalidInput(field, model, f"a model whose period {here} ({profile.period_ms:g} ms) is "
                                         f"{_within_cap(grid)}")
    return profile


def _within_cap(grid: SlotGrid) -> str:
    # Say the way out: the cap is the scenario's own key, and a longer period is refused only below its bound.
    most = MAX_HYPERPERIOD_SLOTS * grid.slot_ms
    return (f"at most max_hyperperiod_ms ({grid.max_hyperperiod_ms:g} ms): no longer period can be placed"
            + (f" (the scenario may raise max_hyperperiod_ms up to {most:g} ms, {MAX_HYPERPERIOD_SLOTS:,} slots of "
               f"slot_ms)" if grid.max_hyperperiod_ms < most else ""))


def _profile(data: Any, field: str) -> Profile:
    try:
        return Profile.from_mapping(data, field)
    except InvalidInput as exc:
        if exc.field.startswith(field):
            raise
        # Cross-field checks run on the built value and name it "profile"; say which job's it is.
        raise InvalidInput(exc.field.replace("profile", field, 1), exc.value, exc.expected) from None
