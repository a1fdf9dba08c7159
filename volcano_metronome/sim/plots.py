"""PNG figures of a comparison: JCT CDFs, the busiest link over time, and the TDM picture.

Needs matplotlib (the ``sim`` extra). Every figure uses the first seed's runs.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.sim.engine import RunResult
from volcano_metronome.sim.report import busiest_link, utilisation_series


def write_plots(runs: Mapping[str, Sequence[RunResult]], outdir: str | pathlib.Path,
                slot_ms: float = 5.0) -> list[pathlib.Path]:
    """Write the figures into ``outdir`` (created if needed); returns their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the installation
        raise MetronomeError("plots need matplotlib: pip install 'volcano-metronome[sim]'") from None
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    first = {name: rs[0] for name, rs in runs.items() if rs}
    paths = [_jct_cdf(plt, first, out / "jct_cdf.png"), _busiest(plt, first, out / "busiest_link.png")]
    if "metronome" in first:
        circle = _tdm_circle(plt, first["metronome"], out / "tdm_circle.png", slot_ms)
        if circle is not None:
            paths.append(circle)
    return paths


def _jct_cdf(plt: Any, runs: Mapping[str, RunResult], path: pathlib.Path) -> pathlib.Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in runs.items():
        jct = np.sort([j.end_s - j.spec.arrival_s for j in run.jobs if not math.isnan(j.end_s)])
        if len(jct):
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name, lw=1.8)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF - {next(iter(runs.values())).scenario}, seed {next(iter(runs.values())).seed}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _busiest(plt: Any, runs: Mapping[str, RunResult], path: pathlib.Path) -> pathlib.Path:
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.7 * len(runs) + 0.8), sharex=True, squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        link = busiest_link(run)
        if link is None:
            ax.text(0.5, 0.5, "no network traffic", ha="center", va="center", transform=ax.transAxes)
        else:
            times, util = utilisation_series(run, link)
            ax.plot(times, util, lw=1.0)
            ax.set_title(f"{name}: {run.link_names[link]}", fontsize=9, loc="left")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("utilisation")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("simulated time (s)")
    fig.suptitle("Busiest link of each policy (carried / capacity per sampling interval)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _tdm_circle(plt: Any, run: RunResult, path: pathlib.Path, slot_ms: float) -> pathlib.Path | None:
    busiest = busiest_link(run)
    crowd = run.crowd.get(busiest) if busiest is not None else None
    link = busiest if busiest is not None else -1
    if not crowd or len(crowd) < 2:
        # The busiest link never held two gangs at once: draw the most crowded link instead.
        if not run.crowd:
            return None
        link, crowd = max(run.crowd.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    slots = [int(round(g["period_ms"] / slot_ms)) for g in crowd]
    circle_ms = math.lcm(*slots) * slot_ms
    fig = plt.figure(figsize=(6.5, 6.5))
    ax = fig.add_subplot(projection="polar")
    ax.set_theta_zero_location("N")
    ax.set_theta_direction(-1)
    colours = plt.get_cmap("tab10")
    for ring, gang in enumerate(crowd):
        radius = 1.0 + ring
        period = gang["period_ms"]
        for k in range(int(round(circle_ms / period))):
            for start, length, _ in gang["windows"]:
                theta = 2 * math.pi * ((gang["offset_ms"] + start + k * period) % circle_ms) / circle_ms
                ax.bar(theta, 0.8, width=2 * math.pi * length / circle_ms, bottom=radius - 0.4, align="edge",
                       color=colours(ring % 10), edgecolor="none")
        ax.plot([], [], color=colours(ring % 10), lw=6,
                label=f"{gang['uid']} (P={period:g} ms, offset {gang['offset_ms']:g} ms, prio {gang['priority']})")
    ax.set_yticks([])
    ax.set_xticks(np.linspace(0, 2 * math.pi, 8, endpoint=False))
    ax.set_xticklabels([f"{circle_ms * i / 8:g} ms" for i in range(8)], fontsize=8)
    ax.set_title(f"metronome: bursts on {run.link_names[link]} over {circle_ms:g} ms", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.05), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
