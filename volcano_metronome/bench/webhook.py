"""``python -m volcano_metronome.bench webhook --rps R --seconds S [--json]``: admission latency and throughput.

Starts the real server (``volcano-metronome webhook``: gunicorn, gevent workers, TLS, JSON access log
to a file) in a subprocess with certificates made by ``volcano_metronome.certs.pki``, then drives it from
load-generator processes of its own over TLS keep-alive connections, as the API server's connection
pool does. The request mix is what a cluster sends: mostly pods of managed gangs (gated), some
unmanaged pods, and the gang objects themselves (Volcano Job, PodGroup, Kueue Job and Workload).

* ``--rps R`` (R > 0) is open-loop: request k on connection c is due at ``t0 + (c + k * C) / R``, and
  its latency is measured from that due time, so a slow server is charged for the queueing it causes
  (no coordinated omission);
* ``--rps 0`` is saturation: every connection sends its next request as soon as the previous one is
  answered, and throughput is what comes out.

Prints ``{"rps_target", "rps_achieved", "p50_ms", "p99_ms", "p999_ms", "errors"}`` plus details: CPU
seconds spent by the server processes and by the load generators, in total and per request (on a
2-core machine they compete: the generator's share says how much of the machine the server did not
get, and ``cores / server_cpu_ms_per_request`` bounds what the server could do alone), connections,
processes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Sequence

import numpy as np

from volcano_metronome import api
from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.bench import cputime, profile

HEADERS_END = b"\r\n\r\n"


def build_parser() -> argparse.ArgumentParser:
    """Flags of the webhook benchmark."""
    parser = argparse.ArgumentParser(prog="python -m volcano_metronome.bench webhook", description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=1000.0, help="target requests/s, 0 for saturation (default 1000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured duration (default 10)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before (default 1)")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections in total (default 8)")
    parser.add_argument("--generators", type=int, default=1, help="load-generator processes (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="server worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=4, help="threads per server worker (default 4)")
    parser.add_argument("--access-log", choices=("file", "off"), default="file",
                        help="server access log to a file (default, as deployed) or off")
    parser.add_argument("--server", choices=("ours", "volcano"), default="ours",
                        help="the server under load: ours (default) or Volcano's vc-webhook-manager, started on a local "
                             "control plane (needs the e2e programs); volcano implies --mix volcano")
    parser.add_argument("--mix", choices=("default", "volcano"), default="default",
                        help="default: our mix of 12; volcano: only what both webhooks handle (Volcano Job, PodGroup, "
                             "4 pods of a Volcano Job per 6 requests)")
    parser.add_argument("--profile", metavar="DIR",
                        help="sample the server's processes with py-spy (on PATH) during the measured seconds; "
                             "writes DIR/flame.svg and DIR/stacks.txt and adds the top frames to the output")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run the benchmark; 0 when it ran (whatever the figures), 2 on bad arguments or a server that never started."""
    args = build_parser().parse_args(list(argv))
    if args.rps < 0 or args.seconds <= 0 or args.connections < 1 or args.generators < 1 or args.warmup < 0:
        print("bench webhook: --rps >= 0, --seconds > 0, --warmup >= 0, --connections and --generators >= 1",
              file=sys.stderr)
        return 2
    args.connections = max(args.connections, args.generators)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="metronome-bench-webhook-"))
    server: subprocess.Popen[bytes] | None = None
    if args.server == "volcano":
        args.mix = "volcano"
    stack: Any = None
    try:
        if args.server == "volcano":
            stack, port, ca_pem, pid = _start_volcano(tmp)
        else:
            ca_pem = _certificates(tmp)
            port = _free_port()
            server = _start_server(tmp, port, args)
            pid = server.pid
        result = _drive(port, ca_pem, args, pid)
        if args.profile:
            result["profile"] = profile.summary(pathlib.Path(args.profile))
    except (RuntimeError, OSError, MetronomeError) as exc:
        print(f"bench webhook: {exc}", file=sys.stderr)
        return 2
    finally:
        if server is not None:
            _stop(server)
        if stack is not None:
            stack.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>20}: {value}")
    return 0


