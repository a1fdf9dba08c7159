"""The training operators a local stack runs, out of cluster: the JobSet controller (beside Kueue) and the
Kubeflow training-operator (PyTorchJobs of one namespace, gang-scheduled by Volcano).

Their configuration, command lines and webhook registrations are pure functions, like
:mod:`~volcano_metronome.devtools.components`; ``start_*`` run them through the callbacks of a
:class:`Context` that :mod:`~volcano_metronome.devtools.stack` gives.
"""

from __future__ import annotations

import copy
import os
import pathlib
import re
from dataclasses import dataclass
from typing import Callable, Mapping

import yaml

from volcano_metronome.devtools import binaries, probes, recipes
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.processes import LOOPBACK, free_ports
from volcano_metronome.devtools.registrations import RegistrationError, point_at_url
from volcano_metronome.shapes import JSON

JOBSET_NAME_PREFIX = "jobset-"  # as its kustomize installation names its webhook configurations
# The Kueue integration the JobSet controller adds (Kueue needs the JobSet CRD installed when it starts).
KUEUE_JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
_WEBHOOK_INDEX = re.compile(r"/webhooks/(\d+)")


@dataclass(frozen=True)
class Context:
    """What starting one component needs from the stack: its directory, the kubeconfig, and callbacks to start
    its process (argv, health port, environment), to wait until a probe holds, and to make webhook certificates
    (directory, common name -> CA PEM)."""

    work: pathlib.Path
    kubeconfig: pathlib.Path
    spawn: Callable[[list[str], int, Mapping[str, str] | None], None]
    wait: Callable[[Callable[[], bool]], None]
    webhook_certs: Callable[[pathlib.Path, str], bytes]


def start_jobset(client: ApiClient, binary: pathlib.Path, ctx: Context) -> None:
    """Start the JobSet controller and register its webhooks on loopback."""
    health, webhook = free_ports(2)
    ca_pem = ctx.webhook_certs(ctx.work / "certs", "jobset-webhook-service")
    config = ctx.work / "config.yaml"
    config.write_text(yaml.safe_dump(jobset_configuration(health_port=health, webhook_port=webhook,
                                                          cert_dir=ctx.work / "certs")))
    ctx.spawn(jobset_args(binary, kubeconfig=ctx.kubeconfig, config=config), health, None)
    ctx.wait(lambda: probes.http_ok(f"http://{LOOPBACK}:{health}/readyz"))
    manifests = binaries.module_file("jobset", recipes.JOBSET_WEBHOOKS)
    patches = [binaries.module_file("jobset", relative) for relative in recipes.JOBSET_WEBHOOK_PATCHES]
    for configuration in jobset_webhooks(manifests, patches):
        client.apply(point_at_url(configuration, f"https://{LOOPBACK}:{webhook}", ca_pem))


def start_training_operator(client: ApiClient, binary: pathlib.Path, ctx: Context, *, namespace: str,
                            gang_scheduler: str | None) -> None:
    """Start a training-operator for the PyTorchJobs of ``namespace``, gang-scheduled by ``gang_scheduler`` (None:
    by nobody, the Kueue case: Kueue admits the whole job at once)."""
    health, webhook = free_ports(2)
    for obj in training_operator_objects(namespace):
        client.apply(obj)
    # Its rotator waits for a kubelet to mount the Secret at this fixed path; its webhook server serves from it.
    ctx.webhook_certs(pathlib.Path(TRAINING_OPERATOR_CERT_DIR), "training-operator")
    ctx.spawn(training_operator_args(binary, kubeconfig=ctx.kubeconfig, namespace=namespace, health_port=health,
                                     webhook_port=webhook, gang_scheduler=gang_scheduler),
              health, {**os.environ, "MY_POD_NAMESPACE": namespace})
    ctx.wait(lambda: probes.http_ok(f"http://{LOOPBACK}:{health}/readyz"))


