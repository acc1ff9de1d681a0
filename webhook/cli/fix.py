"""``gpuguard fix FILE…``: write gpuguard's mutations into manifest files, before they are committed.

What an ML engineer runs before ``git commit``: every workload in the files gets the changes the
webhook would make at ``kubectl apply`` (tolerations, resources, priority class …), so the
cluster later has nothing to change and the repository says what really runs.  What is still
denied after that (a rule no mutation can satisfy) is printed, and the exit code is 1.

Editing, not re-serialising: a file is split into its YAML documents as text; a document with
nothing to change is written back byte for byte, and a changed one is edited in place with
``ruamel.yaml``'s round-trip mode (comments, key order, quoting and flow style of everything
not changed are kept; its indentation is detected).  The edits are the engine's JSON patch
(the one structural diff of ``gpuguard.webhook.engine.patch``), applied to the round-trip tree op by op.
The ``gpuguard.io/mutated-by`` annotation is left out: it records what the webhook changed,
and after ``fix`` it changes nothing.  Multi-document files, Helm ``# Source:`` comments,
kustomize output and ``kind: List`` documents are handled; JSON files are rewritten as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gpuguard.webhook.cli.common import EXIT_ERROR, error, guard
from gpuguard.webhook.config import ConfigError, load_config
from gpuguard.webhook.decision import Decision, RequestContext, Violation
from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION, Engine
from gpuguard.webhook.engine.patch import make_patch

EXIT_CLEAN, EXIT_DENIED = 0, 1
# A document separator line ("---", "--- # comment") or a document end marker ("...").
_SEPARATOR = re.compile(r"^(---|\.\.\.)(\s.*)?$")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fix", help="apply gpuguard's mutations to manifest files in place",
        description="Apply the changes gpuguard's webhook would make at admission to every workload in the "
                    "files, keeping comments, key order and formatting of everything unchanged, then print what "
                    "would still be denied. Exit 0 when nothing is denied, 1 when something still is, 2 when a file "
                    "or an object cannot be read.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML or JSON manifest (multi-document); "
                        "- reads stdin and writes stdout")
    parser.add_argument("--stdout", action="store_true", help="print the fixed files instead of writing them")
    parser.add_argument("--config", help="GpuguardConfig file (default: the shipped default)")
    parser.add_argument("--namespace", default="default", help="namespace for objects without one")
    parser.set_defaults(func=guard(run))


class FixError(Exception):
    """A file ``fix`` cannot edit (unreadable, invalid YAML); the message says where."""


@dataclass
class DocumentResult:
    """What happened to one object of a file."""

    label: str
    changed_by: list[str] = field(default_factory=list)
    denials: list[Violation] = field(default_factory=list)
    error: str | None = None  # the engine could not read the object (malformed manifest)


@dataclass
class FileResult:
    text: str
    changed: bool
    objects: list[DocumentResult]


# ---------------------------------------------------------------- splitting documents as text


def split_documents(text: str) -> list[str]:
    """The file as chunks that concatenate back to ``text`` exactly; each separator starts a chunk."""
    chunks: list[str] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        if _SEPARATOR.match(line.rstrip("\r\n")) and current:
            chunks.append("".join(current))
            current = []
        current.append(line)
    if current:
        chunks.append("".join(current))
    return chunks


def _head_and_body(chunk: str) -> tuple[str, str]:
    """Split off the separator line and leading comment / blank lines, kept verbatim."""
    lines = chunk.splitlines(keepends=True)
    i = 0
    while i < len(lines) and (_SEPARATOR.match(lines[i].rstrip("\r\n")) or not lines[i].strip()
                              or lines[i].lstrip().startswith("#") or lines[i].startswith("%")):
        i += 1
    return "".join(lines[:i]), "".join(lines[i:])


# ---------------------------------------------------------------- applying a JSON patch to a round-trip tree


def _token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> None:
    """Apply RFC 6902 add/replace/remove ops in place, keeping the round-trip containers (and their comments)."""
    for op in ops:
        tokens = [_token(t) for t in op["path"].split("/")[1:]]
        if not tokens:
            raise ValueError("a patch of the whole document cannot be applied in place")
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        kind = op["op"]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, op["value"])
            elif kind == "replace":
                parent[index] = op["value"]
            elif kind == "remove":
                del parent[index]
            else:
                raise ValueError(f"unsupported patch op {kind}")
        elif kind in ("add", "replace"):
            parent[last] = op["value"]
        elif kind == "remove":
            del parent[last]
        else:
            raise ValueError(f"unsupported patch op {kind}")


# ---------------------------------------------------------------- what to change


def _plain(node: Any) -> Any:
    """A round-trip node as plain JSON values (what the apiserver would send the webhook)."""
    return orjson.loads(orjson.dumps(node, option=orjson.OPT_NON_STR_KEYS, default=str))


def _without_mutated_by(original: dict, mutated: dict) -> dict:
    """``mutated`` without the ``gpuguard.io/mutated-by`` annotation the webhook adds (and an emptied map)."""
    meta = mutated.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if isinstance(annotations, dict) and MUTATED_BY_ANNOTATION in annotations:
        before = (original.get("metadata") or {}).get("annotations") if isinstance(original.get("metadata"),
                                                                                   dict) else None
        if isinstance(before, dict) and MUTATED_BY_ANNOTATION in before:
            annotations[MUTATED_BY_ANNOTATION] = before[MUTATED_BY_ANNOTATION]
        else:
            del annotations[MUTATED_BY_ANNOTATION]
            if not annotations and not isinstance(before, dict):
                del meta["annotations"]
    return mutated


def _label(obj: Any, where: str) -> str:
    if not isinstance(obj, dict):
        return where
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return f"{where} {obj.get('kind', '?')} {meta.get('namespace') or '-'}/{meta.get('name') or '-'}"


class Fixer:
    """Fixes documents with one engine (CREATE, mutating then validating, as ``evaluate`` does)."""

    def __init__(self, engine: Engine, namespace: str):
        self.engine = engine
        self.namespace = namespace

    def decide(self, obj: dict) -> tuple[list[dict[str, Any]], Decision]:
        """The patch ``fix`` applies to ``obj`` (plain JSON) and the engine's decision."""
        meta = obj.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, dict) and isinstance(meta.get("namespace"), str) else None
        decision = self.engine.evaluate(obj, RequestContext(operation="CREATE", namespace=ns or self.namespace))
        if not decision.mutated_by or not isinstance(decision.mutated, dict):
            return [], decision
        target = _without_mutated_by(obj, orjson.loads(orjson.dumps(decision.mutated)))
        return make_patch(obj, target), decision

    def fix_node(self, node: Any, where: str, results: list[DocumentResult]) -> bool:
        """Fix one loaded document (a workload, or each item of a ``kind: List``); True when it changed."""
        if not isinstance(node, dict):
            return False
        if node.get("kind") == "List" and isinstance(node.get("items"), list):
            changed = False
            for i, item in enumerate(node["items"]):
                changed = self.fix_node(item, f"{where} items[{i}]", results) or changed
            return changed
        obj = _plain(node)
        ops, decision = self.decide(obj)
        if decision.skipped and not decision.violations:
            return False
        results.append(DocumentResult(_label(obj, where), list(decision.mutated_by) if ops else [],
                                      decision.denials, decision.error))
        if ops:
            apply_patch(node, ops)
        return bool(ops)

    # ------------------------------------------------------------ files

    def fix_yaml(self, text: str, source: str) -> FileResult:
        results: list[DocumentResult] = []
        out: list[str] = []
        changed = False
        for n, chunk in enumerate(split_documents(text)):
            head, body = _head_and_body(chunk)
            if not body.strip():
                out.append(chunk)
                continue
            try:
                yaml = _round_trip(*guess_indent(body))
                node = yaml.load(body)
            except YAMLError as exc:
                raise FixError(f"{source}: document {n}: invalid YAML: {exc}") from None
            if not self.fix_node(node, f"{source}[{n}]", results):
                out.append(chunk)  # nothing to change: the original bytes
                continue
            changed = True
            buffer = io.StringIO()
            yaml.dump(node, buffer)
            new_body = buffer.getvalue()
            # keep the document's own ending (a trailing blank line before the next "---")
            trailing = body[len(body.rstrip("\n")):]
            out.append(head + new_body.rstrip("\n") + (trailing or "\n"))
        return FileResult("".join(out), changed, results)

    def fix_json(self, text: str, source: str) -> FileResult:
        try:
            node = json.loads(text)
        except ValueError as exc:
            raise FixError(f"{source}: invalid JSON: {exc}") from None
        results: list[DocumentResult] = []
        if not self.fix_node(node, source, results):
            return FileResult(text, False, results)
        indent = _json_indent(text)
        return FileResult(json.dumps(node, indent=indent, ensure_ascii=False) + "\n", True, results)

    def fix_text(self, text: str, source: str) -> FileResult:
        if source.endswith(".json") or (text.lstrip().startswith(("{", "[")) and not source.endswith((".yaml",
                                                                                                     ".yml"))):
            return self.fix_json(text, source)
        return self.fix_yaml(text, source)


