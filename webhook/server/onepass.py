"""What the mutating review of a create found for its validating review: kept briefly, used only on proof.

``gpuguard.webhook.engine.onepass`` evaluates a create once and splits the answer.  Between the two reviews this
cache keeps the validating half under a digest of everything the decision is a function of: the object /mutate
returned and the request's namespace, namespace labels, user and groups.  /validate uses it only when it receives
an object and request of the same digest, judged by the same engine (config and node inventory): any other change
in between (another webhook's mutation, the apiserver's defaulting of what gpuguard added, a reload) is a miss,
and a miss only means a full evaluation.

Not the request uid: the apiserver gives every webhook call its own (measured through a real kube-apiserver,
``tests/e2e/test_admission_e2e.py``), so a create's two reviews share nothing but their content.  Content is
also enough: the engine's answer is a pure function of it, so two creates alike in every input (a ReplicaSet's
replicas) may share one answer.  What reads other objects (a runtime, shared claims) is never kept
(``gpuguard.webhook.server.review``).  Each replica keeps its own; a validating review that reaches another
replica evaluates in full.

Bounded: at most ``capacity`` entries of findings only (no objects), each dropped on use or after ``ttl`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from gpuguard.webhook.decision import Decision, RequestContext

# What the apiserver writes into a created object between mutating and validating admission (BeforeCreate):
# identity, timestamps, generation, a generated name, field managers.  Left out of the digest; the status too,
# which PrepareForCreate resets and no policy reads on create.
_SYSTEM_METADATA = ("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields", "selfLink",
                    "namespace")
# The Job's own PrepareForCreate: a selector and the labels it selects, on the pod template.  No policy reads them.
_JOB_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name")
# What the apiserver's Priority admission computes on a Pod from its priorityClassName (again after gpuguard names
# a class, before it calls gpuguard a second time): left out of the digest where nothing may read it (no custom
# rule; no shipped policy reads them but to drop them from templates).
_DERIVED_POD_FIELDS = ("priority", "preemptionPolicy")
DEFAULT_CAPACITY = 2048
DEFAULT_TTL_SECONDS = 30.0  # the apiserver's longest webhook timeout: a create's reviews are closer than that


def _as_judged(obj: dict, derived: bool = False) -> dict:
    """``obj`` without what the apiserver itself adds on create (shallow copies of the parts it touches); with
    ``derived``, a Pod's priority and preemption policy too (``_DERIVED_POD_FIELDS``)."""
    shown = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    if derived and obj.get("kind") == "Pod" and isinstance(obj.get("spec"), dict):
        shown["spec"] = {k: v for k, v in obj["spec"].items() if k not in _DERIVED_POD_FIELDS}
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k not in _SYSTEM_METADATA}
        if "generateName" in kept:  # the apiserver names it after mutating admission
            kept.pop("name", None)
        shown["metadata"] = kept
    spec = obj.get("spec")
    if obj.get("kind") == "Job" and isinstance(spec, dict):
        spec = shown["spec"] = {k: v for k, v in spec.items() if k != "selector"}
        template = spec.get("template")
        labels = template.get("metadata", {}).get("labels") if isinstance(template, dict) and \
            isinstance(template.get("metadata"), dict) else None
        if isinstance(labels, dict) and any(k in labels for k in _JOB_LABELS):
            assert isinstance(template, dict)
            meta = {k: v for k, v in template["metadata"].items() if k != "labels"}
            if own := {k: v for k, v in labels.items() if k not in _JOB_LABELS}:  # none: as if never set
                meta["labels"] = own
            spec["template"] = {**template, "metadata": meta}
    return shown


def digest(ctx: RequestContext, obj: Any, derived: bool = False) -> tuple[int, int] | None:
    """A digest of what the decision on a create reads: the object without the apiserver's own fields, and who
    asks where.

    Python's own hash of the canonical JSON: SipHash, keyed at random per process (``PYTHONHASHSEED`` unset), so a
    tenant can't craft two objects alike to it, and an entry never leaves the process; a few microseconds cheaper
    than hashlib on every review.  The length rides along.
    """
    if not isinstance(obj, dict):
        return None
    request = [ctx.namespace, ctx.username, sorted(ctx.groups), sorted(ctx.namespace_labels.items())]
    try:
        raw = orjson.dumps([request, _as_judged(obj, derived)], option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return hash(raw), len(raw)


@dataclass(frozen=True)
class _Kept:
    judge: tuple[object, ...]  # which engine judged it: the Active pair and its node inventory
    decision: Decision
    until: float


class ValidationCache:
    """The validating halves of creates /mutate answered, by digest.  Thread-safe (engine threads)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, ttl: float = DEFAULT_TTL_SECONDS) -> None:
        self.capacity = capacity
        self.ttl = ttl
        self._kept: OrderedDict[tuple[int, int], _Kept] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, ctx: RequestContext, returned: Any, judge: tuple[object, ...], decision: Decision,
             derived: bool = False) -> None:
        """Keep ``decision`` (a validating half) for the object /mutate returned to the request ``ctx``."""
        if (key := digest(ctx, returned, derived)) is None:
            return
        now = time.monotonic()
        with self._lock:
            self._kept.pop(key, None)  # a reinvoked review (or a create alike) replaces the older answer
            self._kept[key] = _Kept(judge, decision, now + self.ttl)
            while len(self._kept) > self.capacity or (self._kept and next(iter(self._kept.values())).until < now):
                self._kept.popitem(last=False)

    def take(self, ctx: RequestContext, received: Any, judge: tuple[object, ...],
             derived: bool = False) -> Decision | None:
        """The kept decision when /validate received an object /mutate returned, to a request alike and judged by
        the same engine; else None.  Taken once."""
        return self._find(ctx, received, judge, derived, take=True)

    def returned(self, ctx: RequestContext, received: Any, judge: tuple[object, ...],
                 derived: bool = False) -> Decision | None:
        """The kept decision when /mutate receives an object it returned moments before (the apiserver calls it
        again after its Priority admission set a Pod's priority from the class gpuguard named): gpuguard's
        mutations are idempotent, so its answer is "unchanged".  Left for /validate."""
        return self._find(ctx, received, judge, derived, take=False)

    def _find(self, ctx: RequestContext, received: Any, judge: tuple[object, ...], derived: bool,
              take: bool) -> Decision | None:
        if (key := digest(ctx, received, derived)) is None:
            return None
        with self._lock:
            kept = self._kept.pop(key, None) if take else self._kept.get(key)
        if kept is None or kept.until < time.monotonic() or len(kept.judge) != len(judge) or \
                any(a is not b for a, b in zip(kept.judge, judge, strict=True)):
            return None
        return kept.decision
