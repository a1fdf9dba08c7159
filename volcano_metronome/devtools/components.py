"""Command lines and configuration files of the programs a local stack runs beside the control plane.

Pure functions: each takes paths and ports and returns the argv or the configuration object, so the
choices (which controllers, which Kueue features, which flags) are visible in one place and tested
without starting anything. :mod:`volcano_metronome.devtools.stack` runs them.
"""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Any, Mapping

import yaml

from volcano_metronome.devtools.processes import LOOPBACK
from volcano_metronome.devtools.fabric import KWOK_ANNOTATION

# What kube-controller-manager runs: enough for batch Jobs to create pods, objects to be
# garbage-collected through owner references, namespaces to be deleted, nodes to lose the
# `not-ready` taint the API server puts on new nodes, and service accounts to exist. Nothing that
# needs a cloud, volumes, or signing keys.
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "replicaset-controller",
    "deployment-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",
    "ttl-after-finished-controller",
    "root-ca-certificate-publisher-controller",
)

# The Kueue integrations the stack enables: batch/v1 Jobs only (the others' webhooks stay
# registered, as in a real installation, and Kueue answers them with its no-op webhook).
KUEUE_FRAMEWORKS = ("batch/job",)
# Off: with internal certificate management disabled it would read its serving certificate from
# the fixed path /visibility, and it is an aggregated API nothing here uses.
KUEUE_FEATURE_GATES = {"VisibilityOnDemand": False}
# Kueue (cmd/kueue/main.go) reads its metrics certificate from this fixed path whenever internal
# certificate management is off; the stack provides it in a private mount namespace.
KUEUE_METRICS_CERT_DIR = "/etc/kueue/metrics/certs"


def serving_args(port: int, cert: pathlib.Path, key: pathlib.Path) -> list[str]:
    """Secure serving of a Kubernetes component on loopback with a given certificate.

    No authentication or authorization kubeconfig: only the always-allowed paths (``/healthz``,
    ``/readyz``, ``/livez``) are served, which is all the stack asks of them.
    """
    return [
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
    ]


def controller_manager_args(
    binary: pathlib.Path,
    *,
    kubeconfig: pathlib.Path,
    port: int,
    cert: pathlib.Path,
    key: pathlib.Path,
    root_ca: pathlib.Path,
) -> list[str]:
    """kube-controller-manager with :data:`CONTROLLERS`, no leader election, admin credentials."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        *serving_args(port, cert, key),
        "--leader-elect=false",
        f"--controllers={','.join(CONTROLLERS)}",
        f"--root-ca-file={root_ca}",
        # Small numbers: two cores are shared by a dozen processes.
        "--concurrent-gc-syncs=4",
        "--concurrent-namespace-syncs=2",
        "--profiling=false",
    ]


def scheduler_args(
    binary: pathlib.Path, *, kubeconfig: pathlib.Path, port: int, cert: pathlib.Path, key: pathlib.Path
) -> list[str]:
    """kube-scheduler with its default profile, no leader election, admin credentials."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        *serving_args(port, cert, key),
        "--leader-elect=false",
        "--profiling=false",
    ]


def kwok_stage(text: str) -> dict[str, Any]:
    """One of kwok's default Stages, as the stack uses it.

    Changed: ``pod-complete`` finishes at once the running pods owned by a *batch/v1* Job only. Upstream
    selects any owner of kind ``Job``, which includes Volcano's (``batch.volcano.sh``) Jobs, whose pods are
    the long-running training gangs the tests watch running, holding their nodes.
    """
    stage: dict[str, Any] = yaml.safe_load(text)
    if stage["metadata"]["name"] == "pod-complete":
        stage["spec"]["selector"]["matchExpressions"].append(
            {"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In", "values": ["batch/v1"]})
    return stage


def kwok_args(binary: pathlib.Path, *, kubeconfig: pathlib.Path, stages: pathlib.Path) -> list[str]:
    """kwok managing the nodes annotated ``kwok.x-k8s.io/node=fake``, with the given Stage file."""
    return [
        str(binary),
        f"--config={stages}",
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        "--manage-nodes-with-label-selector=",
        "--manage-single-node=",
        "--cidr=10.0.1.0/24",
        "--node-ip=10.0.1.1",
        "--node-lease-duration-seconds=40",
    ]