_KEY_OPENS_BLOCK = re.compile(r"^( *)[^\s#-][^#]*:\s*(#.*)?$")
_INDENT = re.compile(r"^( *)(- )?")


def guess_indent(body: str) -> tuple[int, int, int]:
    """The document's (mapping indent, sequence indent, dash offset), as ruamel's ``indent()`` takes them.

    Read from the first key that opens a nested mapping and the first that opens a sequence:
    ``key:`` / ``  child:`` gives the mapping indent; ``key:`` / ``  - item`` gives a dash offset
    of 2 (kubectl's style) and ``key:`` / ``- item`` of 0 (kustomize's and Helm's usual style).
    ruamel's own ``load_yaml_guess_indent`` returns one indent for both, which re-indents
    documents that nest mappings by 2 and sequences by 4.
    """
    mapping = sequence = offset = None
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for line, following in zip(lines, lines[1:], strict=False):
        key = _KEY_OPENS_BLOCK.match(line)
        if key is None:
            continue
        parent = len(key.group(1))
        child = _INDENT.match(following)
        assert child is not None  # the pattern matches every string
        col = len(child.group(1))
        if child.group(2) and offset is None and col >= parent:
            offset, sequence = col - parent, col - parent + 2
        elif not child.group(2) and mapping is None and col > parent:
            mapping = col - parent
        if mapping is not None and offset is not None:
            break
    mapping = mapping or 2
    return mapping, sequence if sequence is not None else mapping, offset or 0


