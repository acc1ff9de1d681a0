"""The default, human format: per workload its decision, findings and changes; then the totals.

Written for the person deciding whether to switch enforcement on: what would be rejected
and why (with the fix), what would silently change, and what the findings may cost.  Clean
workloads take one line each; non-workload objects (ConfigMaps, Services) are only counted
unless ``--verbose``.
"""

from __future__ import annotations

import io
from typing import TextIO

from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport

STYLES = {"deny": "bold red", "warn": "yellow", "audit": "cyan", "mutate": "magenta", "pass": "green",
          "skipped": "dim", "error": "bold red"}
HEADS = {"deny": "DENY", "warn": "WARN", "audit": "AUDIT", "mutate": "MUTATE", "pass": "PASS", "skipped": "SKIP",
         "error": "ERROR"}
MAX_CHANGES = 8


def _money(value: float) -> str:
    return f"${value:,.0f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _indent(renderable: object, left: int = 2) -> Padding:
    return Padding(renderable, (0, 0, 0, left), expand=False)


def _where(item: AuditItem) -> str:
    doc = item.doc
    if doc.line is None:
        return doc.source
    return f"{doc.source}:{doc.line}" + (f":{doc.column}" if item.is_input_error and doc.column else "")


def _item(item: AuditItem, options: RenderOptions) -> Group | None:
    verdict = item.verdict
    if verdict == "skipped" and not options.verbose:
        return None
    head = Text()
    head.append(f"{HEADS[verdict]:<6}", style=STYLES[verdict])
    head.append("  ")
    if item.is_input_error:
        head.append(_where(item), style="bold")
        head.append(f"  {item.error}")
        return Group(head)
    head.append(item.label, style="bold")
    head.append(f"  {_where(item)}", style="dim")
    parts: list = [head]
    if item.error:
        parts.append(_indent(Text(f"engine error: {item.error}", style="red"), 8))
    elif verdict == "skipped" and item.decision is not None:
        parts.append(_indent(Text(item.decision.skipped or "", style="dim"), 8))
    if item.violations:
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=False)
        table.add_column(width=5, no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column(ratio=1)
        for v in item.violations:
            where = f"{v.path} ({v.target})" if getattr(v, "target", "") else v.path
            body = Text()
            body.append(where, style="dim")
            body.append(f"\n{v.message}")
            if v.fix:
                body.append("\nfix: ", style="bold")
                body.append(v.fix)
            table.add_row(Text(v.verdict, style=STYLES.get(v.verdict, "")), Text(v.policy), body)
        parts.append(_indent(table))
    changes = mutation.describe_changes(item.patch)
    if changes:
        by = ", ".join(item.mutated_by) or "gpuguard"
        parts.append(_indent(Text(f"would change ({by}):", style="magenta")))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="magenta")
        grid.add_column(overflow="fold")
        for replaced in item.decision.changes if item.decision is not None else []:  # the user's own values
            grid.add_row("!", Text(replaced.text))  # Text: "[job-ttl]" is no markup
        for change in changes[:MAX_CHANGES]:
            grid.add_row("+", change)
        if len(changes) > MAX_CHANGES:
            grid.add_row("", Text(f"… and {len(changes) - MAX_CHANGES} more (see --diff)", style="dim"))
        parts.append(_indent(grid, 4))
    if item.cost is not None:
        reasons = ", ".join(item.cost.reasons)
        gpus = _plural(item.cost.gpus, "GPU")
        parts.append(_indent(Text(f"{item.cost.headline(_money)} ({gpus} x 24 h; {reasons})", style="dim")))
    if options.diff and options.color and item.decision is not None and item.patch:
        diff = mutation.yaml_diff(item.decision.original, item.decision.mutated, item.label)
        parts.append(_indent(Syntax(diff, "diff", theme="ansi_dark", background_color="default")))
    return Group(*parts)


