"""``python -m volcano_metronome.bench fuzz [--start S] [--count N] [--seeds K] [--execution ...] [--profiles ...]
[--fabric ...]``: random scenarios.

A crash hunt and a do-no-harm check on scenarios nobody chose. Scenario ``i`` is drawn by
``random.Random(i)`` alone (``scenario(i)``), in the ordinary scenario format (a ``generate:``
block, nothing new), and run through the simulator's own path (``sim.runner.simulate``, what
``volcano-metronome simulate`` runs) under the regime map's four policies (``regimes.POLICIES``);
issue 12's do-no-harm targets are judged on every seed with ``regimes.verdicts``. The regime map
asks where the offsets pay on a grid chosen beforehand; this asks what breaks, or loses, where no
one looked. A hand-run prototype of this generator found three bugs: a per-worker rate cap that
refused a DGX H100 scenario (eight 400 Gbps NICs per node), gangs on links slower than their bursts
never locking, and alternative racks that opened untouched racks later gangs needed.

With ``--profiles drawn`` the models are not the catalog's: each scenario declares 1 to 4 profiles of its own
(a ``catalog:`` key, as a user's measured profiles come), drawn from a generator of their own (``drawn_profiles``),
so every other draw stays the scenario's. With ``--fabric flat`` the cluster is one rack of all its nodes, as
the controller sees nodes with no rack label (``flat``). With ``--settings drawn`` what the plain fuzz leaves at
its defaults is drawn too, from a generator of its own (``drawn_settings``): the slot grid, the QueuePolicy's
knobs, a fabric of traffic classes and explicit jobs beside the generated ones.

With ``--floor`` every scenario also runs ``volcano-topology`` against itself with one job one
iteration longer (``sim.floor``): how often one seed leaves the 0.5 % band by chance, to read the
misses against.

Where metronome holds a gang back (``core.holding``) on some seed, the scenario also runs metronome with
``max_hold_s: 0`` (``without_hold``): the hold against its ablation, per scenario and in the summary, as
``attribution`` puts the placements and the offsets against theirs.

A scenario that raises, in the parser (the generator wrote an invalid scenario) or in the simulator,
is recorded with its traceback and the run goes on; the process exits 1 if any did, so it can gate.
The figures are not targets: random scenarios, usually one seed.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import sys
import time
import traceback
from typing import Any, Mapping, Sequence

import yaml

from volcano_metronome.bench.regimes import NO_HARM_KEYS, POLICIES, fixed, verdicts
from volcano_metronome.catalog import builtin
from volcano_metronome.catalog.models import ALL_TO_ALL_MODELS, MODELS
from volcano_metronome.core.limits import DEFAULT_MAX_HYPERPERIOD_SLOTS, DEFAULT_SLOT_MS
from volcano_metronome.sim import floor
from volcano_metronome.sim.report import NO_HARM, SHARED_EXCESS
from volcano_metronome.sim.runner import simulate
from volcano_metronome.sim.workload import CLASSES_FROM, offered_load, parse_sim

#: The catalog's models in the order it defines them (``Catalog.names()`` sorts): ``rng.sample``
#: draws from this sequence, so its order is part of every scenario. A model added to the catalog
#: changes the mixes of the scenarios drawn after it (the test of scenario 211 then fails: on purpose).
MODEL_NAMES: tuple[str, ...] = tuple(e.name for e in (*MODELS, *ALL_TO_ALL_MODELS))

EXECUTIONS = ("any", "steady", "noisy")
#: Where the models come from: the built-in catalog, or profiles each scenario declares (``drawn_profiles``).
PROFILES = ("catalog", "drawn")
#: The cluster's tiers: racks behind oversubscribed uplinks, or one flat rack of the same nodes (``flat``).
FABRICS = ("racks", "flat")
#: The scheduler's settings and the format's options: at their defaults, or drawn (``drawn_settings``).
SETTINGS = ("default", "drawn")
#: The orderings every scenario draws from (StrictPriority two times in three).
PLAIN_ORDERINGS = ("StrictPriority", "FIFO", "StrictPriority")
#: ``drawn_settings``: each QueuePolicy knob is set, to one of these, in about a third of the scenarios.
POLICY_KNOBS: dict[str, tuple[Any, ...]] = {
    "ordering": ("PriorityWithAging",),  # the one ``PLAIN_ORDERINGS`` leaves out
    "aging_per_minute": (0, 0.5, 10),
    "priority_weight": (0, 1, 16),
    "cushion_slots": (1, 2, 4),
    "overflow_tolerance": (0, 0.2, 1),
    "max_candidates": (1, 2, 32),
    "lock_on_demand": (False,),
    "max_hold_s": (0, 15, 600),
}
SLOTS_MS = (1, 2, 2.5, 10, 20)
TRAFFIC_CLASSES = (2, 4, 8)
QUICK_SCENARIOS, QUICK_COUNT, QUICK_ITERATIONS = 2, 8, [20, 50]
DEFAULT_COUNT = 20
#: Where metronome's average JCT comes from, per seed: its own placements against Volcano's binpack, the
#: offsets against its own placements without them, and both together (``row``, ``summary``).
ATTRIBUTION: dict[str, tuple[str, str]] = {
    "placement": ("metronome-free", "volcano-topology"),
    "offsets": ("metronome", "metronome-free"),
    "both": ("metronome", "volcano-topology"),
}
#: A ratio counts as faster or slower only beyond this band (the do-no-harm bound's 0.5 %).
BAND = floor.BAND
#: The do-no-harm bound on average JCT against ``volcano-topology`` (issue 12), for the hold's ablation.
_VT_BOUND = next(bound for name, figure, bound in NO_HARM if (name, figure) == ("volcano-topology", "avg_jct_s"))


def scenario(index: int, execution: str = "any", profiles: str = "catalog", fabric: str = "racks",
             settings: str = "default") -> dict[str, Any]:
    """Scenario ``index``: the mapping ``simulate`` reads, a pure function of ``index`` (and the four variants).

    Every draw comes from ``random.Random(index)``, in the same order whatever ``execution`` is, so
    the topology, mix, shapes and arrivals of a scenario are the same under ``any``, ``steady`` and
    ``noisy``; only the execution block differs (``_execution``). ``profiles="drawn"`` replaces the mix
    with profiles of the scenario's own (``drawn_profiles``), ``fabric="flat"`` the racks with one rack
    (``flat``), and ``settings="drawn"`` adds settings left at their defaults otherwise (``drawn_settings``);
    none changes anything else.
    """
    for name, value, choices in (("execution", execution, EXECUTIONS), ("profiles", profiles, PROFILES),
                                 ("fabric", fabric, FABRICS), ("settings", settings, SETTINGS)):
        if value not in choices:
            raise ValueError(f"{name}: got {value!r}, expected one of {', '.join(choices)}")
    rng = random.Random(index)
    racks, npr, gpn = rng.choice([2, 4, 8]), rng.choice([2, 4, 8]), rng.choice([4, 8, 8])
    nic = rng.choice([25, 50, 100, 200, 400])
    # Several NICs only on 8-GPU nodes (DGX-like); no draw otherwise, as the prototype did.
    nics = rng.choice([1, 1, 2, 4, 8]) if gpn == 8 else 1
    over = rng.choice([2, 4, 4])
    topology: dict[str, Any] = {"racks": racks, "nodes_per_rack": npr, "gpus_per_node": gpn, "nic_gbps": nic,
                                "uplink_gbps": nic * nics * npr / over}
    if nics > 1:
        topology["nics_per_node"] = nics
    if rng.random() < 0.5:
        topology["gpu"] = rng.choice(["a100", "h100"])
        topology["mfu"] = rng.choice([0.3, 0.4, 0.5])
    block = _execution(rng, index, execution)
    total = racks * npr * gpn
    shapes = []
    for _ in range(rng.randint(1, 4)):
        gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= gpn])
        workers = rng.choice([2, 3, 4, 6, 8, 12, 16])
        while workers * gpus > total:  # halve until the gang fits the cluster (the parser refuses it otherwise)
            workers = max(1, workers // 2)
        shapes.append({"workers": workers, "gpus_per_worker": gpus, "weight": rng.randint(1, 5)})
    mix = {m: rng.randint(1, 3) for m in rng.sample(MODEL_NAMES, rng.randint(1, 5))}
    priorities = rng.choice([{0: 1}, {1000: 20, 500: 30, 0: 50}, {10: 1, 0: 1}])
    count = rng.choice([40, 60, 80])
    rate = rng.choice([10, 20, 40, 80])
    data: dict[str, Any] = {
        "name": f"fuzz-{index}" + ("" if execution == "any" else f"-{execution}"),
        "seeds": 1, "slot_ms": 5, "topology": topology,
        "policy": {"ordering": rng.choice(PLAIN_ORDERINGS)},
        "generate": {"count": count, "seed": rng.randint(0, 10**6),
                     "arrival": {"process": "poisson", "rate_per_min": rate},
                     "mix": mix, "shapes": shapes, "iterations": [rng.choice([50, 200]), rng.choice([300, 800])],
                     "priorities": priorities}}
    if block:
        data["execution"] = block
    if profiles == "drawn":
        data["name"] += "-drawn"
        own = random.Random(f"fuzz-profiles-{index}")  # not ``rng``: the other draws stay the catalog's
        data["catalog"] = drawn_profiles(own)
        data["generate"]["mix"] = {name: own.randint(1, 3) for name in data["catalog"]}
    if fabric == "flat":
        data["name"] += "-flat"
        data["topology"] = flat(topology)
    if settings == "drawn":
        data = drawn_settings(data, random.Random(f"fuzz-settings-{index}"))  # not ``rng``, as the profiles
        data["name"] += "-settings"
    return data


def flat(topology: Mapping[str, Any]) -> dict[str, Any]:
    """The same nodes as one rack: no uplink, so every gang meets only NICs (a cluster whose nodes carry no rack
    label, as the controller sees it; ``sanity-2jobs`` and the ``half-nodes`` examples are flat)."""
    out = {k: v for k, v in topology.items() if k != "uplink_gbps"}
    out.update(racks=1, nodes_per_rack=topology["racks"] * topology["nodes_per_rack"])
    return out


def drawn_profiles(rng: random.Random) -> dict[str, dict[str, Any]]:
    """1 to 4 catalog entries in the user format, named ``drawn-K``: a period of 40 to 1,600 ms and 1 to 3
    windows in order inside it, each 5 to 45 % of the period left after its start at 0.1 to 1 of the
    line rate; jitter, the reference NIC and the collective drawn too. Not models: shapes no catalog
    entry has (several bursts an iteration, a burst of most of the period, a short period), to find what
    the built-in models never ask of the scheduler."""
    entries = {}
    for k in range(rng.randint(1, 4)):
        period = rng.choice([40, 80, 120, 200, 250, 333, 500, 750, 1000, 1600])
        windows = []
        # In tenths of a millisecond, so that the file's rounded figures are the ones laid out (no overlap).
        start = round(rng.uniform(1, 5) * period)
        for _ in range(rng.choice([1, 1, 2, 3])):
            room = 10 * period - start
            if room <= 20:
                break
            length = max(10, round(rng.uniform(0.05, 0.45) * room))
            windows.append({"start_ms": start / 10, "len_ms": length / 10,
                            "fraction": rng.choice([0.1, 0.3, 0.5, 0.8, 1.0])})
            start += length + round(rng.uniform(0, 0.2) * (room - length))
        entries[f"drawn-{k}"] = {"period_ms": period, "windows": windows, "jitter_ms": rng.choice([0, 0, 1, 5, 20]),
                                 "reference_gbps": rng.choice([50, 100, 100, 200]),
                                 "collective": rng.choice(["ring", "ring", "all-to-all"]),
                                 "derivation": "drawn by bench fuzz --profiles drawn: a shape, not a model"}
    return entries


def drawn_settings(data: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """``data`` with what the plain fuzz leaves at its defaults drawn too, each in about a third of the scenarios:
    the slot (``SLOTS_MS``), every QueuePolicy knob on its own (``POLICY_KNOBS``), a fabric serving 2, 4 or 8
    traffic classes in strict priority (the classes each policy published, or by start order), and 1 to 3
    explicit jobs (``explicit-K``) of the mix's models and the scenario's shapes, arriving while the generated
    ones do. Settings a user may choose, not defaults, so the do-no-harm figures are what they cost."""
    out = {**data, "policy": dict(data.get("policy", {}))}
    if rng.random() < 1 / 3:
        out["slot_ms"] = slot = rng.choice(SLOTS_MS)
        if slot < DEFAULT_SLOT_MS:  # the default cap is in slots: keep its 25.2 s, which every drawn model fits
            out["max_hyperperiod_ms"] = DEFAULT_SLOT_MS * DEFAULT_MAX_HYPERPERIOD_SLOTS
    for key, choices in POLICY_KNOBS.items():
        if rng.random() < 1 / 3:
            out["policy"][key] = rng.choice(choices)
    if rng.random() < 1 / 3:
        out["execution"] = {**data.get("execution", {}), "traffic_classes": rng.choice(TRAFFIC_CLASSES),
                            "classes_from": rng.choice(CLASSES_FROM)}
    if rng.random() < 1 / 3:
        generate = data["generate"]
        span_s = 60.0 * generate["count"] / generate["arrival"]["rate_per_min"]
        out["jobs"] = [{"name": f"explicit-{k}", "arrival_s": round(rng.uniform(0.0, span_s), 1),
                        "model": rng.choice(sorted(generate["mix"])),
                        "workers": (shape := rng.choice(generate["shapes"]))["workers"],
                        "gpus_per_worker": shape["gpus_per_worker"],
                        "iterations": rng.randint(*generate["iterations"]),
                        "priority": rng.choice(sorted(generate["priorities"]))}
                       for k in range(rng.randint(1, 3))]
    return out


def settings_summary(data: Mapping[str, Any]) -> str:
    """The settings ``drawn_settings`` may draw that a scenario sets, as ``key=value``; ``default`` where none."""
    policy = data.get("policy", {})
    execution = data.get("execution", {})
    parts = [f"slot_ms={data['slot_ms']:g}"] if data.get("slot_ms", DEFAULT_SLOT_MS) != DEFAULT_SLOT_MS else []
    parts += [f"{key}={policy[key]}" for key in POLICY_KNOBS
              if key in policy and (key != "ordering" or policy[key] not in PLAIN_ORDERINGS)]
    if "traffic_classes" in execution:
        parts.append(f"classes={execution['traffic_classes']}/{execution['classes_from']}")
    if data.get("jobs"):
        parts.append(f"jobs={len(data['jobs'])}")
    return " ".join(parts) or "default"


def _execution(rng: random.Random, index: int, execution: str) -> dict[str, Any]:
    """The execution block: drawn from ``rng`` by the same calls under every ``execution``.

    ``any`` keeps the draw (empty in about one scenario of seven), ``steady`` drops it, ``noisy`` keeps it and,
    where it left the noise out, adds noise drawn by the same choices from a second generator seeded
    by the index (``random.Random(f"fuzz-noise-{index}")``), so ``rng`` is not advanced and the draws
    after this one (shapes, mix, arrivals) stay those of ``any``.
    """
    block: dict[str, Any] = {}
    if rng.random() < 0.5:
        block["overlap"] = True
    if rng.random() < 0.5:
        block.update(_noise(rng))
    if rng.random() < 0.4:
        block["startup_s"] = [rng.choice([0, 5]), rng.choice([10, 30])]
    if execution == "steady":
        return {}
    if execution == "noisy" and "noise_cv" not in block:
        block.update(_noise(random.Random(f"fuzz-noise-{index}")))
    return block


def _noise(rng: random.Random) -> dict[str, Any]:
    return {"noise_cv": rng.choice([0.01, 0.02, 0.05]), "straggler_probability": rng.choice([0, 0.002, 0.01]),
            "straggler_slowdown": rng.choice([1.5, 2.0])}


def quick(data: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario shrunk for a test: ``QUICK_COUNT`` jobs of ``QUICK_ITERATIONS``, everything else drawn as is."""
    generate = {**data["generate"], "count": QUICK_COUNT, "iterations": list(QUICK_ITERATIONS)}
    return {**data, "name": f"{data['name']}-quick", "generate": generate}


