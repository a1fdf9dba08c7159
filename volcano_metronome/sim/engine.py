"""One run: one workload, one policy, one seed, on the fluid network.

Jobs and the runtime helper
    A job's iteration is its profile: compute gaps and communication windows (a window of ``len`` ms
    at ``gbps`` is a volume of ``len x gbps`` to move at up to ``gbps``). Jitter: each iteration's
    longest compute gap is shortened by ``jitter x (1 - u)``, ``u ~ U(0, 1)`` seeded per job and
    iteration, so an iteration alone lasts between ``period - jitter`` and ``period`` (the profile's
    period is the longest iteration, which is what a runtime can hold). Windows of a gang that loads
    links become flows on the fluid network; contention stretches them, and with them the iteration.

    Phased policies publish to each gang a snapped period ``P``, an offset and an epoch (0 here).
    The runtime helper starts the communication of window ``w`` of the gang's ``m``-th grid
    iteration no earlier than ``epoch + offset + start_w + m P``: early, it pads; late by up to
    ``P / 2`` (contention, a slow step), it goes at once, and the next iteration aims at grid
    iteration ``m + 1`` again, so lateness is absorbed by the next early arrival instead of shifting
    the schedule. Later than that it waits for the nearer, next slot (``runtime.aim``). After an
    iteration in which another gang's traffic stretched a burst past its uncontended time
    (``runtime.stretched``: what the real helper learns from its stopwatch), the bound is ``P / 4``,
    once, until an iteration without a collision (``runtime.aim_and_arm``). A policy whose
    ``collision_aware`` is False (``cassini``) keeps ``P / 2`` throughout.

    The helper re-reads what is published at the start of every iteration (the real one re-reads a
    downward-API volume). A new offset (re-optimisation, CASSINI's shifts, or a lock: an offset
    published to a gang that ran free) makes it re-anchor there: it pads to the first slot of the
    new grid, then holds ``P``. A withdrawn offset (an unlock, or a gang placed unlocked: lock on
    demand) makes it run free from that iteration on: no padding, its natural iteration time.

Execution noise (``workload.Execution``, off unless a scenario asks): every iteration's compute is
multiplied by a two-sided draw (and occasionally a straggler's slowdown), and a placed gang starts
computing after a start-up delay. Its draws come from their own seeded stream, per job.

Traffic classes (``Execution.traffic_classes`` above 1): the fluid serves the classes in strict
priority, and a gang's bursts keep their class to the end, as NCCL reads its traffic class once, when
the communicator is made. The class is the one its policy published (``Placement.traffic_class``;
metronome hands them out by ``core.classes``, every other policy publishes none and its gangs share
class 0), or, with ``classes_from: start-order``, the fabric's own for every policy, by the same rule:
the class after the lowest-served one among the running gangs it shares a link with when it starts (0
where it shares none; the last class once they run out).

Gangs that load no link (one node) never touch the network: their end is computed in one step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from volcano_metronome.core.classes import next_class
from volcano_metronome.core.traffic import link_shares
from volcano_metronome.runtime import aim_and_arm, stretched
from volcano_metronome.scenario import JobSpec
from volcano_metronome.sim.fluid import Fluid
from volcano_metronome.sim.kernel import SAMPLING, SCHEDULING, Kernel
from volcano_metronome.sim.policies import Context, SimPolicy, make
from volcano_metronome.sim.workload import Execution, SimScenario

#: Utilisation samples kept per run; past this, samples are thinned and the interval doubled.
MAX_SAMPLES = 2000
_EPS = 1e-9


class JobRun:
    """A job's life in one run (mutable, engine-private)."""

    __slots__ = ("spec", "index", "starts", "lens", "gbps", "volumes", "gaps", "jitter_gap", "jitter_s", "u",
                 "period_s", "start_s", "end_s", "nodes", "members", "links", "route", "aligned", "offset_s",
                 "grid_period_s", "grid", "realign", "published", "fresh", "iteration", "window", "comm_s",
                 "comm_ideal_s", "comm_started", "isolated_s", "padded_s", "first_wait_s", "reanchor_s",
                 "steady", "aligned_iterations", "slow", "startup_s", "collided", "burst_ideal_s", "armed")

    def __init__(self, spec: JobSpec, index: int, seed: int, execution: Execution = Execution()) -> None:
        profile = spec.profile
        self.spec = spec
        self.index = index
        ws = profile.windows
        self.starts = [w.start_ms / 1000.0 for w in ws]
        self.lens = [w.len_ms / 1000.0 for w in ws]
        self.gbps = [w.gbps for w in ws]
        self.volumes = [w.len_ms / 1000.0 * w.gbps for w in ws]
        ends = [0.0] + [s + n for s, n in zip(self.starts, self.lens)]
        self.period_s = profile.period_ms / 1000.0
        # gaps[w] = compute before window w; gaps[-1] = compute after the last window.
        self.gaps = [s - e for s, e in zip(self.starts, ends[:-1])] + [self.period_s - ends[-1]]
        self.jitter_gap = int(np.argmax(self.gaps))
        self.jitter_s = min(profile.jitter_ms / 1000.0, self.gaps[self.jitter_gap])
        self.u: list[float] = np.random.default_rng([seed, index]).random(spec.iterations).tolist()
        # Execution noise (off by default) from its own stream, so the jitter draws above never change.
        self.slow: list[float] | None = None  # per iteration: compute multiplier
        self.startup_s = 0.0
        if execution.random:
            rng = np.random.default_rng([seed, index, 1])
            slow = np.maximum(0.5, 1.0 + execution.noise_cv * rng.standard_normal(spec.iterations))
            stragglers = rng.random(spec.iterations) < execution.straggler_probability
            slow[stragglers] *= execution.straggler_slowdown
            self.slow = slow.tolist()
            self.startup_s = float(rng.uniform(*execution.startup_s))
        self.start_s = math.nan
        self.end_s = math.nan
        self.nodes = np.zeros(0, dtype=np.int64)
        self.members = np.zeros(0, dtype=np.int64)
        self.links = np.zeros(0, dtype=np.int64)
        self.route: Any = None
        self.aligned = False  # the helper aligns this iteration's bursts (what it last read)
        self.offset_s = 0.0  # the offset it aligns to
        self.grid_period_s = self.period_s  # the snapped period, once a phased policy publishes one
        self.grid = 0
        self.realign = True
        self.published: float | None = None  # the offset published now (s); None: runs free
        self.fresh = False  # something new was published since the helper last read
        self.iteration = 0
        self.window = 0
        self.comm_s = 0.0
        self.comm_ideal_s = 0.0
        self.burst_ideal_s = 0.0  # the burst on the wire now, uncontended
        self.comm_started = 0.0
        self.isolated_s = 0.0
        self.padded_s = 0.0  # time the runtime helper held bursts back to their slots
        self.first_wait_s = 0.0  # of which: before the very first burst (waiting for the first slot)
        self.reanchor_s = 0.0  # of which: re-anchoring on a new grid later on (locks, new offsets)
        self.steady = 0  # aligned iterations that followed an aligned one on the same grid
        self.aligned_iterations = 0
        self.armed = True  # a collision may hold the next late burst back (runtime.aim_and_arm)
        self.collided = False  # another gang's traffic stretched a burst of this iteration (runtime.stretched)

    def compute(self, gap: int) -> float:
        """Length of compute gap ``gap`` in the current iteration (jitter included)."""
        base = self.gaps[gap] if self.slow is None else self.gaps[gap] * self.slow[self.iteration]
        if gap != self.jitter_gap:
            return float(base)
        return float(base - self.jitter_s * (1.0 - self.u[self.iteration]))

    def alone_s(self, bottleneck_gbps: float) -> float:
        """Time the job would take alone on links no slower than ``bottleneck_gbps``."""
        stretch = sum(v / min(r, bottleneck_gbps) - n for v, r, n in zip(self.volumes, self.gbps, self.lens))
        jitter = self.jitter_s * sum(1.0 - u for u in self.u)
        alone = self.spec.iterations * (self.period_s + stretch) - jitter
        if self.slow is not None:
            alone += sum(self.gaps) * sum(m - 1.0 for m in self.slow) + self.startup_s
        return float(alone)


