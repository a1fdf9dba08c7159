"""The mutating admission webhook's logic, as pure functions: AdmissionReview in, AdmissionReview out.

No HTTP, no Kubernetes client, no clock, no logging: the server in ``webhooks/`` feeds it decoded
JSON and read-only cache lookups (:class:`Lookups`), and sends back what :func:`admit` returns.
Objects are decoded JSON, so JSON objects are checked as ``dict`` (the fast ``isinstance`` path).
"""

from __future__ import annotations

from volcano_metronome.admission.resolve import Context, Lookups
from volcano_metronome.admission.review import Request, Result, admit, decide, fault, parse_request
from volcano_metronome.admission.settings import Settings, parse_settings

__all__ = ["Context", "Lookups", "Request", "Result", "Settings", "admit", "decide", "fault", "parse_request",
           "parse_settings"]
