"""Load our CRDs and validate objects against their openAPIV3Schema with jsonschema.

What this checks is what the API server checks structurally: types, required fields, enums, ranges,
patterns, formats, list sizes, and (as ``kubectl apply``'s default strict field validation does)
unknown fields. What it cannot check is the CEL ``x-kubernetes-validations``: the integration tier
creates the same objects on a real kube-apiserver, which evaluates them (tests/integration/test_crds_apply.py).
"""

from __future__ import annotations

import copy
import datetime
import functools
import pathlib
from typing import Any, Iterator

import jsonschema
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"
EXAMPLES_DIR = CRD_DIR / "examples"
CHART_CRD_DIR = REPO / "helm" / "volcano-metronome" / "crds"
INVALID_CASES = pathlib.Path(__file__).resolve().parent / "invalid_cases.yaml"

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@functools.lru_cache(maxsize=1)
def upstream_crds() -> tuple[dict[str, Any], ...]:
    """Every upstream CRD in shared/upstream/crds (Volcano, Kueue, scheduler-plugins), parsed once."""
    from volcano_metronome.devtools.sources import upstream_dir

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser: these files are 2 MB
    found = []
    for path in sorted((upstream_dir() / "crds").rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=loader):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                found.append(doc)
    return tuple(found)


def crd_files() -> list[pathlib.Path]:
    """The CRD manifests, one per kind."""
    return sorted(CRD_DIR.glob("*.yaml"))


def load_crds() -> dict[str, dict[str, Any]]:
    """Every CRD by kind (a fresh copy each call: callers may change it)."""
    return copy.deepcopy(_parsed_crds())


@functools.lru_cache(maxsize=1)
def _parsed_crds() -> dict[str, dict[str, Any]]:
    crds: dict[str, dict[str, Any]] = {}
    for path in crd_files():
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = crd
    return crds


def example_objects() -> Iterator[tuple[pathlib.Path, dict[str, Any]]]:
    """Every example custom resource under crds/examples/, with the file it comes from."""
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path, doc


def version_schema(crd: dict[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    """The openAPIV3Schema of one version of a CRD."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` that rejects unknown fields, as strict field validation does.

    ``metadata`` stays open: ObjectMeta is validated by the API server itself, not by the CRD.
    """
    result = copy.deepcopy(schema)

    def close(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
            if path != ("metadata",) and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
        for key, child in node.get("properties", {}).items():
            close(child, (*path, key))
        if isinstance(node.get("items"), dict):
            close(node["items"], (*path, "[]"))
        if isinstance(node.get("additionalProperties"), dict):
            close(node["additionalProperties"], (*path, "{}"))

    close(result, ())
    return result


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())

    def date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if "T" not in value.upper():
            raise ValueError(f"{value!r} has no time part")
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return True

    checker.checks("date-time", raises=ValueError)(date_time)

    for name, (low, high) in _INT_RANGES.items():

        def in_range(value: object, low: int = low, high: int = high) -> bool:
            return not isinstance(value, int) or isinstance(value, bool) or low <= value <= high

        checker.checks(name)(in_range)
    return checker


def validator(crd: dict[str, Any]) -> jsonschema.Draft4Validator:
    """A validator for objects of ``crd`` (OpenAPI v3.0 schemas use draft-4 style exclusiveMinimum)."""
    return jsonschema.Draft4Validator(strict(version_schema(crd)), format_checker=_format_checker())


def errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """Schema violations of ``obj``, each as ``path: message``; empty when valid."""
    found = sorted(validator(crd).iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in found]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every sub-schema of ``node`` with its dotted path (``[]`` for items, ``{}`` for map values)."""
    if not isinstance(node, dict):
        return
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def camel_to_snake(data: Any) -> Any:
    """``{"periodMs": 1}`` -> ``{"period_ms": 1}``, recursively: what the controller does for the core."""
    if isinstance(data, dict):
        return {_snake(key): camel_to_snake(value) for key, value in data.items()}
    if isinstance(data, list):
        return [camel_to_snake(item) for item in data]
    return data


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
