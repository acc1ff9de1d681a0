"""Building blocks of ``KindSpec.locate`` that several operator families share.

Replica counts come from user input, so they are read defensively: an object with a string
or negative count still gets a decision, counted as the default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuguard.workloads.kinds.spec import Locate, TemplateRef
from gpuguard.workloads.paths import Path, get_path


def count(value: Any, default: int = 1) -> int:
    """Replica counts from user input: ints only (bools and strings are not counts)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def template_at(prefix: Path, replicas_path: Path | None = None, role: str = "template") -> Locate:
    """One ``template`` under ``prefix`` (Deployment, StatefulSet, Notebook ...), ``replicas_path`` pods."""

    def locate(obj: dict) -> Iterator[TemplateRef]:
        replicas = count(get_path(obj, replicas_path)) if replicas_path else 1
        yield TemplateRef(role, prefix + ("template", "spec"), prefix + ("template", "metadata"), replicas)

    return locate


def job_replicas(job_spec: Any) -> int:
    """Pods a Job runs at once: parallelism (default 1), capped by completions when set."""
    parallelism = count(get_path(job_spec, ("parallelism",)))
    completions = get_path(job_spec, ("completions",))
    if isinstance(completions, int) and not isinstance(completions, bool) and completions > 0:
        return min(parallelism, completions)
    return parallelism


def no_templates(obj: dict) -> Iterator[TemplateRef]:
    """The object names its pod templates elsewhere (``KindSpec.runtime``)."""
    return iter(())
