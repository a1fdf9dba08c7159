"""Settings parsing, QueuePolicy parsing, topology sources and free-GPU accounting (pure)."""

from __future__ import annotations

import pytest

from tests.controller import builders as b
from volcano_metronome.controller import gpus, network, objects, observe, queuepolicy, settings
from volcano_metronome.controller.settings import DefaultCapacities, Settings
from volcano_metronome.core.errors import InvalidInput
from volcano_metronome.core.grid import SlotGrid
from volcano_metronome.core.model import Ordering
from volcano_metronome.controller.views import Inputs


def test_settings_defaults_and_full_file() -> None:
    assert settings.parse(None) == Settings()
    s = settings.parse({
        "slotMs": 10, "maxHyperperiodMs": 50400, "gpuResource": "amd.com/gpu", "rackLabel": "rack",
        "zoneLabel": "", "defaultCapacities": {"nicGbps": 200, "tierGbps": {"1": 800, "2": 1600, "3": 3200}},
        "resyncSeconds": 10, "namespace": "sys", "healthPort": 9000, "writeConcurrency": 8,
        "leaderElection": {"leaseName": "x", "leaseDurationSeconds": 30, "renewDeadlineSeconds": 20,
                           "retryPeriodSeconds": 4},
        "events": False, "cycleDebounceMs": 0, "reconfigureLeadMs": 2000, "watchTimeoutSeconds": 60,
        "bindAddress": "127.0.0.1", "podsTimeoutSeconds": 0})
    assert s.grid == SlotGrid(10.0, 5040) and s.gpu_resource == "amd.com/gpu"
    assert s.default_capacities.tier(3) == 3200 and s.default_capacities.tier(7) == 3200
    assert s.lease_namespace == "sys" and s.leader_election.lease_duration_s == 30 and not s.events
    assert s.pods_timeout_s == 0 and Settings().pods_timeout_s == 300