def _summary(report: AuditReport) -> list:
    s = report.summary()
    out: list = []
    warned = report.tally.warned
    line = Text()
    line.append(f"{_plural(s['workloads'], 'workload')}: ", style="bold")
    line.append(f"{s['denied']} would be denied", style=STYLES["deny"] if s["denied"] else "")
    line.append(f", {s['allowed']} allowed ({warned} with warnings or audit findings), ")
    line.append(f"{s['mutated']} would be changed", style=STYLES["mutate"] if s["mutated"] else "")
    line.append(f", {s['clean']} clean")
    extras = []
    if s["skipped"]:
        extras.append(f"{s['skipped']} other objects not checked")
    if s["inputErrors"]:
        extras.append(f"{s['inputErrors']} input errors")
    if s["engineErrors"]:
        extras.append(f"{s['engineErrors']} engine errors")
    if extras:
        line.append(" · " + " · ".join(extras), style="bold red" if s["inputErrors"] or s["engineErrors"] else "")
    out.append(line)

    table = Table(title="Findings by policy", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("policy")
    table.add_column("type", style="dim")
    for column in ("deny", "warn", "audit", "mutate"):
        table.add_column(column, justify="right", style=STYLES[column])
    quiet = 0
    for pid, counts in s["byPolicy"].items():
        if not any(counts.values()):
            quiet += 1
            continue
        info = report.catalog.get(pid)
        table.add_row(pid, info.phase if info else "", *(str(counts[c] or "") for c in ("deny", "warn", "audit",
                                                                                       "mutate")))
    if table.row_count:
        out.append(table)
    if quiet:
        out.append(Text(f"{_plural(quiet, 'other policy')} found nothing." if quiet == 1 else
                        f"{quiet} other policies found nothing.", style="dim"))

    cost = s["costAtRisk"]
    if cost["workloads"]:
        text = Text()
        text.append("Cost at risk (estimate): ", style="bold")
        text.append(f"≈ {_money(cost['usdPerDay'])}/day", style="bold yellow")
        text.append(f", {cost['gpuHoursPerDay']:,.0f} GPU-hours/day held by "
                    f"{_plural(cost['workloads'], 'workload')}")
        for reason, bucket in cost["byReason"].items():
            count = _plural(bucket["workloads"], "workload")
            text.append(f"\n  {reason}: {count}, ≈ {_money(bucket['usdPerDay'])}/day ({bucket['description']})")
        if cost["unpricedGpus"]:
            unpriced = ", ".join(f"{n} {r}" for r, n in cost["unpricedGpus"].items())
            text.append(f"\n  not priced (no price in config): {unpriced}")
        text.append(f"\n{cost['method']}", style="dim")
        out.append(text)
    for message in s["otherErrors"]:
        out.append(Text(f"error: {message}", style="bold red"))
    for message in s.get("notes", []):
        out.append(Text(f"note: {message}", style="dim"))
    out.append(_verdict_line(report, s))
    return out


def _verdict_line(report: AuditReport, s: dict) -> Text:
    code = s["exitCode"]
    if code == 2:
        why = "the audit is incomplete: some inputs could not be read or evaluated"
    elif code == 1:
        counted = {"deny": "deny", "warn": "deny and warn"}.get(report.fail_on, "deny, warn and audit")
        why = f"{counted} findings present (--fail-on {report.fail_on})"
    else:
        why = f"nothing at or above --fail-on {report.fail_on}"
    return Text(f"exit {code}: {why}", style="bold red" if code else "bold green")


class Writer:
    """Each item is printed as soon as it is decided; the summary at the end."""

    def __init__(self, report: AuditReport, out: TextIO, options: RenderOptions) -> None:
        self.report, self.out, self.options = report, out, options
        # Plain text (files, pipes, CI logs): rich pads table cells, so each block is printed to a buffer and
        # written without the trailing blanks.
        self.buffer = None if options.color else io.StringIO()
        self.console = Console(file=self.buffer or out, force_terminal=options.color, no_color=not options.color,
                               color_system="auto" if options.color else None, width=options.width,
                               highlight=False, emoji=False)
        self.items = 0

    def _flush(self) -> None:
        if self.buffer is None:
            return
        self.out.write("\n".join(line.rstrip() for line in self.buffer.getvalue().split("\n")))
        self.buffer.seek(0)
        self.buffer.truncate()

    def add(self, item: AuditItem) -> None:
        self.items += 1
        block = _item(item, self.options)
        if block is not None:
            self.console.print(block)
            self._flush()
            if self.options.diff and not self.options.color and item.decision is not None and item.patch:
                # In a pipe or a file the diff is written as it is: every line whole, for `| grep`.
                diff = mutation.yaml_diff(item.decision.original, item.decision.mutated, item.label)
                self.out.write("".join(f"  {line}\n" for line in diff.splitlines()))

    def finish(self) -> None:
        if self.items:
            self.console.print()
        # A rule as wide as a terminal's, also off one (where the console has no width to speak of).
        self.console.print(Rule(escape("Summary"), align="left", style="dim"), width=min(self.console.width, 120))
        for part in _summary(self.report):
            self.console.print(part)
        self._flush()

    def close(self) -> None:
        pass
