"""``python -m volcano_metronome.bench regimes [--quick] [--json] [--seeds N]``: where the offsets pay.

A fixed grid of generated scenarios, written in the ordinary scenario format (a ``generate:`` block,
nothing new), each run through the simulator's own path (``sim.runner.simulate``, what
``volcano-metronome simulate`` runs) under metronome, metronome-free, volcano-topology and cassini.
Three axes, fixed before any run (docs/simulator.md, "Where the offsets pay: a regime map"):

* **periods**: one model (vgg11); two models whose snapped periods divide one another at both NIC
  speeds (bert-base and vgg19: 200 and 400 ms at 100 Gbps, 175 and 350 ms at 200 Gbps); four models
  none of whose snapped periods divides another's (vgg11, bert-base, gpt3, camembert).
* **NIC speed**: 100 or 200 Gbps (compute is the same, so it sets the duty cycles).
* **sharing**: half-node workers on one flat rack (``half-nodes.yaml``); partial-node gangs over
  four racks with 2:1 uplinks (``fragmented.yaml``); whole-node gangs over eight small racks with
  4:1 uplinks (``multirack-4to1.yaml``); whole-node gangs of 3 to 6 nodes over sixteen racks of two
  nodes with 4:1 uplinks (``thin-racks``, round 11), half a NIC each, slower than one gang's ring:
  every gang that spans racks runs throttled by them even alone.

Every scenario has its arrival rate set so that its offered GPU load (``sim.workload.offered_load``)
is 3.0, the saturation of the contended examples (2.7 to 4.0). The figures, ratios, excess and
excess recovered are the report's own (``sim.report``); targets are issue 12's (``issue12_targets``):
do-no-harm judged on every seed, the win targets on the medians over seeds, as ``simulate`` prints them.
``--execution noisy`` runs the same grid with the issue-12 built-ins' execution noise (``EXECUTIONS``);
``classes`` and ``noisy-classes`` on a fabric with traffic classes served in strict priority, given to
every gang by start order; ``published`` and ``noisy-published`` on that fabric, with the classes metronome
publishes (the other policies publish none).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import yaml

from volcano_metronome.catalog import builtin
from volcano_metronome.sim.report import NO_HARM, issue12_targets
from volcano_metronome.sim.runner import simulate
from volcano_metronome.sim.workload import SimScenario, offered_load, parse_sim

POLICIES = ("metronome", "metronome-free", "volcano-topology", "cassini")
OFFERED_LOAD = 3.0
GENERATE_SEED = 7

MIXES: dict[str, dict[str, int]] = {
    "one": {"vgg11": 1},
    "divisible": {"bert-base": 1, "vgg19": 1},
    "mixed": {"vgg11": 1, "bert-base": 1, "gpt3": 1, "camembert": 1},
}
NIC_GBPS = (100, 200)
#: ``--execution``: the contended examples run steady; ``noisy`` adds the issue-12 built-ins' execution
#: block without overlap (2 % two-sided compute noise, a straggling iteration in 500 at 2x, start-up 5-30 s).
#: ``classes`` and ``noisy-classes``: the same on a fabric that serves 8 traffic classes in strict priority
#: (Ethernet's 8 priorities), every gang in the class after those running on its links, whatever its policy
#: (``classes_from: start-order``); ``published`` and ``noisy-published``: the same fabric, each gang in the
#: class its policy published (metronome's; 0 for every other policy).
NOISY = {"noise_cv": 0.02, "straggler_probability": 0.002, "straggler_slowdown": 2.0, "startup_s": [5, 30]}
_START_ORDER = {"traffic_classes": 8, "classes_from": "start-order"}
_PUBLISHED = {"traffic_classes": 8, "classes_from": "scheduler"}
EXECUTIONS: dict[str, dict[str, Any]] = {
    "steady": {},
    "noisy": NOISY,
    "classes": _START_ORDER,
    "noisy-classes": {**NOISY, **_START_ORDER},
    "published": _PUBLISHED,
    "noisy-published": {**NOISY, **_PUBLISHED},
}
SHARING = ("half-nodes", "fragmented", "multirack", "thin-racks")

#: Jobs per scenario, sized for 10 to 25 s of CPU for four policies and one seed (quick: about 3 s).
COUNT = {"half-nodes": 24, "fragmented": 60, "multirack": 40, "thin-racks": 40}
QUICK_COUNT, QUICK_ITERATIONS = 8, (100, 300)

NO_HARM_KEYS = tuple(f"no_harm.{figure}_vs_{name}" for name, figure, _ in NO_HARM)
WIN_KEYS = ("win_if_contended.avg_jct_vs_volcano-topology", "win_if_contended.excess_recovered_vs_volcano-topology")


@dataclass(frozen=True)
class Cell:
    """One scenario of the grid: its axes."""

    periods: str
    nic_gbps: int
    sharing: str
    quick: bool = False
    execution: str = "steady"

    @property
    def name(self) -> str:
        """The scenario's name: its axes."""
        return (f"regime-{self.sharing}-{self.periods}-{self.nic_gbps}g" + ("-quick" if self.quick else "")
                + ("" if self.execution == "steady" else f"-{self.execution}"))


