"""job-limits: retry and deadline defaults for GPU training, the weekend-long runaway job.

A GPU job that crash-loops retries six times by default (each retry re-pulls a large
image and reloads a model), and a job that hangs runs until someone notices.  A backoff
limit and an ``activeDeadlineSeconds`` default (and maximum) bound both.  The class is the engine's,
which rests on evidence (the kind, an honoured declaration), never on a word in a command line: a
cap by class is the price a user pays for declaring ``smoke-test`` or ``batch-inference``.  Objects a trusted
controller creates (the Pods of a Job) never reach a mutating policy: their parent carries the
deadline (``gpuguard.workloads.controllers``).  On UPDATE the caps hold too: raising a deadline past the
maximum is capped like on CREATE.
"""

from __future__ import annotations

from pydantic import Field

from gpuguard.policies.base import ConfigModel, MutatingPolicy, PolicySettings, accelerator_objects_only
from gpuguard.workloads.view import WorkloadView


class Deadline(ConfigModel):
    active_deadline_seconds: int = Field(ge=1, description="Deadline where none is given.")
    max_active_deadline_seconds: int | None = Field(None, ge=1, description="Longer deadlines are capped.")


class Settings(PolicySettings):
    backoff_limit: int = Field(3, ge=0, description="Retries where none is given (Job default is 6).")
    max_backoff_limit: int | None = Field(None, ge=0, description="Larger retry limits are capped to this.")
    active_deadline_seconds: int = Field(86400, ge=1, description="Deadline where none is given.")
    max_active_deadline_seconds: int | None = Field(604800, ge=1, description="Longer deadlines are capped.")
    classes: list[str] = Field(default_factory=lambda: ["training", "batch-inference", "smoke-test"],
                               description="Workload classes it applies to.")
    by_class: dict[str, Deadline] = Field(
        default_factory=lambda: {"smoke-test": Deadline(active_deadline_seconds=1800,
                                                        max_active_deadline_seconds=3600),
                                 "batch-inference": Deadline(active_deadline_seconds=21600,
                                                             max_active_deadline_seconds=86400)},
        description="Deadline and cap per class, over the general ones: the price of the classes that skip the "
        "checkpoint check (a smoke test is short by definition; batch work is bounded to a day).")


def mutate(view: WorkloadView, settings: Settings) -> bool:
    fields = view.kind.job
    if fields is None or not view.is_gpu or view.workload_class not in settings.classes:
        return False
    changed = False
    if fields.backoff:
        changed |= view.set_job_int("backoff", settings.backoff_limit, settings.max_backoff_limit,
                                    fields.backoff_api_default)
    if fields.deadline:
        own = settings.by_class.get(view.workload_class)
        default, cap = (own.active_deadline_seconds, own.max_active_deadline_seconds) if own else (
            settings.active_deadline_seconds, settings.max_active_deadline_seconds)
        changed |= view.set_job_int("deadline", default, cap)
    return changed


POLICY = MutatingPolicy(
    id="job-limits",
    title="Retry and deadline limits for GPU training",
    settings_model=Settings,
    run=mutate,
    description="Sets `backoffLimit` (default 3) and `activeDeadlineSeconds` (default 24h, capped at 7 days; smoke "
    "tests 30 min, capped at 1h; batch inference 6h, capped at 24h) on GPU training, batch-inference and smoke-test "
    "workloads where absent; explicit user values stay below the cap of the class, which rests on evidence.",
    rationale="A hung or crash-looping GPU job bills every GPU-hour until a human notices; over a weekend "
    "that is 60 hours per GPU.",
    cpu_scope=accelerator_objects_only,
    writes=("job.deadline", "job.backoff"),
)
