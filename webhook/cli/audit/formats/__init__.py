"""Audit output formats: one module per format, each a ``render(report, out, options)`` function.

A format only presents an ``AuditReport``; counts, exit codes and costs are computed once in
``gpuguard.webhook.cli.audit.run`` so that every format tells the same story.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from gpuguard.webhook.cli.audit.run import AuditReport

# format name -> module (under gpuguard.webhook.cli.audit.formats)
FORMATS: dict[str, str] = {
    "table": "table",
    "json": "jsonreport",
    "junit": "junit",
    "sarif": "sarif",
    "policyreport": "policyreport",
    "html": "htmlreport",
}
# Formats meant for people reading a terminal; the others are files for tools.
HUMAN_FORMATS = frozenset({"table"})


@dataclass(frozen=True)
class RenderOptions:
    color: bool = False
    width: int | None = None
    verbose: bool = False
    diff: bool = False  # table: append each workload's YAML diff


def render(report: AuditReport, fmt: str, out: TextIO, options: RenderOptions | None = None) -> None:
    """Write ``report`` to ``out`` in format ``fmt`` (one of ``FORMATS``)."""
    module = importlib.import_module(f"gpuguard.webhook.cli.audit.formats.{FORMATS[fmt]}")
    module.render(report, out, options or RenderOptions())
