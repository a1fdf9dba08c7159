"""Admission webhook configurations for webhooks served outside the cluster, on loopback.

In a cluster a webhook is reached through a Service; a local stack runs its webhook servers as
plain processes, so their configurations name a URL (``https://127.0.0.1:<port><path>``) and carry
the ``caBundle`` of the certificate the server presents. Everything else is kept as the project
ships it:

- ours is the chart's MutatingWebhookConfiguration, rendered by ``helm template``
  (``helm/volcano-metronome/templates/mutatingwebhookconfiguration.yaml``), so the rules, selectors
  and failure policies are the chart's own;
- Kueue's are the manifests of its pinned module (``config/components/webhook``), with the
  namespace selectors its kustomization adds, and the ``kueue-`` name prefix of its installation.
"""

from __future__ import annotations

import base64
import copy
import pathlib
import re
import subprocess
import tempfile
from typing import Any, Mapping, Sequence

import yaml

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.shapes import JSON
CHART_WEBHOOK_TEMPLATE = "templates/mutatingwebhookconfiguration.yaml"
KUEUE_NAME_PREFIX = "kueue-"  # config/default/kustomization.yaml of Kueue
_FIELD_PATH = re.compile(r"webhooks\.\[name=([^\]]+)\]\.([A-Za-z]+)")


class RegistrationError(MetronomeError):
    """A webhook configuration could not be rendered or understood."""


def point_at_url(configuration: Mapping[str, Any], base_url: str, ca_pem: bytes) -> JSON:
    """A copy of ``configuration`` whose every webhook calls ``base_url`` + its Service path, trusting ``ca_pem``."""
    result = copy.deepcopy(dict(configuration))
    bundle = base64.b64encode(ca_pem).decode("ascii")
    for webhook in result.get("webhooks") or []:
        client = webhook.get("clientConfig") or {}
        path = (client.get("service") or {}).get("path", "")
        if not path and "url" not in client:
            raise RegistrationError(f"webhook {webhook.get('name')}: clientConfig has neither a Service path nor a URL")
        url = base_url.rstrip("/") + path if path else str(client["url"])
        webhook["clientConfig"] = {"url": url, "caBundle": bundle}
    return result


def render_chart_webhooks(
    helm: pathlib.Path,
    chart: pathlib.Path,
    *,
    release: str,
    namespace: str,
    values: Mapping[str, Any],
    kube_version: str,
) -> JSON:
    """The chart's MutatingWebhookConfiguration, as ``helm template`` renders it with ``values``."""
    with tempfile.TemporaryDirectory(prefix="metronome-helm-") as home:
        values_file = pathlib.Path(home) / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        # A private, empty helm home: no user configuration or repository leaks in.
        env = {
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        command = [
            str(helm), "template", release, str(chart), "--namespace", namespace, "--kube-version", kube_version,
            "--values", str(values_file), "--show-only", CHART_WEBHOOK_TEMPLATE,
        ]
        completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    if completed.returncode != 0:
        raise RegistrationError(f"helm template {chart} failed: {completed.stderr.strip()}")
    documents = [doc for doc in yaml.safe_load_all(completed.stdout) if doc]
    if len(documents) != 1 or documents[0].get("kind") != "MutatingWebhookConfiguration":
        raise RegistrationError(f"{CHART_WEBHOOK_TEMPLATE} rendered {len(documents)} objects, expected one MutatingWebhookConfiguration")
    return dict(documents[0])


def kueue_webhooks(manifests: pathlib.Path, kustomization: pathlib.Path) -> list[JSON]:
    """Kueue's Mutating- and ValidatingWebhookConfiguration as its installation creates them (Service form).

    Applies what ``config/components/webhook/kustomization.yaml`` does to ``manifests.yaml``: its
    patches (fields of named webhooks) and its replacements (one webhook's field copied to others),
    then the ``kueue-`` name prefix. Anything else in the kustomization is an error, so a Kueue
    upgrade that changes it is noticed rather than half-applied.
    """
    configurations = {doc["metadata"]["name"]: doc for doc in _documents(manifests)}
    spec = _documents(kustomization)[0]
    unknown = set(spec) - {"resources", "configurations", "patches", "replacements"}
    if unknown:
        raise RegistrationError(f"{kustomization}: unsupported kustomization keys {sorted(unknown)}")
    for patch in spec.get("patches") or []:
        if set(patch) != {"patch"}:
            raise RegistrationError(f"{kustomization}: only inline patches are supported, got {sorted(patch)}")
        for doc in yaml.safe_load_all(patch["patch"]):
            target = _configuration(configurations, doc["metadata"]["name"], kustomization)
            for webhook_patch in doc.get("webhooks") or []:
                _webhook(target, webhook_patch["name"], kustomization).update(
                    {k: v for k, v in webhook_patch.items() if k != "name"}
                )
    for replacement in spec.get("replacements") or []:
        source = replacement["source"]
        name, field = _field_path(source["fieldPath"], kustomization)
        value = _webhook(_configuration(configurations, source["name"], kustomization), name, kustomization)[field]
        for target in replacement.get("targets") or []:
            configuration = _configuration(configurations, target["select"]["name"], kustomization)
            for path in target["fieldPaths"]:
                target_name, target_field = _field_path(path, kustomization)
                _webhook(configuration, target_name, kustomization)[target_field] = copy.deepcopy(value)
    result = []
    for doc in configurations.values():
        doc["metadata"]["name"] = KUEUE_NAME_PREFIX + doc["metadata"]["name"]
        result.append(doc)
    return result


def _documents(path: pathlib.Path) -> list[JSON]:
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except (OSError, yaml.YAMLError) as exc:
        raise RegistrationError(f"cannot read {path}: {exc}") from exc


def _configuration(configurations: Mapping[str, JSON], name: str, source: pathlib.Path) -> JSON:
    try:
        return configurations[name]
    except KeyError:
        raise RegistrationError(f"{source}: no webhook configuration named {name!r}") from None


def _webhook(configuration: JSON, name: str, source: pathlib.Path) -> JSON:
    for webhook in configuration.get("webhooks") or []:
        if webhook.get("name") == name:
            return webhook  # type: ignore[no-any-return]  # the same dict: callers update it in place
    raise RegistrationError(f"{source}: {configuration['metadata']['name']} has no webhook {name!r}")


def _field_path(path: str, source: pathlib.Path) -> tuple[str, str]:
    match = _FIELD_PATH.fullmatch(path)
    if not match:
        raise RegistrationError(f"{source}: unsupported fieldPath {path!r} (expected webhooks.[name=N].field)")
    return match.group(1), match.group(2)


def webhook_names(configurations: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every webhook name in ``configurations`` (for messages and tests)."""
    return [str(w["name"]) for c in configurations for w in c.get("webhooks") or []]
