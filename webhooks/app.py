"""The Flask app: ``/mutate`` (AdmissionReview in and out), ``/healthz``, ``/readyz``, ``/metrics``.

The admission decision is the pure ``volcano_metronome.admission.decide``; this module only reads
the body, maps the outcome to HTTP, counts and logs. A body that is not an AdmissionReview gets a
400 with a JSON message, a body over 3 MiB a 413, and nothing a client sends can produce a 5xx:
should the logic itself fail, the request is answered in-band (controller objects pass with a
warning, others are denied with code 500 in the review) and the fault is logged.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Iterable

from flask import Flask, Response
from werkzeug.exceptions import BadRequest, HTTPException, RequestEntityTooLarge

from volcano_metronome.admission import Context, decide, fault, parse_request
from volcano_metronome.admission.review import compact_json
from volcano_metronome.core.errors import InvalidInput
from webhooks import metrics

MAX_BODY_BYTES = 3 * 1024 * 1024  # API server objects are at most 1.5 MiB; a review may carry two
JSON_TYPE = "application/json"
#: ``app.extensions[MUTATE]`` is ``mutate(content_length, stream) -> (status, body)``: the gunicorn worker
#: answers ``POST /mutate`` with it directly, without building a WSGI environ (webhooks.worker).
MUTATE = "volcano_metronome.mutate"

log = logging.getLogger("volcano_metronome.webhook")


def create_app(context: Callable[[], Context], ready: Callable[[], bool] = lambda: True) -> Flask:
    """The WSGI app; ``context()`` gives the admission context per request, ``ready()`` backs ``/readyz``."""
    app = Flask("volcano_metronome.webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    def mutate(declared: str | None, stream: Any) -> tuple[str, bytes]:
        started = time.perf_counter()
        kind = "other"
        try:
            try:
                body = _body(declared, stream)
            except RequestEntityTooLarge:
                metrics.requests(kind, "bad_request").inc()
                return "413 REQUEST ENTITY TOO LARGE", _dumps({"error": f"request body larger than {MAX_BODY_BYTES} bytes"})
            except BadRequest as exc:
                metrics.requests(kind, "bad_request").inc()
                return "400 BAD REQUEST", _dumps({"error": exc.description})
            try:
                parsed = parse_request(json.loads(body))
            except (ValueError, RecursionError, InvalidInput) as exc:
                metrics.requests(kind, "bad_request").inc()
                return "400 BAD REQUEST", _dumps({"error": f"not an admission.k8s.io/v1 AdmissionReview: {_reason(exc)}"})
            kind = parsed.label
            try:
                result = decide(parsed, context())
                verdict = result.verdict
            except Exception as exc:  # noqa: BLE001 - a fault of ours must not become a 500 loop at the API server
                log.exception("admission failed for %s uid=%s", kind, parsed.uid)
                result, verdict = fault(parsed, f"{type(exc).__name__}: {exc}"), "error"
            metrics.requests(kind, verdict).inc()
            return "200 OK", compact_json(result.review).encode()
        finally:
            metrics.latency(kind).observe(time.perf_counter() - started)

    flask_app = app.wsgi_app

    def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # POST /mutate skips Flask's request and response objects, context stacks and routing: they
        # cost more CPU than the admission decision (profile in docs/webhook.md). The rest goes to Flask.
        if environ.get("PATH_INFO") != "/mutate":
            return flask_app(environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST":
            status, payload = "405 METHOD NOT ALLOWED", _dumps({"error": "only POST is served on /mutate"})
            start_response(status, [("Content-Type", JSON_TYPE), ("Content-Length", str(len(payload))),
                                    ("Allow", "POST")])
            return [payload]
        status, payload = mutate(environ.get("CONTENT_LENGTH"), environ["wsgi.input"])
        start_response(status, [("Content-Type", JSON_TYPE), ("Content-Length", str(len(payload)))])
        return [payload]

    app.wsgi_app = wsgi_app  # type: ignore[method-assign]
    app.extensions[MUTATE] = mutate

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", 200, content_type="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        if ready():
            return Response("ok\n", 200, content_type="text/plain")
        return Response("caches not synced\n", 503, content_type="text/plain")

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        data, content_type = metrics.exposition()
        return Response(data, 200, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        if exc.code == 413:
            metrics.requests("other", "bad_request").inc()
            return _json({"error": f"request body larger than {MAX_BODY_BYTES} bytes"}, 413)
        return _json({"error": exc.description or exc.name}, exc.code or 400)

    return app


def _body(declared: str | None, stream: Any) -> bytes:
    """The request body, read straight from the server's input (werkzeug's stream wrappers cost more
    than the admission decision): a declared length over the limit is refused from the headers, a
    chunked body as soon as it passes the limit (413 either way, never more than the limit read)."""
    if not declared:
        return _chunked(stream)
    try:
        length = int(declared)
    except ValueError:
        raise BadRequest(f"Content-Length: got {declared!r}, expected a number of bytes") from None
    if length > MAX_BODY_BYTES:
        raise RequestEntityTooLarge()
    data: bytes = stream.read(length)
    return data


def _chunked(stream: Any) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        part = stream.read(min(65536, MAX_BODY_BYTES + 1 - size))
        if not part:
            return b"".join(parts)
        size += len(part)
        if size > MAX_BODY_BYTES:
            raise RequestEntityTooLarge()
        parts.append(part)


def _json(document: Any, status: int) -> Response:
    return Response(json.dumps(document), status, content_type=JSON_TYPE)


def _dumps(document: Any) -> bytes:
    return json.dumps(document).encode()


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."
