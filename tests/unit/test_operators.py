"""The JobSet controller's out-of-cluster configuration and webhook registrations, from its real module."""

from __future__ import annotations

import pathlib

import pytest

from volcano_metronome.devtools import components, gosource, operators, recipes
from volcano_metronome.devtools.registrations import RegistrationError, point_at_url


@pytest.fixture(scope="module")
def jobset_module() -> pathlib.Path:
    tree, why = gosource.module_tree("sigs.k8s.io/jobset", "v0.12.0")
    assert tree is not None, why
    return tree


def test_jobsets_webhooks_select_only_jobset_pods_and_point_at_loopback(jobset_module: pathlib.Path) -> None:
    configurations = operators.jobset_webhooks(jobset_module / recipes.JOBSET_WEBHOOKS,
                                               [jobset_module / p for p in recipes.JOBSET_WEBHOOK_PATCHES])
    assert [c["metadata"]["name"] for c in configurations] == ["jobset-mutating-webhook-configuration",
                                                               "jobset-validating-webhook-configuration"]
    for configuration in configurations:
        pods = [w for w in configuration["webhooks"] if w["rules"][0]["resources"] == ["pods"]]
        assert [w["objectSelector"] for w in pods] == [
            {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}]
        local = point_at_url(configuration, "https://127.0.0.1:9443", b"ca")
        assert all(w["clientConfig"]["url"].startswith("https://127.0.0.1:9443/") for w in local["webhooks"])


def test_an_unknown_patch_is_an_error(jobset_module: pathlib.Path, tmp_path: pathlib.Path) -> None:
    patch = tmp_path / "patch.yaml"
    patch.write_text("- op: add\n  path: /webhooks/0/timeoutSeconds\n  value: 3\n")
    with pytest.raises(RegistrationError, match="unsupported patch add /webhooks/0/timeoutSeconds"):
        operators.jobset_webhooks(jobset_module / recipes.JOBSET_WEBHOOKS, [patch])


def test_kueue_enables_the_jobset_integration_only_when_asked(tmp_path: pathlib.Path) -> None:
    plain = components.kueue_configuration(namespace="k", health_port=1, webhook_port=2, cert_dir=tmp_path)
    assert plain["integrations"]["frameworks"] == ["batch/job"]
    with_jobset = components.kueue_configuration(namespace="k", health_port=1, webhook_port=2, cert_dir=tmp_path,
                                                 frameworks=(*components.KUEUE_FRAMEWORKS,
                                                             operators.KUEUE_JOBSET_FRAMEWORK))
    assert with_jobset["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]
    config = operators.jobset_configuration(health_port=1, webhook_port=2, cert_dir=tmp_path)
    assert config["internalCertManagement"] == {"enable": False} and config["webhook"]["host"] == "127.0.0.1"


def test_dev_clusters_jobset_sample_is_a_valid_jobset_our_webhook_manages() -> None:
    import yaml

    from tests.admission.builders import patched, review, schema_errors
    from volcano_metronome import api
    from volcano_metronome.admission import Context, admit
    from volcano_metronome.devtools import devcluster

    (jobset,) = yaml.safe_load_all(devcluster.SAMPLE_JOBSET)
    assert schema_errors(jobset) == []
    after = patched(jobset, admit(review(jobset), Context()).review)
    assert after["metadata"]["annotations"][api.GANG_SIZE] == "3"
    assert {q["metadata"]["name"] for q in yaml.safe_load_all(devcluster.SAMPLE_KUEUE) if q["kind"] == "LocalQueue"} == \
        {jobset["metadata"]["labels"][api.KUEUE_QUEUE_NAME]}


def test_the_training_operator_runs_one_namespace_with_volcano_and_what_its_rotator_waits_for() -> None:
    args = operators.training_operator_args(pathlib.Path("/bin/to"), kubeconfig=pathlib.Path("/k"), namespace="ns",
                                            health_port=1, webhook_port=2, gang_scheduler="volcano")
    assert "--namespace=ns" in args and "--gang-scheduler-name=volcano" in args and "--enable-scheme=pytorchjob" in args
    assert "--health-probe-bind-address=127.0.0.1:1" in args and "--metrics-bind-address=0" in args
    namespace, secret, webhooks = operators.training_operator_objects("ns")
    assert (namespace["kind"], secret["metadata"]["namespace"]) == ("Namespace", "ns")
    assert webhooks["metadata"]["name"] == operators.TRAINING_OPERATOR_WEBHOOKS
    assert all(w["rules"] == [] for w in webhooks["webhooks"])  # registered for its rotator, never called
