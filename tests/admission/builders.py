"""Reviews, upstream manifests and schema checks shared by the admission and webhook tests.

Upstream CRDs and examples are read from ``shared/upstream`` as ``devtools.sources.upstream_dir``
finds it (``METRONOME_UPSTREAM_DIR`` overrides); they are never copied into the repository. An example
part that was not gathered (tests/conftest.py) simply contributes no cases.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import pathlib
import uuid
from typing import Any, Iterator

import jsonpatch
import jsonschema
import pytest
import yaml

from volcano_metronome import api
from volcano_metronome.devtools import sources


@functools.cache
def upstream() -> pathlib.Path:
    """``shared/upstream`` (an error naming where it was looked for when it is missing)."""
    return sources.upstream_dir()


# (group, version, kind) the webhook handles -> the upstream CRD file that defines it (None: built-in kind).
HANDLED = {
    ("batch.volcano.sh", "v1alpha1", "Job"): "crds/volcano/batch.volcano.sh_jobs.yaml",
    ("scheduling.volcano.sh", "v1beta1", "PodGroup"): "crds/volcano/scheduling.volcano.sh_podgroups.yaml",
    ("kueue.x-k8s.io", "v1beta2", "Workload"): "crds/kueue/kueue.x-k8s.io_workloads.yaml",
    ("kueue.x-k8s.io", "v1beta1", "Workload"): "crds/kueue/kueue.x-k8s.io_workloads.yaml",
    ("batch", "v1", "Job"): None,
    ("", "v1", "Pod"): None,
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"): "crds/jobset/jobset.x-k8s.io_jobsets.yaml",
    ("kubeflow.org", "v1", "PyTorchJob"): "crds/training-operator/kubeflow.org_pytorchjobs.yaml",
    ("kubeflow.org", "v2beta1", "MPIJob"): "crds/mpi-operator/kubeflow.org_mpijobs.yaml",
}
# Projects whose example parts tests may need (tests/conftest.py deselects those whose part is missing).
EXAMPLE_PROJECTS = {"volcano", "kueue", "scheduler-plugins", "training-operator", "mpi-operator", "trainer"}
MODEL = {api.MODEL: "resnet50"}
EXPLICIT = {api.PERIOD_MS: "100", api.WINDOWS: '[{"start_ms": 60, "len_ms": 40, "gbps": 50}]', api.JITTER_MS: "1"}


def gvk(obj: dict[str, Any]) -> tuple[str, str, str]:
    """``(group, version, kind)`` of a manifest."""
    group, _, version = obj["apiVersion"].rpartition("/")
    return group, version, obj["kind"]


def review(obj: Any, *, kind: tuple[str, str, str] | None = None, namespace: str = "default",
           operation: str = "CREATE", dry_run: bool = False, sub_resource: str | None = None,
           uid: str | None = None) -> dict[str, Any]:
    """An ``admission.k8s.io/v1`` AdmissionReview of ``obj`` as the API server sends it."""
    group, version, kind_name = kind or gvk(obj)
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind_name},
        "resource": {"group": group, "version": version, "resource": kind_name.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": kind_name},
        "name": _name(obj),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _name(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


def response(review_out: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionResponse of a response review."""
    assert review_out["apiVersion"] == "admission.k8s.io/v1" and review_out["kind"] == "AdmissionReview"
    out: dict[str, Any] = review_out["response"]
    return out