@pytest.mark.parametrize("data, field, fragment", [
    ({"slotMS": 5}, "slotMS", "one of the keys"),
    ({"slotMs": "5"}, "slotMs", "a number"),
    ({"resyncSeconds": True}, "resyncSeconds", "a number"),
    ({"defaultCapacities": {"tierGbps": {"zero": 1}}}, "defaultCapacities.tierGbps.zero", "tier number"),
    ({"leaderElection": {"renewDeadlineSeconds": 20}}, "leaderElection", "renewDeadlineSeconds < leaseDuration"),
    ({"healthPort": 70000}, "healthPort", "an integer in [0, 65535]"),
    ({"slotMs": 11}, "maxHyperperiodMs", "whole number of slots"),
    ({"podsTimeoutSeconds": -1}, "podsTimeoutSeconds", "got -1, expected a number in [0, 604800]"),
    ({"podsTimeoutSeconds": "5m"}, "podsTimeoutSeconds", "got '5m', expected a number"),
    # Found by an adversarial pass (2026-11-29): each was taken as given and failed only at run time.
    ({"namespace": "Bad_NS"}, "namespace", "a DNS-1123 label"),
    ({"watchNamespace": "a b"}, "watchNamespace", "a DNS-1123 label"),
    ({"leaderElection": {"leaseName": "Lease!"}}, "leaderElection.leaseName", "a DNS-1123 subdomain"),
    ({"bindAddress": "not an addr"}, "bindAddress", "an IP address to bind"),
    ({"gpuResource": "  "}, "gpuResource", "an extended resource name"),
    ({"defaultCapacities": {"tierGbps": {1: 400, "1": 800}}}, "defaultCapacities.tierGbps.1", "a tier not given already"),
    ({"defaultCapacities": {"tierGbps": {"\uff11": 400}}}, "defaultCapacities.tierGbps.\uff11", "tier number"),
    ({"defaultCapacities": {"tierGbps": {" 1 ": 400}}}, "defaultCapacities.tierGbps. 1 ", "tier number"),
])
def test_settings_errors_name_field_value_and_expectation(data: dict, field: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as err:
        settings.parse(data)
    assert err.value.field == field and fragment in str(err.value)


def test_queue_policy_maps_to_core_policy() -> None:
    grid = SlotGrid()
    view = queuepolicy.parse(b.queue_policy("p", volcanoQueues=["q1"], ordering="PriorityWithAging", agingPerMinute=2,
                                       cushionSlots=1, overflowTolerance=0.1, maxCandidates=4,
                                       maxHoldSeconds=0,
                                       defaultProfile={"periodMs": 100, "windows": [
                                           {"startMs": 0, "lenMs": 10, "gbps": 50}]},
                                       reoptimization={"enabled": False}), grid, 100.0)
    assert not view.error and view.volcano_queues == {"q1"}
    assert view.policy.ordering is Ordering.PRIORITY_WITH_AGING and view.policy.cushion_slots == 1
    assert view.policy.max_hold_s == 0.0 and queuepolicy.parse(b.queue_policy("d"), grid, 100.0).policy.max_hold_s == 60.0
    assert view.default_profile is not None and view.default_profile.period_ms == 100
    assert not view.reoptimization.enabled
    bad = queuepolicy.parse(b.queue_policy("bad", ordering="Random"), grid, 100.0)
    assert "spec.ordering" in bad.error and "Random" in bad.error
    listed = queuepolicy.parse(b.queue_policy("listed", ordering=["FIFO"]), grid, 100.0)  # a list is refused, not hashed
    assert "spec.ordering: got ['FIFO'], expected one of" in listed.error
    catch_all = queuepolicy.parse(b.queue_policy("all"), grid, 100.0)
    assert queuepolicy.select([view, catch_all, bad], volcano_queue="q1") is view
    assert queuepolicy.select([view, catch_all, bad], volcano_queue="other") is catch_all
    assert queuepolicy.select([bad]) is None


@pytest.mark.parametrize("spec, field", [
    ({"agingPerMinute": -1}, "spec.agingPerMinute"),
    ({"priorityWeight": -0.5}, "spec.priorityWeight"),
    ({"cushionSlots": 101}, "spec.cushionSlots"),
    ({"overflowTolerance": 1.5}, "spec.overflowTolerance"),
    ({"maxCandidates": 0}, "spec.maxCandidates"),
    ({"maxHoldSeconds": 3601}, "spec.maxHoldSeconds"),
    ({"maxHoldSeconds": -1}, "spec.maxHoldSeconds"),
    ({"reoptimization": {"enabled": "false"}}, "spec.reoptimization.enabled"),
    ({"reoptimization": {"intervalSeconds": 5}}, "spec.reoptimization.intervalSeconds"),
    ({"reoptimization": {"maxMovesPerCycle": 10001}}, "spec.reoptimization.maxMovesPerCycle"),
])
def test_a_queue_policy_out_of_its_crd_s_bounds_is_refused_naming_the_field(spec: dict, field: str) -> None:
    """The API server enforces the CRD; the parser holds to the same bounds (objects written before a CRD
    upgrade, the in-memory API of the tests) and names the field as the user wrote it."""
    view = queuepolicy.parse(b.queue_policy("q", **spec), SlotGrid(), 100.0)
    assert view.error.startswith(f"QueuePolicy q: {field}: got ")


def test_each_capacity_says_whether_it_is_used_and_on_how_many_nodes() -> None:
    nodes = [b.node(f"n{i}", rack=f"r{i // 2}") for i in range(4)]
    caps = DefaultCapacities(100, {1: 400})

    def states(objs: list[dict]) -> dict[str, tuple[int, str]]:
        net = network.build(nodes, objs, [], caps, "metronome.dev/rack", "zone")
        return {s.name: (s.matched, s.reason) for s in net.capacities}

    used = [{"metadata": {"name": "nic"}, "spec": {"capacityGbps": 200, "tier": 0, "nodes": ["n0", "n1", "ghost"]}},
            {"metadata": {"name": "leaf"}, "spec": {"capacityGbps": 50, "tier": 1, "nodes": ["n0", "n1"]}},
            {"metadata": {"name": "gone"}, "spec": {"capacityGbps": 50, "tier": 1, "nodes": ["ghost"]}},
            {"metadata": {"name": "odd"}, "spec": {"capacityGbps": 50, "tier": 1, "nodes": ["n2"], "direction": "Sideways"}}]
    assert states(used) == {"nic": (2, ""), "leaf": (2, ""), "gone": (0, network.NO_NODES),
                            "odd": (1, network.INVALID)}
    # Two tier-1 link sets that overlap: no switch capacity is used (labels are), the NICs still are.
    overlap = [used[0], used[1], {"metadata": {"name": "wide"}, "spec": {"capacityGbps": 50, "tier": 1,
                                                                        "nodes": ["n1", "n2"]}}]
    assert states(overlap) == {"nic": (2, ""), "leaf": (2, network.CONFLICT), "wide": (2, network.CONFLICT)}


def test_topology_from_labels_capacities_and_hypernodes() -> None:
    nodes = [b.node(f"n{i}", rack=f"r{i // 2}", labels={"zone": f"z{i // 4}"}) for i in range(8)]
    caps = DefaultCapacities(100, {1: 400, 2: 800})
    net = network.build(nodes, [], [], caps, "metronome.dev/rack", "zone")
    assert net.source == network.LABELS and net.topology.tiers == 3
    assert {lk.name for lk in net.topology.links if lk.tier == 1} >= {"rack:r0:up", "rack:r3:down"}

    cap_objs = [{"metadata": {"name": "nic-n0"}, "spec": {"capacityGbps": 200, "tier": 0, "nodes": ["n0"]}},
                {"metadata": {"name": "leaf-a"}, "spec": {"capacityGbps": 50, "tier": 1,
                                                          "nodeSelector": {"matchLabels": {"zone": "z0"}}}},
                {"metadata": {"name": "up-b"}, "spec": {"capacityGbps": 60, "tier": 1, "direction": "Up",
                                                        "nodes": ["n4", "n5", "ghost"]}}]
    net = network.build(nodes, cap_objs, [], caps, "metronome.dev/rack", "zone")
    links = {lk.name: lk for lk in net.topology.links}
    assert net.source == network.CAPACITIES
    assert links["cap:nic-n0:up"].capacity_gbps == 200 and links["nic:n1:up"].capacity_gbps == 100
    assert links["cap:leaf-a:down"].nodes == frozenset({"n0", "n1", "n2", "n3"})
    assert "cap:up-b:up" in links and "cap:up-b:down" not in links
    assert any("ghost" in w for w in net.warnings)

    shared_spec = [{"metadata": {"name": "gpu-nics"}, "spec": {"capacityGbps": 400, "tier": 0, "nodes": ["n0", "n1"]}}]
    links = {lk.name: lk for lk in network.build(nodes, shared_spec, [], caps, "metronome.dev/rack", "zone")
             .topology.links}
    # A tier-0 object describes one NIC per node it names, not one link the nodes share.
    assert links["cap:gpu-nics:n0:up"].nodes == frozenset({"n0"}) and links["cap:gpu-nics:n0:up"].capacity_gbps == 400
    assert links["cap:gpu-nics:n1:down"].nodes == frozenset({"n1"}) and "nic:n0:up" not in links

    hns = [{"metadata": {"name": "s0"}, "spec": {"tier": 1, "members": [
               {"type": "Node", "selector": {"regexMatch": {"pattern": "n[0-3]$"}}}]}},
           {"metadata": {"name": "s1"}, "spec": {"tier": 1, "members": [
               {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"zone": "z1"}}}}]}},
           {"metadata": {"name": "spine"}, "spec": {"tier": 2, "members": [
               {"type": "HyperNode", "selector": {"exactMatch": {"name": "s0"}}},
               {"type": "HyperNode", "selector": {"exactMatch": {"name": "s1"}}}]}}]
    net = network.build(nodes, [], hns, caps, "metronome.dev/rack", "zone")
    links = {lk.name: lk for lk in net.topology.links}
    assert net.source == network.HYPERNODES
    assert links["hypernode:s1:up"].nodes == frozenset({"n4", "n5", "n6", "n7"})
    assert links["hypernode:spine:up"].capacity_gbps == 800 and len(links["hypernode:spine:up"].nodes) == 8

    overlapping = hns + [{"metadata": {"name": "s2"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"exactMatch": {"name": "n0"}}}]}}]
    net = network.build(nodes, [], overlapping, caps, "metronome.dev/rack", "zone")
    assert net.source == network.LABELS and any("HyperNode" in w for w in net.warnings)