def jobset_configuration(*, health_port: int, webhook_port: int, cert_dir: pathlib.Path) -> JSON:
    """The JobSet controller's ``config.jobset.x-k8s.io/v1alpha1`` Configuration, run out of cluster.

    As for Kueue: the webhook server on loopback with the certificate in ``cert_dir`` (internal certificate
    management off: it only knows in-cluster Service names), no leader election, metrics off.
    """
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "webhook": {"host": LOOPBACK, "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def jobset_args(binary: pathlib.Path, *, kubeconfig: pathlib.Path, config: pathlib.Path) -> list[str]:
    """argv of the JobSet controller."""
    return [str(binary), f"--kubeconfig={kubeconfig}", f"--config={config}", "--zap-log-level=2"]


def jobset_webhooks(manifests: pathlib.Path, patches: list[pathlib.Path]) -> list[JSON]:
    """JobSet's Mutating- and ValidatingWebhookConfiguration as its kustomize installation makes them.

    ``config/components/webhook/patches/*.yaml`` replace the pod webhooks (``/webhooks/1``) by ones that
    select only JobSet pods; any other kind of patch is an error, so an upgrade that changes them is noticed.
    """
    try:
        configurations = [doc for doc in yaml.safe_load_all(manifests.read_text()) if doc]
        patch_sets = {path: yaml.safe_load(path.read_text()) for path in patches}
    except (OSError, yaml.YAMLError) as exc:
        raise RegistrationError(f"cannot read JobSet's webhook manifests: {exc}") from exc
    result = []
    for configuration in configurations:
        configuration = copy.deepcopy(configuration)
        webhooks = configuration.get("webhooks") or []
        for path, ops in patch_sets.items():
            for op in ops or []:
                match = _WEBHOOK_INDEX.fullmatch(str(op.get("path")))
                if op.get("op") != "replace" or match is None or int(match.group(1)) >= len(webhooks):
                    raise RegistrationError(f"{path}: unsupported patch {op.get('op')} {op.get('path')}")
                if op["value"].get("name") == webhooks[int(match.group(1))].get("name"):
                    webhooks[int(match.group(1))] = copy.deepcopy(op["value"])
        configuration["metadata"]["name"] = JOBSET_NAME_PREFIX + configuration["metadata"]["name"]
        result.append(configuration)
    return result


# ------------------------------------------------------------------------------------- training-operator
#: The namespace whose PyTorchJobs the stack's training-operator runs with Volcano gang scheduling; a second one
#: runs those of ``default`` (where the Kueue examples put their LocalQueue) for Kueue.
VOLCANO_TRAINING_NAMESPACE = "volcano-training"
KUEUE_TRAINING_NAMESPACE = "default"
KUEUE_PYTORCH_FRAMEWORK = "kubeflow.org/pytorchjob"
# training-operator v1.9.3 always runs cert-controller's rotator (pkg/cert): it keeps its certificate in this
# Secret of its own namespace (MY_POD_NAMESPACE) and is ready only once it has injected its CA into this
# ValidatingWebhookConfiguration (cmd/training-operator.v1/main.go).
TRAINING_OPERATOR_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_WEBHOOKS = "validator.training-operator.kubeflow.org"
TRAINING_OPERATOR_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # pkg/cert: fixed


def training_operator_args(binary: pathlib.Path, *, kubeconfig: pathlib.Path, namespace: str, health_port: int,
                           webhook_port: int, gang_scheduler: str | None) -> list[str]:
    """argv of a training-operator that runs the PyTorchJobs of ``namespace`` (gang-scheduled by ``gang_scheduler``)."""
    args = [str(binary), f"--kubeconfig={kubeconfig}", f"--namespace={namespace}", "--enable-scheme=pytorchjob",
            "--metrics-bind-address=0", f"--health-probe-bind-address={LOOPBACK}:{health_port}",
            f"--webhook-server-port={webhook_port}", "--zap-log-level=2"]
    return args + ([f"--gang-scheduler-name={gang_scheduler}"] if gang_scheduler else [])


def training_operator_objects(namespace: str) -> list[JSON]:
    """Its namespace, the (empty) Secret its certificate rotator fills, and the webhook configuration it waits for."""
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TRAINING_OPERATOR_SECRET, "namespace": namespace}},
            training_operator_webhooks()]


def training_operator_webhooks() -> JSON:
    """The ValidatingWebhookConfiguration its certificate rotator waits for, with no rules.

    Its rotator makes a certificate for the in-cluster Service name only, which the API server could not
    verify when calling it on loopback; so the configuration exists (the rotator injects its CA and becomes
    ready) but sends nothing: the stack runs without the training-operator's validation.
    """
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": TRAINING_OPERATOR_WEBHOOKS},
            "webhooks": [{"name": "validator.pytorchjob.training-operator.kubeflow.org", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "failurePolicy": "Ignore", "rules": [],
                          "clientConfig": {"url": f"https://{LOOPBACK}:9/unused"}}]}
