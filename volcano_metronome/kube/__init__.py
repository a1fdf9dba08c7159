"""The one package that talks to the Kubernetes API (import-linter contract ``one-kubernetes-client``).

Everything above it sees Kubernetes objects as plain dicts in the API's JSON form (camelCase, as the
server returns them). Its modules, by concern:

- :mod:`.client`: :func:`connect` (a :class:`Kube` from a kubeconfig file, else the in-cluster service
  account) and :class:`Kube`: get, list (paginated), create, merge / JSON / strategic patch (optionally
  on a subresource, optionally guarded by ``resourceVersion``), replace, delete, watch, events.
- :mod:`.informer`: :class:`Informer`: list, then watch from the list's resourceVersion with bookmarks
  and a server timeout, re-list on 410 Gone, exponential backoff with jitter on errors; a thread-safe store.
- :mod:`.secrets`: :func:`read_secret` / :func:`write_secret` (created or replaced only if unchanged
  since read) and :func:`patch_webhook_ca_bundle`.

The pure parts live in :mod:`volcano_metronome.shapes` and are re-exported here: the resource table
(:class:`Resource` and a constant per kind) and the errors, :class:`KubeError` (a
:class:`MetronomeError`) carrying the HTTP status: 404 :class:`NotFound`, 409 :class:`Conflict` (also
AlreadyExists), 410 :class:`Gone`, 422 :class:`Invalid`, and :class:`Unavailable` when the server
cannot be reached.
"""

from __future__ import annotations

from volcano_metronome.kube.client import FENCE_MIN_SECONDS, FIELD_MANAGER, JSON_PATCH, MERGE, STRATEGIC, Kube, \
    connect, now_micro
from volcano_metronome.kube.informer import Informer, key_of, rv_newer
from volcano_metronome.kube.secrets import patch_webhook_ca_bundle, read_secret, write_secret
from volcano_metronome.shapes import JSON
from volcano_metronome.shapes.apierrors import Conflict, Fenced, Gone, Invalid, KubeError, NotFound, Unavailable, \
    error_from_status
from volcano_metronome.shapes.resources import ADMISSION_CHECKS, BATCH_JOBS, CAPACITIES, CLAIMS, CLUSTER_QUEUES, \
    CORE_EVENTS, CRDS, EVENTS, HYPERNODES, LEASES, LOCAL_QUEUES, MUTATING_WEBHOOKS, NAMESPACES, NODES, PODGROUPS, \
    PODS, PRIORITY_CLASSES, QUEUE_POLICIES, RESOURCE_FLAVORS, SECRETS, VOLCANO_JOBS, VOLCANO_QUEUES, WORKLOADS, \
    Resource

_error = error_from_status  # the name the unit tests of the error mapping use

__all__ = [
    "ADMISSION_CHECKS", "BATCH_JOBS", "CAPACITIES", "CLAIMS", "CLUSTER_QUEUES", "CORE_EVENTS", "CRDS", "EVENTS",
    "FENCE_MIN_SECONDS", "FIELD_MANAGER", "HYPERNODES", "JSON", "JSON_PATCH", "LEASES", "LOCAL_QUEUES", "MERGE",
    "MUTATING_WEBHOOKS", "NAMESPACES", "NODES", "PODGROUPS", "PODS", "PRIORITY_CLASSES", "QUEUE_POLICIES",
    "RESOURCE_FLAVORS", "SECRETS", "STRATEGIC", "VOLCANO_JOBS", "VOLCANO_QUEUES", "WORKLOADS",
    "Conflict", "Fenced", "Gone", "Informer", "Invalid", "Kube", "KubeError", "NotFound", "Resource", "Unavailable",
    "connect", "error_from_status", "key_of", "now_micro", "patch_webhook_ca_bundle", "read_secret", "rv_newer",
    "write_secret",
]
