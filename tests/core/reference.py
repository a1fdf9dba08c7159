"""Slow, obviously correct loop versions of the core's vectorised kernels (for cross-checks only)."""

from __future__ import annotations

import numpy as np


def occupancy(rates: np.ndarray, offset: int, hyper: int) -> np.ndarray:
    """The gang's rate in every slot of the hyperperiod at ``offset``: slot t carries rates[(t - offset) % P]."""
    period = len(rates)
    return np.array([rates[(t - offset) % period] for t in range(hyper)], dtype=np.int64)


def carried(rate, multiplier):
    """What a link carries for a per-worker ``rate`` at ``multiplier``: the product, to the nearest whole Mbps."""
    return int(round(float(rate) * float(multiplier)))


def fits(base, capacity, multiplier, guarded):
    links, hyper = base.shape
    out = []
    for o in range(len(guarded)):
        occ = occupancy(guarded, o, hyper)
        # Only the slots the gang sends in count: overload it does not touch is not its doing.
        ok = all(base[l, t] + carried(occ[t], multiplier[l]) <= capacity[l]
                 for l in range(links) for t in range(hyper) if occ[t] > 0)
        out.append(ok)
    return np.array(out)


def added_overflow(base, capacity, multiplier, rates):
    links, hyper = base.shape
    out = np.zeros((links, len(rates)), dtype=np.int64)
    for o in range(len(rates)):
        occ = occupancy(rates, o, hyper)
        for l in range(links):
            for t in range(hyper):
                before = max(0, base[l, t] - capacity[l])
                after = max(0, base[l, t] + carried(occ[t], multiplier[l]) - capacity[l])
                out[l, o] += after - before
    return out


def damage(base, higher, capacity, multiplier, rates):
    links, hyper = base.shape

    def lost(h, x, c):
        return h * max(0, x - c) / x if x > 0 else 0.0

    out = np.zeros((links, len(rates)))
    for o in range(len(rates)):
        occ = occupancy(rates, o, hyper)
        for l in range(links):
            for t in range(hyper):
                x0 = base[l, t]
                x1 = x0 + carried(occ[t], multiplier[l])
                out[l, o] += lost(higher[l, t], x1, capacity[l]) - lost(higher[l, t], x0, capacity[l])
    return out


def peak_utilisation(base, capacity, multiplier, rates):
    links, hyper = base.shape
    out = []
    for o in range(len(rates)):
        occ = occupancy(rates, o, hyper)
        out.append(max((base[l, t] + carried(occ[t], multiplier[l])) / capacity[l] for l in range(links) for t in range(hyper)))
    return np.array(out)


def circular_window(values, start, length, reduce):
    period = values.shape[-1]
    out = np.empty(values.shape)
    for o in range(period):
        picked = [values[..., (start + o + j) % period] for j in range(length)]
        acc = picked[0]
        for p in picked[1:]:
            acc = reduce(acc, p)
        out[..., o] = acc
    return out


def loaded_links(topology, nodes):
    """Links whose node set splits the gang: some of its nodes behind the link, some not."""
    gang = {topology.nodes[i] for i in nodes}
    return sorted(i for i, link in enumerate(topology.links) if gang & link.nodes and gang - link.nodes)


def link_loads(topology, placements, hyper):
    """Load of every link, summed gang by gang from scratch: placements = [(pattern rates, nodes, offset)]."""
    load = np.zeros((len(topology.links), hyper), dtype=np.int64)
    for rates, nodes, offset in placements:
        occ = occupancy(rates, offset, hyper)
        for li in loaded_links(topology, nodes):
            load[li] += occ
    return load


def link_shares(topology, nodes, members, collective):
    """Every link's multiplier, pair by pair: each worker sends ``1 / (n - 1)`` of its rate to each other
    worker (all-to-all), or one ring edge leaves and one enters every cut (ring)."""
    workers = [topology.nodes[node] for node, count in zip(nodes, members) for _ in range(count)]
    n = len(workers)
    out = {}
    for i, link in enumerate(topology.links):
        inside = [w for w in workers if w in link.nodes]
        if not inside or len(inside) == n or len(set(workers)) < 2:
            continue
        if collective == "ring":
            out[i] = 1.0
        else:
            pairs = sum(1 for a in workers for b in workers if (a in link.nodes) and (b not in link.nodes))
            out[i] = pairs / (n - 1)
    return out


def commensurate(grid_periods, period_slots, others):
    """The smallest allowed period >= period_slots that divides, or is a multiple of, every one of others."""
    for p in sorted(grid_periods):
        if p >= period_slots - 1e-9 and all(p % o == 0 or o % p == 0 for o in others):
            return p
    return None
