"""Our CRDs: names from api.py, structural schemas with bounded lists, the contract field names,
printer columns that point at real fields, short names nobody else uses, and the chart's copies."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from tests.crds.crd_schema import CHART_CRD_DIR, crd_files, load_crds, upstream_crds, version_schema, walk
from volcano_metronome import api

CRDS = load_crds()
KINDS = {"STBandwidthClaim": (api.CLAIMS, "Namespaced"), "STBandwidthCapacity": (api.CAPACITIES, "Cluster"),
         "QueuePolicy": (api.QUEUE_POLICIES, "Cluster")}

# The field names the controller codes against (issue 5). Changing one is an API change.
SPEC_FIELDS = {
    "STBandwidthClaim": {"profile", "gangRef", "priority", "queuePolicy"},
    "STBandwidthCapacity": {"capacityGbps", "tier", "nodes", "nodeSelector", "direction"},
    "QueuePolicy": {"volcanoQueues", "kueueClusterQueues", "ordering", "agingPerMinute", "priorityWeight",
                    "cushionSlots", "overflowTolerance", "maxCandidates", "lockOnDemand", "maxHoldSeconds",
                    "defaultProfile", "trafficClasses",
                    "reoptimization", "profilePolicy", "profileTolerance"},
}
STATUS_FIELDS = {
    "STBandwidthClaim": {"nodes", "members", "offsetMs", "periodMs", "epoch", "links", "predictedOverflowGbpsMs",
                         "feasible", "locked", "decidedAt", "heldSince", "observedGeneration", "conditions",
                         "measuredProfile", "adoptedProfile", "trafficClass", "trafficClassEnv"},
    "STBandwidthCapacity": {"observedGeneration", "conditions", "matchedNodes"},
    "QueuePolicy": {"observedGeneration", "conditions", "pendingGangs", "placedGangs"},
}
CEL_MACROS = {"all", "exists", "exists_one", "map", "filter"}
PRINTER_COLUMNS = {
    "STBandwidthClaim": ["Gang", "Kind", "Placed", "Reason", "Offset", "Period", "Locked", "Class", "Nodes", "Priority",
                         "Overflow", "Held", "Age"],
    "STBandwidthCapacity": ["Capacity", "Tier", "Direction", "Nodes", "Age"],
    "QueuePolicy": ["Ordering", "Tolerance", "Pending", "Placed", "Ready", "Age"],
}
# Short names of the built-in kinds of Kubernetes 1.36 (`kubectl api-resources`); the integration
# tier checks against the real API server's discovery as well.
CORE_SHORT_NAMES = {
    "cm", "cs", "ep", "ev", "limits", "no", "ns", "po", "pv", "pvc", "quota", "rc", "sa", "svc", "crd", "crds",
    "deploy", "ds", "rs", "sts", "hpa", "cj", "csr", "ing", "netpol", "pdb", "pc", "sc", "vac",
}


def _spec(kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = version_schema(CRDS[kind])["properties"]["spec"]
    return spec


def test_one_crd_per_kind_named_as_in_api_py() -> None:
    assert set(CRDS) == set(KINDS)
    for kind, (plural, scope) in KINDS.items():
        crd = CRDS[kind]
        spec = crd["spec"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert spec["group"] == api.GROUP
        assert spec["names"]["plural"] == plural
        assert spec["names"]["singular"] == kind.lower()
        assert spec["names"]["listKind"] == f"{kind}List"
        assert crd["metadata"]["name"] == f"{plural}.{api.GROUP}"
        assert spec["scope"] == scope
        assert [v["name"] for v in spec["versions"]] == [api.VERSION]
        assert spec["versions"][0]["served"] and spec["versions"][0]["storage"]
        assert spec["versions"][0]["subresources"] == {"status": {}}
    assert sorted(p.name for p in crd_files()) == sorted(f"{api.GROUP}_{p}.yaml" for p, _ in KINDS.values())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_contract_field_names(kind: str) -> None:
    schema = version_schema(CRDS[kind])
    assert set(schema["properties"]["spec"]["properties"]) == SPEC_FIELDS[kind]
    assert set(schema["properties"]["status"]["properties"]) == STATUS_FIELDS[kind]
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_is_structural_and_bounded(kind: str) -> None:
    """Every node is typed, every object closed, every list and map bounded (CEL cost stays estimable)."""
    problems = []
    for path, node in walk(version_schema(CRDS[kind])):
        if path == ".metadata":
            assert node == {"type": "object"}
            continue
        if "type" not in node:
            problems.append(f"{path}: no type")
        if node.get("type") == "array":
            if "maxItems" not in node:
                problems.append(f"{path}: array without maxItems")
            if "x-kubernetes-list-type" not in node:
                problems.append(f"{path}: array without x-kubernetes-list-type")
        if node.get("type") == "object" and path:
            if "properties" not in node and "additionalProperties" not in node:
                problems.append(f"{path}: object with neither properties nor additionalProperties")
            if "additionalProperties" in node and "maxProperties" not in node:
                problems.append(f"{path}: map without maxProperties")
        if node.get("type") == "string" and path.endswith("[]") and "maxLength" not in node:
            problems.append(f"{path}: list item string without maxLength")
        for forbidden in ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "nullable"):
            if forbidden in node:
                problems.append(f"{path}: uses {forbidden}")
    assert not problems, problems


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_defaults_and_enums_satisfy_their_own_schema(kind: str) -> None:
    for path, node in walk(version_schema(CRDS[kind])):
        if "default" in node:
            checked = {k: v for k, v in node.items() if k != "default"}
            jsonschema.Draft4Validator(checked).validate(node["default"])
        for value in node.get("enum", []):
            assert isinstance(value, str), f"{path}: enum value {value!r}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cel_rules_are_well_formed(kind: str) -> None:
    rules = [(path, node, rule) for path, node in walk(version_schema(CRDS[kind]))
             for rule in node.get("x-kubernetes-validations", [])]
    assert rules
    for path, node, rule in rules:
        assert set(rule) <= {"rule", "message", "fieldPath", "reason", "messageExpression"}, (path, rule)
        assert rule["message"] and rule["rule"], (path, rule)
        if "fieldPath" in rule:
            field = rule["fieldPath"].lstrip(".")
            assert field in node.get("properties", {}), f"{path}: fieldPath {rule['fieldPath']} is not a property"
        # Every identifier after "self." must be a property of this node (or a CEL macro over a map's keys):
        # catches renamed fields.
        for name in re.findall(r"\bself\.([A-Za-z]+)", rule["rule"]):
            if name in CEL_MACROS and "additionalProperties" in node:
                continue
            assert name in node.get("properties", {}), f"{path}: rule uses self.{name}, not a property"


def test_cross_field_rules_required_by_the_issue() -> None:
    profile = _spec("STBandwidthClaim")["properties"]["profile"]
    rules = {r["rule"] for r in profile["x-kubernetes-validations"]}
    assert "self.windows.all(w, w.startMs + w.lenMs <= self.periodMs + 1e-9)" in rules
    assert any("jitterMs < self.periodMs" in r for r in rules)
    assert any("exists_one" in r for r in rules) and any("v.startMs >= w.startMs + w.lenMs" in r for r in rules)
    capacity = _spec("STBandwidthCapacity")["x-kubernetes-validations"]
    assert [r["rule"] for r in capacity] == ["has(self.nodes) != has(self.nodeSelector)"]
    default_profile = _spec("QueuePolicy")["properties"]["defaultProfile"]["x-kubernetes-validations"]
    assert default_profile[0]["rule"] == "has(self.model) != has(self.periodMs)"


def test_profile_schemas_agree_between_claim_and_default_profile() -> None:
    """The claim's profile and a QueuePolicy's explicit default profile are the same schema."""
    claim = _spec("STBandwidthClaim")["properties"]["profile"]
    default = _spec("QueuePolicy")["properties"]["defaultProfile"]
    for field in ("periodMs", "windows"):
        assert claim["properties"][field] == default["properties"][field], field
    for field in ("jitterMs", "collective"):  # the claim defaults them; a default profile may be a model instead
        assert {k: v for k, v in claim["properties"][field].items() if k not in ("default", "description")} == {
            k: v for k, v in default["properties"][field].items() if k != "description"}, field
    assert claim["properties"]["collective"]["enum"] == ["ring", "all-to-all"]
    # The profile rules reappear in the default profile, guarded for the model form.
    claim_messages = {r["message"] for r in claim["x-kubernetes-validations"]}
    default_messages = {r["message"] for r in default["x-kubernetes-validations"]}
    assert claim_messages <= default_messages


def test_condition_schema_is_the_same_everywhere() -> None:
    """metav1.Condition, listType map keyed by type, in every CRD."""
    schemas = []
    for kind in KINDS:
        conditions = version_schema(CRDS[kind])["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert set(conditions["items"]["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}
        assert set(conditions["items"]["properties"]) == {
            "type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"}
        schemas.append(conditions["items"])
    assert all(s == schemas[0] for s in schemas)


def _resolves(schema: dict[str, Any], json_path: str) -> bool:
    node: dict[str, Any] = schema
    if json_path == ".metadata.creationTimestamp":
        return True
    path = re.sub(r"\[\?\(.*?\)\]", "", json_path)  # a filter selects items of the list it follows
    for part in path.strip(".").split("."):
        if node.get("type") == "array":
            node = node["items"]
        if part not in node.get("properties", {}):
            return False
        node = node["properties"][part]
    return True


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_printer_columns_point_at_fields(kind: str) -> None:
    version = CRDS[kind]["spec"]["versions"][0]
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == PRINTER_COLUMNS[kind]
    schema = version["schema"]["openAPIV3Schema"]
    for column in columns:
        assert _resolves(schema, column["jsonPath"]), column
        assert column["type"] in {"string", "number", "integer", "date", "boolean"}


def test_placed_column_reads_the_placed_condition() -> None:
    columns = {c["name"]: c for c in CRDS["STBandwidthClaim"]["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Placed"]["jsonPath"] == '.status.conditions[?(@.type=="Placed")].status'
    # Why it waits: the NoFit condition's reason (HeldForContention, ...), which reads Placed once placed.
    assert columns["Reason"]["jsonPath"] == '.status.conditions[?(@.type=="NoFit")].reason'
    assert columns["Held"]["jsonPath"] == ".status.heldSince" and columns["Held"]["type"] == "date"


def _upstream_names() -> dict[str, str]:
    names: dict[str, str] = {}
    for doc in upstream_crds():
        spec_names = doc["spec"]["names"]
        for name in [*spec_names.get("shortNames", []), spec_names["plural"], spec_names.get("singular", ""),
                     spec_names["kind"].lower()]:
            names[name.lower()] = doc["metadata"]["name"]
    return names


def test_short_names_collide_with_nothing_upstream() -> None:
    taken = _upstream_names()
    assert "pg" in taken  # the upstream data is really there: Volcano's PodGroup is `pg`
    ours = []
    for crd in CRDS.values():
        names = crd["spec"]["names"]
        ours.extend(names["shortNames"])
        for name in [*names["shortNames"], names["plural"], names["singular"]]:
            assert name not in taken, f"{name} is already {taken[name]}"
            assert name not in CORE_SHORT_NAMES, f"{name} is a built-in short name"
        assert names["categories"] == ["metronome"]
    assert len(ours) == len(set(ours))
    assert "pg" not in ours and "tdm" not in " ".join(ours)


def test_chart_crds_are_byte_identical_copies() -> None:
    chart = sorted(p.name for p in CHART_CRD_DIR.glob("*")) if CHART_CRD_DIR.is_dir() else []
    assert chart == sorted(p.name for p in crd_files()), "helm/volcano-metronome/crds/ must mirror crds/*.yaml"
    for path in crd_files():
        copy = CHART_CRD_DIR / path.name
        assert not copy.is_symlink(), f"{copy} is a symlink; Helm does not follow symlinks out of the chart"
        assert copy.read_bytes() == path.read_bytes(), f"{copy} differs from {path}; copy it again"