def scenario_yaml(data: Mapping[str, Any]) -> str:
    """The scenario as a YAML file ``volcano-metronome simulate FILE`` reproduces."""
    return "# python -m volcano_metronome.bench fuzz\n" + yaml.safe_dump(
        dict(data), sort_keys=False, default_flow_style=None, width=120)


def topology_summary(topology: Mapping[str, Any]) -> str:
    """``racks x nodes x GPUs``, NIC speed (x NICs per node), uplink oversubscription (or flat), named GPU at MFU."""
    nics = topology.get("nics_per_node", 1)
    if "uplink_gbps" in topology:
        over = f"{topology['nic_gbps'] * nics * topology['nodes_per_rack'] / topology['uplink_gbps']:g}:1"
    else:
        over = "flat"
    text = (f"{topology['racks']}x{topology['nodes_per_rack']}x{topology['gpus_per_node']} {topology['nic_gbps']}G"
            + (f"x{nics}" if nics > 1 else "") + f" {over}")
    return text + (f" {topology['gpu']}@{topology['mfu']:g}" if "gpu" in topology else "")


def execution_summary(block: Mapping[str, Any] | None) -> str:
    """``steady``, or the execution block's flags: overlap, noise (its cv), strag(glers), start(-up delay)."""
    if not block:
        return "steady"
    flags = ["overlap"] if block.get("overlap") else []
    if block.get("noise_cv"):
        flags.append(f"noise{block['noise_cv']:g}")
    if block.get("straggler_probability"):
        flags.append("strag")
    if block.get("startup_s"):
        flags.append("start")
    return "+".join(flags) or "steady"