# ------------------------------------------------------------------------------------------ server
def _certificates(tmp: pathlib.Path) -> bytes:
    from volcano_metronome.certs import pki

    ca = pki.make_ca("bench-ca")
    pki.make_serving_cert(ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"]).write(tmp / "tls.crt", tmp / "tls.key")
    return ca.cert_pem


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(tmp: pathlib.Path, port: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    (tmp / "settings.yaml").write_text("watch: {podGroups: false, claims: false}\n")
    env = dict(os.environ)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    # The server imports what this process imported (a checkout or site-packages), whatever its cwd.
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    access_log = str(tmp / "access.log") if args.access_log == "file" else "off"
    command = [sys.executable, "-m", "volcano_metronome", "webhook", "--cert-dir", str(tmp), "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(args.workers), "--threads", str(args.threads),
               "--config", str(tmp / "settings.yaml"), "--metrics-dir", str(tmp / "metrics"), "--access-log", access_log]
    stderr = (tmp / "server.err").open("wb")
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=tmp)
    context = _client_context_from_file(tmp)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"server exited: {(tmp / 'server.err').read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    if tls.recv(64).startswith(b"HTTP/1.1 200"):
                        return server
        except OSError:
            time.sleep(0.05)
    _stop(server)
    raise RuntimeError("server not ready within 30 s")


def _start_volcano(tmp: pathlib.Path) -> tuple[Any, int, bytes, int]:
    """etcd, kube-apiserver and vc-webhook-manager (``devtools.stack``, registrations included); its port, CA, pid."""
    from volcano_metronome.devtools.stack import Stack

    stack = Stack(tmp / "stack", components=("volcano-webhook",), required=("volcano-webhook",))
    stack.start(lambda message: print(f"[bench webhook] {message}", file=sys.stderr, flush=True))
    from volcano_metronome.devtools.apply import ApiClient

    # The reviews' namespace: Volcano's PodGroup admission reads it from the API server.
    ApiClient.from_kubeconfig(stack.kubeconfig_path).apply({"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": "ml"}})
    ca_pem = (tmp / "stack" / "volcano-webhook" / "certs" / "ca.crt").read_bytes()
    return stack, stack.port("volcano-webhook"), ca_pem, stack.records()["volcano-webhook"].pid


def _client_context_from_file(tmp: pathlib.Path) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only the readiness probe; the generators verify against the CA
    return context


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# ------------------------------------------------------------------------------------------ load
# Where vc-webhook-manager serves each kind (its chart's registrations); ours serves all at /mutate.
VOLCANO_PATHS = {"Job": "/jobs/mutate", "PodGroup": "/podgroups/mutate", "Pod": "/pods/mutate"}