@dataclass
class RunResult:
    """Everything a run measured (``report`` turns it into figures)."""

    scenario: str
    policy: str
    seed: int
    jobs: list[JobRun]
    capacity: np.ndarray
    carried: np.ndarray  # Gb per link
    demanded: np.ndarray  # Gb per link
    occupied_s: np.ndarray  # per link: time with at least one running gang loading it
    sample_times: np.ndarray
    samples: np.ndarray  # cumulative carried Gb, (len(sample_times), links)
    link_names: tuple[str, ...]
    decision_ms: list[float]
    extra: dict[str, Any]
    crowd: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    wall_s: float = 0.0
    events: int = 0
    sim_end_s: float = 0.0


Progress = Callable[[int, int, float], None]


def traffic_class(users: np.ndarray) -> int:
    """The class of a gang starting where ``users[link, k]`` gangs of class ``k`` run on each of its links, by
    ``core.classes.next_class``: the one after the lowest-served class there (0 where nobody runs)."""
    return next_class(np.flatnonzero(users.any(axis=0)).tolist(), users.shape[1])


class Engine:
    """Wires the kernel, the fluid network, the policy and the jobs; ``run()`` once."""

    def __init__(self, sim: SimScenario, jobs: Sequence[JobSpec], policy: str | SimPolicy, seed: int = 0,
                 sample_s: float = 1.0, progress: Progress | None = None) -> None:
        self.sim = sim
        self.topology = sim.scenario.topology.build()
        self.kernel = Kernel()
        self.fluid = Fluid(self.kernel, self.topology)
        execution = sim.execution
        handed_out = execution.traffic_classes if execution.classes_from == "scheduler" else 0
        self.policy = policy if isinstance(policy, SimPolicy) else make(
            policy, Context(sim.scenario, self.topology, seed, traffic_classes=handed_out))
        self.seed = seed
        self.jobs = [JobRun(spec, i, seed, sim.execution) for i, spec in enumerate(jobs)]
        self.by_name = {j.spec.name: j for j in self.jobs}
        self.free = np.full(len(self.topology.nodes), sim.scenario.topology.gpus_per_node, dtype=np.int64)
        self.pending: dict[str, JobRun] = {}
        self.running = 0
        self.done = 0
        self.arrived = 0
        links = len(self.topology.links)
        self.occupants = np.zeros(links, dtype=np.int64)
        self.occupied_since = np.zeros(links)
        self.occupied_s = np.zeros(links)
        self.class_users = np.zeros((links, sim.execution.traffic_classes), dtype=np.int64)  # running gangs per link, class
        self.sample_s = sample_s
        self.sample_times: list[float] = []
        self.samples: list[np.ndarray] = []
        self.progress = progress
        self._cycle_queued = False
        self._next_report = 0

    def run(self) -> RunResult:
        """Simulate until every job has ended (or nothing can change any more)."""
        started = time.perf_counter()
        for job in self.jobs:
            self.kernel.at(job.spec.arrival_s, self._arrive, job)
        self.kernel.at(0.0, self._sample, rank=SAMPLING)
        self.kernel.run()
        self._sample_now()
        self.policy.finish()
        end = self.kernel.now
        live = self.occupants > 0
        self.occupied_s[live] += end - self.occupied_since[live]
        return RunResult(
            scenario=self.sim.name, policy=self.policy.name, seed=self.seed, jobs=self.jobs,
            capacity=np.array([link.capacity_gbps for link in self.topology.links]),
            carried=self.fluid.carried(), demanded=self.fluid.demanded.copy(), occupied_s=self.occupied_s.copy(),
            sample_times=np.array(self.sample_times), samples=np.array(self.samples),
            link_names=tuple(link.name for link in self.topology.links),
            decision_ms=list(self.policy.stats.decision_ms), extra=dict(self.policy.stats.extra),
            crowd=dict(self.policy.stats.crowd),
            wall_s=time.perf_counter() - started, events=self.kernel.fired, sim_end_s=end,
        )

    # -- queue and scheduling --------------------------------------------------------------------

    def _arrive(self, job: JobRun) -> None:
        self.arrived += 1
        self.pending[job.spec.name] = job
        self._queue_cycle()

    def _queue_cycle(self) -> None:
        if not self._cycle_queued:
            self._cycle_queued = True
            self.kernel.at(self.kernel.now, self._cycle, rank=SCHEDULING)

    def _cycle(self) -> None:
        # Runs after every arrival and completion, even with nothing pending: a policy re-optimises
        # (and unlocks gangs) after departures.
        self._cycle_queued = False
        for placement in self.policy.schedule(self.kernel.now, [j.spec for j in self.pending.values()]):
            job = self.pending.pop(placement.uid)
            self._start(job, placement.nodes, placement.members, placement.offset_ms, placement.period_ms,
                        placement.traffic_class)
        for at in self.policy.wakeups():
            self.kernel.at(at, self._queue_cycle, rank=SCHEDULING)
        for uid, period_ms in self.policy.periods():  # re-laid by a lock: its offset follows in the shifts
            job = self.by_name[uid]
            if len(job.links) and math.isnan(job.end_s):
                job.grid_period_s = period_ms / 1000.0
        for uid, offset_ms in self.policy.shifts():
            job = self.by_name[uid]
            if len(job.links) and math.isnan(job.end_s):
                self._publish(job, offset_ms)

    @staticmethod
    def _publish(job: JobRun, offset_ms: float | None) -> None:
        """What the controller writes to a running gang's pods: an offset, or none (it runs free)."""
        job.published = None if offset_ms is None else offset_ms / 1000.0
        job.fresh = True

    def _start(self, job: JobRun, nodes: np.ndarray, members: np.ndarray, offset_ms: float | None,
               period_ms: float | None, published_class: int | None = None) -> None:
        spec = job.spec
        gpus = members * spec.gpus_per_worker
        if int(members.sum()) != spec.workers or (self.free[nodes] < gpus).any():
            raise RuntimeError(f"{self.policy.name} placed {spec.name} on GPUs that are not free")
        self.free[nodes] -= gpus
        now = self.kernel.now
        job.start_s = now
        job.nodes, job.members = nodes, members
        job.links, shares = link_shares(self.topology, nodes, members, spec.profile.collective)
        self.running += 1
        # The fastest per-worker rate the links allow alone (an all-to-all cut carries ``share`` x that rate).
        bottleneck = float(min((self.topology.links[i].capacity_gbps / w for i, w in zip(job.links, shares)),
                               default=math.inf))
        job.isolated_s = job.alone_s(bottleneck)
        if not len(job.links):
            # No network: the job runs alone whatever the others do.
            self.kernel.at(now + job.alone_s(math.inf), self._complete, job)
            return
        if self.sim.execution.classes_from == "start-order":
            klass = traffic_class(self.class_users[job.links])
        else:
            klass = min(published_class or 0, self.class_users.shape[1] - 1)
        job.route = self.fluid.route(job.links, shares, klass)
        self.class_users[job.links, job.route.klass] += 1
        self._occupy(job.links, +1)
        if period_ms is not None:
            # A phased placement carries the snapped period, and an offset unless the gang runs free.
            job.grid_period_s = period_ms / 1000.0
            self._publish(job, offset_ms)
        if job.startup_s > 0:
            # Pulling images, NCCL set-up: the gang holds its GPUs and links before its first compute.
            self.kernel.after(job.startup_s, self._compute, job, 0)
        else:
            self._compute(job, 0)

    # -- one job's iterations --------------------------------------------------------------------

    def _compute(self, job: JobRun, gap: int) -> None:
        delay = job.compute(gap)
        last = gap == len(job.starts)
        step = self._iteration_done if last else self._ready
        if delay <= _EPS:
            step(job)
        else:
            self.kernel.after(delay, step, job)

    def _ready(self, job: JobRun) -> None:
        now = self.kernel.now
        if job.window == 0:
            self._read(job)
        if job.aligned:
            anchoring = job.window == 0 and job.realign
            target = self._target(job, now)
            if target > now + _EPS:
                wait = target - now
                job.padded_s += wait
                if job.iteration == 0 and job.window == 0:
                    job.first_wait_s = wait
                elif anchoring:
                    job.reanchor_s += wait
                self.kernel.at(target, self._send, job)
                return
        self._send(job)

    @staticmethod
    def _read(job: JobRun) -> None:
        """The helper, at the start of an iteration, reads what is published (see the module docstring)."""
        if job.fresh:
            job.fresh = False
            job.aligned = job.published is not None
            if job.published is not None:
                job.offset_s = job.published
                job.realign = True
        if job.aligned:
            job.aligned_iterations += 1
            if not job.realign:
                job.steady += 1

    def _target(self, job: JobRun, now: float) -> float:
        """When the helper lets window ``job.window`` go: the runtime's own aiming rule, in seconds."""
        period = job.grid_period_s
        if job.window == 0:
            job.grid, job.armed = aim_and_arm(now, job.offset_s + job.starts[0], period,
                                              None if job.realign else job.grid,
                                              job.collided and self.policy.collision_aware, job.armed)
            job.realign = False
            job.collided = False
        return job.offset_s + job.starts[job.window] + job.grid * period

    def _send(self, job: JobRun) -> None:
        w = job.window
        job.comm_started = self.kernel.now
        job.burst_ideal_s = job.volumes[w] / min(job.gbps[w], job.route.floor)
        job.comm_ideal_s += job.burst_ideal_s
        self.fluid.start(job.route, job.gbps[w], job.volumes[w], partial(self._sent, job))

    def _sent(self, job: JobRun) -> None:
        took = self.kernel.now - job.comm_started
        job.comm_s += took
        job.collided |= stretched(took, job.burst_ideal_s)
        job.window += 1
        self._compute(job, job.window)

    def _iteration_done(self, job: JobRun) -> None:
        job.iteration += 1
        job.window = 0
        if job.iteration >= job.spec.iterations:
            self._complete(job)
        else:
            self._compute(job, 0)

    def _complete(self, job: JobRun) -> None:
        now = self.kernel.now
        job.end_s = now
        self.free[job.nodes] += job.members * job.spec.gpus_per_worker
        if len(job.links):
            self._occupy(job.links, -1)
            self.class_users[job.links, job.route.klass] -= 1
        self.running -= 1
        self.done += 1
        self.policy.release(now, job.spec.name)
        self._queue_cycle()
        if self.progress is not None and (self.done >= self._next_report or self.done == len(self.jobs)):
            self._next_report = self.done + max(1, len(self.jobs) // 20)
            self.progress(self.done, len(self.jobs), now)

    # -- measurements ----------------------------------------------------------------------------

    def _occupy(self, links: np.ndarray, sign: int) -> None:
        now = self.kernel.now
        if sign > 0:
            fresh = links[self.occupants[links] == 0]
            self.occupied_since[fresh] = now
            self.occupants[links] += 1
        else:
            self.occupants[links] -= 1
            ended = links[self.occupants[links] == 0]
            self.occupied_s[ended] += now - self.occupied_since[ended]

    def _sample(self) -> None:
        self._sample_now()
        if len(self.samples) >= MAX_SAMPLES:
            self.samples = self.samples[::2]
            self.sample_times = self.sample_times[::2]
            self.sample_s *= 2
        if self.done < len(self.jobs) and (self.running or self.arrived < len(self.jobs)):
            self.kernel.after(self.sample_s, self._sample, rank=SAMPLING)

    def _sample_now(self) -> None:
        self.sample_times.append(self.kernel.now)
        self.samples.append(self.fluid.carried())
