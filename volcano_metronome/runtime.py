"""The training-side helper: start each communication burst in the gang's slot.

The controller publishes, on every pod of a placed gang, the snapped period and, once the gang is
*locked* (its bursts could collide with another gang's on a shared link), the gang's offset and a
cluster-wide epoch (annotations ``metronome.dev/period-ms``, ``offset-ms``, ``epoch``). A gang that
is not locked (alone on its links, say) gets no offset, and the helper lets it run free (no
padding). The webhook exposes the annotations in two ways:

* the environment variables ``METRONOME_PERIOD_MS``, ``METRONOME_OFFSET_MS`` and ``METRONOME_EPOCH``
  (downward API): their values when the container started, never updated;
* the files ``period-ms``, ``offset-ms`` and ``epoch`` of the downwardAPI volume mounted read-only
  at ``/etc/metronome``: the kubelet rewrites them (atomically, by swapping the directory's
  ``..data`` symlink) when the controller changes the annotations of the running pod, which it does
  when it locks the gang (a gang placed on its links could collide with it), unlocks it
  (re-optimisation: none could any more), or moves its offset (re-optimisation).

Prefer the files; call :meth:`Metronome.wait` right before the all-reduce of every iteration::

    from volcano_metronome.runtime import Metronome
    metronome = Metronome.from_dir() or Metronome.from_env()   # None when the gang is not managed
    for batch in loader:
        loss = model(batch).backward()
        if metronome is not None:
            metronome.wait()                  # pads to the gang's slot (or returns at once when free)
        all_reduce(gradients)

The helper keeps the index of the slot it aims at. Early, it pads; late by up to half a period (a
slow step, a straggler), it goes at once and aims the next burst at the next slot, so lateness is
absorbed by the next early arrival instead of shifting the schedule; later than that, the next slot
is nearer than the missed one, and it waits for it. Going at once whatever the lateness let a
collision last: two locked gangs thrown into each other's slots (a straggler) went late together,
each stretched by the other and so late again at the next iteration, for good (docs/simulator-rounds.md,
round 12). Half a period still let it last where bursts are long (a duty cycle of 0.35 or more):
the lateness a collision leaves stays under half a period, the burst goes at once into the next
gang's slot, and the two keep stretching each other (round 13). So after an iteration whose burst
was stretched by another gang's traffic (it took more than ``STRETCHED`` longer than the shortest
burst of its size the stopwatch has timed: :meth:`Stopwatch.collided`), a burst goes at once only up to
a quarter of a period late. A slow step alone does not stretch the burst, so a gang whose
iterations run longer than its published period (a wrong profile) keeps the half-period rule.
Without a stopwatch timing the collectives the helper cannot tell the two apart and keeps half a
period; ``wait(collided=...)`` lets a caller that knows say so. Having held one burst back, a
collision holds none back again until an iteration without one: where the collisions come from a gang
that does not align (a neighbour left free), waiting for the next slot would cost a period every time
and end nothing. This is the behaviour the simulator models (``volcano_metronome.sim.engine``).

Following the files (:meth:`Metronome.from_dir`), each ``wait`` first checks, with one ``readlink``
(or three ``stat`` calls outside a kubelet volume), whether they changed, and reads them only then:

* no offset (an unlocked gang, or one not placed yet): no waiting, the gang runs free;
* an epoch still in the future (a lock or a move takes effect there): the previous slot is kept
  until then (free, for a gang that was not aligned);
* a new offset, period or epoch in effect: the helper re-anchors, aiming at the first slot of the
  new grid, as the simulator models a re-optimised gang.

A value that does not parse is refused with :class:`InvalidInput` when the helper is created; on a
later change it is ignored with a :class:`RuntimeWarning` and the previous slot stays.

The helper can also time the loop it runs in (issue 16): a :class:`Stopwatch` marks each iteration
(``Metronome.wait`` does it when given one) and times each collective in ``with stopwatch.burst():``;
``stopwatch.measured()`` gives the period and windows in the fitter's terms
(:mod:`volcano_metronome.profiling.timed`), as the job would run free: the helper's own padding is
taken out of the timeline::

    stopwatch = Stopwatch()
    metronome = Metronome.from_dir(stopwatch=stopwatch)     # or call stopwatch.iteration() yourself
    for batch in loader:
        loss = model(batch).backward()
        if metronome is not None:
            metronome.wait()
        with stopwatch.burst(nbytes=gradient_bytes):        # bytes this process sends, if known
            all_reduce(gradients)
    print(stopwatch.measured().to_dict())

To let the controller see it, the stopwatch publishes its measurement every ``every_s`` seconds into
a directory the node agent reads (``profile agent --runtime-dir``), as one JSON file per process
(:mod:`volcano_metronome.profiling.report`); the agent writes it into the gang's claim as
``status.measuredProfile`` with ``source: runtime``, preferring it to its own NIC fit::

    stopwatch = Stopwatch(publication=Publication.from_env())   # None (no publishing) without METRONOME_MEASURED_DIR

:meth:`Publication.from_env` reads ``METRONOME_MEASURED_DIR`` (the directory, shared with the node's
agent) and the gang's identity: ``METRONOME_NAMESPACE``, ``METRONOME_GANG_KIND``, ``METRONOME_GANG_NAME``
(the pod's ``metronome.dev/gang-kind`` and ``gang-name`` annotations, through the downward API) and
``METRONOME_POD``. Only a measurement with each window's rate (``burst(nbytes=...)``) is published:
a measured profile without rates is not a profile the controller can plan with.

Where the cluster's QueuePolicy lists the fabric's traffic classes, the controller also gives each
gang a class: the webhook exposes it as ``METRONOME_TRAFFIC_CLASS`` (its index) and
``METRONOME_TRAFFIC_CLASS_ENV`` (a JSON object of the variables that select it, ``NCCL_IB_SL``,
``NCCL_IB_TC``...). NCCL reads those once, when a communicator is made, so call
:func:`apply_traffic_class` before creating the process group; it does nothing for a gang without a class::

    from volcano_metronome.runtime import apply_traffic_class
    apply_traffic_class()                       # a variable the user set already is kept, with a warning
    torch.distributed.init_process_group("nccl")
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
import warnings
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, MutableMapping

from volcano_metronome import api
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.profiling.fit import Refusal
from volcano_metronome.profiling.report import RuntimeReport
from volcano_metronome.profiling.timed import Burst, Measured, measure

DEFAULT_DIR = api.SLOT_DIR  # where the webhook mounts the timing files
SLOT_FILES = tuple(name for name, _ in api.SLOT_FILES)  # period-ms, offset-ms, epoch
_KUBELET_DATA = "..data"  # the symlink the kubelet swaps to publish a new set of files


def next_start_ms(now_ms: float, epoch_ms: float, period_ms: float, offset_ms: float, window_ms: float = 0.0) -> float:
    """The earliest time >= ``now_ms`` congruent to ``epoch + offset + window`` modulo the period."""
    phase = epoch_ms + offset_ms + window_ms
    return phase + math.ceil((now_ms - phase) / period_ms - 1e-12) * period_ms


#: A burst *collided* when it took more than this share longer than the gang's uncontended burst: another
#: gang's traffic shared its links (a slow step makes the burst late, not long).
STRETCHED = 0.05
#: How late a burst may go at once, as a share of the period: up to half a period after a slow step (the
#: next slot is nearer beyond that), a quarter after a collision (module docstring).
LATE_SHARE, COLLIDED_LATE_SHARE = 0.5, 0.25


def aim(now_ms: float, phase_ms: float, period_ms: float, previous: int | None, collided: bool = False) -> int:
    """Index ``m`` of the slot ``phase + m * period`` the next burst aims at (see the module docstring);
    ``collided``: the last iteration's burst was stretched by another gang's traffic."""
    if previous is None:
        return math.ceil((now_ms - phase_ms) / period_ms - 1e-12)
    # The next slot, or a later one where the burst would go later than the share allows. Two gangs late
    # together would otherwise go together, each stretched by the other, so late again.
    share = COLLIDED_LATE_SHARE if collided else LATE_SHARE
    return max(previous + 1, math.ceil((now_ms - phase_ms) / period_ms - share - 1e-12))


def aim_and_arm(now_ms: float, phase_ms: float, period_ms: float, previous: int | None, collided: bool,
                armed: bool) -> tuple[int, bool]:
    """``aim`` with the collision bound held back once: the slot the next burst aims at, and whether the next
    collision may hold a burst back again. After holding one back it may not until an iteration without a
    collision: where a gang that does not align keeps stretching this one, waiting never ends that."""
    held = collided and armed
    slot = aim(now_ms, phase_ms, period_ms, previous, held)
    if held and slot > aim(now_ms, phase_ms, period_ms, previous):
        return slot, False
    return slot, armed or not collided


def stretched(took_ms: float, shortest_ms: float) -> bool:
    """Whether a burst that took ``took_ms`` was stretched by another gang's traffic: more than ``STRETCHED``
    longer than the shortest burst of its size (its uncontended time, as far as the helper has seen)."""
    return 0.0 < shortest_ms * (1.0 + STRETCHED) < took_ms


@dataclass(frozen=True)
class Timing:
    """What the controller published: the snapped period, and the offset and epoch once the gang is locked."""

    period_ms: float | None
    offset_ms: float | None
    epoch_ms: float | None

    @property
    def aligned(self) -> bool:
        """Whether bursts align: a period, an offset and an epoch are all published."""
        return self.period_ms is not None and self.offset_ms is not None and self.epoch_ms is not None


def parse_timing(raw: Mapping[str, str], names: tuple[str, str, str]) -> Timing:
    """Period, offset and epoch from their texts (``names`` label them in errors); empty means absent."""
    values: list[float | None] = []
    for name, text in zip(names, (raw.get(n, "") for n in names)):
        text = text.strip()
        if not text:
            values.append(None)
            continue
        try:
            values.append(float(text))
        except ValueError:
            raise InvalidInput(name, text, "a number of milliseconds") from None
    period = values[0]
    if period is not None and not period > 0:
        raise InvalidInput(names[0], raw[names[0]], "a period > 0 ms")
    return Timing(*values)


class SlotFiles:
    """The timing files in a directory (a downwardAPI volume): change detection, and consistent reads.

    The kubelet publishes a new set by writing a new hidden directory and swapping the ``..data``
    symlink to it; the visible files are symlinks through ``..data``. Reading inside the directory
    the link named gives one consistent set. Elsewhere (a plain directory), files' inode, mtime and
    size stand in for the link.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)
        self._seen: object = None

    def version(self) -> object:
        """What changes whenever the files do: the ``..data`` target, else the files' stat."""
        try:
            return os.readlink(self.path / _KUBELET_DATA)
        except OSError:
            pass
        stats: list[tuple[int, int, int] | None] = []
        for name in SLOT_FILES:
            try:
                st = os.stat(self.path / name)
                stats.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except FileNotFoundError:
                stats.append(None)
        return tuple(stats)

    def changed(self) -> Timing | None:
        """The timing when the files changed since the last call (or on the first call), else None."""
        version = self.version()
        if version == self._seen:
            return None
        base = self.path / version if isinstance(version, str) else self.path
        texts: list[str] = []
        for name in SLOT_FILES:
            try:
                texts.append((base / name).read_text(encoding="utf-8"))
            except FileNotFoundError:
                if isinstance(version, str):
                    return None  # swapped again while reading: the next call reads the newer set
                texts.append("")
            except UnicodeDecodeError as exc:
                raise InvalidInput(str(self.path / name), exc.object[:40],
                                   "UTF-8 text: a number of milliseconds") from None
            except OSError as exc:
                raise InvalidInput(str(self.path / name), exc.strerror, "a readable file") from None
        self._seen = version
        period, offset, epoch = (str(self.path / name) for name in SLOT_FILES)
        return parse_timing(dict(zip((period, offset, epoch), texts)), (period, offset, epoch))


MEASURED_DIR_ENV = "METRONOME_MEASURED_DIR"
# Report field -> the variable naming it (the pod's namespace, gang annotations and name: downward API).
IDENTITY_ENV = (("namespace", "METRONOME_NAMESPACE"), ("gang_kind", "METRONOME_GANG_KIND"),
                ("gang_name", "METRONOME_GANG_NAME"), ("pod", "METRONOME_POD"))


@dataclass(frozen=True)
class Publication:
    """Where the stopwatch publishes its measurement for the node agent, and as which gang's process."""

    directory: pathlib.Path
    namespace: str
    gang_kind: str
    gang_name: str
    pod: str
    every_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.every_s > 0:
            raise InvalidInput("every_s", self.every_s, "a number of seconds > 0")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, every_s: float = 10.0) -> "Publication | None":
        """From ``METRONOME_MEASURED_DIR`` and the identity variables; None when the directory is not set."""
        env = os.environ if env is None else env
        directory = env.get(MEASURED_DIR_ENV, "").strip()
        if not directory:
            return None
        names = {}
        for field, variable in IDENTITY_ENV:
            names[field] = env.get(variable, "").strip()
            if not names[field]:
                raise InvalidInput(variable, env.get(variable, ""), f"the pod's {field.replace('_', ' ')} "
                                   f"(set with {MEASURED_DIR_ENV}, to name the gang the measurement belongs to)")
        return cls(pathlib.Path(directory), every_s=every_s, **names)

    @property
    def path(self) -> pathlib.Path:
        """The report file of this process (namespaces hold no dot: the name is unambiguous)."""
        return self.directory / f"{self.namespace}.{self.pod}.json"


