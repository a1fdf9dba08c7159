"""The real Volcano in a local stack: its three programs configured as its Helm chart configures them.

- **vc-webhook-manager**: the chart's admission webhooks (``templates/webhooks.yaml`` of the pinned
  source, rendered by ``helm template`` with the admissions the manager enables), registered by URL on
  loopback with the caBundle of a certificate made here; the manager checks each registration exists
  and carries its CA before it serves.
- **vc-controller-manager**: every controller but sharding (the chart's default), scheduler name
  ``volcano``.
- **vc-scheduler**: the chart's default ``volcano-scheduler.conf`` (actions ``enqueue, allocate,
  backfill``; priority, gang, conformance, overcommit, drf, predicates, proportion, nodeorder, binpack),
  in a directory of its own: the scheduler watches the file's directory and reloads the configuration
  on every change in it, so a directory other files are written to would reload it in a loop.

Pure functions of paths and ports (argv, values, rendered objects); ``Stack`` runs them.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile
from typing import Any

import yaml

from volcano_metronome.devtools import registrations
from volcano_metronome.devtools.processes import LOOPBACK

NAMESPACE = "volcano-system"
RELEASE = "volcano"
SCHEDULER_NAME = "volcano"
# The admissions vc-webhook-manager enables by default (cmd/webhook-manager options), also given to the
# chart template so that exactly these are registered.
ENABLED_ADMISSIONS = "/jobs/mutate,/jobs/validate,/podgroups/mutate,/pods/validate,/pods/mutate,/queues/mutate,/queues/validate"
# Small numbers: two cores are shared by a dozen processes.
_VERBOSITY = "--v=2"


def scheduler_conf(default_conf: pathlib.Path, directory: pathlib.Path) -> pathlib.Path:
    """The chart's default scheduler configuration, copied alone into ``directory``; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / default_conf.name
    shutil.copyfile(default_conf, target)
    return target


def _served(healthz_port: int, metrics_port: int) -> list[str]:
    """Health and listen addresses on loopback (the programs bind every interface by default), no leader election."""
    return [
        "--enable-healthz=true",
        f"--healthz-address={LOOPBACK}:{healthz_port}",
        "--enable-metrics=false",
        f"--listen-address={LOOPBACK}:{metrics_port}",
        "--leader-elect=false",
    ]


def scheduler_args(
    binary: pathlib.Path, *, kubeconfig: pathlib.Path, conf: pathlib.Path, healthz_port: int, metrics_port: int,
    dump_dir: pathlib.Path,
) -> list[str]:
    """vc-scheduler as the chart runs it (scheduler name ``volcano``), out of cluster, no leader election."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--scheduler-conf={conf}",
        f"--scheduler-name={SCHEDULER_NAME}",
        *_served(healthz_port, metrics_port),
        f"--cache-dump-dir={dump_dir}",
        "--logtostderr",
        _VERBOSITY,
    ]


def controller_manager_args(
    binary: pathlib.Path, *, kubeconfig: pathlib.Path, healthz_port: int, metrics_port: int
) -> list[str]:
    """vc-controller-manager as the chart runs it (its default controllers), no leader election."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--scheduler-name={SCHEDULER_NAME}",
        *_served(healthz_port, metrics_port),
        "--worker-threads=2",
        "--logtostderr",
        _VERBOSITY,
    ]


def webhook_manager_args(
    binary: pathlib.Path, *, kubeconfig: pathlib.Path, port: int, healthz_port: int, cert_dir: pathlib.Path
) -> list[str]:
    """vc-webhook-manager serving HTTPS on loopback with ``cert_dir``'s ``tls.crt``/``tls.key``/``ca.crt``."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--enabled-admission={ENABLED_ADMISSIONS}",
        f"--tls-cert-file={cert_dir / 'tls.crt'}",
        f"--tls-private-key-file={cert_dir / 'tls.key'}",
        f"--ca-cert-file={cert_dir / 'ca.crt'}",
        f"--webhook-url=https://{LOOPBACK}:{port}",
        f"--listen-address={LOOPBACK}",
        f"--port={port}",
        f"--scheduler-name={SCHEDULER_NAME}",
        "--enable-healthz=true",
        f"--healthz-address={LOOPBACK}:{healthz_port}",
        "--logtostderr",
        _VERBOSITY,
    ]


def chart_values() -> dict[str, Any]:
    """The values ``templates/webhooks.yaml`` reads (the chart's own values.yaml is not in the source)."""
    return {"custom": {"admission_enable": True, "enabled_admissions": ENABLED_ADMISSIONS, "scheduler_name": SCHEDULER_NAME}}


def render_webhooks(helm: pathlib.Path, template: pathlib.Path, *, kube_version: str) -> list[dict[str, Any]]:
    """The chart's Mutating/ValidatingWebhookConfigurations (Service form), rendered by ``helm template``."""
    with tempfile.TemporaryDirectory(prefix="metronome-volcano-chart-") as scratch:
        chart = pathlib.Path(scratch) / "volcano"
        (chart / "templates").mkdir(parents=True)
        shutil.copyfile(template, chart / "templates" / template.name)
        (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": "volcano", "version": "0.0.0"}))
        (chart / "values.yaml").write_text(yaml.safe_dump(chart_values()))
        env = {"HOME": scratch, "HELM_CACHE_HOME": f"{scratch}/cache", "HELM_CONFIG_HOME": f"{scratch}/config",
               "HELM_DATA_HOME": f"{scratch}/data"}
        completed = subprocess.run(
            [str(helm), "template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", kube_version],
            env=env, capture_output=True, text=True, timeout=120, check=False)
    if completed.returncode != 0:
        raise registrations.RegistrationError(f"helm template of Volcano's {template.name} failed: {completed.stderr.strip()}")
    documents = [doc for doc in yaml.safe_load_all(completed.stdout) if doc]
    kinds = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    if not documents or any(doc.get("kind") not in kinds for doc in documents):
        raise registrations.RegistrationError(f"Volcano's {template.name} rendered {[d.get('kind') for d in documents]}, "
                                              f"expected webhook configurations only")
    return documents


def queue_probe() -> dict[str, Any]:
    """A Queue without ``reclaimable``: vc-webhook-manager's /queues/mutate sets it (its readiness probe)."""
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "metronome-probe"},
            "spec": {"weight": 1}}
