"""``--format json``: the stable, documented audit contract for scripts and dashboards.

Shape: ``{"summary": {...}, "results": [...]}``: ``summary`` counts the run (exit code, totals,
by policy, by namespace, cost at risk), ``results`` holds one ``Decision.result_entry`` per
object or one error entry per unreadable document.  Every key is described in
``docs/audit.md`` ("JSON contract") and checked by ``docs/audit-result.schema.json``.  Keys are
only ever added, never renamed or removed, so consumers can rely on them.
"""

from __future__ import annotations

from typing import TextIO

import orjson

from gpuguard.webhook.cli.audit.formats import RenderOptions
from gpuguard.webhook.cli.audit.run import AuditReport

SCHEMA_ID = "https://gpuguard.io/schemas/audit-result.schema.json"


def render(report: AuditReport, out: TextIO, options: RenderOptions) -> None:
    data = {"$schema": SCHEMA_ID, **report.to_dict()}
    out.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
    out.write("\n")
