"""Every upstream example the webhook handles, admitted in-process: schema-valid afterwards, idempotent.

(``tests/webhook/test_examples.py`` sends the same reviews to the real server over HTTPS.)
"""

from __future__ import annotations

import pytest

from tests.admission.builders import (
    EXPLICIT,
    MODEL,
    gvk,
    ops_of,
    patched,
    review,
    schema_errors,
    as_params,
    trainer_jobsets,
    upstream_examples,
    with_annotations,
    workload,
)
from volcano_metronome import api
from volcano_metronome.admission import Context, admit

CTX = Context()
EXAMPLES = list(upstream_examples())
WORKLOADS = [(f"synthesized Workload {v}", workload(v)) for v in ("v1beta2", "v1beta1")]
JOBSETS = trainer_jobsets()
CASES = EXAMPLES + WORKLOADS + JOBSETS


@pytest.mark.upstream_examples("volcano", "kueue", "training-operator", "mpi-operator", "trainer")
def test_the_examples_cover_every_kind_we_handle():
    kinds = {gvk(obj) for _, obj in CASES}
    assert kinds == {("batch.volcano.sh", "v1alpha1", "Job"), ("scheduling.volcano.sh", "v1beta1", "PodGroup"),
                     ("kueue.x-k8s.io", "v1beta2", "Workload"), ("kueue.x-k8s.io", "v1beta1", "Workload"),
                     ("batch", "v1", "Job"), ("", "v1", "Pod"), ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
                     ("kubeflow.org", "v1", "PyTorchJob"), ("kubeflow.org", "v2beta1", "MPIJob")}
    assert len(EXAMPLES) >= 16 and len(JOBSETS) >= 2


@pytest.mark.parametrize("name, obj", as_params(CASES))
def test_examples_are_valid_before_we_touch_them(name, obj):
    assert schema_errors(obj) == []


@pytest.mark.parametrize("annotations", [None, MODEL, EXPLICIT], ids=["plain", "model", "explicit"])
@pytest.mark.parametrize("name, obj", as_params(CASES))
def test_admitted_examples_stay_schema_valid_and_idempotent(name, obj, annotations):
    if annotations:
        obj = with_annotations(obj, annotations)
    first = admit(review(obj), CTX)
    assert first.verdict in ("allowed", "patched"), first.review
    after = patched(obj, first.review)
    assert schema_errors(after) == []
    second = admit(review(after), CTX)
    assert second.verdict == "allowed" and ops_of(second.review) == []
    managed = annotations is not None and not (gvk(obj) == ("", "v1", "Pod") and api.KUEUE_POD_GROUP_NAME not in
                                               (obj["metadata"].get("labels") or {}))
    if managed:
        assert api.PROFILE in after["metadata"]["annotations"]
        assert int(after["metadata"]["annotations"][api.GANG_SIZE]) >= 1
    else:
        assert ops_of(first.review) == []
