"""``--format sarif``: SARIF 2.1.0 for code-scanning UIs (GitHub, GitLab, Azure DevOps).

One rule per policy (id, title, what it checks, why it matters, a passing example) and one
result per finding, located at the file and line of the offending field when the source
has it (else the object's first line), so the UI annotates the manifest in the pull
request.  Would-be mutations are not results: code scanning is for problems, and the
webhook fixes those by itself; mutating policies in warn/audit mode do report.  Objects
from a live cluster have no file and carry a logical location (``Kind/namespace/name``).
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import orjson

from gpuguard.webhook import __version__
from gpuguard.webhook.catalog import PolicyInfo
from gpuguard.webhook.cli.audit.formats import RenderOptions, render
from gpuguard.webhook.cli.audit.formats.spool import Spool, indented_json, write_json_around
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport
from gpuguard.webhook.manifests import STDIN_NAME

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INPUT_RULE = "invalid-input"
LEVELS = {"deny": "error", "warn": "warning", "audit": "note"}
DEFAULT_LEVELS = {"enforce": "error", "warn": "warning", "audit": "note", "off": "none"}
SRCROOT = "%SRCROOT%"
_RESULT_INDENT = 8  # {"runs": [{"results": [ -> each result
_INPUT_RULE_PENDING = -1  # the input rule's index until every policy id is known


def _artifact(source: str) -> dict[str, Any] | None:
    """SARIF artifactLocation: relative to the working directory (``%SRCROOT%``) when inside it."""
    if source == STDIN_NAME or source.startswith("cluster"):
        return None
    path = Path(source)
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return {"uri": path.resolve().as_uri()}
    return {"uri": quote(relative.as_posix()), "uriBaseId": SRCROOT}


def _location(item: AuditItem, path: str | None = None) -> dict[str, Any]:
    location: dict[str, Any] = {}
    artifact = _artifact(item.doc.source)
    if artifact is not None:
        physical: dict[str, Any] = {"artifactLocation": artifact}
        line = item.doc.line_of(path) if path else item.doc.line
        if line:
            region: dict[str, Any] = {"startLine": line}
            if item.is_input_error and item.doc.column:
                region["startColumn"] = item.doc.column
            physical["region"] = region
        location["physicalLocation"] = physical
    if item.kind:
        name = "/".join(p for p in (item.kind, item.namespace, item.name) if p)
        location["logicalLocations"] = [{"fullyQualifiedName": name, "kind": "resource"}]
    if not location:
        location["logicalLocations"] = [{"fullyQualifiedName": item.doc.source, "kind": "module"}]
    return location


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def _rule(pid: str, info: PolicyInfo | None) -> dict[str, Any]:
    if info is None:
        return {"id": pid, "name": pid, "shortDescription": {"text": pid}}
    help_text = f"{info.description}\n\nWhy it matters: {info.rationale}"
    markdown = f"{info.description}\n\n**Why it matters:** {info.rationale}"
    if info.example:
        help_text += f"\n\nPassing example:\n{info.example}"
        markdown += f"\n\n**Passing example:**\n\n```yaml\n{info.example.rstrip()}\n```"
    markdown += f"\n\nMore: `gpuguard explain {pid}`"
    return {
        "id": pid,
        "name": "".join(word.capitalize() for word in pid.split("-")),
        "shortDescription": {"text": info.title or pid},
        "fullDescription": {"text": info.description or info.title or pid},
        "help": {"text": help_text, "markdown": markdown},
        "defaultConfiguration": {"level": DEFAULT_LEVELS.get(info.default_action, "warning")},
        "properties": {"tags": ["gpuguard", "kubernetes", info.phase]},
    }


class Writer:
    """Results go to a spool as objects are decided; the rules, the invocation (exit code) and the summary
    are written around them at the end.  Engine errors are notifications, kept until then (one line each)."""

    def __init__(self, report: AuditReport, out: TextIO, options: RenderOptions) -> None:
        self.report, self.out = report, out
        self.spool = Spool()
        self.count = 0
        self.notifications: list[dict[str, Any]] = []
        self.input_errors = False
        self._index: dict[str, int] = {}

    def _rule_index(self, pid: str) -> int:
        if pid not in self._index:
            self._index = {p: i for i, p in enumerate(self.report.policy_ids())}
        return self._index[pid]

    def _result(self, result: dict[str, Any]) -> None:
        separator = ",\n" if self.count else ""
        self.spool.write(None, separator + indented_json(result, _RESULT_INDENT))
        self.count += 1

    def add(self, item: AuditItem) -> None:
        if item.is_input_error:
            self.input_errors = True
            self._result({
                "ruleId": INPUT_RULE, "ruleIndex": _INPUT_RULE_PENDING, "level": "error",
                "message": {"text": f"{item.error}"},
                "locations": [_location(item)],
                "partialFingerprints": {"gpuguard/v1": _fingerprint(INPUT_RULE, item.doc.source, item.doc.index)},
            })
        elif item.error:
            self.notifications.append({"level": "error", "message": {"text": f"{item.label}: {item.error}"},
                                       "locations": [_location(item)]})
        for v in item.violations:
            self._result({
                "ruleId": v.policy, "ruleIndex": self._rule_index(v.policy), "level": LEVELS.get(v.verdict, "note"),
                "message": {"text": f"{item.label}: {v.message}; fix: {v.fix}" if v.fix else
                            f"{item.label}: {v.message}"},
                "locations": [_location(item, v.path)],
                "partialFingerprints": {"gpuguard/v1": _fingerprint(v.policy, item.kind, item.namespace,
                                                                    item.name, v.path, v.message)},
                "properties": {"action": v.verdict, "path": v.path, "kind": item.kind,
                               "namespace": item.namespace, "name": item.name},
            })

    def finish(self) -> None:
        report = self.report
        policy_ids = report.policy_ids()
        rules = [_rule(pid, report.catalog.get(pid)) for pid in policy_ids]
        rules.append({"id": INPUT_RULE, "name": "InvalidInput",
                      "shortDescription": {"text": "Manifest could not be read"},
                      "fullDescription": {"text": "A document is not valid YAML/JSON or not a Kubernetes object, so "
                                                  "gpuguard could not audit it."},
                      "defaultConfiguration": {"level": "error"}})
        notifications = self.notifications + [{"level": "error", "message": {"text": message}}
                                              for message in report.extra_errors]
        invocation: dict[str, Any] = {"executionSuccessful": report.exit_code != 2,
                                      "exitCode": report.exit_code}
        if notifications:
            invocation["toolExecutionNotifications"] = notifications
        placeholder = secrets.token_hex(16)
        run: dict[str, Any] = {
            "tool": {"driver": {"name": "gpuguard", "version": __version__, "semanticVersion": __version__,
                                "rules": rules}},
            "invocations": [invocation],
            "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().resolve().as_uri() + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": placeholder,
            "properties": {"summary": {k: v for k, v in report.summary().items() if k != "costAtRisk"}},
        }
        if os.environ.get("GITHUB_SHA"):
            run["versionControlProvenance"] = [{"repositoryUri": _github_repo_uri(),
                                                "revisionId": os.environ["GITHUB_SHA"]}]
        document = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
        results = self.spool.chunks(None)
        if self.input_errors:  # the input rule comes after every policy: its index is known only now
            pending = " " * (_RESULT_INDENT + 2) + f'"ruleIndex": {_INPUT_RULE_PENDING},'
            known = " " * (_RESULT_INDENT + 2) + f'"ruleIndex": {len(policy_ids)},'
            results = _replace_lines(results, pending, known)
        write_json_around(self.out, document, placeholder, results, _RESULT_INDENT)

    def close(self) -> None:
        self.spool.close()


def _replace_lines(chunks: Iterator[str], old: str, new: str) -> Iterator[str]:
    """``chunks`` with every line equal to ``old`` written as ``new`` (a key line of the indented JSON: string
    values hold no newline, so no manifest text can make such a line)."""
    rest = ""
    for chunk in chunks:
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        yield "".join((new if line == old else line) + "\n" for line in lines)
    yield new if rest == old else rest


def build(report: AuditReport) -> dict[str, Any]:
    """The SARIF log of ``report``'s items as a dict (for tests: the text ``render`` writes, parsed)."""
    out = io.StringIO()
    render(report, "sarif", out)
    data: dict[str, Any] = orjson.loads(out.getvalue())
    return data


def _github_repo_uri() -> str:
    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
    return f"{server}/{os.environ.get('GITHUB_REPOSITORY', '')}"
