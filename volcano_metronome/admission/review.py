"""AdmissionReview ``admission.k8s.io/v1`` in, AdmissionReview out: the whole webhook as one pure function.

``admit(body, ctx)`` parses a review (raising :class:`InvalidInput` for a body that is not one: the
HTTP shell answers those with 400), picks the handler for the object's kind, and builds the
response: a base64 JSONPatch when something changes, nothing when not (idempotent), a denial with
status 400 when an object a person submitted carries a bad profile, and for objects a controller
created (anything with an owner, and every Kueue Workload) never a denial but a warning and the
annotation ``metronome.dev/profile-error``. Only CREATE is acted on; sub-resources, other
operations and other kinds pass through unchanged. Dry-run requests get the same answer: nothing
here has side effects.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from volcano_metronome import api
from volcano_metronome.admission.jobset import admit_jobset
from volcano_metronome.admission.kubeflow import admit_mpi_job, admit_pytorch_job
from volcano_metronome.admission.objects import admit_batch_job, admit_pod_group, admit_volcano_job, admit_workload
from volcano_metronome.admission.outcome import UNMANAGED, Outcome, created_by_controller
from volcano_metronome.admission.patches import mapping_at_or_none, set_entries
from volcano_metronome.admission.pods import admit_pod
from volcano_metronome.admission.resolve import Context
from volcano_metronome.core.errors import InvalidInput

REVIEW_API_VERSION = "admission.k8s.io/v1"
WARNING_PREFIX = "volcano-metronome: "
MAX_MESSAGE = 1000  # characters; the API server shows a denial message to the user verbatim

Handler = Callable[[Mapping[str, Any], str, Context], Outcome]

# (group, version, kind) -> (metrics label, handler, always created by a controller)
KINDS: dict[tuple[str, str, str], tuple[str, Handler, bool]] = {
    ("batch.volcano.sh", "v1alpha1", "Job"): ("VolcanoJob", admit_volcano_job, False),
    ("scheduling.volcano.sh", "v1beta1", "PodGroup"): ("PodGroup", admit_pod_group, False),
    ("kueue.x-k8s.io", "v1beta2", "Workload"): ("Workload", admit_workload, True),
    ("kueue.x-k8s.io", "v1beta1", "Workload"): ("Workload", admit_workload, True),
    ("batch", "v1", "Job"): ("Job", admit_batch_job, False),
    ("", "v1", "Pod"): ("Pod", admit_pod, False),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"): ("JobSet", admit_jobset, False),
    ("kubeflow.org", "v1", "PyTorchJob"): ("PyTorchJob", admit_pytorch_job, False),
    ("kubeflow.org", "v2beta1", "MPIJob"): ("MPIJob", admit_mpi_job, False),
}
OTHER = "other"

# Verdicts, as counted by the server's metrics.
PATCHED, ALLOWED, WARNED, DENIED = "patched", "allowed", "warned", "denied"


@dataclass(frozen=True)
class Request:
    """The parts of an AdmissionRequest the webhook reads."""

    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    sub_resource: str
    dry_run: bool
    obj: Any

    @property
    def label(self) -> str:
        """The kind as metrics name it: ``VolcanoJob``, ``PodGroup``, ``Workload``, ``Job``, ``Pod``, ``JobSet``,
        ``PyTorchJob``, ``MPIJob`` or ``other``."""
        entry = KINDS.get((self.group, self.version, self.kind))
        return entry[0] if entry else OTHER


@dataclass(frozen=True)
class Result:
    """A response review, with the kind and verdict the server counts."""

    review: dict[str, Any]
    kind: str
    verdict: str


def admit(body: Any, ctx: Context) -> Result:
    """Answer one AdmissionReview (already JSON-decoded); :class:`InvalidInput` if ``body`` is not one."""
    return decide(parse_request(body), ctx)


def parse_request(body: Any) -> Request:
    """The request inside an ``admission.k8s.io/v1`` AdmissionReview, checked field by field."""
    if not isinstance(body, dict):
        raise InvalidInput("body", body, "an AdmissionReview JSON object")
    if body.get("apiVersion") != REVIEW_API_VERSION or body.get("kind") != "AdmissionReview":
        raise InvalidInput("apiVersion/kind", f"{body.get('apiVersion')!r}/{body.get('kind')!r}",
                           f"{REVIEW_API_VERSION}/AdmissionReview")
    request = body.get("request")
    if not isinstance(request, dict):
        raise InvalidInput("request", request, "an AdmissionRequest object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidInput("request.uid", uid, "a non-empty string")
    gvk = request.get("kind")
    if not isinstance(gvk, dict):
        raise InvalidInput("request.kind", gvk, "an object {group, version, kind}")
    group, version, kind = (gvk.get(key, "") for key in ("group", "version", "kind"))
    for key, value in (("group", group), ("version", version), ("kind", kind)):
        if not isinstance(value, str):
            raise InvalidInput(f"request.kind.{key}", value, "a string")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        raise InvalidInput("request.operation", operation, "one of CREATE, UPDATE, DELETE, CONNECT")
    namespace = request.get("namespace", "")
    sub_resource = request.get("subResource", "")
    dry_run = request.get("dryRun", False)
    for key, value, expected in (("namespace", namespace, str), ("subResource", sub_resource, str),
                                 ("dryRun", dry_run, bool)):
        if not isinstance(value, expected):
            raise InvalidInput(f"request.{key}", value, "a string" if expected is str else "true or false")
    obj = request.get("object")
    if operation == "CREATE" and not sub_resource and not isinstance(obj, dict):
        raise InvalidInput("request.object", obj, "the object being created")
    return Request(uid=uid, group=group, version=version, kind=kind, operation=operation, namespace=namespace or "",
                   sub_resource=sub_resource or "", dry_run=dry_run, obj=obj)


def decide(request: Request, ctx: Context) -> Result:
    """Admit one parsed request."""
    entry = KINDS.get((request.group, request.version, request.kind))
    if entry is None or request.operation != "CREATE" or request.sub_resource:
        return _respond(request, UNMANAGED, request.label)
    label, handler, always_controller = entry
    namespace = request.namespace or _object_namespace(request.obj)
    try:
        outcome = handler(request.obj, namespace, ctx)
    except InvalidInput as exc:
        if always_controller or created_by_controller(request.obj):
            return _respond(request, _recorded(request.obj, str(exc)), label)
        return deny(request, str(exc), label)
    return _respond(request, outcome, label)


def deny(request: Request, message: str, label: str | None = None, code: int = 400) -> Result:
    """A denial naming what is wrong (status ``code``: 400 for bad input, 500 for a fault of ours)."""
    status = {"status": "Failure", "code": code, "reason": "BadRequest" if code == 400 else "InternalError",
              "message": _clean(WARNING_PREFIX + message)}
    response = {"uid": request.uid, "allowed": False, "status": status}
    return Result(_review(response), label or request.label, DENIED)


def fault(request: Request, message: str) -> Result:
    """The answer when admission itself failed: objects of controllers pass with a warning, others are denied."""
    entry = KINDS.get((request.group, request.version, request.kind))
    if (entry is not None and entry[2]) or created_by_controller(request.obj):
        warning = f"internal error, object admitted unmanaged: {message}"
        return _respond(request, Outcome(warnings=(warning,)), request.label)
    return deny(request, f"internal error: {message}", code=500)


def _recorded(obj: Any, message: str) -> Outcome:
    """Allow a controller's object: warn, and record the problem in ``metronome.dev/profile-error`` when possible."""
    warning = f"{message} (object admitted without a bandwidth profile; see annotation {api.PROFILE_ERROR})"
    try:
        ops = set_entries(obj, ("metadata", "annotations"), {api.PROFILE_ERROR: _clean(message)})
    except InvalidInput:
        ops = []  # metadata itself is malformed: nothing can be patched, the warning still tells
    return Outcome(tuple(ops), (warning,))


def _respond(request: Request, outcome: Outcome, label: str) -> Result:
    response: dict[str, Any] = {"uid": request.uid, "allowed": True}
    if outcome.ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(compact_json(outcome.ops).encode()).decode()
    if outcome.warnings:
        response["warnings"] = [_clean(WARNING_PREFIX + w) for w in outcome.warnings]
    verdict = WARNED if outcome.warnings else (PATCHED if outcome.ops else ALLOWED)
    return Result(_review(response), label, verdict)


#: ``json.dumps(value, separators=(",", ":"))`` without building an encoder per call (a tuple encodes as a list);
#: the patch's encoding here, and the whole review's in the HTTP shell.
compact_json = json.JSONEncoder(separators=(",", ":")).encode


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}


def _object_namespace(obj: Any) -> str:
    metadata = mapping_at_or_none(obj, ("metadata",))
    namespace = metadata.get("namespace") if metadata is not None else None
    return namespace if isinstance(namespace, str) else ""


def _clean(text: str) -> str:
    """Printable text of bounded length (warnings travel in HTTP headers; denials are shown to people)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."
