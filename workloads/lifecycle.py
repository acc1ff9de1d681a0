"""What a workload *is*, apart from what it may do: its class, from evidence first.

The class decides which checks a workload gets (a server has no progress to checkpoint; a run to
completion needs a deadline), so it rests on evidence, in this order:

1. what its kind is *for* — its lifecycle: work that runs to completion (Job, PyTorchJob, TrainJob,
   RayJob …: ``training``, the class with every check), a long-running service (Deployment,
   StatefulSet, LeaderWorkerSet, the serving CRDs: ``inference``) or interactive work (Notebook:
   ``notebook``).  The admin's ``workloadClasses.byKind`` is evidence too.  A bare Pod's lifecycle is
   its ``restartPolicy`` (``Always``, the default, never completes);
2. the user's explicit declaration (label ``gpuguard.io/workload-class``), honoured where it raises
   the checks, and where it lowers them only with a price that bounds the risk: ``smoke-test`` and
   ``batch-inference`` on kinds that carry a deadline (``job-limits`` caps it for the class); on
   kinds that can't carry one, or ``inference``/``notebook`` on work that runs to completion, it
   lowers nothing (``ClassReading.declaration_note`` says why).

What the work looks like — command lines, images, ports (``gpuguard.workloads.classify``) — is a
*guess*.  It never removes a check, caps a value or denies: it chooses between classes with the same
checks (a long-running pod that runs ``jupyter lab`` is a notebook, one that runs ``vllm serve`` a
server), shapes messages, and turns a check the kind would skip into a warning (a Deployment that
runs ``torchrun train.py`` is warned about checkpoints, not denied).

Privilege is separate: only ``inference`` may preempt, and only where the namespace's profile grants
it (workload-class ``allowEscalationTo``).  A server without the grant is still judged as a server,
with a non-preempting priority class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuguard.workloads.classify import BATCH, INFERENCE, NOTEBOOK, SMOKE, TRAINING, Inference, infer
from gpuguard.workloads.kinds import KindSpec, TemplateRef
from gpuguard.workloads.paths import get_path

COMPLETE, SERVE, INTERACT = "runs to completion", "long-running service", "interactive"
# The lifecycle each class belongs to: the guess may choose between classes of the same checks only.
LIFECYCLE_OF = {TRAINING: COMPLETE, BATCH: COMPLETE, SMOKE: COMPLETE, INFERENCE: SERVE, NOTEBOOK: INTERACT}
# Classes that drop the checkpoint check on work that runs to completion: a declaration of one is
# honoured only where a deadline bounds what a restart can lose.
PRICED_CLASSES = frozenset({BATCH, SMOKE})
# Classes with no progress to lose (no checkpoint or deadline checks): they never complete.
LONG_RUNNING_CLASSES = frozenset({INFERENCE, NOTEBOOK})
# The one class that may preempt, where the namespace grants it.
PREEMPTING_CLASSES = frozenset({INFERENCE})


@dataclass(frozen=True)
class ClassReading:
    """The class a workload is judged as, and what else was read.

    ``judged`` decides checks and defaults; ``evidence`` says whether it rests on evidence (the kind's
    purpose, the admin's config, an honoured declaration) or only on the work's look (a bare Pod that
    runs to completion: its class-dependent findings warn).  ``guess`` is what the work looks like.
    """

    judged: str
    guess: Inference
    evidence: bool = True
    declared: str | None = None
    declaration_note: str = ""  # why a declaration lowers nothing here ("" when honoured or absent)
    may_preempt: bool = False

    @property
    def guessed(self) -> str:
        return self.guess.workload_class

    @property
    def lifecycle(self) -> str:
        return LIFECYCLE_OF.get(self.judged, COMPLETE)


def base_class(obj: dict, kind: KindSpec, kind_class: str) -> str:
    """The class a kind's purpose gives (``kind_class``: the admin's byKind or the kind table's).

    A bare Pod says what it is for by its ``restartPolicy``: ``Always`` (the default) restarts it for
    ever, so it is long-running — a dev pod, a notebook or a server, never a run to completion."""
    if kind.is_pod:
        policy = get_path(obj, ("spec", "restartPolicy"))
        if policy in (None, "Always"):
            return NOTEBOOK if kind_class in (TRAINING, BATCH, SMOKE) else kind_class
    return kind_class


def carries_deadline(kind: KindSpec) -> bool:
    """Whether the kind has a deadline field ``job-limits`` can cap (the price of a lowering declaration)."""
    return kind.job is not None and kind.job.deadline is not None


def read_class(obj: dict, kind: KindSpec, kind_class: str, declared: str | None,
               granted: frozenset[str] | None, lifecycle_kind: KindSpec | None = None,
               refs: Sequence[TemplateRef] | None = None) -> ClassReading:
    """The class ``obj`` is judged as (see the module docstring).

    ``declared``: the label's value where the admin lets users declare (``None`` otherwise);
    ``granted``: the privileged classes the namespace's profile grants (``None``: all, the
    workload-class policy being off); ``lifecycle_kind``: the kind whose purpose counts when it is not
    ``kind`` (a Pod a Deployment's controller made is a server's pod).
    """
    purpose = lifecycle_kind or kind
    base = base_class(obj, purpose, kind_class)
    guess = infer(obj, kind, base, refs)  # refs: kind.locate(obj), where the caller has it
    judged, evidence = base, not (purpose.is_pod and base in (TRAINING, BATCH, SMOKE))
    if base in LONG_RUNNING_CLASSES and guess.workload_class in LONG_RUNNING_CLASSES:
        judged = guess.workload_class  # the same checks either way: the look may choose
    note = ""
    if declared is not None:
        judged, evidence, note = _declare(declared, judged, evidence, purpose, base)
    # Preempting is force against other teams' pods: only a class that rests on the kind or a declaration may,
    # never one a look chose (a bare pod that runs `vllm serve` is a server, but does not preempt for it).
    chosen_by_look = judged != base and judged != declared
    may_preempt = judged in PREEMPTING_CLASSES and not chosen_by_look and (granted is None or judged in granted)
    return ClassReading(judged, guess, evidence, declared, note, may_preempt)


def _declare(declared: str, judged: str, evidence: bool, kind: KindSpec, base: str) -> tuple[str, bool, str]:
    """A user's declaration: honoured where it raises the checks or where a price bounds what it lowers."""
    if declared in (TRAINING, judged):
        return declared, True, ""
    if declared in PRICED_CLASSES:
        if carries_deadline(kind):
            return declared, True, ""
        return judged, evidence, (f"a {kind.kind} has no deadline to bound what it loses, so declaring "
                                  f"{declared!r} lowers no check here")
    # inference or notebook: no checkpoint or deadline checks at all, a price no run to completion can pay.
    if base in LONG_RUNNING_CLASSES or (kind.is_pod and LIFECYCLE_OF.get(base) != COMPLETE):
        return declared, True, ""
    return judged, evidence, f"a {kind.kind} runs to completion, so declaring {declared!r} lowers no check here"
