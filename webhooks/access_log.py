"""gunicorn loggers that write one JSON object per line (access log and error log)."""

from __future__ import annotations

import datetime
import json
import logging
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
        document = {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "remote": environ.get("REMOTE_ADDR", "-"),
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "status": int(str(status).split(None, 1)[0]) if status else None,
            "bytes": getattr(resp, "sent", None),
            "duration_ms": round(request_time.total_seconds() * 1000.0, 3),
            "user_agent": environ.get("HTTP_USER_AGENT"),
        }
        line = json.dumps(document) + "\n"
        # Straight to the handlers' streams, under their locks: a LogRecord per request costs more than the
        # admission decision on a small machine, and the line is already formatted.
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
