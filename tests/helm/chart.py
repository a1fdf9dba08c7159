"""Render the chart with the real ``helm`` binary and validate what it renders.

Validation of Kubernetes' built-in kinds uses the models of the official Python client (package
``kubernetes``, generated from the Kubernetes OpenAPI spec): they are pydantic models with
``extra='forbid'`` and strict types, so ``model_validate`` reports unknown fields, wrong types and
missing required fields at their path. That is a structural check only: the API server also
validates values (enums, label syntax, cross-field rules), which the integration tier covers by
dry-run creating the rendered chart on a real kube-apiserver. One known difference: the client
types resource quantities as strings where the server also accepts JSON numbers, so quantities in
values must be quoted ("1", not 1) to pass here.

Our own kinds are validated against our CRDs' openAPIV3Schema (tests/crds/crd_schema.py).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import tempfile
from typing import Any

import kubernetes.client
import pydantic
import pytest
import yaml

from volcano_metronome.devtools import binaries

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "volcano-metronome"
KUBE_VERSION = "1.36.0"  # the version of the control plane the integration tier builds
NAMESPACE = "metronome-system"
RELEASE = "metronome"


def helm() -> pathlib.Path:
    """The helm binary built by `volcano-metronome tools build helm`; skip locally, fail on CI without it."""
    try:
        return binaries.binary_path("helm")
    except binaries.MissingBinary as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and helm is missing: {exc}", pytrace=False)
        pytest.skip(str(exc))


def run_helm(*args: str, kubeconfig: pathlib.Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with an empty, private home so no user configuration or repository leaks in."""
    with tempfile.TemporaryDirectory(prefix="metronome-helm-") as home:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return subprocess.run([str(helm()), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _values_file(values: dict[str, Any] | None, directory: str) -> list[str]:
    if not values:
        return []
    path = pathlib.Path(directory) / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["--values", str(path)]


def template(values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE, release: str = RELEASE,
             extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders (hooks included, CRDs not), or a failed test with helm's error."""
    with tempfile.TemporaryDirectory(prefix="metronome-values-") as tmp:
        completed = run_helm("template", release, str(CHART), "--namespace", namespace,
                             "--kube-version", KUBE_VERSION, *_values_file(values, tmp), *extra)
    if completed.returncode != 0:
        pytest.fail(f"helm template failed:\n{completed.stderr}", pytrace=False)
    return [doc for doc in yaml.safe_load_all(completed.stdout) if doc]


def template_error(values: dict[str, Any]) -> str:
    """helm's error message for values that must be refused (fails the test if helm accepts them)."""
    with tempfile.TemporaryDirectory(prefix="metronome-values-") as tmp:
        completed = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                             "--kube-version", KUBE_VERSION, *_values_file(values, tmp))
    if completed.returncode == 0:
        pytest.fail(f"helm template accepted values it should refuse: {values}", pytrace=False)
    return completed.stderr


def lint(values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """``helm lint --strict`` of the chart with ``values``."""
    with tempfile.TemporaryDirectory(prefix="metronome-values-") as tmp:
        return run_helm("lint", str(CHART), "--strict", "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
                        *_values_file(values, tmp))


# ----------------------------------------------------------------------------- validation

def builtin_model(obj: dict[str, Any]) -> type[pydantic.BaseModel] | None:
    """The Python client's model of a built-in kind (``apps/v1`` ``Deployment`` -> ``V1Deployment``)."""
    version = obj["apiVersion"].rsplit("/", 1)[-1]
    model = getattr(kubernetes.client, f"{version[0].upper()}{version[1:]}{obj['kind']}", None)
    return model if isinstance(model, type) and issubclass(model, pydantic.BaseModel) else None


def builtin_errors(obj: dict[str, Any]) -> list[str]:
    """Unknown fields, wrong types and missing required fields of a built-in object."""
    model = builtin_model(obj)
    if model is None:
        return [f"no Kubernetes client model for {obj['apiVersion']} {obj['kind']}"]
    try:
        model.model_validate(obj)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return []


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(kind/name, pod spec)`` of every workload that runs pods."""
    found = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            found.append((f"{obj['kind']}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "Pod":
            found.append((f"Pod/{obj['metadata']['name']}", obj["spec"]))
    return found


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The objects of one kind."""
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of ``kind`` (and ``name``)."""
    matches = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {[m['metadata']['name'] for m in matches]}"
    return matches[0]


def openapi_to_draft7(node: dict[str, Any]) -> dict[str, Any]:
    """A CRD's OpenAPI v3.0 schema as JSON Schema draft-07, closed to unknown keys (for values.schema.json).

    CEL rules and Kubernetes extensions have no JSON Schema form and are dropped; the rendered object
    is still validated against the CRD itself.
    """
    out: dict[str, Any] = {}
    for key in ("description", "type", "enum", "maximum", "minLength", "maxLength", "pattern", "minItems",
                "maxItems", "required", "maxProperties"):
        if key in node:
            out[key] = node[key]
    if "minimum" in node:
        out["exclusiveMinimum" if node.get("exclusiveMinimum") else "minimum"] = node["minimum"]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if "properties" in node:
        out["properties"] = {k: openapi_to_draft7(v) for k, v in node["properties"].items()}
        out["additionalProperties"] = False
    elif isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = openapi_to_draft7(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        out["items"] = openapi_to_draft7(node["items"])
    return out


def values_schema() -> dict[str, Any]:
    """The chart's values.schema.json."""
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def default_values() -> dict[str, Any]:
    """The chart's values.yaml."""
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values