def request_bodies(mix: str = "default", server: str = "ours") -> list[bytes]:
    """The request mix, as complete HTTP/1.1 requests: 6 gated pods, 2 unmanaged pods, 4 gang objects
    (``default``), or a Volcano Job, a PodGroup and 4 of its pods (``volcano``), to ``server``'s paths."""
    profile = {api.MODEL: "resnet50"}
    resolved = {api.PROFILE: '{"period_ms":200,"windows":[{"start_ms":176,"len_ms":24,"gbps":80}],"jitter_ms":2}',
                api.PROFILE_SOURCE: "catalog", api.GANG_SIZE: "8"}
    container = {"name": "trainer", "image": "registry.example/trainer:1.0", "command": ["python", "train.py"],
                 "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                               "limits": {"nvidia.com/gpu": "8"}},
                 "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    template = {"metadata": {"labels": {"app": "train"}},
                "spec": {"containers": [container], "restartPolicy": "Never",
                         "volumes": [{"name": "data", "emptyDir": {}}]}}
    volcano_owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train", "uid": "1",
                     "controller": True, "blockOwnerDeletion": True}

    def pod(annotations: dict[str, str], owner: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "train-worker-0", "namespace": "ml", "labels": {"app": "train"},
                             "annotations": annotations, "ownerReferences": [owner]},
                "spec": template["spec"]}

    gated = pod({**resolved, api.VOLCANO_GROUP_NAME: "train-1"}, volcano_owner)
    plain = pod({"note": "unmanaged"}, {**volcano_owner, "kind": "ReplicaSet", "apiVersion": "apps/v1"})
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "annotations": profile},
           "spec": {"queue": "default", "tasks": [{"name": "worker", "replicas": 8, "template": template}]}}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "train-1", "namespace": "ml", "annotations": {**profile, **resolved},
                          "ownerReferences": [volcano_owner]}, "spec": {"minMember": 8, "queue": "default"}}
    batch = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "sample", "namespace": "ml", "labels": {api.KUEUE_QUEUE_NAME: "user-queue"},
                          "annotations": profile},
             "spec": {"parallelism": 4, "completions": 4, "template": template}}
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "job-sample-1", "namespace": "ml",
                             "ownerReferences": [{**volcano_owner, "apiVersion": "batch/v1", "name": "sample"}]},
                "spec": {"queueName": "user-queue", "podSets": [
                    {"name": "main", "count": 4, "template": {**template, "metadata": {"annotations": resolved}}}]}}
    objects = [gated, gated, gated, job, gated, plain, group, gated, batch, gated, plain, workload]
    if mix == "volcano":
        objects = [gated, job, gated, group, gated, gated]
    bodies = []
    for index, obj in enumerate(objects):
        path = VOLCANO_PATHS[obj["kind"]] if server == "volcano" else "/mutate"
        group_name, _, version = obj["apiVersion"].rpartition("/")
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": f"bench-{index}", "kind": {"group": group_name, "version": version, "kind": obj["kind"]},
            "resource": {"group": group_name, "version": version, "resource": obj["kind"].lower() + "s"},
            "namespace": "ml", "operation": "CREATE", "userInfo": {"username": "system:serviceaccount:x:y"},
            "object": obj, "oldObject": None, "dryRun": False}}
        payload = json.dumps(review, separators=(",", ":")).encode()
        bodies.append(b"POST %s?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      b"Accept: application/json\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(payload), payload))
    return bodies