class Stopwatch:
    """Times the loop's iterations and communication bursts on a monotonic clock (seconds), keeping the last ``keep``.

    Times are kept on a *free* timeline: the padding the helper adds (:meth:`padded`) is subtracted,
    so the measured profile is the job's own, not the slot grid it was padded to. With a
    ``publication`` it publishes its measurement at the first iteration mark after every ``every_s``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, keep: int = 1024,
                 publication: Publication | None = None, wall: Callable[[], float] = time.time) -> None:
        if keep < 2:
            raise InvalidInput("keep", keep, "at least 2 iterations to keep")
        self.publication = publication
        self.wall = wall
        self._published_at: float | None = None
        self.clock = clock
        self.marks: deque[float] = deque(maxlen=keep)
        self.bursts: deque[Burst] = deque(maxlen=4 * keep)
        self._padding_ms = 0.0  # padding so far: the free timeline is the clock minus this
        self.shortest: dict[int | None, float] = {}  # the shortest burst of each size so far (ms)
        self.pads: deque[float] = deque(maxlen=keep)  # padding added in each marked iteration

    def now_ms(self) -> float:
        """The free timeline: the clock in ms less the padding so far."""
        return self.clock() * 1000.0 - self._padding_ms

    def iteration(self) -> None:
        """Mark that one iteration reached its all-reduce (the place ``Metronome.wait`` sits)."""
        self.marks.append(self.now_ms())
        self.pads.append(0.0)
        if self.publication is not None:
            now = self.clock()
            if self._published_at is None:
                self._published_at = now  # the first report after a whole interval of iterations
            elif now - self._published_at >= self.publication.every_s:
                self._published_at = now
                try:
                    self.publish()
                except OSError as exc:  # the job goes on; the agent falls back to the NIC
                    warnings.warn(f"cannot publish the measured profile to {self.publication.path}: {exc}",
                                  RuntimeWarning, stacklevel=2)

    def padded(self, ms: float) -> None:
        """The helper just padded ``ms`` to reach the slot: not the job's own time."""
        self._padding_ms += max(0.0, ms)
        if self.pads:
            self.pads[-1] += max(0.0, ms)

    @contextmanager
    def burst(self, nbytes: int | None = None) -> Iterator[None]:
        """Time the collective inside the ``with`` block; ``nbytes``: what this process sends in it."""
        if nbytes is not None and nbytes < 0:
            raise InvalidInput("nbytes", nbytes, "a number of bytes >= 0")
        start = self.now_ms()
        try:
            yield
        finally:
            end = self.now_ms()
            self.bursts.append(Burst(start, end, nbytes))
            self.shortest[nbytes] = min(self.shortest.get(nbytes, math.inf), end - start)

    def collided(self) -> bool:
        """Whether another gang's traffic stretched a burst of the last complete iteration (``stretched``)."""
        if len(self.marks) < 2:
            return False
        since = self.marks[-2]
        for b in reversed(self.bursts):
            if b.start_ms < since:
                return False
            if stretched(b.end_ms - b.start_ms, self.shortest[b.nbytes]):
                return True
        return False

    def measured(self) -> Measured | Refusal:
        """The period and windows of the iterations kept, or why they give none."""
        marks = list(self.marks)
        first = marks[0] if marks else 0.0
        bursts = [b for b in self.bursts if b.start_ms >= first]
        pads = list(self.pads)[:-1]  # the last mark's iteration is not complete
        return measure(marks, bursts, sum(pads) / len(pads) if pads else 0.0)

    def publish(self, publication: Publication | None = None) -> RuntimeReport | Refusal:
        """Write the measurement for the node agent (atomically: it never reads half a file); a refusal, or a
        measurement without every window's rate, writes nothing and is returned as a :class:`Refusal`."""
        where = publication or self.publication
        if where is None:
            raise InvalidInput("publication", None, f"a Publication (or {MEASURED_DIR_ENV} and Publication.from_env)")
        measured = self.measured()
        if isinstance(measured, Refusal):
            return measured
        if measured.profile() is None:
            return Refusal("no-rate", "the bursts were timed without their bytes (burst(nbytes=...)): no rate to report")
        report = RuntimeReport(where.namespace, where.gang_kind, where.gang_name, where.pod, self.wall(), measured)
        where.directory.mkdir(parents=True, exist_ok=True)
        partial = where.path.with_name(f".{where.path.name}.partial")
        partial.write_text(report.to_json() + "\n")
        os.replace(partial, where.path)
        return report