def kueue_configuration(*, namespace: str, health_port: int, webhook_port: int, cert_dir: pathlib.Path,
                        frameworks: tuple[str, ...] = KUEUE_FRAMEWORKS) -> dict[str, Any]:
    """Kueue's ``config.kueue.x-k8s.io/v1beta2`` Configuration for a manager run out of cluster.

    Its webhook server listens on loopback with the certificate in ``cert_dir`` (``tls.crt`` /
    ``tls.key``; internal certificate management off, since it only knows in-cluster Service names),
    no leader election, metrics off; ``frameworks``: the integrations (JobSet's too when its controller runs).
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": namespace,
        "manageJobsWithoutQueueName": False,
        "internalCertManagement": {"enable": False},
        "webhook": {"host": LOOPBACK, "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(frameworks)},
        "featureGates": dict(KUEUE_FEATURE_GATES),
    }


# Runs in a new mount namespace: /etc becomes an overlay whose writable layer lives on a private
# tmpfs, so the metrics certificate appears at Kueue's fixed path and the host's /etc is untouched.
_KUEUE_SANDBOX = """\
set -eu
mount -t tmpfs metronome-kueue "$METRONOME_KUEUE_OVERLAY"
mkdir "$METRONOME_KUEUE_OVERLAY/upper" "$METRONOME_KUEUE_OVERLAY/work"
mount -t overlay metronome-kueue-etc \
  -o "lowerdir=/etc,upperdir=$METRONOME_KUEUE_OVERLAY/upper,workdir=$METRONOME_KUEUE_OVERLAY/work" /etc
mkdir -p "$METRONOME_KUEUE_METRICS_DIR"
cp "$METRONOME_KUEUE_CERTS/tls.crt" "$METRONOME_KUEUE_CERTS/tls.key" "$METRONOME_KUEUE_METRICS_DIR/"
exec "$@"
"""


def kueue_command(
    binary: pathlib.Path,
    *,
    kubeconfig: pathlib.Path,
    config: pathlib.Path,
    cert_dir: pathlib.Path,
    overlay_dir: pathlib.Path,
    unshare: str,
    as_root: bool,
) -> tuple[list[str], dict[str, str]]:
    """argv and extra environment that start the Kueue manager in its private mount namespace.

    ``unshare`` execs the shell, which execs Kueue: the process id stays Kueue's. Without root a
    user namespace (mapped to root inside) makes the mounts possible.
    """
    isolation = [unshare, "--mount", "--propagation", "private"]
    if not as_root:
        isolation[1:1] = ["--user", "--map-root-user"]
    argv = [
        *isolation,
        "sh",
        "-c",
        _KUEUE_SANDBOX,
        "kueue-sandbox",
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
    ]
    env = {
        "METRONOME_KUEUE_OVERLAY": str(overlay_dir),
        "METRONOME_KUEUE_CERTS": str(cert_dir),
        "METRONOME_KUEUE_METRICS_DIR": KUEUE_METRICS_CERT_DIR,
    }
    return argv, env


def webhook_args(
    *,
    cert_dir: pathlib.Path,
    port: int,
    kubeconfig: pathlib.Path,
    metrics_dir: pathlib.Path,
    config: pathlib.Path | None = None,
    workers: int = 1,
) -> list[str]:
    """``volcano-metronome webhook`` on loopback (one worker: the machine is small, the load light)."""
    args = [
        sys.executable,
        "-m",
        "volcano_metronome",
        "webhook",
        f"--cert-dir={cert_dir}",
        f"--host={LOOPBACK}",
        f"--port={port}",
        f"--workers={workers}",
        "--threads=4",
        f"--kubeconfig={kubeconfig}",
        f"--metrics-dir={metrics_dir}",
    ]
    if config is not None:
        args.append(f"--config={config}")
    return args


def controller_settings(*, namespace: str, health_port: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The controller's settings file: defaults, loopback health port, a quick resync."""
    return {
        "namespace": namespace,
        "healthPort": health_port,
        "bindAddress": LOOPBACK,
        "resyncSeconds": 5,
        **(extra or {}),
    }


def controller_args(*, kubeconfig: pathlib.Path, config: pathlib.Path, identity: str) -> list[str]:
    """``volcano-metronome controller`` with a settings file and the admin kubeconfig."""
    return [
        sys.executable,
        "-m",
        "volcano_metronome",
        "controller",
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        f"--identity={identity}",
    ]


def python_env(checkout: pathlib.Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of our Python processes: the checkout first on the path, unbuffered output.

    The checkout's ``webhooks`` package is then importable even from an editable install made
    before it existed; unbuffered output keeps the logs current.
    """
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join(part for part in (str(checkout), env.get("PYTHONPATH", "")) if part)
    env["PYTHONUNBUFFERED"] = "1"
    return env
