"""Kubernetes resource quantities ("500m", "64Gi", "1e3") as numbers, parsed with bounded cost.

Why not the kubernetes client's ``parse_quantity``: it builds ``Decimal(10) ** exponent`` for
whatever exponent the text carries, so ``"1e800000"`` (which a CRD's quantity pattern
accepts) took seconds of CPU, and ``"NaN"``/``"Infinity"`` came back as Decimals that made the
policies raise.  This parser follows the grammar of ``k8s.io/apimachinery/pkg/api/resource``
and applies Kubernetes' own range before doing any arithmetic: no quantity may exceed
2^63-1 in magnitude.  Anything else is *invalid*: :func:`parse` returns ``None`` (the
policies treat it as missing) and :func:`problem` says why, so the server can deny the
object with a clear message (``gpuguard.webhook.engine.prechecks``) instead of judging it blindly.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any

MAX_TEXT_LENGTH = 64  # far above any real quantity ("9223372036854775807" is 19 characters)
MAX_MAGNITUDE = Decimal(2**63 - 1)  # Kubernetes' largest allowed quantity (resource.maxAllowed)
_MAX_INT = 2**63 - 1
_TOO_LARGE = "larger than Kubernetes allows (2^63-1)"
_MAX_DIGITS_BEFORE_POINT = 19  # 2^63-1 has 19 digits: more means out of range whatever follows
_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?"
)
_BINARY_POWER = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_POWER = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


class InvalidQuantity(ValueError):
    """A value that is not a Kubernetes quantity, or one outside Kubernetes' range."""


def _decimal_power(match: re.Match[str]) -> int:
    """The power of ten the suffix multiplies by; bounded before it is ever used."""
    if match["decimal"]:
        return _DECIMAL_POWER[match["decimal"]]
    if match["exp"]:
        digits = match["exp"][1:].lstrip("+-").lstrip("0") or "0"
        if len(digits) > 3:  # |exponent| >= 1000: out of range either way, decided without arithmetic
            raise InvalidQuantity("exponent out of range")
        return int(match["exp"][1:])
    return 0


def _parse_text(text: str) -> Decimal:
    if len(text) > MAX_TEXT_LENGTH:
        raise InvalidQuantity(f"longer than {MAX_TEXT_LENGTH} characters")
    match = _GRAMMAR.fullmatch(text)
    if match is None:
        raise InvalidQuantity("malformed; expected a number with an optional suffix, such as 2, 500m, 64Gi or 1e3")
    number = match["number"]
    whole = number.split(".", 1)[0].lstrip("0")
    power = _decimal_power(match)
    mantissa = Decimal(number)
    if mantissa == 0:
        return Decimal(0)
    if len(whole) + power > _MAX_DIGITS_BEFORE_POINT + 1:  # cheap bound before any scaling
        raise InvalidQuantity(_TOO_LARGE)
    if power < -40:  # below a nano of a nano: Kubernetes rounds it up; nothing sensible asks for it
        raise InvalidQuantity("exponent out of range")
    value = mantissa.scaleb(power)
    if match["binary"]:
        value *= 2 ** _BINARY_POWER[match["binary"]]
    if match["sign"] == "-":
        value = -value
    if abs(value) > MAX_MAGNITUDE:
        raise InvalidQuantity(_TOO_LARGE)
    # "1e3" scales to Decimal("1E+3"); whole numbers read (and print) better as plain integers.
    return Decimal(int(value)) if value == value.to_integral_value() else value


def check(value: Any) -> Decimal:
    """``value`` as a Decimal, or :class:`InvalidQuantity` saying why it is not a usable quantity."""
    found = _read(value)
    if isinstance(found, str):
        raise InvalidQuantity(found)
    return found


def problem(value: Any) -> str | None:
    """Why ``value`` is not a valid quantity, or ``None`` when it is one."""
    found = _read(value)
    return found if isinstance(found, str) else None


def parse(value: Any) -> Decimal | None:
    """A quantity as a Decimal, or ``None`` when it is missing, malformed or out of range."""
    if value is None:
        return None
    found = _read(value)
    return None if isinstance(found, str) else found


# Every policy reads the same few quantities ("2", "16Gi", 8) of every object, again and again: plain
# strings and ints are answered from these, the rest (bools, floats, str subclasses from YAML) by _convert.
_CACHED_TEXT_LENGTH = 2 * MAX_TEXT_LENGTH  # longer ones are refused without keeping them
_SMALL_INT_LIMIT = 1025  # GPU counts, CPUs, byte sizes written as small integers
_SMALL_INTS = tuple(Decimal(i) for i in range(_SMALL_INT_LIMIT))


def _read(value: Any) -> Decimal | str:
    """``value`` as a Decimal, or why it is not a usable quantity (the one place both come from)."""
    kind = type(value)
    if kind is str:
        return _text(value) if len(value) <= _CACHED_TEXT_LENGTH else _convert(value)
    if kind is int:
        if 0 <= value < _SMALL_INT_LIMIT:
            return _SMALL_INTS[value]
        return Decimal(value) if -_MAX_INT <= value <= _MAX_INT else _TOO_LARGE
    return _convert(value)


@lru_cache(maxsize=4096)
def _text(value: str) -> Decimal | str:
    """A short plain string's reading, valid or not (bounded: a hostile object's values only churn it)."""
    return _convert(value)


def _convert(value: Any) -> Decimal | str:
    try:
        return _check(value)
    except InvalidQuantity as exc:
        return str(exc)


def _check(value: Any) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise InvalidQuantity("neither a number nor a string")
    if isinstance(value, int):
        if abs(value) > MAX_MAGNITUDE:
            raise InvalidQuantity(_TOO_LARGE)
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
            raise InvalidQuantity("not a finite number within Kubernetes' range (2^63-1)")
        return Decimal(repr(value))
    if isinstance(value, str):
        return _parse_text(value.strip())
    raise InvalidQuantity(f"a {type(value).__name__}, not a number or string")


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