def _round_trip(mapping: int, sequence: int, offset: int) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap long lines (commands, JSON in annotations)
    yaml.default_flow_style = False
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _json_indent(text: str) -> int | None:
    match = re.search(r"\n( +)\S", text)
    return len(match.group(1)) if match else None


# ---------------------------------------------------------------- the command


def _report(result: FileResult, stream: Any) -> tuple[bool, bool]:
    """Print what changed, what is still denied and what could not be read: (denied?, unreadable?)."""
    denied = unreadable = False
    for obj in result.objects:
        if obj.error:
            unreadable = True
            print(f"ERROR   {obj.label}: gpuguard could not evaluate it: {obj.error}", file=stream)
        if obj.changed_by:
            print(f"fixed   {obj.label}: {', '.join(obj.changed_by)}", file=stream)
        for v in obj.denials:
            denied = True
            print(f"DENIED  {obj.label}: {v.text}", file=stream)
    return denied, unreadable


def run(args: argparse.Namespace) -> int:
    try:
        engine = Engine(load_config(args.config))
    except ConfigError as exc:
        error(str(exc))
        return EXIT_ERROR
    fixer = Fixer(engine, args.namespace)
    denied = failed = False
    for name in args.files:
        to_stdout = args.stdout or name == "-"
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            error(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}")
            failed = True
            continue
        try:
            result = fixer.fix_text(text, "<stdin>" if name == "-" else name)
        except FixError as exc:
            error(str(exc))
            failed = True
            continue
        report_stream = sys.stderr if to_stdout else sys.stdout
        file_denied, unreadable = _report(result, report_stream)
        denied, failed = denied or file_denied, failed or unreadable
        if to_stdout:
            sys.stdout.write(result.text)
        elif result.changed:
            Path(name).write_text(result.text, encoding="utf-8")
    if failed:
        return EXIT_ERROR
    return EXIT_DENIED if denied else EXIT_CLEAN
