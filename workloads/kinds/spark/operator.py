"""What the Spark operator makes of a ``SparkApplication`` (``sparkoperator.k8s.io/v1beta2``).

A SparkApplication has no pod templates: its ``driver`` and ``executor`` specs each describe
one pod *and* its main container in Spark's own terms (``cores``, ``coreRequest``,
``coreLimit``, ``memory`` and ``memoryOverhead`` in JVM sizes such as ``4g``, ``gpu:
{name, quantity}``), and the operator (through spark-submit) writes the container's
``resources`` from them.  The same settings may instead come from ``sparkConf``
(``spark.executor.memory``, ``spark.executor.resource.gpu.amount`` with its ``vendor`` …),
which is how the RAPIDS Accelerator's samples ask for GPUs.  This module reads both, so
the view can show policies what the pods will really request.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any

MIB = 2**20
# Spark's memory overhead: max(factor x memory, 384 MiB); the factor is 0.1 for JVM jobs and
# 0.4 for Python and R ones (spark.kubernetes.memoryOverheadFactor, Spark 3.x).
MIN_OVERHEAD = Decimal(384 * MIB)
_JVM_UNITS = {"b": 1, "k": 2**10, "kb": 2**10, "m": MIB, "mb": MIB, "g": 2**30, "gb": 2**30,
              "t": 2**40, "tb": 2**40, "p": 2**50, "pb": 2**50}


def jvm_bytes(text: Any) -> Decimal | None:
    """``"4g"`` -> bytes, as Spark reads memory settings (a bare number is MiB); ``None`` if unreadable."""
    if isinstance(text, int) and not isinstance(text, bool):
        return Decimal(text) * MIB
    if not isinstance(text, str):
        return None
    value = text.strip().lower()
    number = value.rstrip("bkmgtp")
    unit = value[len(number):] or "m"
    if unit not in _JVM_UNITS or not number:
        return None
    try:
        amount = Decimal(number)
    except InvalidOperation:
        return None
    return amount * _JVM_UNITS[unit] if amount.is_finite() and amount >= 0 else None


def jvm_size(size: Decimal) -> str:
    """Bytes -> Spark's notation, whole MiB rounded down so the pod stays within what was sized
    (``12g``, ``1536m``)."""
    mib = max(math.floor(size / MIB), 1)
    return f"{mib // 1024}g" if mib % 1024 == 0 else f"{mib}m"


def conf(app: dict) -> dict[str, str]:
    """The application's ``sparkConf`` (string values only)."""
    values = app.get("sparkConf")
    if not isinstance(values, dict):
        return {}
    return {k: v for k, v in values.items() if isinstance(k, str) and isinstance(v, str)}


def _conf_int(values: dict[str, str], key: str) -> int:
    text = values.get(key, "").strip()
    return int(text) if text.isdigit() else 0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def executors(app: dict) -> tuple[int, bool]:
    """(the most executor pods at once, whether that is unbounded).

    ``executor.instances`` (or ``spark.executor.instances``; 1 when neither is set), unless dynamic
    allocation is on: then up to ``maxExecutors``, which Spark leaves unlimited when unset.
    """
    values = conf(app)
    executor = app.get("executor")
    executor = executor if isinstance(executor, dict) else {}
    instances = _count(executor.get("instances")) or _conf_int(values, "spark.executor.instances") or 1
    dynamic = app.get("dynamicAllocation")
    dynamic = dynamic if isinstance(dynamic, dict) else {}
    enabled = dynamic.get("enabled") is True or values.get("spark.dynamicAllocation.enabled", "").lower() == "true"
    if not enabled:
        return instances, False
    starts = max(instances, _count(dynamic.get("initialExecutors")), _count(dynamic.get("minExecutors")),
                 _conf_int(values, "spark.dynamicAllocation.initialExecutors"),
                 _conf_int(values, "spark.dynamicAllocation.minExecutors"))
    maximum = _count(dynamic.get("maxExecutors")) or _conf_int(values, "spark.dynamicAllocation.maxExecutors")
    if not maximum:
        return starts, True
    return max(maximum, starts), False


def gpu(role_spec: dict, role: str, values: dict[str, str]) -> tuple[str, Any] | None:
    """(extended resource, amount) the role's pods ask for: the typed ``gpu`` field, else Spark's
    ``spark.<role>.resource.gpu.amount`` with its ``vendor`` (the resource is ``<vendor>/gpu``)."""
    typed = role_spec.get("gpu")
    if isinstance(typed, dict) and isinstance(typed.get("name"), str) and typed["name"]:
        return typed["name"], typed.get("quantity")
    amount = values.get(f"spark.{role}.resource.gpu.amount")
    vendor = values.get(f"spark.{role}.resource.gpu.vendor")
    if amount and vendor:
        return f"{vendor}/gpu", amount
    return None


def overhead_factor(app: dict) -> Decimal:
    """``memoryOverheadFactor`` (a string), else Spark's default for the application type."""
    text = app.get("memoryOverheadFactor")
    try:
        factor = Decimal(text) if isinstance(text, str) else None
    except InvalidOperation:
        factor = None
    if factor is not None and factor.is_finite() and factor >= 0:
        return factor
    return Decimal("0.4") if app.get("type") in ("Python", "R") else Decimal("0.1")


def heap_for(pod_memory: Decimal, factor: Decimal) -> Decimal:
    """The ``memory`` (heap) that makes a pod of ``pod_memory`` once Spark adds its overhead."""
    heap = pod_memory / (1 + factor)
    if heap * factor < MIN_OVERHEAD:
        heap = pod_memory - MIN_OVERHEAD
    return max(heap, Decimal(MIB))
