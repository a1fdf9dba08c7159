"""``python -m volcano_metronome.bench pipeline --scheduler volcano|kueue --gangs N --size S [--json]``.

What metronome costs a submission, next to the scheduler alone, on one local control plane (the
e2e stack: etcd, kube-apiserver, kube-controller-manager, kwok GPU nodes in racks, Volcano or Kueue
with kube-scheduler, our webhook and controller; ``volcano_metronome.devtools.stack``).

The same workload of gangs (Volcano Jobs, or batch Jobs through a Kueue LocalQueue) is submitted in
two arms, in random order per round: **alone** (our webhook registration removed, so the API
server never calls it; the controller runs but nothing is managed) and **metronome** (registered;
the gangs carry a profile, so their pods are created gated and placed by our controller). Between
arms the namespace is deleted and its pods waited out, so each arm starts on an empty fabric.

Per arm: gangs/s (first submission to the last gang with every pod bound), submission-to-all-pods-
bound p50/p99 per gang, API writes per pod (the API server's own ``apiserver_request_total``,
write verbs; kwok's node and lease heartbeats left out of the per-pod figure), CPU seconds of every
process of the stack (``/proc``, children included), the load average. Then the issue's ratios, and
where a gang's time went: a per-gang timeline from the bench's watches, p50/p99 per stage and arm
(``rounds[i].stages``, :mod:`volcano_metronome.bench.timeline`), also as a table on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from volcano_metronome import kube
from volcano_metronome.bench import cputime, timeline, workload
from volcano_metronome.bench.workload import JSON, Shape
from volcano_metronome.devtools import probes
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.fabric import GPU_RESOURCE, Layout
from volcano_metronome.devtools.stack import Stack

# The components each scheduler's arms need (Volcano brings its own scheduler; Kueue admits, kube-scheduler binds).
NEEDS = {
    "volcano": ("kube-controller-manager", "kwok", "volcano-webhook", "volcano-controller-manager",
                "volcano-scheduler", "webhook", "controller"),
    "kueue": ("kube-controller-manager", "kube-scheduler", "kwok", "webhook", "kueue", "controller"),
}
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
DEFAULT_DEBOUNCE_S = 0.02  # the controller's cycleDebounceMs default, when the stack does not set it


def build_parser() -> argparse.ArgumentParser:
    """Flags of the pipeline benchmark."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench pipeline",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scheduler", choices=workload.SCHEDULERS, required=True)
    parser.add_argument("--gangs", type=int, default=50, help="gangs per arm (default 50)")
    parser.add_argument("--size", type=int, default=16, help="pods per gang (default 16)")
    parser.add_argument("--gpus-per-pod", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--nodes-per-rack", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of both arms, each in random order (default 1)")
    parser.add_argument("--seed", type=int, help="seed of the arms' order (default: random, printed)")
    parser.add_argument("--submitters", type=int, default=4, help="threads submitting gangs (default 4)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds an arm may take (default 600)")
    parser.add_argument("--stack-dir", help="use the running stack in this directory (e.g. a dev-cluster's) "
                                            "instead of starting one")
    parser.add_argument("--keep", help="start the stack in this directory and keep its logs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run the benchmark; 0 when it ran (whatever the figures), 2 on bad arguments or a stack that failed."""
    args = build_parser().parse_args(list(argv))
    try:
        shape = Shape(args.scheduler, args.gangs, args.size, args.gpus_per_pod)
        if args.rounds < 1 or args.submitters < 1 or args.timeout <= 0 or args.nodes_per_rack < 1:
            raise ValueError("--rounds, --submitters, --nodes-per-rack >= 1 and --timeout > 0")
        if args.gpus_per_pod > args.gpus_per_node:
            raise ValueError(f"--gpus-per-pod: got {args.gpus_per_pod}, expected at most --gpus-per-node={args.gpus_per_node}")
    except ValueError as exc:
        print(f"bench pipeline: {exc}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    try:
        if args.stack_dir:
            result = measure(Stack.attach(pathlib.Path(args.stack_dir)), shape, args, seed)
        else:
            racks = math.ceil(shape.nodes_needed(args.gpus_per_node) / args.nodes_per_rack)
            layout = Layout(racks=max(racks, 1), nodes_per_rack=args.nodes_per_rack, gpus_per_node=args.gpus_per_node)
            directory = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
            stack = Stack(directory, layout=layout, components=NEEDS[shape.scheduler], required=NEEDS[shape.scheduler])
            try:
                stack.start(_progress)
                result = measure(stack, shape, args, seed)
            finally:
                stack.stop()
    except Exception as exc:  # the stack's errors carry the failing component's log
        print(f"bench pipeline: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for entry in result["rounds"]:
            for arm in entry["order"]:
                figures = entry[arm]
                print(f"round {entry['round']} {arm:>9}: {figures['gangs_per_s']} gangs/s, p50 {figures['p50_s']} s, "
                      f"p99 {figures['p99_s']} s, {figures['writes_per_pod']} workload writes/pod")
            print(f"round {entry['round']} ratios: {json.dumps(entry['ratios'])}")
    return 0


def _progress(message: str) -> None:
    print(f"[pipeline] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ measure
def measure(stack: Stack, shape: Shape, args: argparse.Namespace, seed: int) -> JSON:
    """Every round of both arms on ``stack``; the figures as a dict."""
    running = stack.running()
    missing = [name for name in NEEDS[shape.scheduler] if not running.get(name)]
    if missing:
        raise RuntimeError(f"the stack in {stack.directory} does not run {', '.join(missing)}")
    client = ApiClient.from_kubeconfig(stack.kubeconfig_path)
    k = kube.connect(str(stack.kubeconfig_path), qps_pool=max(32, args.submitters * 4))
    gpus = _gpus(k)
    needed = shape.nodes_needed(args.gpus_per_node) * args.gpus_per_node
    if needed > gpus:
        raise RuntimeError(f"{shape.gangs} gangs of {shape.size} x {shape.gpus_per_pod} GPUs need {needed} GPUs "
                           f"on whole nodes; the stack's nodes have {gpus}")
    registration = _our_registration(client, stack.port("webhook"))
    order_rng = random.Random(seed)
    rounds = []
    try:
        for index in range(args.rounds):
            order = list(workload.ARMS)
            order_rng.shuffle(order)
            entry: JSON = {"round": index + 1, "order": order}
            recorders: dict[str, timeline.Recorder] = {}
            webhooks: JSON = {}
            for arm in order:
                _register(client, registration, arm == "metronome")
                entry[arm], recorders[arm], webhooks[arm] = _arm(stack, k, shape, arm, gpus, args)
            cycle_s = entry["metronome"]["controller"]["cycle_interval_s"]
            entry["ratios"] = workload.ratios(entry["alone"], entry["metronome"], shape.pods, cycle_s)
            entry["stages"] = timeline.stages(shape.scheduler, recorders["alone"].marks(),
                                              recorders["metronome"].marks(),
                                              {arm: r.unattributed for arm, r in recorders.items()})
            # The admission webhooks' share of the stages (the API server's own histogram: means, not quantiles).
            entry["stages"]["admission_webhooks"] = webhooks
            _progress(f"round {index + 1}, where a gang's time goes (seconds):\n{timeline.table(entry['stages'])}")
            rounds.append(entry)
    finally:
        _register(client, registration, True)
        k.close()
    return {"scheduler": shape.scheduler, "gangs": shape.gangs, "size": shape.size, "pods_per_arm": shape.pods,
            "gpus_per_pod": shape.gpus_per_pod, "cluster_gpus": gpus, "seed": seed, "rounds": rounds,
            "cpu_count": os.cpu_count()}


def _gpus(k: kube.Kube) -> int:
    return sum(int((node.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0))
               for node in k.list(kube.NODES)["items"])


def _our_registration(client: ApiClient, port: int) -> JSON:
    """Our MutatingWebhookConfiguration (the one whose webhooks call our server), as it can be created again."""
    for configuration in client.request("GET", WEBHOOKS).get("items", []):
        urls = [str((w.get("clientConfig") or {}).get("url", "")) for w in configuration.get("webhooks") or []]
        if urls and all(f":{port}/" in url for url in urls):
            meta = configuration["metadata"]
            configuration["metadata"] = {key: meta[key] for key in ("name", "labels", "annotations") if key in meta}
            return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                    **{key: value for key, value in configuration.items() if key not in ("apiVersion", "kind")}}
    raise RuntimeError(f"no MutatingWebhookConfiguration calls our webhook on port {port}")


def _register(client: ApiClient, registration: JSON, on: bool) -> None:
    """Register (or remove) our webhook, and wait until the API server calls it (or no longer does)."""
    name = registration["metadata"]["name"]
    exists = bool([c for c in client.request("GET", WEBHOOKS).get("items", []) if c["metadata"]["name"] == name])
    if on and not exists:
        client.request("POST", WEBHOOKS, body=json.dumps(registration).encode())
    elif not on and exists:
        client.request("DELETE", f"{WEBHOOKS}/{name}")
    deadline = time.monotonic() + 60
    while probes.webhook_mutates_podgroups(client) != on:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API server {'never called' if on else 'kept calling'} our webhook within 60 s")
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------ one arm
def _arm(stack: Stack, k: kube.Kube, shape: Shape, arm: str, gpus: int,
         args: argparse.Namespace) -> tuple[JSON, timeline.Recorder, JSON]:
    namespace = f"pipe-{arm}-{uuid.uuid4().hex[:5]}"
    k.create(kube.NAMESPACES, {"metadata": {"name": namespace}})
    if shape.scheduler == "kueue":
        _kueue_queues(k, arm, namespace, gpus)
    tracker = _Tracker(shape, workload.GANG_LABEL[shape.scheduler])
    recorder = timeline.Recorder(shape.scheduler, shape.size, workload.GANG_LABEL[shape.scheduler])
    resource = kube.VOLCANO_JOBS if shape.scheduler == "volcano" else kube.BATCH_JOBS

    def on_pod(event: str, pod: JSON) -> None:
        tracker.on_change(event, pod)
        recorder.on_pod(event, pod)

    # The timeline's watches: pods (also the latency figures), the gang's Job, its PodGroup or Workload, our claims.
    informers = [kube.Informer(k, kube.PODS, namespace, on_change=on_pod).start(),
                 kube.Informer(k, resource, namespace, on_change=recorder.on_job).start(),
                 kube.Informer(k, kube.PODGROUPS if shape.scheduler == "volcano" else kube.WORKLOADS, namespace,
                               on_change=recorder.on_group).start(),
                 kube.Informer(k, kube.CLAIMS, namespace, on_change=recorder.on_claim).start()]

    def submit(obj: JSON) -> None:
        tracker.submit(obj["metadata"]["name"], lambda: k.create(resource, obj))
        recorder.mark(obj["metadata"]["name"], "created")

    try:
        for informer in informers:
            if not informer.wait_synced(60):
                raise RuntimeError(f"{informer.resource.plural} watch of {namespace} not synced within 60 s")
        load = _loadavg()
        text_before = _apiserver_metrics(stack)
        controller_before = _controller_cycles(stack)
        cpu_before = _cpu(stack)
        manifests = [workload.gang(shape, arm, namespace, index) for index in range(shape.gangs)]
        first = time.monotonic()
        with ThreadPoolExecutor(args.submitters) as pool:
            list(pool.map(submit, manifests))
        submitted = time.monotonic()
        complete = tracker.done.wait(args.timeout)
        last = time.monotonic()
        cpu_after = _cpu(stack)
        controller_after = _controller_cycles(stack)
        text_after = _apiserver_metrics(stack)
    finally:
        for informer in informers:
            informer.stop()
    for gang, at in tracker.submitted.items():
        recorder.mark(gang, "submitted", at)
    figures = tracker.figures(first, last if not complete else tracker.last_bound)
    cycles = controller_after[1] - controller_before[1]
    mean_cycle = (controller_after[0] - controller_before[0]) / cycles if cycles else 0.0
    api_writes = workload.writes(workload.request_counts(text_before), workload.request_counts(text_after))
    webhooks = workload.webhook_calls(workload.webhook_admission(text_before), workload.webhook_admission(text_after))
    result: JSON = {
        "complete": complete, **figures,
        "submit_s": round(submitted - first, 3),
        "writes": api_writes, "writes_per_pod": round(api_writes["workload"] / shape.pods, 3),
        "cpu_s": {name: round(cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0), 2) for name in cpu_after},
        "controller": {"cycles": int(cycles), "mean_cycle_s": round(mean_cycle, 4),
                       "cycle_interval_s": round(DEFAULT_DEBOUNCE_S + mean_cycle, 4)},
        "loadavg_before": load, "loadavg_after": _loadavg(),
    }
    _clean(k, namespace, args.timeout)
    return result, recorder, webhooks


class _Tracker:
    """When each gang was submitted and when each of its pods was first seen bound (fed by a pod watch)."""

    def __init__(self, shape: Shape, gang_label: str) -> None:
        self.shape, self.gang_label = shape, gang_label
        self.submitted: dict[str, float] = {}
        self.bound: dict[str, dict[str, float]] = {}
        self.completed: dict[str, float] = {}
        self.last_bound = 0.0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def submit(self, gang: str, create: Callable[[], Any]) -> None:
        with self._lock:
            self.submitted[gang] = time.monotonic()
        create()

    def on_change(self, event: str, pod: JSON) -> None:
        if event == "DELETED" or not (pod.get("spec") or {}).get("nodeName"):
            return
        now = time.monotonic()
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(self.gang_label)
        if gang is None:
            return
        with self._lock:
            pods = self.bound.setdefault(gang, {})
            pods.setdefault(str(meta.get("name")), now)
            if len(pods) >= self.shape.size and gang not in self.completed:
                self.completed[gang] = now
                self.last_bound = now
                if len(self.completed) >= self.shape.gangs:
                    self.done.set()

    def figures(self, first: float, end: float) -> JSON:
        with self._lock:
            latencies = [self.completed[g] - self.submitted[g] for g in self.completed if g in self.submitted]
            pods_bound = sum(len(pods) for pods in self.bound.values())
        span = end - first
        p50, p99 = workload.percentile(latencies, 50), workload.percentile(latencies, 99)
        return {"gangs_bound": len(self.completed), "pods_bound": pods_bound, "span_s": round(span, 3),
                "gangs_per_s": round(len(self.completed) / span, 3) if span > 0 and self.completed else None,
                "p50_s": None if p50 is None else round(p50, 3), "p99_s": None if p99 is None else round(p99, 3),
                "max_s": round(max(latencies), 3) if latencies else None}


def _kueue_queues(k: kube.Kube, arm: str, namespace: str, gpus: int) -> None:
    shared, local = workload.kueue_queues(arm, namespace, gpus)
    resources = {"ResourceFlavor": kube.RESOURCE_FLAVORS, "AdmissionCheck": kube.ADMISSION_CHECKS,
                 "ClusterQueue": kube.CLUSTER_QUEUES}
    for obj in shared:
        if k.get(resources[obj["kind"]], None, obj["metadata"]["name"]) is None:
            k.create(resources[obj["kind"]], obj)
    k.create(kube.LOCAL_QUEUES, local)
    deadline = time.monotonic() + 60
    while True:  # Kueue admits nothing through a queue it has not marked Active
        queue = k.get(kube.LOCAL_QUEUES, namespace, workload.LOCAL_QUEUE) or {}
        conditions = (queue.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"LocalQueue {namespace}/{workload.LOCAL_QUEUE} not Active within 60 s: {conditions}")
        time.sleep(0.2)


def _clean(k: kube.Kube, namespace: str, timeout: float) -> None:
    """Delete the arm's namespace and wait until it is gone: the next arm finds every GPU free, and the
    namespace controller's deletions (a request per resource type) are not counted as its writes."""
    k.delete(kube.NAMESPACES, None, namespace)
    deadline = time.monotonic() + timeout
    while k.get(kube.NAMESPACES, None, namespace) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace {namespace} still there {timeout:.0f} s after its deletion")
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------ readings
def _apiserver_metrics(stack: Stack) -> str:
    plane = stack.plane
    context = ssl.create_default_context(cafile=str(plane.ca_path))
    context.load_cert_chain(str(plane.admin_cert_path), str(plane.admin_key_path))
    with urllib.request.urlopen(f"{plane.server_url}/metrics", timeout=30, context=context) as response:
        return str(response.read().decode())


def _controller_cycles(stack: Stack) -> tuple[float, float]:
    url = f"http://127.0.0.1:{stack.port('controller')}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return workload.histogram_totals(response.read().decode(), "metronome_controller_cycle_seconds")


def _cpu(stack: Stack) -> dict[str, float]:
    """CPU seconds so far of every process of the stack (children included: gunicorn's workers) and of this one."""
    seconds = {name: cputime.process_tree(record.pid) for name, record in stack.records().items()}
    seconds["bench"] = cputime.own()
    return seconds


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in pathlib.Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []
