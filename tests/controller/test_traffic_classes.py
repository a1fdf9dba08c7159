"""Traffic classes against the in-memory API: a QueuePolicy that lists the fabric's classes gives each placed
gang one (claim status, then its pods' annotations before their gate is removed, and the Placed Event).

The fabric of ``test_lock_on_demand``: 3 nodes of 8 GPUs in one rack, gangs of 3 members of 4 GPUs, so the
second gang always shares a NIC with the first.
"""

from __future__ import annotations

import json

from tests.controller import builders as b
from tests.controller.test_lock_on_demand import add_gang, claim, controller, converge, fake, pods, remove_gang
from volcano_metronome import api, kube
from volcano_metronome.controller import objects

__all__ = ["fake"]  # the fixture, imported for this module's tests

CLASSES = [{"env": {"NCCL_IB_SL": "3", "NCCL_IB_TC": "106"}}, {"env": {"NCCL_IB_SL": "2", "NCCL_IB_TC": "74"}},
           {"env": {"NCCL_IB_SL": "0"}}]


def classes_of(f, gang: str) -> set[tuple[str | None, str | None]]:
    return {(objects.annotations_of(p).get(api.TRAFFIC_CLASS), objects.annotations_of(p).get(api.TRAFFIC_CLASS_ENV))
            for p in pods(f, gang)}


def test_each_gang_goes_after_the_gangs_on_its_links(fake) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", trafficClasses=CLASSES))
    ctl = controller(fake)
    add_gang(fake, "a")
    converge(ctl)
    status = claim(fake, "a")["status"]
    assert (status["trafficClass"], status["trafficClassEnv"]) == (0, CLASSES[0]["env"])
    assert classes_of(fake, "a") == {("0", json.dumps(CLASSES[0]["env"], sort_keys=True, separators=(",", ":")))}
    assert all(not objects.gates(p) or api.SCHEDULING_GATE not in objects.gates(p) for p in pods(fake, "a"))
    add_gang(fake, "b")
    converge(ctl)
    assert claim(fake, "b")["status"]["trafficClass"] == 1
    assert classes_of(fake, "b") == {("1", '{"NCCL_IB_SL":"2","NCCL_IB_TC":"74"}')}
    assert claim(fake, "a")["status"]["trafficClass"] == 0  # a gang keeps its class
    # In classes of their own, the priority interleaves them: nobody is locked (test_lock_on_demand locks both).
    assert claim(fake, "a")["status"]["locked"] is False and claim(fake, "b")["status"]["locked"] is False
    notes = [json.dumps(e) for e in fake.events if e["reason"] == "Placed"]
    assert sum("traffic class 1 of 3, NCCL_IB_SL=2, NCCL_IB_TC=74" in n for n in notes) == 1

def test_a_class_is_free_again_once_its_gang_has_left(fake) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", trafficClasses=CLASSES))
    ctl = controller(fake)
    add_gang(fake, "a")
    converge(ctl)
    remove_gang(fake, "a")
    converge(ctl)
    add_gang(fake, "b")
    converge(ctl)
    assert claim(fake, "b")["status"]["trafficClass"] == 0


def test_without_classes_nothing_is_written(fake) -> None:
    ctl = controller(fake)
    add_gang(fake, "a")
    add_gang(fake, "b")
    converge(ctl)
    for gang in ("a", "b"):
        assert "trafficClass" not in claim(fake, gang)["status"]
        assert classes_of(fake, gang) == {(None, None)}


def test_a_broken_class_list_is_refused_naming_the_field(fake) -> None:
    fake.put(kube.QUEUE_POLICIES, b.queue_policy("default", trafficClasses=[{"env": {"NCCL IB SL": "3"}}, {}]))
    ctl = controller(fake)
    add_gang(fake, "a")
    converge(ctl)
    status = fake.obj(kube.QUEUE_POLICIES, None, "default").get("status") or {}
    assert "spec.trafficClasses[0].env" in json.dumps(status)
    assert "trafficClass" not in claim(fake, "a")["status"]
