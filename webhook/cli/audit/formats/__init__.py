"""Audit output formats: one module per format, each a ``Writer(report, out, options)``.

A format only presents the audit; counts, exit codes and costs are computed once in
``gpuguard.webhook.cli.audit.run`` so that every format tells the same story.  The audit streams:
each object's item goes to ``Writer.add`` as soon as it is decided and is dropped after, so a
format writes the item's text at once (to ``out``, or to a ``spool.Spool`` on disk when the
report's order needs the totals first) and keeps only what it must: counts, never decisions.
``Writer.finish`` writes the rest once every item has been added.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport

# format name -> module (under gpuguard.webhook.cli.audit.formats)
FORMATS: dict[str, str] = {
    "table": "table",
    "json": "jsonreport",
    "junit": "junit",
    "sarif": "sarif",
    "policyreport": "policyreport",
    "openreports": "openreports",
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


class Writer(Protocol):
    """What every format module's ``Writer`` class does."""

    def add(self, item: AuditItem) -> None:
        """Write (or spool) one item, already counted in the report."""

    def finish(self) -> None:
        """Write everything that needs the whole audit: the totals, and the spooled text in order."""

    def close(self) -> None:
        """Drop temporary files (also when the audit stopped before ``finish``)."""


def open_writer(report: AuditReport, fmt: str, out: TextIO, options: RenderOptions | None = None) -> Writer:
    """A ``Writer`` of format ``fmt`` (one of ``FORMATS``) for ``report``, writing to ``out``."""
    module = importlib.import_module(f"gpuguard.webhook.cli.audit.formats.{FORMATS[fmt]}")
    writer: Writer = module.Writer(report, out, options or RenderOptions())
    return writer


def write_all(writer: Writer, items: Iterable[AuditItem]) -> None:
    """Hand ``items`` to an open writer, finish the report and close the writer (its spool too)."""
    try:
        for item in items:
            writer.add(item)
        writer.finish()
    finally:
        writer.close()


def render(report: AuditReport, fmt: str, out: TextIO, options: RenderOptions | None = None) -> None:
    """Write ``report`` and the items it holds (``report.items``) to ``out`` in format ``fmt``."""
    write_all(open_writer(report, fmt, out, options), report.items)
