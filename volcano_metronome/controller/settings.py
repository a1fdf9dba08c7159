"""Controller settings: a YAML file (camelCase keys, the Helm chart passes it through) plus flags.

Parsing is strict: an unknown key or a value of the wrong type is an :class:`InvalidInput` that
names the key, the value and the expected form. Every key and its default is documented in
docs/controller.md; keep the two in step.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from volcano_metronome.core import fields
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid


@dataclass(frozen=True)
class DefaultCapacities:
    """Capacities used when links come from HyperNodes or node labels rather than STBandwidthCapacity."""

    nic_gbps: float = 100.0
    tier_gbps: Mapping[int, float] = field(default_factory=lambda: {1: 400.0, 2: 800.0})

    def tier(self, tier: int) -> float:
        """Capacity of a tier (the highest configured tier's value for tiers beyond it)."""
        if tier == 0:
            return self.nic_gbps
        if tier in self.tier_gbps:
            return self.tier_gbps[tier]
        below = [t for t in self.tier_gbps if t < tier]
        return self.tier_gbps[max(below)] if below else self.nic_gbps


@dataclass(frozen=True)
class LeaderElection:
    """Lease-based leader election (coordination.k8s.io/v1)."""

    enabled: bool = True
    lease_name: str = "volcano-metronome-controller"
    lease_namespace: str = ""  # empty: the controller's namespace
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


@dataclass(frozen=True)
class Settings:
    """Everything the controller is configured with (see docs/controller.md for each key)."""

    slot_ms: float = 5.0
    max_hyperperiod_ms: float = 25200.0
    gpu_resource: str = "nvidia.com/gpu"
    rack_label: str = "metronome.dev/rack"
    zone_label: str = "topology.kubernetes.io/zone"
    default_capacities: DefaultCapacities = field(default_factory=DefaultCapacities)
    resync_s: float = 30.0
    namespace: str = "volcano-metronome"
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    health_port: int = 8081
    bind_address: str = "0.0.0.0"
    write_concurrency: int = 16
    cycle_debounce_ms: float = 20.0
    reconfigure_lead_ms: float = 10000.0
    events: bool = True
    watch_timeout_s: int = 300
    node_selector: str = ""  # label selector of the nodes the controller places gangs on ("" = all)
    watch_namespace: str = ""  # the one namespace whose gangs it manages ("" = all namespaces)
    # A claim decided for a Volcano PodGroup before its pods is released when no pod came this long after the
    # decision (0: held until the pods come or the group goes).
    pods_timeout_s: float = 300.0

    @property
    def grid(self) -> SlotGrid:
        """The slot grid every profile is laid on."""
        return SlotGrid.from_ms(self.slot_ms, self.max_hyperperiod_ms)

    @property
    def lease_namespace(self) -> str:
        """Where the Lease lives."""
        return self.leader_election.lease_namespace or self.namespace


_TOP = {
    "slotMs", "maxHyperperiodMs", "gpuResource", "rackLabel", "zoneLabel", "defaultCapacities", "resyncSeconds",
    "namespace", "leaderElection", "healthPort", "bindAddress", "writeConcurrency", "cycleDebounceMs",
    "reconfigureLeadMs", "events", "watchTimeoutSeconds", "nodeSelector",
    "watchNamespace", "podsTimeoutSeconds",
}
_LEADER = {"enabled", "leaseName", "leaseNamespace", "leaseDurationSeconds", "renewDeadlineSeconds",
           "retryPeriodSeconds"}
_CAPS = {"nicGbps", "tierGbps"}
#: An extended resource name: an optional DNS prefix and a name (nvidia.com/gpu, amd.com/gpu).
_RESOURCE = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def parse(data: Any, base: Settings | None = None) -> Settings:
    """Settings from the mapping of a settings file (None or {} gives the defaults)."""
    base = base or Settings()
    if data is None:
        data = {}
    fields.mapping(data, "", _TOP)
    d = base
    out: dict[str, Any] = {}
    if "slotMs" in data:
        out["slot_ms"] = fields.number(data["slotMs"], "slotMs", minimum=0.1, maximum=1000.0)
    if "maxHyperperiodMs" in data:
        out["max_hyperperiod_ms"] = fields.number(data["maxHyperperiodMs"], "maxHyperperiodMs", minimum=1.0, maximum=3_600_000.0)
    for key, attr in (("gpuResource", "gpu_resource"), ("rackLabel", "rack_label"), ("zoneLabel", "zone_label"),
                      ("nodeSelector", "node_selector")):
        if key in data:
            out[attr] = fields.string(data[key], key, allow_empty=key != "gpuResource")
    if "gpuResource" in data and not _RESOURCE.fullmatch(out["gpu_resource"]):
        raise InvalidInput("gpuResource", data["gpuResource"], "an extended resource name, e.g. nvidia.com/gpu")
    if "namespace" in data:
        out["namespace"] = fields.dns_label(data["namespace"], "namespace", "a namespace")
    if "watchNamespace" in data:  # "" watches every namespace
        watch = fields.string(data["watchNamespace"], "watchNamespace", allow_empty=True)
        out["watch_namespace"] = fields.dns_label(watch, "watchNamespace", "a namespace") if watch else ""
    if "bindAddress" in data:
        out["bind_address"] = fields.ip_address(data["bindAddress"], "bindAddress")
    if "defaultCapacities" in data:
        out["default_capacities"] = _capacities(data["defaultCapacities"], d.default_capacities)
    if "resyncSeconds" in data:
        out["resync_s"] = fields.number(data["resyncSeconds"], "resyncSeconds", minimum=1.0, maximum=86400.0)
    if "leaderElection" in data:
        out["leader_election"] = _leader(data["leaderElection"], d.leader_election)
    if "healthPort" in data:
        out["health_port"] = fields.integer(data["healthPort"], "healthPort", 0, 65535)
    if "writeConcurrency" in data:
        out["write_concurrency"] = fields.integer(data["writeConcurrency"], "writeConcurrency", 1, 256)
    if "cycleDebounceMs" in data:
        out["cycle_debounce_ms"] = fields.number(data["cycleDebounceMs"], "cycleDebounceMs", minimum=0.0, maximum=10000.0)
    if "reconfigureLeadMs" in data:
        out["reconfigure_lead_ms"] = fields.number(data["reconfigureLeadMs"], "reconfigureLeadMs", minimum=0.0, maximum=3_600_000.0)
    if "events" in data:
        out["events"] = fields.boolean(data["events"], "events")
    if "watchTimeoutSeconds" in data:
        out["watch_timeout_s"] = fields.integer(data["watchTimeoutSeconds"], "watchTimeoutSeconds", 10, 3600)
    if "podsTimeoutSeconds" in data:
        out["pods_timeout_s"] = fields.number(data["podsTimeoutSeconds"], "podsTimeoutSeconds", minimum=0.0,
                                              maximum=604_800.0)
    settings = dataclasses.replace(base, **out)
    try:
        settings.grid  # noqa: B018 - validates slotMs against maxHyperperiodMs
    except InvalidInput as exc:
        raise InvalidInput("maxHyperperiodMs", settings.max_hyperperiod_ms,
                           f"a whole number of slots of slotMs={settings.slot_ms:g} ({exc.expected})") from None
    return settings


def _capacities(data: Any, base: DefaultCapacities) -> DefaultCapacities:
    fields.mapping(data, "defaultCapacities", _CAPS)
    nic = fields.number(data["nicGbps"], "defaultCapacities.nicGbps", minimum=1e-3, maximum=1e6) if "nicGbps" in data else base.nic_gbps
    tiers = dict(base.tier_gbps)
    if "tierGbps" in data:
        raw = data["tierGbps"]
        if not isinstance(raw, Mapping):
            raise InvalidInput("defaultCapacities.tierGbps", raw, 'a mapping of tier number to Gbps, e.g. {"1": 400}')
        tiers = {}
        for k, v in raw.items():
            where = f"defaultCapacities.tierGbps.{k}"
            text = str(k) if isinstance(k, (int, str)) and not isinstance(k, bool) else ""
            if not re.fullmatch(r"[0-9]{1,3}", text) or int(text) < 1:  # ASCII digits: "１" and " 1 " are no tiers
                raise InvalidInput(where, k, "a tier number >= 1 as the key")
            if int(text) in tiers:
                raise InvalidInput(where, k, f"a tier not given already (as {int(text)})")
            tiers[int(text)] = fields.number(v, where, minimum=1e-3, maximum=1e6)
    return DefaultCapacities(nic, tiers)


def _leader(data: Any, base: LeaderElection) -> LeaderElection:
    fields.mapping(data, "leaderElection", _LEADER)
    namespace = fields.string(data.get("leaseNamespace", base.lease_namespace), "leaderElection.leaseNamespace",
                              allow_empty=True)  # "": the controller's own
    out = dataclasses.replace(
        base,
        enabled=fields.boolean(data.get("enabled", base.enabled), "leaderElection.enabled"),
        lease_name=fields.dns_subdomain(data.get("leaseName", base.lease_name), "leaderElection.leaseName",
                                        "a Lease name"),
        lease_namespace=fields.dns_label(namespace, "leaderElection.leaseNamespace", "a namespace") if namespace else "",
        lease_duration_s=fields.number(data.get("leaseDurationSeconds", base.lease_duration_s),
                                 "leaderElection.leaseDurationSeconds", minimum=1.0, maximum=3600.0),
        renew_deadline_s=fields.number(data.get("renewDeadlineSeconds", base.renew_deadline_s),
                                 "leaderElection.renewDeadlineSeconds", minimum=0.5, maximum=3600.0),
        retry_period_s=fields.number(data.get("retryPeriodSeconds", base.retry_period_s),
                               "leaderElection.retryPeriodSeconds", minimum=0.1, maximum=600.0),
    )
    if not out.retry_period_s < out.renew_deadline_s < out.lease_duration_s:
        raise InvalidInput("leaderElection", {"leaseDurationSeconds": out.lease_duration_s,
                                              "renewDeadlineSeconds": out.renew_deadline_s,
                                              "retryPeriodSeconds": out.retry_period_s},
                           "retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds")
    return out
