"""How the local stack runs Volcano and kwok: argv, configuration files, stages (pure parts)."""

from __future__ import annotations

import pathlib

import yaml

from volcano_metronome.devtools import components, gosource, volcano

KWOK_POD_COMPLETE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.ownerReferences.[].kind', operator: In, values: [Job]}
"""


def test_scheduler_conf_lives_alone_in_its_directory(tmp_path: pathlib.Path) -> None:
    """vc-scheduler reloads its configuration on any write in the file's directory."""
    default = tmp_path / "chart" / "volcano-scheduler.conf"
    default.parent.mkdir()
    default.write_text('actions: "enqueue, allocate, backfill"\n')
    conf = volcano.scheduler_conf(default, tmp_path / "stack" / "volcano-scheduler" / "conf")
    assert conf.read_text() == default.read_text()
    assert [p.name for p in conf.parent.iterdir()] == ["volcano-scheduler.conf"]
    args = volcano.scheduler_args(pathlib.Path("/bin/vc-scheduler"), kubeconfig=tmp_path / "kc", conf=conf,
                                  healthz_port=1, metrics_port=2, dump_dir=tmp_path / "stack" / "volcano-scheduler")
    assert f"--scheduler-conf={conf}" in args and "--scheduler-name=volcano" in args
    # Every listener on loopback: the programs' defaults (:8080, :11251) listen on every interface.
    assert "--healthz-address=127.0.0.1:1" in args and "--listen-address=127.0.0.1:2" in args


def test_webhook_manager_serves_on_loopback_with_its_certificate(tmp_path: pathlib.Path) -> None:
    args = volcano.webhook_manager_args(pathlib.Path("/bin/vc-webhook"), kubeconfig=tmp_path / "kc", port=8443,
                                        healthz_port=8444, cert_dir=tmp_path)
    assert "--webhook-url=https://127.0.0.1:8443" in args and "--listen-address=127.0.0.1" in args
    assert f"--ca-cert-file={tmp_path / 'ca.crt'}" in args
    assert f"--enabled-admission={volcano.ENABLED_ADMISSIONS}" in args
    assert volcano.chart_values()["custom"]["enabled_admissions"] == volcano.ENABLED_ADMISSIONS


def test_kwok_completes_only_pods_of_batch_jobs() -> None:
    stage = components.kwok_stage(KWOK_POD_COMPLETE)
    keys = {e["key"]: e["values"] for e in stage["spec"]["selector"]["matchExpressions"]}
    assert keys[".metadata.ownerReferences.[].apiVersion"] == ["batch/v1"]
    other = components.kwok_stage(KWOK_POD_COMPLETE.replace("pod-complete", "pod-ready"))
    assert other == yaml.safe_load(KWOK_POD_COMPLETE.replace("pod-complete", "pod-ready"))


def test_go_mod_local_replacements_and_requirements() -> None:
    go_mod = (
        "module volcano.sh/volcano\n\nrequire (\n\tvolcano.sh/apis v1.15.1\n\tk8s.io/api v0.35.3\n)\n\n"
        "replace (\n\tk8s.io/api => k8s.io/api v0.35.3\n\tvolcano.sh/apis => ./staging/src/volcano.sh/apis\n)\n"
        "replace example.com/x => ../x // a comment\n"
    )
    assert gosource.local_replacements(go_mod) == {"volcano.sh/apis": "staging/src/volcano.sh/apis",
                                                   "example.com/x": "../x"}
    assert gosource.required_version(go_mod, "volcano.sh/apis") == "v1.15.1"
    assert gosource.required_version(go_mod, "example.com/none") is None
