"""gunicorn loggers that write one JSON object per line (access log and error log)."""

from __future__ import annotations

import datetime
import json
import logging
import time
from json.encoder import encode_basestring_ascii as _quoted
from typing import Any

from gunicorn.glogging import Logger


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message"[, "exception"]}`` per record."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document)


class JsonLogger(Logger):  # type: ignore[misc]  # gunicorn ships no type hints
    """gunicorn's logger with JSON lines: one access record per request, and JSON error-log records."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())
        for handler in self.access_log.handlers:
            handler.setFormatter(logging.Formatter("%(message)s"))

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: datetime.timedelta) -> None:
        if not self.access_log_enabled:
            return
        status = resp.status
        self.request(environ.get("REMOTE_ADDR", "-"), environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                     int(str(status).split(None, 1)[0]) if status else None, getattr(resp, "sent", None),
                     request_time.total_seconds(), environ.get("HTTP_USER_AGENT"))

    def request(self, remote: str, method: str | None, path: str | None, status: int | None, sent: int | None,
                seconds: float, user_agent: str | None) -> None:
        """One access line, as :meth:`access` writes it, from plain values (the worker's ``POST /mutate``)."""
        if not self.access_log_enabled:
            return
        # Formatted by hand (the same text json.dumps gives): per request, json.dumps of a dict, a datetime
        # and a LogRecord cost as much as the admission decision.
        line = (f'{{"time": "{_utc_now()}", "remote": {_string(remote)}, "method": {_string(method)}, '
                f'"path": {_string(path)}, "status": {_number(status)}, "bytes": {_number(sent)}, '
                f'"duration_ms": {round(seconds * 1000.0, 3)!r}, "user_agent": {_string(user_agent)}}}\n')
        # Straight to the handlers' streams, under their locks, flushed per line so that a worker that
        # crashes loses no line.
        for handler in self.access_log.handlers:
            stream = getattr(handler, "stream", None)
            if stream is None:  # e.g. syslog: the ordinary path
                handler.handle(logging.LogRecord("gunicorn.access", logging.INFO, "", 0, line[:-1], None, None))
                continue
            handler.acquire()
            try:
                stream.write(line)
                stream.flush()
            except Exception:  # noqa: BLE001 - as gunicorn's own access(): a log line must never fail a request
                handler.handleError(logging.LogRecord("gunicorn.access", logging.INFO, "", 0, line[:-1], None, None))
            finally:
                handler.release()


_second = -1
_second_text = ""


def _utc_now() -> str:
    """Now in UTC as ``datetime.isoformat(timespec="milliseconds")`` writes it; the date part made once a second."""
    global _second, _second_text
    now = time.time()
    second = int(now)
    if second != _second:
        _second, _second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_text}.{int((now - second) * 1000.0):03d}+00:00"


def _string(value: str | None) -> str:
    return "null" if value is None else str(_quoted(value))


def _number(value: int | None) -> str:
    return "null" if value is None else str(int(value))
