"""job-limits: retry and deadline defaults for GPU training, the weekend-long runaway job.

A GPU job that crash-loops retries six times by default (each retry re-pulls a large
image and reloads a model), and a job that hangs runs until someone notices.  A backoff
limit and an ``activeDeadlineSeconds`` default (and maximum) bound both.  Pods created by a
controller are skipped: their controller carries the deadline, and a pod-level deadline
would change what the controller asked for.
"""

from __future__ import annotations

from pydantic import Field

from policies.base import MutatingPolicy, PolicySettings
from workloads.paths import set_int_field
from workloads.view import WorkloadView


class Settings(PolicySettings):
    backoff_limit: int = Field(3, ge=0, description="Retries where none is given (Job default is 6).")
    max_backoff_limit: int | None = Field(None, ge=0, description="Larger retry limits are capped to this.")
    active_deadline_seconds: int = Field(86400, ge=1, description="Deadline where none is given.")
    max_active_deadline_seconds: int | None = Field(604800, ge=1, description="Longer deadlines are capped.")
    classes: list[str] = Field(default_factory=lambda: ["training"],
                               description="Workload classes it applies to.")


def mutate(view: WorkloadView, settings: Settings) -> bool:
    fields = view.kind.job
    if fields is None or not view.is_gpu or view.workload_class not in settings.classes:
        return False
    if view.owned_by_controller:
        return False
    changed = False
    if fields.backoff:
        changed |= set_int_field(view.obj, fields.backoff, settings.backoff_limit, settings.max_backoff_limit,
                      fields.backoff_api_default)
    if fields.deadline:
        changed |= set_int_field(view.obj, fields.deadline, settings.active_deadline_seconds,
                      settings.max_active_deadline_seconds)
    return changed


POLICY = MutatingPolicy(
    id="job-limits",
    title="Retry and deadline limits for GPU training",
    settings_model=Settings,
    run=mutate,
    description="Sets backoffLimit (default 3) and activeDeadlineSeconds (default 24h, capped at 7 days) on "
    "GPU training workloads where absent.",
    rationale="A hung or crash-looping GPU job bills every GPU-hour until a human notices; over a weekend "
    "that is 60 hours per GPU.",
    example="""\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  backoffLimit: 3
  activeDeadlineSeconds: 86400
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: ghcr.io/example/train:1
        resources:
          limits: {nvidia.com/gpu: 1}
""",
)