def run_one(index: int, seeds: int, execution: str = "any", small: bool = False,
            with_floor: bool = False, profiles: str = "catalog", fabric: str = "racks",
            settings: str = "default") -> dict[str, Any]:
    """Generate, parse and simulate scenario ``index``: its row, or a crash record (never raises).

    ``with_floor``: the row also carries ``volcano-topology`` against itself, one job one iteration
    longer (``sim.floor``), on every seed."""
    started = time.process_time()
    data: dict[str, Any] | None = None
    stage = "generate"
    try:
        data = scenario(index, execution, profiles, fabric, settings)
        if small:
            data = quick(data)
        stage = "parse"  # a refusal here is the generator's bug: it wrote a scenario the format rejects
        sim = parse_sim(data, builtin())
        assert sim.generate is not None
        load = offered_load(sim.generate, sim.scenario, sim.execution.overlap)
        stage = "simulate"
        report, _ = simulate(sim, POLICIES, list(range(seeds)))
        ratios = None
        if with_floor:
            measured = floor.measure(sim, range(seeds), bases=floor.known_bases(report))
            ratios = [r for s in measured["per_seed"] for r in s["ratios"]]
        held = None
        if any(s["policies"]["metronome"].get("held_gangs") for s in report["per_seed"]):
            stage = "simulate without the hold"
            held = without_hold(data, report)
        return row(index, data, report, load, time.process_time() - started, ratios, held)
    except Exception as exc:  # a crash is what this command hunts: record it and go on
        return {"index": index, "scenario": data["name"] if data else f"fuzz-{index}", "stage": stage,
                "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-1500:],
                "cpu_s": round(time.process_time() - started, 1)}