def ops_of(review_out: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSONPatch ops of a response (empty when it carries none)."""
    resp = response(review_out)
    if "patch" not in resp:
        assert "patchType" not in resp
        return []
    assert resp["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(resp["patch"], validate=True))
    return ops


def patched(obj: dict[str, Any], review_out: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the response's patch applied (as the API server applies it)."""
    result: dict[str, Any] = jsonpatch.apply_patch(obj, ops_of(review_out))
    return result


def with_annotations(obj: dict[str, Any], annotations: dict[str, str], path: tuple[str, ...] = ("metadata",)) -> dict[str, Any]:
    """A copy of ``obj`` with ``annotations`` added to the metadata at ``path``."""
    out = copy.deepcopy(obj)
    node = out
    for key in path:
        node = node.setdefault(key, {})
    node.setdefault("annotations", {}).update(annotations)
    return out


def upstream_examples() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every upstream example manifest of a kind the webhook handles, named ``file#index``."""
    for path in sorted((upstream() / "examples").glob("*/*.yaml")):
        for index, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
            if gvk(doc) in HANDLED:
                yield f"{path.parent.name}/{path.name}#{index}", doc


def as_params(cases: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """``(name, obj)`` cases as pytest parameters, each upstream example marked ``upstream_examples(<its project>)``."""
    projects = EXAMPLE_PROJECTS
    return [pytest.param(name, obj, id=name, marks=[pytest.mark.upstream_examples(project)] if project in projects else [])
            for name, obj in cases for project in [name.partition("/")[0]]]


def trainer_jobsets(queue: str | None = "user-queue") -> list[tuple[str, dict[str, Any]]]:
    """JobSets as Kubeflow Trainer makes them from its upstream runtimes (``spec.template`` of a
    ClusterTrainingRuntime is a JobSet template; JobSet's own module ships no real example), named
    ``trainer/<file>#<index>``, labelled for Kueue ``queue`` unless None."""
    out = []
    for path in sorted((upstream() / "examples" / "trainer").glob("*.yaml")):
        for index, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
            if doc.get("kind") not in ("ClusterTrainingRuntime", "TrainingRuntime"):
                continue
            template = copy.deepcopy(doc["spec"]["template"])
            metadata: dict[str, Any] = {"name": doc["metadata"]["name"], "namespace": "default",
                                        **({"labels": {api.KUEUE_QUEUE_NAME: queue}} if queue else {})}
            out.append((f"trainer/{path.name}#{index}", {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                        "metadata": metadata, "spec": template["spec"]}))
    return out


def workload(version: str, *, annotations: dict[str, str] | None = None,
             template_annotations: dict[str, str] | None = None, counts: tuple[int, ...] = (3,),
             queue: str = "user-queue") -> dict[str, Any]:
    """A Kueue Workload as Kueue's job controller creates one (no upstream example of a Workload exists)."""
    pod_sets = []
    for i, count in enumerate(counts):
        template: dict[str, Any] = {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "trainer", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53", "args": ["pause"],
             "resources": {"requests": {"cpu": "1", "memory": "200Mi"}}}]}}
        if template_annotations:
            template["metadata"] = {"annotations": dict(template_annotations)}
        pod_sets.append({"name": "main" if i == 0 else f"set-{i}", "count": count, "template": template})
    metadata: dict[str, Any] = {
        "name": "job-sample-job-3f1a2", "namespace": "default",
        "labels": {"kueue.x-k8s.io/job-uid": "0b6f6c0e-6b1e-4a53-9b49-2f8f2c1e7d11"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "sample-job",
                             "uid": "0b6f6c0e-6b1e-4a53-9b49-2f8f2c1e7d11", "controller": True,
                             "blockOwnerDeletion": True}],
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Workload", "metadata": metadata,
            "spec": {"queueName": queue, "podSets": pod_sets}}


