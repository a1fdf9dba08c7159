"""The training operators a local stack can run beside Kueue: the JobSet controller, out of cluster.

Pure functions (configuration, command line, webhook registrations) like
:mod:`~volcano_metronome.devtools.components`; :mod:`~volcano_metronome.devtools.stack` runs them.
"""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import yaml

from volcano_metronome.devtools.controlplane import LOOPBACK
from volcano_metronome.devtools.registrations import RegistrationError

JSON = dict[str, Any]
JOBSET_NAME_PREFIX = "jobset-"  # as its kustomize installation names its webhook configurations
# The Kueue integration the JobSet controller adds (Kueue needs the JobSet CRD installed when it starts).
KUEUE_JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
_WEBHOOK_INDEX = re.compile(r"/webhooks/(\d+)")


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