def without_hold(data: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, list[float | None]]:
    """The hold's ablation: metronome again with ``max_hold_s: 0`` on the report's seeds. Per seed: metronome's
    average JCT over the one without the hold (``ratio``), and the one without it over ``volcano-topology``'s."""
    bare = {**data, "policy": {**data.get("policy", {}), "max_hold_s": 0}}
    plain, _ = simulate(parse_sim(bare, builtin()), ["metronome"], list(report["seeds"]))
    out: dict[str, list[float | None]] = {"ratio": [], "without_vs_volcano_topology": []}
    for seed, bare_seed in zip(report["per_seed"], plain["per_seed"]):
        both = {**seed["policies"], "without": bare_seed["policies"]["metronome"]}
        out["ratio"].append(_ratio(both, "metronome", "without"))
        out["without_vs_volcano_topology"].append(_ratio(both, "without", "volcano-topology"))
    return out


def row(index: int, data: Mapping[str, Any], report: Mapping[str, Any], load: float, cpu_s: float,
        floor_ratios: Sequence[float] | None = None,
        held: Mapping[str, list[float | None]] | None = None) -> dict[str, Any]:
    """One scenario's entry: what was drawn, every policy's figures, do-no-harm ratios (worst seed) and verdicts
    (and ``floor``, ``volcano-topology`` against itself, and ``hold``, the hold's ablation, where measured)."""
    policies = report["policies"]
    targets = verdicts(report)
    excess = policies["volcano-topology"]["contention_excess"]
    extra: dict[str, Any] = {} if floor_ratios is None else {"floor": list(floor_ratios)}
    if held is not None:
        extra["hold"] = dict(held)
    return {
        "index": index,
        "scenario": data["name"],
        "topology": topology_summary(data["topology"]),
        "execution": execution_summary(data.get("execution")),
        "settings": settings_summary(data),
        "models": sorted(data["generate"]["mix"]),
        "jobs": data["generate"]["count"] + len(data.get("jobs", [])),
        "offered_load": round(load, 3),
        "seeds": list(report["seeds"]),
        "policies": {name: {k: f.get(k) for k in ("avg_jct_s", "p99_jct_s", "contention_excess")}
                     for name, f in policies.items()},
        "volcano_topology_contention_excess": excess,
        "contended": excess >= SHARED_EXCESS,
        "ratios": {key: targets[key]["value"] for key in NO_HARM_KEYS},
        "met": {key: targets[key]["met"] for key in NO_HARM_KEYS},
        "worst_seed": {key: targets[key]["worst_seed"] for key in NO_HARM_KEYS},
        "placed_locked": policies["metronome"].get("placed_locked"),
        "held_gangs": policies["metronome"].get("held_gangs"),
        "holds_overtaken": policies["metronome"].get("holds_overtaken"),
        "attribution": {name: [_ratio(seed["policies"], ours, theirs) for seed in report["per_seed"]]
                        for name, (ours, theirs) in ATTRIBUTION.items()},
        **extra,
        "cpu_s": round(cpu_s, 1),
    }