@dataclass
class Metronome:
    """The gang's slot: period, offset and epoch (all in ms), and the offset of its first window.

    ``aligned`` is False while no offset is in effect (the gang runs free); ``files`` are the timing
    files it follows (:meth:`from_dir`), and ``pending`` a published timing whose epoch is ahead.
    """

    period_ms: float
    offset_ms: float
    epoch_ms: float
    window_ms: float = 0.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    slot: int | None = None  # the slot index the last burst aimed at
    armed: bool = True  # a collision may hold the next late burst back (``aim_and_arm``)
    aligned: bool = True
    files: SlotFiles | None = None
    pending: Timing | None = None
    stopwatch: Stopwatch | None = None  # marks each iteration at wait(), and the padding it adds

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, window_ms: float = 0.0) -> "Metronome | None":
        """The slot published to this pod at container start, or None when there is none to align to
        (the gang is not managed, or not locked: variables unset or empty)."""
        env = os.environ if env is None else env
        names = (api.ENV_PERIOD_MS, api.ENV_OFFSET_MS, api.ENV_EPOCH)
        if not all(env.get(key, "") for key in names):
            return None
        timing = parse_timing({key: env[key] for key in names}, names)
        assert timing.period_ms is not None and timing.offset_ms is not None and timing.epoch_ms is not None
        return cls(timing.period_ms, timing.offset_ms, timing.epoch_ms, window_ms)

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str] = DEFAULT_DIR, window_ms: float = 0.0,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 stopwatch: Stopwatch | None = None) -> "Metronome | None":
        """A helper following the timing files in ``path`` as the controller changes them (see the module
        docstring), or None when the directory does not exist (the gang is not managed)."""
        files = SlotFiles(path)
        if not files.path.is_dir():
            return None
        timing = files.changed()
        metronome = cls(0.0, 0.0, 0.0, window_ms, clock, sleep, aligned=False, files=files, stopwatch=stopwatch)
        if timing is not None:
            metronome._adopt(timing, clock() * 1000.0)
        return metronome

    @property
    def phase_ms(self) -> float:
        """Start of slot 0: epoch + offset + the first window's start."""
        return self.epoch_ms + self.offset_ms + self.window_ms

    def wait(self, collided: bool | None = None) -> float:
        """Sleep until this burst's slot (no sleep when late or free); returns the milliseconds waited.

        ``collided``: whether the last burst was stretched by another gang's traffic; by default the
        stopwatch's timing of the bursts says (:meth:`Stopwatch.collided`), and without one, never."""
        now = self.clock() * 1000.0
        if self.stopwatch is not None:
            self.stopwatch.iteration()
            if collided is None:
                collided = self.stopwatch.collided()
        self._follow(now)
        if not self.aligned:
            return 0.0
        self.slot, self.armed = aim_and_arm(now, self.phase_ms, self.period_ms, self.slot, bool(collided),
                                            self.armed)
        delay = self.phase_ms + self.slot * self.period_ms - now
        if delay > 0:
            self.sleep(delay / 1000.0)
            if self.stopwatch is not None:
                self.stopwatch.padded(delay)
        return max(0.0, delay)

    def _follow(self, now_ms: float) -> None:
        if self.files is not None:
            try:
                timing = self.files.changed()
            except InvalidInput as exc:
                warnings.warn(f"{exc}; keeping the previous slot", RuntimeWarning, stacklevel=3)
                timing = None
            if timing is not None:
                self._adopt(timing, now_ms)
        if self.pending is not None and self.pending.epoch_ms is not None and self.pending.epoch_ms <= now_ms:
            self._switch(self.pending)

    def _adopt(self, timing: Timing, now_ms: float) -> None:
        if not timing.aligned:
            self.aligned, self.pending, self.slot = False, None, None
            self.period_ms = timing.period_ms or self.period_ms
            return
        if self.aligned and (timing.period_ms, timing.offset_ms, timing.epoch_ms) == (
                self.period_ms, self.offset_ms, self.epoch_ms):
            self.pending = None
        elif timing.epoch_ms is not None and timing.epoch_ms > now_ms:
            self.pending = timing  # in effect from its epoch; the current slot (or none) until then
        else:
            self._switch(timing)

    def _switch(self, timing: Timing) -> None:
        assert timing.period_ms is not None and timing.offset_ms is not None and timing.epoch_ms is not None
        self.period_ms, self.offset_ms, self.epoch_ms = timing.period_ms, timing.offset_ms, timing.epoch_ms
        self.aligned, self.pending = True, None
        self.slot = None  # re-anchor: the first slot of the new grid


