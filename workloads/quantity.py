"""Kubernetes resource quantities ("500m", "64Gi", "1e3") as numbers.

Parsing is the kubernetes client's ``parse_quantity``; this module only caches it (the same
few strings recur in every pod, and Decimal parsing is the slowest part of a policy) and
turns malformed input into ``None`` instead of an exception, because user objects are
untrusted and the engine must never raise on them.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any

from kubernetes.utils.quantity import parse_quantity

_BINARY = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal | None:
    try:
        return Decimal(parse_quantity(text))
    except (ValueError, ArithmeticError, TypeError):
        return None


def parse(value: Any) -> Decimal | None:
    """A quantity as a Decimal, or ``None`` when it is missing or not a valid quantity."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if isinstance(value, str):
        return _parse_text(value.strip())
    return None


def format_bytes(value: Decimal) -> str:
    """Bytes in the largest binary unit that keeps a whole number ("64Gi"), as users write them."""
    whole = int(value)
    for suffix, size in _BINARY:
        if whole >= size and whole % size == 0:
            return f"{whole // size}{suffix}"
    return str(whole)


def format_cpu(value: Decimal) -> str:
    """CPU as cores when whole ("8"), else millicores ("500m")."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"
