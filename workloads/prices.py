"""What an accelerator costs an hour, so findings about idle or stranded devices can be weighed in dollars.

One price table serves the audit's cost at risk (``gpuguard.webhook.cli.audit.cost``) and the policies that name
what idle devices cost (``server-parallelism``): both read it from the config's ``cost`` section, which the
config compiles into the ``Accelerators`` the workload view carries (``Accelerators.prices``).  The prices are
list prices an admin sets, never a bill: an estimate that helps rank findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from gpuguard.workloads.paths import get_path

# Label keys that name a node's accelerator product, tried in this order (the inventory names its node groups by
# them; productHourlyUsd keys match their values).
PRODUCT_LABELS = (
    "nvidia.com/gpu.product", "cloud.google.com/gke-accelerator", "cloud.google.com/gke-tpu-accelerator",
    "karpenter.k8s.aws/instance-gpu-name", "k8s.amazonaws.com/accelerator", "kubernetes.azure.com/accelerator",
)


def _matching(table: Mapping[str, float], key: str, *, fold_case: bool = False) -> float | None:
    """Exact key first, then the longest (most specific) glob that matches."""
    if key in table:
        return table[key]
    probe = key.lower() if fold_case else key
    for pattern in sorted(table, key=len, reverse=True):
        if fnmatchcase(probe, pattern.lower() if fold_case else pattern):
            return table[pattern]
    return None


@dataclass(frozen=True)
class Prices:
    """USD per device-hour: by resource name (or glob) and by GPU product node-label value (or glob)."""

    gpu_hourly_usd: Mapping[str, float]
    product_hourly_usd: Mapping[str, float] = field(default_factory=dict)

    def per_gpu_hour(self, resource: str, products: Iterable[str] = ()) -> float | None:
        """Price of one device of ``resource`` for an hour; a pinned product wins for whole GPUs.

        Product prices apply to whole-GPU resources (``*/gpu``) only: a MIG slice or a shared
        time-slice of an H100 does not cost a whole H100.
        """
        if resource.endswith("/gpu"):
            for product in products:
                price = _matching(self.product_hourly_usd, product, fold_case=True)
                if price is not None:
                    return price
        return _matching(self.gpu_hourly_usd, resource)

    def per_day(self, devices: Mapping[str, int], products: Iterable[str] = ()) -> float | None:
        """What ``devices`` (resource -> count) cost over 24 hours, ``None`` when one of them has no price."""
        pinned = tuple(products)
        total = 0.0
        for resource, count in devices.items():
            price = self.per_gpu_hour(resource, pinned)
            if price is None:
                return None
            total += count * 24 * price
        return total


def pinned_products(pod_spec: dict) -> Iterator[str]:
    """GPU product label values a PodSpec requires (its nodeSelector, or required node affinity with ``In``)."""
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, dict):
        for label in PRODUCT_LABELS:
            if isinstance(selector.get(label), str):
                yield selector[label]
    terms = get_path(pod_spec, ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                                "nodeSelectorTerms"))
    for term in terms if isinstance(terms, list) else []:
        expressions = term.get("matchExpressions") if isinstance(term, dict) else None
        for expr in expressions if isinstance(expressions, list) else []:
            if (isinstance(expr, dict) and expr.get("key") in PRODUCT_LABELS and expr.get("operator") == "In"
                    and isinstance(expr.get("values"), list)):
                yield from (v for v in expr["values"] if isinstance(v, str))


def usd(amount: float) -> str:
    """A day's cost as people read it: ``$192`` (whole dollars from $10 up, cents below)."""
    return f"${amount:,.0f}" if amount >= 10 else f"${amount:,.2f}"
