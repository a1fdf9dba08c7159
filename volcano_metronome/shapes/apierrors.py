"""Errors of the Kubernetes API as exception classes, chosen by HTTP status. PURE.

Errors are :class:`KubeError` (a :class:`MetronomeError`) carrying the HTTP status: 404
:class:`NotFound`, 409 :class:`Conflict` (also AlreadyExists), 410 :class:`Gone`, 422 :class:`Invalid`,
and :class:`Unavailable` when the server cannot be reached or answers 429/5xx.
"""

from __future__ import annotations

import json

from volcano_metronome.core.errors import MetronomeError


class KubeError(MetronomeError):
    """A request the API server refused or could not answer; ``status`` is the HTTP status (0 if none)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """404: the object (or the resource type) does not exist."""


class Conflict(KubeError):
    """409: the object changed since it was read (resourceVersion mismatch), or it already exists."""


class Gone(KubeError):
    """410: the resourceVersion a watch asked for is too old; re-list."""


class Fenced(KubeError):
    """A write refused before it was sent: the lease that allows it may have passed to another replica."""


class Unavailable(KubeError):
    """The API server could not be reached, or answered 429/5xx."""


class Invalid(KubeError):
    """422: the server's validation refused the object or patch (a failed JSON-patch test op too)."""


def error_from_status(status: int, body: bytes, what: str) -> KubeError:
    """The error for an HTTP ``status`` whose body is (usually) a ``metav1.Status``."""
    reason, message = "", body.decode("utf-8", "replace")[:500]
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            reason, message = str(doc.get("reason", "")), str(doc.get("message", message))
    except ValueError:
        pass
    text = f"{what}: HTTP {status} {reason}: {message}".strip()
    cls: type[KubeError] = KubeError
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status == 410:
        cls = Gone
    elif status == 422:
        cls = Invalid
    elif status == 429 or status >= 500:
        cls = Unavailable
    return cls(text, status, reason)