def test_free_gpus_subtract_bound_pods_and_unbound_placed_members() -> None:
    nodes = [b.node("n0", 8), b.node("n1", 8), b.node("n2", 8)]
    nodes[2]["spec"] = {"unschedulable": True}
    bound = b.pod("x", "other", "o", gpus=3, gates=(), with_profile=False)
    bound["spec"]["nodeName"] = "n0"
    done = b.pod("x", "done", "o", gpus=8, gates=(), with_profile=False)
    done["spec"]["nodeName"] = "n1"
    done["status"] = {"phase": "Succeeded"}
    members = [b.pod("ns", f"g-{i}", "g", gpus=4, size=2, gates=()) for i in range(2)]
    members[0]["spec"]["nodeName"] = "n1"  # one member bound, the other still to come
    claim = {"metadata": {"name": "podgroup-g", "namespace": "ns"},
             "spec": {"gangRef": {"kind": "PodGroup", "name": "g"}},
             "status": {"nodes": ["n1"], "members": [2], "offsetMs": 0, "periodMs": 200, "epoch": 0}}
    world = observe.observe(Inputs(nodes=nodes, pods=members, bound_pods=[bound, done, members[0]],
                                           claims=[claim]), Settings())
    assert world.allocatable == (8, 8, 8)
    assert world.free_gpus == (5, 0, 0)  # n1: 4 bound + 4 reserved; n2 unschedulable


