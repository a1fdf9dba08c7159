"""Where each kind volcano-metronome reads or writes lives in the REST API: the resource table. PURE."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from volcano_metronome import api
from volcano_metronome.shapes.apierrors import KubeError


@dataclass(frozen=True)
class Resource:
    """Where objects of one kind live in the REST API."""

    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The collection path (all namespaces when ``namespace`` is None), or an object's path."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
        elif self.namespaced and name:
            raise KubeError(f"{self.kind} {name!r}: a namespace is required for a namespaced resource")
        base += f"/{self.plural}"
        if name:
            base += f"/{urllib.parse.quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", True, "Pod")
SECRETS = Resource("", "v1", "secrets", True, "Secret")
NODES = Resource("", "v1", "nodes", False, "Node")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
CORE_EVENTS = Resource("", "v1", "events", True, "Event")
EVENTS = Resource("events.k8s.io", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
BATCH_JOBS = Resource("batch", "v1", "jobs", True, "Job")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False,
                             "MutatingWebhookConfiguration")
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", True, "PodGroup")
VOLCANO_JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", True, "Job")
VOLCANO_QUEUES = Resource("scheduling.volcano.sh", "v1beta1", "queues", False, "Queue")
HYPERNODES = Resource("topology.volcano.sh", "v1alpha1", "hypernodes", False, "HyperNode")
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", True, "Workload")
ADMISSION_CHECKS = Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", False, "AdmissionCheck")
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", False, "ClusterQueue")
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", True, "LocalQueue")
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", False, "ResourceFlavor")
CLAIMS = Resource(api.GROUP, api.VERSION, api.CLAIMS, True, "STBandwidthClaim")
CAPACITIES = Resource(api.GROUP, api.VERSION, api.CAPACITIES, False, "STBandwidthCapacity")
QUEUE_POLICIES = Resource(api.GROUP, api.VERSION, api.QUEUE_POLICIES, False, "QueuePolicy")