def pod_from_template(template: dict[str, Any], *, name: str, owner: dict[str, Any] | None = None,
                      annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod a controller makes from ``template`` (its metadata copied, owner and extra keys added)."""
    metadata = copy.deepcopy(template.get("metadata") or {})
    metadata.pop("name", None)
    metadata["name"] = name
    metadata["namespace"] = "default"
    if annotations:
        metadata.setdefault("annotations", {}).update(annotations)
    if labels:
        metadata.setdefault("labels", {}).update(labels)
    if owner:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template["spec"])}


# ------------------------------------------------------------------------------------- schemas
@functools.lru_cache(maxsize=None)
def _crd_validator(path: str, version: str) -> jsonschema.Draft4Validator:
    # libyaml when present: the Workload CRD is 1.4 MB of YAML
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((upstream() / path).read_text(), Loader=loader)  # noqa: S506 - a safe loader
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return jsonschema.Draft4Validator(_strict(entry["schema"]["openAPIV3Schema"]), format_checker=_checker())
    raise KeyError(f"{path} has no version {version}")


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Reject unknown fields (the API server would prune them: a field we add that is not in the schema
    would silently vanish). Top-level ``metadata`` stays open (ObjectMeta is checked separately)."""
    result = copy.deepcopy(schema)

    def close(node: Any, top: bool) -> None:
        if not isinstance(node, dict):
            return
        if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for key, child in node.get("properties", {}).items():
            if not (top and key == "metadata"):
                close(child, False)
        if isinstance(node.get("items"), dict):
            close(node["items"], False)
        if isinstance(node.get("additionalProperties"), dict):
            close(node["additionalProperties"], False)

    close(result, True)
    return result


def _checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    checker.checks("int32")(lambda v: not isinstance(v, int) or -(2**31) <= v < 2**31)
    checker.checks("int64")(lambda v: not isinstance(v, int) or -(2**63) <= v < 2**63)
    return checker


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Violations of ``obj`` against its upstream CRD schema, or against the built-in structure we write."""
    key = gvk(obj)
    path = HANDLED[key]
    validator = _crd_validator(path, key[1]) if path else _builtin_validator(key[2])
    found = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(obj)]
    return found + metadata_errors(obj) + (volume_errors(obj["spec"]) if key == ("", "v1", "Pod") and not found else [])


def volume_errors(spec: dict[str, Any]) -> list[str]:
    """The API server's cross-field rules on volumes: unique names; per container, mounts of existing
    volumes at distinct paths."""
    names = [v["name"] for v in spec.get("volumes") or []]
    found = [f"spec.volumes: duplicate name {n}" for n in sorted(set(names)) if names.count(n) > 1]
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or []):
            mounts = container.get("volumeMounts") or []
            paths = [m["mountPath"].rstrip("/") for m in mounts]
            found += [f"spec.{key}[{i}].volumeMounts: duplicate mountPath {p}" for p in sorted(set(paths))
                      if paths.count(p) > 1]
            found += [f"spec.{key}[{i}].volumeMounts: {m['name']} is not a volume" for m in mounts
                      if m["name"] not in names]
    return found


def metadata_errors(obj: dict[str, Any]) -> list[str]:
    """ObjectMeta rules for what we write: string maps, qualified keys, label values."""
    found = []
    for where in _metadatas(obj):
        meta = where[1]
        for field in ("annotations", "labels"):
            values = meta.get(field)
            if values is None:
                continue
            if not isinstance(values, dict):
                found.append(f"{where[0]}.{field}: not a map")
                continue
            for k, v in values.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    found.append(f"{where[0]}.{field}[{k!r}]: not a string map")
            if field == "labels" and api.MANAGED_LABEL in values and values[api.MANAGED_LABEL] != "true":
                found.append(f"{where[0]}.labels: bad managed label value")
    return found


def _metadatas(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(obj.get("metadata"), dict):
        yield "metadata", obj["metadata"]
    spec = obj.get("spec") or {}
    templates = [("spec.template", spec.get("template"))]
    templates += [(f"spec.tasks[{i}].template", t.get("template")) for i, t in enumerate(spec.get("tasks") or [])]
    templates += [(f"spec.podSets[{i}].template", t.get("template")) for i, t in enumerate(spec.get("podSets") or [])]
    templates += [(f"spec.replicatedJobs[{i}].template.spec.template", ((t.get("template") or {}).get("spec") or {})
                   .get("template")) for i, t in enumerate(spec.get("replicatedJobs") or [])]
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs"):
        templates += [(f"spec.{key}.{t}.template", r.get("template")) for t, r in (spec.get(key) or {}).items()]
    for name, template in templates:
        if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
            yield f"{name}.metadata", template["metadata"]


@functools.lru_cache(maxsize=None)
def _builtin_validator(kind: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(BUILTIN_SCHEMAS[kind], format_checker=_checker())


_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_FIELD_REF = {"type": "object", "required": ["fieldPath"], "additionalProperties": False, "properties": {
    "apiVersion": {"type": "string"},
    "fieldPath": {"type": "string", "pattern": r"^metadata\.annotations\['[a-z0-9./-]+'\]$|^[a-zA-Z.]+$"}}}
_ENV_VAR = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "value": {"type": "string"},
        "valueFrom": {"type": "object", "additionalProperties": False, "properties": {
            "fieldRef": _FIELD_REF,
            "configMapKeyRef": {"type": "object"}, "secretKeyRef": {"type": "object"},
            "resourceFieldRef": {"type": "object"}}},
    },
}
_VOLUME_MOUNT = {
    "type": "object", "required": ["name", "mountPath"], "additionalProperties": False,
    "properties": {"name": {"type": "string", "minLength": 1}, "mountPath": {"type": "string", "pattern": "^/"},
                   "readOnly": {"type": "boolean"}, "subPath": {"type": "string"}, "subPathExpr": {"type": "string"},
                   "mountPropagation": {"type": "string"}, "recursiveReadOnly": {"type": "string"}},
}
_DOWNWARD_API = {"type": "object", "additionalProperties": False, "properties": {
    "defaultMode": {"type": "integer", "minimum": 0, "maximum": 0o777},
    "items": {"type": "array", "items": {
        "type": "object", "required": ["path"], "additionalProperties": False, "properties": {
            "path": {"type": "string", "pattern": r"^[^/.][^/]*$"},
            "mode": {"type": "integer", "minimum": 0, "maximum": 0o777},
            "fieldRef": _FIELD_REF,
            "resourceFieldRef": {"type": "object"}}}}}}
# A volume is its name plus exactly one source; the downward API source is the one we write, in full.
_VOLUME = {"type": "object", "required": ["name"], "minProperties": 2, "maxProperties": 2,
           "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                          "downwardAPI": _DOWNWARD_API},
           "additionalProperties": {"type": "object"}}
_CONTAINER = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "env": {"type": "array", "items": _ENV_VAR},
    "volumeMounts": {"type": "array", "items": _VOLUME_MOUNT}}}
_POD_SPEC = {"type": "object", "required": ["containers"], "properties": {
    "containers": {"type": "array", "minItems": 1, "items": _CONTAINER},
    "initContainers": {"type": "array", "items": _CONTAINER},
    "volumes": {"type": "array", "items": _VOLUME},
    "schedulingGates": {"type": "array", "items": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": {"type": "string", "minLength": 1}}}},
}}
_META = {"type": "object", "properties": {"annotations": _STRING_MAP, "labels": _STRING_MAP}}
# The parts of the built-in kinds the webhook touches (Kubernetes' own types, as in k8s.io/api).
BUILTIN_SCHEMAS: dict[str, dict[str, Any]] = {
    "Pod": {"type": "object", "required": ["metadata", "spec"],
            "properties": {"metadata": _META, "spec": _POD_SPEC}},
    "Job": {"type": "object", "required": ["spec"], "properties": {
        "metadata": _META,
        "spec": {"type": "object", "required": ["template"], "properties": {
            "parallelism": {"type": "integer", "minimum": 0}, "completions": {"type": "integer", "minimum": 0},
            "template": {"type": "object", "properties": {"metadata": _META, "spec": _POD_SPEC}}}}}},
}
