"""Readiness probes of the local stack's components, and the clean-up of a restarted stack's webhooks."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

from volcano_metronome import api
from volcano_metronome.devtools import volcano
from volcano_metronome.devtools.apply import ApiClient
from volcano_metronome.devtools.processes import LOOPBACK


def forget_local_webhooks(client: ApiClient) -> None:
    """Delete webhook configurations a previous start registered (they call loopback URLs).

    A restarted stack reuses its etcd data; until each webhook server is up again, its old
    registration (failure policy Fail, a port nobody listens on any more) would refuse requests.
    """
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
        for configuration in client.request("GET", path).get("items", []):
            urls = [str((w.get("clientConfig") or {}).get("url", "")) for w in configuration.get("webhooks") or []]
            if urls and all(url.startswith(f"https://{LOOPBACK}:") for url in urls):
                client.request("DELETE", f"{path}/{configuration['metadata']['name']}")


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=context) as response:
            return int(response.status) == 200
    except (OSError, urllib.error.HTTPError):
        return False


def ready_nodes(client: ApiClient) -> int:
    nodes = client.request("GET", "/api/v1/nodes").get("items", [])
    return sum(
        1 for node in nodes
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])
    )


def webhook_mutates_podgroups(client: ApiClient) -> bool:
    """A dry-run PodGroup with a catalog model comes back with a resolved profile: our webhook is called."""
    probe = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "metronome-probe", "annotations": {api.MODEL: "resnet50"}},
        "spec": {"minMember": 1},
    }
    created = client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups",
                             body=json.dumps(probe).encode(), query={"dryRun": "All"})
    return api.PROFILE in (created.get("metadata", {}).get("annotations") or {})


def volcano_mutates_queues(client: ApiClient) -> bool:
    """A dry-run Queue comes back ``reclaimable``: Volcano's webhook manager is called."""
    created = client.request("POST", "/apis/scheduling.volcano.sh/v1beta1/queues",
                             body=json.dumps(volcano.queue_probe()).encode(), query={"dryRun": "All"})
    return "reclaimable" in (created.get("spec") or {})


def kueue_suspends_jobs(client: ApiClient) -> bool:
    """A dry-run batch Job labelled for a Kueue queue comes back suspended: Kueue's webhook is called."""
    probe = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "metronome-probe", "labels": {api.KUEUE_QUEUE_NAME: "metronome-probe"}},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
        },
    }
    created = client.request("POST", "/apis/batch/v1/namespaces/default/jobs",
                             body=json.dumps(probe).encode(), query={"dryRun": "All"})
    return bool(created.get("spec", {}).get("suspend"))