def apply_traffic_class(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the variables of ``METRONOME_TRAFFIC_CLASS_ENV`` (before NCCL makes a communicator); returns those set.

    A variable already set to another value is kept, with a :class:`RuntimeWarning`.
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(api.ENV_TRAFFIC_CLASS_ENV, "")
    if not raw:
        return {}  # the downward API gives "" for an absent annotation: the gang has no class
    wanted = _class_env(raw)
    applied: dict[str, str] = {}
    for name, value in wanted.items():
        theirs = environ.get(name)
        if theirs is not None and theirs != value:
            # The user's choice wins (they may know the fabric better), but silently losing the class would
            # leave the gang's traffic in another queue than the controller planned for.
            warnings.warn(f"{name} is already set to {theirs!r}, not to the {value!r} of the gang's traffic class "
                          f"({api.ENV_TRAFFIC_CLASS}={environ.get(api.ENV_TRAFFIC_CLASS, '')!r}): keeping "
                          f"{theirs!r}; the gang's traffic class is not applied for {name}",
                          RuntimeWarning, stacklevel=2)
            continue
        environ[name] = value
        applied[name] = value
    return applied


def _class_env(raw: str) -> dict[str, str]:
    """``METRONOME_TRAFFIC_CLASS_ENV`` parsed, every entry checked before any is set (all or nothing)."""
    expected = ("a JSON object of environment variable names to string values (the gang's "
                f"{api.TRAFFIC_CLASS_ENV} annotation), e.g. {{\"NCCL_IB_SL\":\"2\",\"NCCL_IB_TC\":\"74\"}}")
    try:
        wanted = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidInput(api.ENV_TRAFFIC_CLASS_ENV, raw, expected) from None
    if not isinstance(wanted, dict):
        raise InvalidInput(api.ENV_TRAFFIC_CLASS_ENV, raw, expected)
    for name, value in wanted.items():
        # os.environ refuses these (ValueError) or the C library misreads them: refuse them here, by name.
        if not name or "=" in name or "\0" in name or not isinstance(value, str) or "\0" in value:
            raise InvalidInput(api.ENV_TRAFFIC_CLASS_ENV, raw, f"{expected}; {name!r}: {value!r} is not one")
    return wanted