def grid(quick: bool = False, execution: str = "steady", nic_gbps: Sequence[int] = NIC_GBPS) -> list[Cell]:
    """The grid: every combination of the axes, or (quick) two small half-node scenarios.

    ``nic_gbps`` replaces the speed axis: the map's own cells at speeds it was not drawn at.
    """
    if quick:
        return [Cell("one", 100, "half-nodes", True, execution), Cell("mixed", 100, "half-nodes", True, execution)]
    return [Cell(p, nic, s, execution=execution) for s in SHARING for p in MIXES for nic in nic_gbps]


def _layout(cell: Cell) -> tuple[dict[str, Any], list[dict[str, int]], list[int]]:
    """Topology, shapes and iteration range of a sharing regime (those of the contended examples)."""
    nic = cell.nic_gbps
    if cell.sharing == "half-nodes":
        return ({"racks": 1, "nodes_per_rack": 8, "gpus_per_node": 8, "nic_gbps": nic},
                [{"workers": 3, "gpus_per_worker": 4, "weight": 1}], [400, 800])
    if cell.sharing == "fragmented":
        return ({"racks": 4, "nodes_per_rack": 8, "gpus_per_node": 8, "nic_gbps": nic, "uplink_gbps": 4 * nic},
                [{"workers": 4, "gpus_per_worker": 2, "weight": 3}, {"workers": 4, "gpus_per_worker": 4, "weight": 3},
                 {"workers": 8, "gpus_per_worker": 2, "weight": 2}, {"workers": 8, "gpus_per_worker": 4, "weight": 2},
                 {"workers": 6, "gpus_per_worker": 3, "weight": 1}], [200, 600])
    whole_nodes = [{"workers": 4, "gpus_per_worker": 8, "weight": 3}, {"workers": 6, "gpus_per_worker": 8, "weight": 3},
                   {"workers": 8, "gpus_per_worker": 8, "weight": 2}, {"workers": 12, "gpus_per_worker": 8, "weight": 1}]
    if cell.sharing == "multirack":
        return ({"racks": 8, "nodes_per_rack": 4, "gpus_per_node": 8, "nic_gbps": nic, "uplink_gbps": nic},
                whole_nodes, [200, 600])
    if cell.sharing == "thin-racks":  # odd sizes too: even ones alone tile racks of two, and nothing is shared
        return ({"racks": 16, "nodes_per_rack": 2, "gpus_per_node": 8, "nic_gbps": nic, "uplink_gbps": nic / 2},
                [{"workers": 3, "gpus_per_worker": 8, "weight": 3}, {"workers": 4, "gpus_per_worker": 8, "weight": 3},
                 {"workers": 5, "gpus_per_worker": 8, "weight": 2}, {"workers": 6, "gpus_per_worker": 8, "weight": 1}],
                [200, 600])
    raise ValueError(f"sharing: got {cell.sharing!r}, expected one of {', '.join(SHARING)}")


