"""Checks for fields of plain data (YAML, JSON, settings files): each failure names field, value and form.

Shared by every parser (scenarios, the webhook's and the controller's settings, the catalog, the
simulator's workloads) so that one field is refused with the same words wherever it appears.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any, Iterable, Mapping

from volcano_metronome.core.errors import InvalidInput

#: What YAML 1.1 reads as text though it looks like a number: an exponent without a dot or without a sign
#: (1.0e12, 1e+12, 1E-3); a float there needs both (1.0e+12).
_TEXT_EXPONENT = re.compile(r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$")
#: A decimal number as text, ASCII only: ``float`` also takes "1_0", "nan", "inf" and full-width digits ("２００").
DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
#: Kubernetes names: a DNS-1123 label (namespaces, Services) and a DNS-1123 subdomain (most objects).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def mapping(data: Any, field: str, keys: Iterable[str] | None = None) -> Mapping[Any, Any]:
    """A mapping whose keys are all among ``keys`` (any keys when ``keys`` is None).

    ``field`` is the mapping's path; "" is the root of a settings file (its keys are named bare).
    """
    allowed = None if keys is None else sorted(keys)
    if not isinstance(data, Mapping):
        raise InvalidInput(field or "settings", data, "a mapping" + (f" with keys among {allowed}" if allowed else ""))
    if allowed is not None:
        unknown = sorted(str(k) for k in set(data) - set(allowed))
        if unknown:
            key = next(k for k in data if str(k) == unknown[0])
            raise InvalidInput(f"{field}.{key}" if field else str(key), data[key], f"one of the keys {allowed}")
    return data


def number(value: Any, field: str, *, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None) -> float:
    """A finite number, within the bounds given (``above`` is exclusive); bools and strings are refused."""
    form = _number_form(minimum, maximum, above)
    if isinstance(value, str) and _TEXT_EXPONENT.match(value):
        raise InvalidInput(field, value, f"{form} (this is text to YAML: write a dot and the exponent's sign, "
                                         f"as in 1.0e+12)")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(field, value, form)
    try:
        result = float(value)
    except OverflowError:  # an integer too large for a float
        raise InvalidInput(field, value, form) from None
    if (not math.isfinite(result) or (minimum is not None and result < minimum)
            or (maximum is not None and result > maximum) or (above is not None and result <= above)):
        raise InvalidInput(field, value, form)
    return result


def integer(value: Any, field: str, minimum: int, maximum: int | None = None) -> int:
    """An integer in ``[minimum, maximum]`` (bools are refused)."""
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or (maximum is not None and value > maximum)):
        raise InvalidInput(field, value, f"an integer >= {minimum}" if maximum is None
                           else f"an integer in [{minimum}, {maximum}]")
    return value


def positive(value: Any, field: str) -> float:
    """A finite number above zero."""
    return number(value, field, above=0.0)


def nonnegative(value: Any, field: str) -> float:
    """A finite number at least zero."""
    return number(value, field, minimum=0.0)


def boolean(value: Any, field: str) -> bool:
    """``true`` or ``false``."""
    if not isinstance(value, bool):
        raise InvalidInput(field, value, "true or false")
    return value


def string(value: Any, field: str, allow_empty: bool = False) -> str:
    """A string (non-empty unless ``allow_empty``)."""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise InvalidInput(field, value, "a string" if allow_empty else "a non-empty string")
    return value


def dns_label(value: Any, field: str, what: str = "a name") -> str:
    """A DNS-1123 label (a namespace's or a Service's name)."""
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        raise InvalidInput(field, value, f"{what}: a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
    return value


def dns_subdomain(value: Any, field: str, what: str = "a name") -> str:
    """A DNS-1123 subdomain (the name of most Kubernetes objects)."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise InvalidInput(field, value, f"{what}: a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
                                         f"at most 253)")
    return value


def ip_address(value: Any, field: str) -> str:
    """An IPv4 or IPv6 address to bind (0.0.0.0 or :: for every interface)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise InvalidInput(field, value, "an IP address to bind, e.g. 0.0.0.0 (every interface) or 127.0.0.1") from None
    return str(value)


def choice(value: Any, field: str, options: Iterable[str]) -> str:
    """One of the strings ``options`` (a list or a mapping given as the value is refused, not hashed)."""
    allowed = list(options)
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(field, value, f"one of {', '.join(allowed)}")
    return value


def _number_form(minimum: float | None, maximum: float | None, above: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"a number in [{minimum:g}, {maximum:g}]"
    if above is not None:
        return f"a number > {above:g}" + (f" and <= {maximum:g}" if maximum is not None else "")
    if minimum is not None:
        return f"a number >= {minimum:g}"
    if maximum is not None:
        return f"a number <= {maximum:g}"
    return "a finite number"