def _generate(port: int, ca_pem: bytes, rps: float, total_connections: int, first_connection: int, connections: int,
              warmup: float, seconds: float, ready: Any, start: Any, t0_value: Any, results: Any, mix: str = "default",
              server: str = "ours") -> None:
    """One load-generator process: ``connections`` threads, each with one TLS keep-alive connection."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    bodies = request_bodies(mix, server)
    latencies: list[list[float]] = [[] for _ in range(connections)]
    errors = [0] * connections
    sent = [0] * connections
    sockets: list[ssl.SSLSocket | None] = [_connect(port, context, bodies[0]) for _ in range(connections)]
    ready.put(os.getpid())
    start.wait()
    t0 = t0_value.value
    measured_from, until = t0 + warmup, t0 + warmup + seconds
    cpu_before = cputime.own()

    def run(slot: int) -> None:
        index = first_connection + slot
        tls = sockets[slot]
        k = 0
        while True:
            if rps > 0:
                due = t0 + (index + k * total_connections) / rps
                if due >= until:
                    return
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            else:
                due = time.monotonic()
                if due >= until:
                    return
            body = bodies[(index + k) % len(bodies)]
            k += 1
            try:
                if tls is None:
                    tls = _connect(port, context, bodies[0])
                tls.sendall(body)
                ok = _read_response(tls)
            except (OSError, ValueError):
                ok = False
                if tls is not None:
                    tls.close()
                tls = None
            done = time.monotonic()
            if due >= measured_from:
                sent[slot] += 1
                if ok:
                    latencies[slot].append(done - due)
                else:
                    errors[slot] += 1

    threads = [threading.Thread(target=run, args=(slot,), daemon=True) for slot in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_after = cputime.own()
    last = time.monotonic()
    for tls in sockets:
        if tls is not None:
            tls.close()
    results.put({"latencies": [x for slot in latencies for x in slot], "errors": sum(errors), "sent": sum(sent),
                 "cpu_s": cpu_after - cpu_before,
                 "finished": last})


def _connect(port: int, context: ssl.SSLContext, first: bytes) -> ssl.SSLSocket:
    """A TLS connection that has served one request, ``first`` (as the API server's pooled connections have)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tls = context.wrap_socket(raw, server_hostname="localhost")
    tls.sendall(first)
    _read_response(tls)
    return tls


def _read_response(tls: ssl.SSLSocket, expect: bytes = b'"response"') -> bool:
    """Read one HTTP response; True for a 200 whose body holds ``expect`` (by default: an AdmissionReview)."""
    data = b""
    while HEADERS_END not in data:
        chunk = tls.recv(65536)
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    head, _, body = data.partition(HEADERS_END)
    length = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None:
        raise ValueError("no content-length")
    while len(body) < length:
        chunk = tls.recv(65536)
        if not chunk:
            raise ValueError("connection closed")
        body += chunk
    return head.startswith(b"HTTP/1.1 200") and expect in body


def _drive(port: int, ca_pem: bytes, args: argparse.Namespace, server_pid: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, results, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    t0_value = ctx.Value("d", 0.0)
    per = [args.connections // args.generators + (1 if i < args.connections % args.generators else 0)
           for i in range(args.generators)]
    firsts = [sum(per[:i]) for i in range(args.generators)]
    processes = [ctx.Process(target=_generate, daemon=True,
                             args=(port, ca_pem, args.rps, args.connections, firsts[i], per[i], args.warmup,
                                   args.seconds, ready, start, t0_value, results, args.mix, args.server))
                 for i in range(args.generators)]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=60)
    server_cpu_before = cputime.process_tree(server_pid)
    t0_value.value = time.monotonic() + 0.05
    start.set()
    samplers = profile.start(pathlib.Path(args.profile), server_pid, args.warmup, args.seconds) if args.profile else []
    outcomes = [results.get(timeout=args.warmup + args.seconds + 120) for _ in processes]
    server_cpu = cputime.process_tree(server_pid) - server_cpu_before
    profile.finish(samplers)
    for process in processes:
        process.join(timeout=10)
    latencies = np.array([x for o in outcomes for x in o["latencies"]]) * 1000.0
    completed = len(latencies)
    errors = sum(int(o["errors"]) for o in outcomes)
    measured_start = t0_value.value + args.warmup
    span = max(max(float(o["finished"]) for o in outcomes) - measured_start, args.seconds) \
        if args.rps > 0 else args.seconds
    generator_cpu = sum(float(o["cpu_s"]) for o in outcomes)
    figures = (np.percentile(latencies, [50, 99, 99.9]) if completed else np.array([float("nan")] * 3))
    return {
        "rps_target": args.rps if args.rps > 0 else "saturation",
        "rps_achieved": round(completed / span, 1),
        "p50_ms": round(float(figures[0]), 3),
        "p99_ms": round(float(figures[1]), 3),
        "p999_ms": round(float(figures[2]), 3),
        "errors": errors,
        "requests": completed + errors,
        "seconds": args.seconds,
        "connections": args.connections,
        "generator_processes": args.generators,
        "server_workers": args.workers,
        "server_threads": args.threads,
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_ms_per_request": round(server_cpu * 1000.0 / max(completed + errors, 1), 3),
        "generator_cpu_s": round(generator_cpu, 2),
        "generator_cpu_ms_per_request": round(generator_cpu * 1000.0 / max(completed + errors, 1), 3),
        "cpu_count": os.cpu_count(),
        "access_log": args.access_log,
        "server": args.server,
        "mix": ("6 gated pods, 2 unmanaged pods, Volcano Job, PodGroup, Kueue Job, Workload per 12 requests"
                if args.mix == "default" else "4 gated pods of a Volcano Job, the Volcano Job, a PodGroup per 6 requests"),
    }