def scenario_data(cell: Cell) -> dict[str, Any]:
    """The scenario mapping (the YAML ``simulate`` reads), arrival rate set for the offered load."""
    topology, shapes, iterations = _layout(cell)
    count = QUICK_COUNT if cell.quick else COUNT[cell.sharing]
    if cell.quick:
        iterations = list(QUICK_ITERATIONS)

    def data(rate: float) -> dict[str, Any]:
        return {
            "name": cell.name,
            "description": f"regime map: {cell.sharing}, {cell.periods} periods, {cell.nic_gbps} Gbps NICs, "
                           f"offered load {OFFERED_LOAD:g}",
            "seeds": 1,
            "slot_ms": 5,
            "topology": topology,
            "policy": {"ordering": "StrictPriority"},
            **({"execution": dict(EXECUTIONS[cell.execution])} if EXECUTIONS[cell.execution] else {}),
            "generate": {"count": count, "seed": GENERATE_SEED,
                         "arrival": {"process": "poisson", "rate_per_min": rate},
                         "mix": dict(MIXES[cell.periods]), "shapes": shapes, "iterations": iterations,
                         "priorities": {0: 1}},
        }

    unit = parse_sim(data(1.0), builtin())
    assert unit.generate is not None
    return data(round(OFFERED_LOAD / offered_load(unit.generate, unit.scenario), 3))


def scenario_yaml(cell: Cell) -> str:
    """The scenario as a YAML file ``volcano-metronome simulate FILE`` reproduces."""
    data = scenario_data(cell)  # parses the scenario once to set its arrival rate: not twice
    return f"# {data['description']} (python -m volcano_metronome.bench regimes)\n" + yaml.safe_dump(
        data, sort_keys=False, default_flow_style=None, width=120)


def sim_scenario(cell: Cell) -> SimScenario:
    """The scenario as the simulator reads it."""
    return parse_sim(scenario_data(cell), builtin())


def verdicts(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 12's targets on a ``simulate`` report: do-no-harm on every seed, the win targets on the medians.

    Each entry: ``target``, ``applies``, ``met`` (None where it does not apply) and ``value`` (for
    do-no-harm the worst seed's ratio, ``worst_seed`` and ``per_seed``). A figure a seed lacks fails.
    """
    out: dict[str, dict[str, Any]] = {}
    seeds = [(s["seed"], issue12_targets({"policies": s["policies"], "gains": s["gains"]})) for s in report["per_seed"]]
    for key, (_, _, bound) in zip(NO_HARM_KEYS, NO_HARM):
        values = [(seed, t.get(key, {}).get("value")) for seed, t in seeds]
        known = [(v, seed) for seed, v in values if v is not None]
        worst, worst_seed = max(known) if known else (None, None)
        met = bool(values) and len(known) == len(values) and all(t.get(key, {}).get("met") for _, t in seeds)
        out[key] = {"target": f"<= {bound:g}x", "applies": True, "met": met, "value": worst,
                    "worst_seed": worst_seed, "per_seed": [v for _, v in values]}
    median = issue12_targets(report)
    gate = median.get("win_if_contended")
    for key in WIN_KEYS:
        if gate is not None and gate.get("applies") is False:
            out[key] = {"target": gate["target"], "applies": False, "met": None, "value": None}
        else:
            entry = median.get(key)
            out[key] = ({"target": entry["target"], "applies": True, "met": entry["met"], "value": entry["value"]}
                        if entry else {"target": "figure missing", "applies": True, "met": False, "value": None})
    return out


def row(cell: Cell, report: Mapping[str, Any], cpu_s: float) -> dict[str, Any]:
    """One scenario's entry in the JSON: axes, figures, the targets' ratios, excess, locks, verdicts."""
    policies = report["policies"]
    median = issue12_targets(report)
    ours = policies["metronome"]
    sim = sim_scenario(cell)
    assert sim.generate is not None
    return {
        "scenario": cell.name,
        "axes": {"periods": cell.periods, "models": sorted(MIXES[cell.periods]), "nic_gbps": cell.nic_gbps,
                 "sharing": cell.sharing, "execution": cell.execution},
        "jobs": sim.generate.count,
        "rate_per_min": sim.generate.rate_per_min,
        "offered_load": round(offered_load(sim.generate, sim.scenario), 3),
        "seeds": list(report["seeds"]),
        "policies": {name: {k: f.get(k) for k in ("avg_jct_s", "p99_jct_s", "avg_queue_s", "contention_excess",
                                                  "avg_contention_excess_s", "avg_padding_s")}
                     for name, f in policies.items()},
        "ratios": {key: median.get(key, {}).get("value") for key in NO_HARM_KEYS},
        "volcano_topology_contention_excess": policies["volcano-topology"]["contention_excess"],
        "excess_recovered_pct": {
            name: report["gains"].get(f"metronome_vs_{name}", {}).get("contention_excess_recovered_pct")
            for name in ("volcano-topology", "metronome-free")},
        "locked_placements": ours.get("placed_locked"),
        "locks": ours.get("locks"),
        "link_sharing_decisions": ours.get("link_sharing_decisions"),
        "targets": verdicts(report),
        "per_seed": [{"seed": s["seed"],
                      "policies": {n: {"avg_jct_s": f["avg_jct_s"], "p99_jct_s": f["p99_jct_s"],
                                       "contention_excess": f["contention_excess"]} for n, f in s["policies"].items()},
                      "placed_locked": s["policies"]["metronome"].get("placed_locked")} for s in report["per_seed"]],
        "cpu_s": round(cpu_s, 1),
    }


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts met / missed / not applicable per target, the worst value of each with its scenario, the misses."""
    counts: dict[str, dict[str, int]] = {}
    worst: dict[str, dict[str, Any]] = {}
    for key in NO_HARM_KEYS + WIN_KEYS:
        c = {"met": 0, "missed": 0, "not_applicable": 0}
        lowest = key.endswith("recovered_vs_volcano-topology")  # a share recovered: the worst is the smallest
        pick: dict[str, Any] | None = None
        for r in rows:
            t = r["targets"][key]
            c["not_applicable" if not t["applies"] else "met" if t["met"] else "missed"] += 1
            if t["applies"] and t["value"] is not None and (
                    pick is None or (t["value"] < pick["value"] if lowest else t["value"] > pick["value"])):
                pick = {"value": t["value"], "scenario": r["scenario"], "seed": t.get("worst_seed")}
        counts[key] = c
        worst[key] = pick or {"value": None, "scenario": None, "seed": None}
    misses = [{"scenario": r["scenario"], "target": key, "value": r["targets"][key]["value"],
               "seed": r["targets"][key].get("worst_seed")}
              for r in rows for key in NO_HARM_KEYS if not r["targets"][key]["met"]]
    return {"scenarios": len(rows), "counts": counts, "worst": worst, "no_harm_misses": misses,
            "per_seed": per_seed_counts(rows), "cpu_s": round(sum(r["cpu_s"] for r in rows), 1)}


def per_seed_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per do-no-harm target, over every scenario's seeds: how many met it and the ratios' geometric mean.

    A scenario's verdict is its worst seed, so with more seeds more scenarios miss by the jitter of one queue;
    the share of seeds met and the mean ratio say how often and by how much, which the verdict cannot.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, (_, _, bound) in zip(NO_HARM_KEYS, NO_HARM):
        values = [v for r in rows for v in r["targets"][key]["per_seed"]]
        known = [v for v in values if v is not None]
        out[key] = {"met": sum(v <= bound for v in known), "seeds": len(values),
                    "geometric_mean": round(math.exp(sum(map(math.log, known)) / len(known)), 4) if known else None}
    return out


def table(rows: Sequence[Mapping[str, Any]], summ: Mapping[str, Any]) -> str:
    """One screen: a line per scenario, then the summary."""
    head = (f"{'scenario':<34}{'VT exc':>7}{'m/VT':>7}{'m/free':>7}{'m/cas':>7}{'p99/VT':>7}{'recov':>7}"
            f"{'lock':>5}  {'no-harm':<8}{'win (jct, recovered)':<22}")
    lines = ["do-no-harm ratios: worst seed; excess, recovered and win: medians over seeds", head, "-" * len(head)]
    for r in rows:
        t = r["targets"]
        ratios = "".join(fixed(t[k]["value"], 3, 7) for k in NO_HARM_KEYS)
        harm = "ok" if all(t[k]["met"] for k in NO_HARM_KEYS) else "MISSED"
        win = ("n/a" if not t[WIN_KEYS[0]]["applies"]
               else ", ".join("met" if t[k]["met"] else "missed" for k in WIN_KEYS))
        lines.append(f"{r['scenario'][len('regime-'):]:<34}{fixed(100 * r['volcano_topology_contention_excess'], 1, 6)}%"
                     f"{ratios}{fixed(r['excess_recovered_pct']['volcano-topology'], 0, 6)}%"
                     f"{r['locked_placements'] or 0:>5}  {harm:<8}{win:<22}")
    lines.append("")
    for key, c in summ["counts"].items():
        w = summ["worst"][key]
        lines.append(f"{key:<56} met {c['met']:>2}, missed {c['missed']:>2}, n/a {c['not_applicable']:>2}; "
                     f"worst {fixed(w['value'], 4, 0)} ({w['scenario']})")
    for key, c in summ["per_seed"].items():
        lines.append(f"{key:<56} per seed: met on {c['met']} of {c['seeds']}, "
                     f"geometric mean {fixed(c['geometric_mean'], 4, 0)}")
    lines.append(f"{summ['scenarios']} scenarios, {summ['cpu_s']} s of CPU")
    return "\n".join(lines)


def fixed(x: float | None, digits: int, width: int) -> str:
    """``x`` with ``digits`` decimals, right-aligned in ``width`` characters; ``-`` when there is no figure."""
    return f"{'-' if x is None else f'{x:.{digits}f}':>{width}}"


def heat_map(doc: Mapping[str, Any], path: str | pathlib.Path) -> pathlib.Path:
    """A PNG: per sharing regime, metronome's avg JCT over volcano-topology's (median) by periods and NIC speed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {(r["axes"]["sharing"], r["axes"]["periods"], r["axes"]["nic_gbps"]): r for r in doc["scenarios"]}
    speeds = sorted({k[2] for k in rows})
    sharing = [s for s in SHARING if any(k[0] == s for k in rows)]
    fig, axes = plt.subplots(1, len(sharing), figsize=(3.6 * len(sharing), 3.6), squeeze=False)
    image: Any = None
    for ax, regime in zip(axes[0], sharing):
        ratio = [[rows[(regime, p, n)]["ratios"][NO_HARM_KEYS[0]] if (regime, p, n) in rows else float("nan")
                  for n in speeds] for p in MIXES]
        image = ax.imshow(ratio, cmap="RdBu_r", vmin=0.8, vmax=1.2)
        for i, p in enumerate(MIXES):
            for j, n in enumerate(speeds):
                r = rows.get((regime, p, n))
                if r is not None:
                    harm = "" if all(r["targets"][k]["met"] for k in NO_HARM_KEYS) else "\nno-harm MISSED"
                    ax.text(j, i, f"{r['ratios'][NO_HARM_KEYS[0]]:.3f}\nVT exc "
                            f"{100 * r['volcano_topology_contention_excess']:.1f}%{harm}",
                            ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(speeds)), [f"{n} Gbps" for n in speeds])
        ax.set_yticks(range(len(MIXES)), list(MIXES) if ax is axes[0][0] else [])
        ax.set_title(regime)
    fig.colorbar(image, ax=axes[0].tolist(), label="metronome / volcano-topology, avg JCT (median)", shrink=0.8)
    fig.suptitle(f"Where the offsets pay (offered load {OFFERED_LOAD:g}, {doc['grid']['seeds']} seeds, "
                 f"{doc['grid'].get('execution', 'steady')} execution)", y=1.04)
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def run(cells: Sequence[Cell], seeds: int, say: bool = True, execution: str = "steady") -> dict[str, Any]:
    """Simulate every cell; the JSON document."""
    rows = []
    for i, cell in enumerate(cells):
        started = time.process_time()
        report, _ = simulate(sim_scenario(cell), POLICIES, list(range(seeds)))
        rows.append(row(cell, report, time.process_time() - started))
        if say:
            print(f"[{i + 1}/{len(cells)}] {cell.name}: {rows[-1]['cpu_s']} s of CPU", file=sys.stderr, flush=True)
    return {"grid": {"periods": {k: sorted(v) for k, v in MIXES.items()},
                     "nic_gbps": sorted({c.nic_gbps for c in cells}),
                     "sharing": list(SHARING), "execution": execution, "offered_load": OFFERED_LOAD, "generate_seed": GENERATE_SEED,
                     "policies": list(POLICIES), "seeds": seeds},
            "scenarios": rows, "summary": summary(rows)}


def main(argv: list[str] | None = None) -> int:
    """Run the grid, print the JSON (``--json``) and the table."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench regimes", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two small half-node scenarios (a test)")
    parser.add_argument("--json", action="store_true", help="print the JSON on stdout (the table goes to stderr)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default 3)")
    parser.add_argument("--execution", choices=sorted(EXECUTIONS), default="steady",
                        help="how jobs run: steady (the default, as the contended examples) or noisy (issue-12 noise); "
                             "classes, noisy-classes: the same on a fabric of 8 traffic classes in strict priority, "
                             "every gang's by start order; published, noisy-published: metronome's classes only")
    parser.add_argument("--nic-gbps", default=",".join(map(str, NIC_GBPS)), metavar="LIST",
                        help="comma-separated NIC speeds of the speed axis (default 100,200, the map's own). Others "
                             "run the same cells where the map was not drawn; the period axis's names hold only "
                             "at 100 and 200 (at 50 and 400 Gbps `divisible` snaps to 280/525 and 150/350 ms)")
    parser.add_argument("--only", default="", help="comma-separated scenario names to run (default: the whole grid)")
    parser.add_argument("--write", metavar="DIR", help="also write every scenario of the grid as DIR/NAME.yaml")
    parser.add_argument("--plot", metavar="PNG", help="draw the heat map of metronome / volcano-topology (matplotlib)")
    parser.add_argument("--from", dest="source", metavar="JSON", help="read an earlier run's JSON instead of running")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds: got {args.seeds}, expected an integer >= 1")
    try:
        speeds = [int(x) for x in args.nic_gbps.split(",")]
    except ValueError:
        speeds = []
    if not speeds or any(n < 1 for n in speeds):
        parser.error(f"--nic-gbps: got {args.nic_gbps!r}, expected comma-separated whole Gbps >= 1, e.g. 50,400")
    cells = grid(args.quick, args.execution, speeds)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {c.name for c in cells}
        if unknown:
            parser.error(f"--only: got {', '.join(sorted(unknown))}, expected names of the grid: "
                         f"{', '.join(c.name for c in cells)}")
        cells = [c for c in cells if c.name in wanted]
    if args.write:
        folder = pathlib.Path(args.write)
        folder.mkdir(parents=True, exist_ok=True)
        for cell in cells:
            (folder / f"{cell.name}.yaml").write_text(scenario_yaml(cell), encoding="utf-8")
    if args.source:
        doc = json.loads(pathlib.Path(args.source).read_text(encoding="utf-8"))
        doc["summary"] = summary(doc["scenarios"])  # an earlier run's JSON gets this version's summary
    else:
        doc = run(cells, args.seeds, execution=args.execution)
    if args.plot:
        heat_map(doc, args.plot)
    text = table(doc["scenarios"], doc["summary"])
    if args.json:
        print(json.dumps(doc, indent=2))
        print(text, file=sys.stderr)
    else:
        print(text)
    return 0
