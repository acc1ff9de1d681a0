"""``--format html``: one self-contained page a team lead can open, mail or attach to a ticket.

Everything is inline (CSS, SVG charts); no script, no font, no image is fetched, so the
page renders the same offline, behind a proxy or from a CI artifact store with a strict
Content-Security-Policy.  Workloads use ``<details>`` (denied ones open) so a long report
stays scannable without JavaScript; each mutation is shown as a coloured unified YAML diff.
"""

from __future__ import annotations

import datetime as dt
import html as _html
import io
import re
from typing import Any, TextIO

from gpuguard.webhook import __version__
from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions, write_all
from gpuguard.webhook.cli.audit.formats.spool import Spool
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport

# Control characters (other than tab and newline) are parse errors in HTML and NUL is dropped or
# replaced by browsers; a manifest's names and messages may hold any of them, so they are shown as
# visible ``\xNN`` escapes.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape(text: str) -> str:
    """``text`` safe inside HTML text and attribute values, control characters written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _html.escape(text))


COLORS = {"deny": "#c62828", "warn": "#ef8f00", "audit": "#1e88e5", "mutate": "#8e24aa", "pass": "#2e7d32",
          "skipped": "#757575", "error": "#b71c1c"}
SERIES = ("deny", "warn", "audit", "mutate")
MAX_BARS = 20

CSS = """
:root { color-scheme: light; --fg:#1d1d1f; --muted:#5f6368; --line:#e0e0e0; --bg:#fafafa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; padding: 24px 32px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 10px; }
.meta { color: var(--muted); font-size: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 18px 0; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 16px; min-width: 130px; }
.card .n { font-size: 24px; font-weight: 600; } .card .l { color: var(--muted); font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 24px; }
.chart { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px; }
.legend span { display: inline-block; margin-right: 12px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
details.workload { background: #fff; border: 1px solid var(--line); border-radius: 8px; margin: 8px 0;
                   padding: 0 12px; }
details.workload > summary { cursor: pointer; padding: 10px 0; list-style-position: outside; }
.badge { display: inline-block; min-width: 58px; text-align: center; color: #fff; border-radius: 4px;
         font-size: 11px; font-weight: 700; padding: 2px 6px; margin-right: 8px; }
.where { color: var(--muted); font-size: 12px; margin-left: 8px; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre.diff { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 8px;
           overflow-x: auto; }
pre.diff .add { background: #e6ffec; display: block; } pre.diff .del { background: #ffebe9; display: block; }
pre.diff .hunk { color: #6f42c1; display: block; } pre.diff .file { color: var(--muted); display: block; }
.fix { color: var(--muted); }
.cost { background: #fff8e1; border: 1px solid #ffe082; border-radius: 8px; padding: 12px 16px; }
.note { color: var(--muted); font-size: 12px; }
.exit0 { color: #2e7d32; } .exit1, .exit2 { color: #c62828; }
"""


def _badge(verdict: str) -> str:
    return f'<span class="badge" style="background:{COLORS.get(verdict, "#555")}">{escape(verdict.upper())}</span>'


def _money(value: float) -> str:
    return f"${value:,.0f}"


def bar_chart(title: str, rows: list[tuple[str, dict[str, int]]], width: int = 560) -> str:
    """A horizontal stacked bar chart as inline SVG (no library: a few rects and texts)."""
    rows = [(label, counts) for label, counts in rows if sum(counts.get(s, 0) for s in SERIES)]
    rows.sort(key=lambda r: -sum(r[1].get(s, 0) for s in SERIES))
    rows = rows[:MAX_BARS]
    label_w, bar_h, gap, top = 170, 18, 6, 8
    height = top + len(rows) * (bar_h + gap) + 8
    if not rows:
        return (f'<figure class="chart"><figcaption><b>{escape(title)}</b></figcaption>'
                '<p class="note">Nothing to show.</p></figure>')
    peak = max(sum(c.get(s, 0) for s in SERIES) for _, c in rows)
    scale = (width - label_w - 50) / peak
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{escape(title)}" font-family="system-ui, sans-serif" font-size="12">']
    for i, (label, counts) in enumerate(rows):
        y = top + i * (bar_h + gap)
        short = label if len(label) <= 26 else label[:25] + "…"
        parts.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end" fill="#1d1d1f">'
                     f'<title>{escape(label)}</title>{escape(short)}</text>')
        x = float(label_w)
        for series in SERIES:
            n = counts.get(series, 0)
            if not n:
                continue
            w = max(n * scale, 2.0)
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" '
                         f'fill="{COLORS[series]}"><title>{escape(label)}: {n} {series}</title></rect>')
            x += w
        total = sum(counts.get(s, 0) for s in SERIES)
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 13}" fill="#5f6368">{total}</text>')
    parts.append("</svg>")
    legend = "".join(f'<span><i style="background:{COLORS[s]}"></i>{s}</span>' for s in SERIES)
    return (f'<figure class="chart"><figcaption><b>{escape(title)}</b></figcaption>{"".join(parts)}'
            f'<div class="legend">{legend}</div></figure>')


def _diff_html(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        cls = ("file" if line.startswith(("---", "+++")) else "hunk" if line.startswith("@@")
               else "add" if line.startswith("+") else "del" if line.startswith("-") else "")
        text = escape(line) or " "
        out.append(f'<span class="{cls}">{text}</span>' if cls else text + "\n")
    return f'<pre class="diff">{"".join(out)}</pre>'


def _workload(item: AuditItem) -> str:
    verdict = item.verdict
    where = escape(item.doc.location)
    head = f'<summary>{_badge(verdict)}<b>{escape(item.label)}</b><span class="where">{where}</span>'
    if item.cost is not None:
        head += f'<span class="where">{escape(item.cost.headline(_money))}</span>'
    head += "</summary>"
    body: list[str] = []
    if item.error:
        body.append(f'<p style="color:{COLORS["error"]}">{escape(item.error)}</p>')
    if item.violations:
        rows = "".join(
            f"<tr><td>{_badge(v.verdict)}</td><td><code>{escape(v.policy)}</code></td>"
            f"<td><code>{escape(v.path)}</code>{' (' + escape(v.target) + ')' if getattr(v, 'target', '') else ''}"
            f"</td><td>{escape(v.message)}<div class=\"fix\">fix: {escape(v.fix)}</div></td></tr>"
            for v in item.violations)
        body.append("<table><tr><th>action</th><th>policy</th><th>field</th><th>finding</th></tr>"
                    f"{rows}</table>")
    if item.patch and item.decision is not None:
        by = ", ".join(item.mutated_by) or "gpuguard"
        body.append(f"<p><b>Would change</b> ({escape(by)}):</p>")
        body.append(_diff_html(mutation.yaml_diff(item.decision.original, item.decision.mutated, item.label)))
    if not body:
        body.append('<p class="note">No finding, no change.</p>')
    opened = " open" if verdict in ("deny", "error") else ""
    return f'<details class="workload"{opened}>{head}{"".join(body)}</details>'


def _cards(s: dict[str, Any]) -> str:
    cost = s["costAtRisk"]
    cards = [
        (s["workloads"], "workloads checked", None),
        (s["denied"], "would be denied", COLORS["deny"]),
        (s["violations"]["warn"], "warnings", COLORS["warn"]),
        (s["violations"]["audit"], "audit findings", COLORS["audit"]),
        (s["mutated"], "would be changed", COLORS["mutate"]),
        (s["clean"], "clean", COLORS["pass"]),
        (s["inputErrors"] + s["engineErrors"], "input/engine errors", COLORS["error"]),
        (f"≈ {_money(cost['usdPerDay'])}", "cost at risk per day (estimate)", COLORS["warn"]),
    ]
    html = []
    for value, label, color in cards:
        style = f' style="color:{color}"' if color else ""
        html.append(f'<div class="card"><div class="n"{style}>{escape(str(value))}</div>'
                    f'<div class="l">{escape(label)}</div></div>')
    return f'<div class="cards">{"".join(html)}</div>'


def _cost(s: dict[str, Any]) -> str:
    cost = s["costAtRisk"]
    if not cost["workloads"]:
        return ('<h2>Cost at risk</h2><p class="note">No workload without deadline or TTL, and none that would '
                "pend forever.</p>")
    rows = "".join(f"<tr><td><code>{escape(reason)}</code></td><td>{escape(b['description'])}</td>"
                   f"<td>{b['workloads']}</td><td>{b['gpuHoursPerDay']:,.0f}</td><td>{_money(b['usdPerDay'])}</td></tr>"
                   for reason, b in cost["byReason"].items())
    unpriced = ""
    if cost["unpricedGpus"]:
        listed = ", ".join(f"{n} × {r}" for r, n in cost["unpricedGpus"].items())
        unpriced = f'<p class="note">Not priced (no price in the config): {escape(listed)}</p>'
    return (f'<h2>Cost at risk</h2><div class="cost"><p><b>≈ {_money(cost["usdPerDay"])} per day</b>, '
            f'{cost["gpuHoursPerDay"]:,.0f} GPU-hours per day held by {cost["workloads"]} workloads '
            f"({cost['gpus']} GPUs). <b>This is an estimate.</b></p>"
            "<table><tr><th>policy</th><th>why it costs</th><th>workloads</th><th>GPU-hours/day</th>"
            f"<th>USD/day</th></tr>{rows}</table>{unpriced}<p class=\"note\">{escape(cost['method'])}</p></div>")


_ORDER = {"error": 0, "deny": 1, "warn": 2, "audit": 3, "mutate": 4, "pass": 5}  # workloads, worst first
_ERRORS = "input errors"


def _error_row(where: str, kind: str, message: str) -> str:
    return f"<tr><td>{where}</td><td>{escape(kind)}</td><td>{escape(message)}</td></tr>"


class Writer:
    """Each workload's block is written as soon as it is decided, parked on disk by verdict (the page lists the
    worst first); the page is written at the end, its summary, charts and cost first."""

    def __init__(self, report: AuditReport, out: TextIO, options: RenderOptions,
                 now: dt.datetime | None = None) -> None:
        self.report, self.out, self.now = report, out, now
        self.spool = Spool()
        self.shown = 0

    def add(self, item: AuditItem) -> None:
        if item.is_input_error:
            self.spool.write(_ERRORS, _error_row(f"<code>{escape(item.doc.location)}</code>", item.error_type or "",
                                                 item.error or ""))
        elif item.verdict != "skipped":
            self.shown += 1
            self.spool.write(_ORDER.get(item.verdict, 9), _workload(item))

    def finish(self) -> None:
        report, out = self.report, self.out
        s = report.summary()
        when = (self.now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
        sources = ", ".join(s["sources"]) or "-"
        by_policy = [(pid, counts) for pid, counts in s["byPolicy"].items()]
        by_namespace = [(ns, counts) for ns, counts in s["byNamespace"].items()]
        exit_code = s["exitCode"]
        notes = "".join(f'<p class="note">note: {escape(n)}</p>' for n in s["notes"])
        out.write(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>gpuguard audit report</title><style>{CSS}</style></head>
<body>
<h1>gpuguard audit report</h1>
<div class="meta">gpuguard {escape(__version__)} · {escape(when)} · sources: {escape(sources)} ·
fail-on {escape(s['failOn'])} · <span class="exit{exit_code}">exit code {exit_code}</span></div>
{_cards(s)}
<h2>Findings</h2>
<div class="charts">{bar_chart("Findings by policy", by_policy)}{bar_chart("Findings by namespace", by_namespace)}</div>
{_cost(s)}
""")
        if _ERRORS in self.spool or report.extra_errors:
            out.write("<h2>Input errors</h2><p>These documents were not audited; the rest of the audit went on.</p>"
                      "<table><tr><th>where</th><th>type</th><th>error</th></tr>")
            self.spool.copy(_ERRORS, out)
            out.write("".join(_error_row("cluster", "error", m) for m in report.extra_errors))
            out.write("</table>")
        out.write(f"""
<h2>Workloads ({self.shown})</h2>
<p class="note">{s['skipped']} other objects (not workloads, or exempt) are not listed.</p>
""")
        for group in sorted(k for k in self.spool if k != _ERRORS):
            self.spool.copy(group, out)
        out.write(f"""
{notes}
</body></html>
""")

    def close(self) -> None:
        self.spool.close()


def build(report: AuditReport, now: dt.datetime | None = None) -> str:
    """The whole page of ``report``'s items as a string (for tests)."""
    out = io.StringIO()
    write_all(Writer(report, out, RenderOptions(), now=now), report.items)
    return out.getvalue()
