"""Kubernetes ``Time`` / ``MicroTime`` strings and Unix seconds. PURE."""

from __future__ import annotations

import datetime
from typing import Any


def parse_time(value: Any) -> float | None:
    """Unix seconds of a Kubernetes ``Time`` / ``MicroTime`` string (None when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(unix_s: float) -> str:
    """A Kubernetes ``Time`` string (RFC 3339, seconds, UTC)."""
    return datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(unix_s: float) -> str:
    """A Kubernetes ``MicroTime`` string (leases, events.k8s.io)."""
    return datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