def test_quantities_and_pod_gpus() -> None:
    assert objects.quantity("8") == 8 and objects.quantity("500m") == 0.5 and objects.quantity("2Ki") == 2048
    assert objects.quantity("garbage") == 0
    spec = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                           {"resources": {"requests": {"nvidia.com/gpu": 1}}}],
            "initContainers": [{"resources": {"requests": {"nvidia.com/gpu": "4"}}}]}
    assert objects.container_gpus(spec, "nvidia.com/gpu") == 4

    # Beyond a float, or huge: garbage (0) or held to MAX_COUNT, never an OverflowError that stops the cycle.
    assert objects.quantity("1e309") == objects.quantity(10**400) == objects.quantity(float("inf")) == 0
    huge = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "9" * 40}}}]}
    assert objects.container_gpus(huge, "nvidia.com/gpu") == objects.MAX_COUNT
    assert gpus.node_gpus(b.node("n", gpus=8) | {"status": {"allocatable": {"nvidia.com/gpu": "9" * 40}}},
                          "nvidia.com/gpu")[0] == objects.MAX_COUNT


def test_pinned_terms_only_narrow_existing_affinity() -> None:
    p = b.pod("ns", "p", "g")
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                              {"matchExpressions": [{"key": "tpu", "operator": "Exists"}]}]}}}
    terms = objects.pinned_terms(p, "n3")
    assert [t["matchExpressions"][0]["key"] for t in terms] == ["gpu", "tpu"]
    assert all(t["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n3"]}] for t in terms)
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = terms
    assert objects.pinned_node(p) == "n3"
    assert objects.pinned_node(b.pod("ns", "q", "g")) is None


@pytest.mark.parametrize("argv, message", [
    (["--health-port", "99999"], "--health-port: got 99999, expected an integer in [0, 65535]"),
    (["--bind-address", "not an addr"], "--bind-address: got 'not an addr', expected an IP address"),
    (["--namespace", "Bad"], "--namespace: got 'Bad', expected a namespace"),
    (["--config", ""], "cannot read '': an empty path names no file"),
])
def test_the_flags_are_checked_as_the_keys_they_override(argv: list[str], message: str, tmp_path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from volcano_metronome.cli import main

    assert main(["controller", "--kubeconfig", str(tmp_path / "none"), *argv]) == 2
    assert message in capsys.readouterr().err