def _ratio(policies: Mapping[str, Mapping[str, Any]], ours: str, theirs: str) -> float | None:
    a, b = policies[ours].get("avg_jct_s"), policies[theirs].get("avg_jct_s")
    return round(a / b, 4) if a is not None and b else None


def summary(rows: Sequence[Mapping[str, Any]], crashes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Scenarios, crashes, met / missed and the worst value (with its index) per do-no-harm target, the misses."""
    counts: dict[str, dict[str, int]] = {}
    worst: dict[str, dict[str, Any]] = {}
    for key in NO_HARM_KEYS:
        counts[key] = {"met": sum(1 for r in rows if r["met"][key]), "missed": sum(1 for r in rows if not r["met"][key])}
        known = [r for r in rows if r["ratios"][key] is not None]
        w = max(known, key=lambda r: float(r["ratios"][key]), default=None)
        worst[key] = ({"value": w["ratios"][key], "index": w["index"], "seed": w["worst_seed"][key]} if w
                      else {"value": None, "index": None, "seed": None})
    misses = [{"index": r["index"], "scenario": r["scenario"], "target": key, "value": r["ratios"][key],
               "seed": r["worst_seed"][key]} for r in rows for key in NO_HARM_KEYS if not r["met"][key]]
    out = {"scenarios": len(rows) + len(crashes), "crashes": len(crashes),
           "crashed": [c["index"] for c in crashes], "counts": counts, "worst": worst, "no_harm_misses": misses,
           "contended": sum(1 for r in rows if r["contended"]), "attribution": attribution(rows),
           "hold": hold_summary(rows),
           "cpu_s": round(sum(r["cpu_s"] for r in (*rows, *crashes)), 1)}
    measured = [r for r in rows if "floor" in r]
    if measured:
        out["floor"] = floor.summary([v for r in measured for v in r["floor"]])
        # The same, on the scenarios where metronome's average JCT differs from Volcano's binpack's at all (by
        # more than the ratios' rounding): where a comparison can move.
        moved = [r for r in measured if any(v is not None and abs(v - 1.0) > 1e-4 for v in r["attribution"]["both"])]
        out["floor_where_metronome_differs"] = floor.summary([v for r in moved for v in r["floor"]])
    return out


def attribution(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ``ATTRIBUTION`` ratio, over every scenario-seed: the geometric mean, and how many are faster or
    slower than ``BAND``: whether a gain (or a loss) is the placements' or the offsets'."""
    return {name: _spread([v for r in rows for v in r["attribution"][name] if v is not None]) for name in ATTRIBUTION}


def hold_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The hold against its ablation, over the scenario-seeds of the scenarios that hold a gang: the spread of
    metronome over metronome without the hold, and how many of those scenarios miss do-no-harm against
    ``volcano-topology`` (worst seed) with the hold and without it."""
    held = [r for r in rows if "hold" in r]
    without = [max((v for v in r["hold"]["without_vs_volcano_topology"] if v is not None), default=None)
               for r in held]
    return {"scenarios": len(held), **_spread([v for r in held for v in r["hold"]["ratio"] if v is not None]),
            "misses_vs_volcano_topology": {
                "with": sum(1 for r in held if not r["met"]["no_harm.avg_jct_s_vs_volcano-topology"]),
                "without": sum(1 for w in without if w is not None and w > _VT_BOUND)}}


def _spread(known: Sequence[float]) -> dict[str, Any]:
    return {"seeds": len(known),
            "geometric_mean": round(math.exp(sum(map(math.log, known)) / len(known)), 4) if known else None,
            "faster": sum(v < 1 - BAND for v in known), "slower": sum(v > 1 + BAND for v in known)}


def table(rows: Sequence[Mapping[str, Any]], crashes: Sequence[Mapping[str, Any]], summ: Mapping[str, Any]) -> str:
    """One screen: a line per scenario (or crash), then the summary."""
    head = (f"{'idx':>5}  {'topology':<26}{'execution':<30}{'VT exc':>7}{'m/VT':>7}{'m/free':>7}{'m/cas':>7}"
            f"{'p99/VT':>7}{'lock':>5}{'held':>5}  {'no-harm':<8}{'cpu s':>6}")
    lines = ["do-no-harm ratios: metronome's figure over the other's, worst seed", head, "-" * len(head)]
    entries = sorted([*rows, *crashes], key=lambda e: int(e["index"]))
    for e in entries:
        if "error" in e:
            lines.append(f"{e['index']:>5}  CRASH ({e['stage']}) {e['error'][:100]}")
            continue
        ratios = "".join(fixed(e["ratios"][k], 3, 7) for k in NO_HARM_KEYS)
        harm = "ok" if all(e["met"].values()) else "MISSED"
        lines.append(f"{e['index']:>5}  {e['topology']:<26}{e['execution']:<30}"
                     f"{fixed(100 * e['volcano_topology_contention_excess'], 1, 6)}%{ratios}"
                     f"{e['placed_locked'] or 0:>5}{e.get('held_gangs') or 0:>5}  {harm:<8}{e['cpu_s']:>6}")
    lines.append("")
    for key, c in summ["counts"].items():
        w = summ["worst"][key]
        lines.append(f"{key:<42} met {c['met']:>3}, missed {c['missed']:>3}; worst {fixed(w['value'], 4, 0)}"
                     + (f" (fuzz {w['index']}, seed {w['seed']})" if w["index"] is not None else ""))
    lines.append(f"where metronome's avg JCT comes from, over every scenario-seed: geometric mean "
                 f"(faster / slower by more than {100 * BAND:g} %)")
    for name, (ours, theirs) in ATTRIBUTION.items():
        a = summ["attribution"][name]
        lines.append(f"  {name:<10}{ours + ' / ' + theirs:<36}{fixed(a['geometric_mean'], 4, 0)}"
                     f" ({a['faster']} / {a['slower']} of {a['seeds']})")
    h = summ["hold"]
    if h["scenarios"]:
        m = h["misses_vs_volcano_topology"]
        lines.append(f"  {'hold':<10}{'metronome / without the hold':<36}{fixed(h['geometric_mean'], 4, 0)}"
                     f" ({h['faster']} / {h['slower']} of {h['seeds']}, in the {h['scenarios']} scenarios that hold a "
                     f"gang; misses against volcano-topology {m['with']} with it, {m['without']} without)")
    if "floor" in summ:
        lines.append(floor.line(summ["floor"]))
        lines.append("  on the scenarios where metronome differs from it: "
                     + floor.line(summ["floor_where_metronome_differs"]).split(": ", 1)[1])
    lines.append(f"{summ['scenarios']} scenarios, {summ['crashes']} crashed"
                 + (f" ({', '.join(map(str, summ['crashed']))})" if summ["crashed"] else "")
                 + f", {summ['contended']} contended (volcano-topology excess >= {100 * SHARED_EXCESS:g} %), "
                 f"{summ['cpu_s']} s of CPU")
    return "\n".join(lines)


def run(indices: Sequence[int], seeds: int, execution: str = "any", small: bool = False,
        say: bool = True, with_floor: bool = False, profiles: str = "catalog",
        fabric: str = "racks", settings: str = "default") -> dict[str, Any]:
    """Run every scenario of ``indices``; the JSON document."""
    rows: list[dict[str, Any]] = []
    crashes: list[dict[str, Any]] = []
    for n, index in enumerate(indices):
        entry = run_one(index, seeds, execution, small, with_floor=with_floor, profiles=profiles, fabric=fabric,
                        settings=settings)
        (crashes if "error" in entry else rows).append(entry)
        if say:
            what = f"CRASH {entry['error'][:120]}" if "error" in entry else "ok"
            print(f"[{n + 1}/{len(indices)}] {entry['scenario']}: {what}, {entry['cpu_s']} s of CPU",
                  file=sys.stderr, flush=True)
    return {"run": {"indices": list(indices), "seeds": seeds, "execution": execution, "quick": small,
                    "floor": with_floor, "profiles": profiles, "fabric": fabric, "settings": settings,
                    "policies": list(POLICIES), "models": list(MODEL_NAMES)},
            "scenarios": rows, "crashes": crashes, "summary": summary(rows, crashes)}


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios, print the JSON (``--json``) and the table; 1 if any scenario crashed."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=int, default=0, help="first scenario index (default 0)")
    parser.add_argument("--count", type=int, default=None,
                        help=f"how many scenarios (default {DEFAULT_COUNT}; {QUICK_SCENARIOS} with --quick)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario (default 1)")
    parser.add_argument("--execution", choices=EXECUTIONS, default="any",
                        help="any (the drawn execution block, none in about one scenario of seven), steady (no block) or "
                             "noisy (always a block with noise); the other draws are the same under all three")
    parser.add_argument("--profiles", choices=PROFILES, default="catalog",
                        help="catalog (the built-in models) or drawn (1 to 4 profiles of each scenario's own, in its "
                             "catalog: key; the other draws unchanged)")
    parser.add_argument("--fabric", choices=FABRICS, default="racks",
                        help="racks (as drawn) or flat (the same nodes as one rack, no uplinks; the other draws "
                             "unchanged)")
    parser.add_argument("--settings", choices=SETTINGS, default="default",
                        help="default (the scheduler's defaults, 5 ms slots, a fair fabric, generated jobs only) or "
                             "drawn (the slot, the QueuePolicy's knobs, traffic classes and explicit jobs drawn too; "
                             "the other draws unchanged)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a test: {QUICK_SCENARIOS} scenarios of {QUICK_COUNT} jobs of {QUICK_ITERATIONS[0]} "
                             f"to {QUICK_ITERATIONS[1]} iterations")
    parser.add_argument("--json", action="store_true", help="print the JSON on stdout (the table goes to stderr)")
    parser.add_argument("--write", metavar="DIR", help="also write every scenario as DIR/fuzz-I.yaml")
    parser.add_argument("--floor", action="store_true",
                        help="also run volcano-topology against itself, one job one iteration longer (bench floor): "
                             "how often one seed misses the 0.5 %% band by chance")
    args = parser.parse_args(argv)
    count = args.count if args.count is not None else QUICK_SCENARIOS if args.quick else DEFAULT_COUNT
    if count < 1:
        parser.error(f"--count: got {count}, expected an integer >= 1")
    if args.seeds < 1:
        parser.error(f"--seeds: got {args.seeds}, expected an integer >= 1")
    if args.start < 0:
        parser.error(f"--start: got {args.start}, expected an integer >= 0")
    indices = list(range(args.start, args.start + count))
    if args.write:
        folder = pathlib.Path(args.write)
        folder.mkdir(parents=True, exist_ok=True)
        for index in indices:
            data = scenario(index, args.execution, args.profiles, args.fabric, args.settings)
            (folder / f"fuzz-{index}.yaml").write_text(scenario_yaml(quick(data) if args.quick else data),
                                                       encoding="utf-8")
    doc = run(indices, args.seeds, args.execution, args.quick, with_floor=args.floor, profiles=args.profiles,
              fabric=args.fabric, settings=args.settings)
    text = table(doc["scenarios"], doc["crashes"], doc["summary"])
    if args.json:
        print(json.dumps(doc, indent=2))
        print(text, file=sys.stderr)
    else:
        print(text)
    return 1 if doc["crashes"] else 0
