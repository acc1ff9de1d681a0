"""``--format json``: the stable, documented audit contract for scripts and dashboards.

Shape: ``{"summary": {...}, "results": [...]}``: ``summary`` counts the run (exit code, totals,
by policy, by namespace, cost at risk), ``results`` holds one ``Decision.result_entry`` per
object or one error entry per unreadable document.  Every key is described in
``docs/audit.md`` ("JSON contract") and checked by ``docs/audit-result.schema.json``.  Keys are
only ever added, never renamed or removed, so consumers can rely on them.
"""

from __future__ import annotations

import secrets
from typing import TextIO

from gpuguard.webhook.cli.audit.formats import RenderOptions
from gpuguard.webhook.cli.audit.formats.spool import Spool, indented_json, write_json_around
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport

SCHEMA_ID = "https://gpuguard.io/schemas/audit-result.schema.json"
_ITEM_INDENT = 4  # {"results": [ -> each entry


class Writer:
    """Entries go to a spool as objects are decided; ``summary`` (first in the document) is written at the end."""

    def __init__(self, report: AuditReport, out: TextIO, options: RenderOptions) -> None:
        self.report, self.out = report, out
        self.spool = Spool()
        self.count = 0

    def add(self, item: AuditItem) -> None:
        separator = ",\n" if self.count else ""
        self.spool.write(None, separator + indented_json(item.entry(), _ITEM_INDENT))
        self.count += 1

    def finish(self) -> None:
        placeholder = secrets.token_hex(16)
        document = {"$schema": SCHEMA_ID, "summary": self.report.summary(), "results": placeholder}
        write_json_around(self.out, document, placeholder, self.spool.chunks(None), _ITEM_INDENT)

    def close(self) -> None:
        self.spool.close()
