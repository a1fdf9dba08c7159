"""Kubernetes objects as plain dicts: the shapes admission and the controller share. PURE.

Objects travel in the API's JSON form (camelCase, as the server returns them). This package holds
what both sides must read the same way: the resource table (:mod:`.resources`), API errors by HTTP
status (:mod:`.apierrors`), Kubernetes times (:mod:`.times`), label and node selectors
(:mod:`.selectors`), the one profile parser (:mod:`.profiles`) and object references
(:mod:`.refs`). No I/O, no clock, no Kubernetes client (import-linter contract ``shapes-are-pure``).
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
