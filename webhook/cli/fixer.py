"""Editing manifest files in place with the engine's mutations: the library behind ``gpuguard fix``.

Editing, not re-serialising: a file is split into its YAML documents as text (at the document
markers ``gpuguard.webhook.manifests`` cuts at); a document with nothing to change is written back
byte for byte, and a changed one is edited in place with ``ruamel.yaml``'s round-trip mode
(comments, key order, quoting and flow style of everything not changed are kept; its
indentation is detected).  The edits are the engine's JSON patch (the one structural diff of
``gpuguard.webhook.engine.patch``), applied to the round-trip tree op by op.  The
``gpuguard.io/mutated-by`` annotation is left out: it records what the webhook changed, and
after ``fix`` it changes nothing.  Multi-document files, Helm ``# Source:`` comments, kustomize
output, ``kind: List`` and typed lists (``JobList``) are handled; JSON files are rewritten as JSON.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import SingleQuotedScalarString

from gpuguard.webhook.decision import Change, Decision, RequestContext, Violation, unresolved_as_finding
from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION, Engine
from gpuguard.webhook.engine.patch import make_patch
from gpuguard.webhook.manifests import TOO_LARGE, document_marker, fill_list_item, is_list, parse_text, split_text
from gpuguard.webhook.objects import StaticLookup
from gpuguard.workloads.claims import StaticClaims


class FixError(Exception):
    """A file ``fix`` cannot edit (unreadable, invalid YAML); the message says where."""


@dataclass
class DocumentResult:
    """What happened to one object of a file."""

    label: str
    changed_by: list[str] = field(default_factory=list)
    denials: list[Violation] = field(default_factory=list)
    error: str | None = None  # the engine could not read the object (malformed manifest)
    changes: list[Change] = field(default_factory=list)  # values the file had that the fix overwrote


@dataclass
class FileResult:
    text: str
    changed: bool
    objects: list[DocumentResult]


# ---------------------------------------------------------------- splitting documents as text


def split_documents(text: str) -> list[str]:
    """The file as chunks that concatenate back to ``text`` exactly; each ``---`` or ``...`` line starts a chunk."""
    return [chunk for chunk, _line in split_text(text, at_end_markers=True)]


def _head_and_body(chunk: str) -> tuple[str, str]:
    """Split off the document marker and leading comment / blank / directive lines, kept verbatim."""
    lines = chunk.splitlines(keepends=True)
    i = 0
    while i < len(lines) and (document_marker(lines[i]) or not lines[i].strip()
                              or lines[i].lstrip().startswith("#") or lines[i].startswith("%")):
        i += 1
    return "".join(lines[:i]), "".join(lines[i:])


# ---------------------------------------------------------------- applying a JSON patch to a round-trip tree


def _token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


_YAML_1_1 = yaml.resolver.Resolver()


def _unambiguous(value: Any) -> Any:
    """``value`` with every string a YAML 1.1 reader would take for something else (``on``, ``yes``, ``1e3``) quoted.

    ruamel writes YAML 1.2, where ``on`` is a string; kubectl and PyYAML read YAML 1.1, where it
    is ``true``.  Quoting such strings keeps what ``fix`` writes what the engine decided.
    """
    if isinstance(value, dict):
        return {k: _unambiguous(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unambiguous(v) for v in value]
    if isinstance(value, str) and _YAML_1_1.resolve(yaml.ScalarNode, value, (True, False)) != "tag:yaml.org,2002:str":
        return SingleQuotedScalarString(value)
    return value


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> None:
    """Apply RFC 6902 add/replace/remove ops in place, keeping the round-trip containers (and their comments)."""
    for op in ops:
        if "value" in op:
            op = {**op, "value": _unambiguous(op["value"])}
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
    """Fixes documents with one engine (CREATE, mutating then validating, as ``evaluate`` does).

    As in ``evaluate``, what a workload names may stand in the same file: a TrainJob's runtime
    (looked up in the file's objects) and the DRA claims and claim templates of pods.
    """

    def __init__(self, engine: Engine, namespace: str):
        self.engine = engine
        self.namespace = namespace
        self.lookup: StaticLookup | None = None

    def read_objects(self, text: str, source: str) -> None:
        """Make the objects of ``text`` (read as ``gpuguard.webhook.manifests`` reads it) what lookups find."""
        docs = list(parse_text(text, source))
        # Refused before ruamel sees the text: its round-trip loader and the copies made of what
        # it loads expand every alias (a 600-byte alias bomb took the interpreter down).
        for doc in docs:
            if doc.error is not None and doc.error.kind == TOO_LARGE:
                raise FixError(f"{doc.location}: {doc.error.message}")
        objects = [doc.obj for doc in docs if doc.obj is not None]
        self.engine.claims = StaticClaims(objects, origin=source)
        self.lookup = StaticLookup(objects) or None

    def decide(self, obj: dict) -> tuple[list[dict[str, Any]], Decision]:
        """The patch ``fix`` applies to ``obj`` (plain JSON) and the engine's decision."""
        meta = obj.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, dict) and isinstance(meta.get("namespace"), str) else None
        decision = unresolved_as_finding(self.engine.evaluate(
            obj, RequestContext(operation="CREATE", namespace=ns or self.namespace, read_object=self.lookup)))
        if not decision.mutated_by or not isinstance(decision.mutated, dict):
            return [], decision
        target = _without_mutated_by(obj, orjson.loads(orjson.dumps(decision.mutated)))
        return make_patch(obj, target), decision

    def fix_node(self, node: Any, where: str, results: list[DocumentResult], of_list: Any = None) -> bool:
        """Fix one loaded document (a workload, or each item of a list); True when it changed.

        Lists are recognised as ``gpuguard.webhook.manifests`` recognises them (``kind: List`` and
        typed lists such as ``JobList``, whose items are evaluated with the list's kind).
        """
        if not isinstance(node, dict):
            return False
        if is_list(node):
            changed = False
            for i, item in enumerate(node["items"]):
                changed = self.fix_node(item, f"{where} items[{i}]", results, of_list=node) or changed
            return changed
        obj = _plain(node)
        if of_list is not None:
            fill_list_item(of_list, obj)  # the plain copy only: the file keeps its items as written
        ops, decision = self.decide(obj)
        if decision.skipped and not decision.violations:
            return False
        results.append(DocumentResult(_label(obj, where), list(decision.mutated_by) if ops else [],
                                      decision.denials, decision.error, list(decision.changes) if ops else []))
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
                editor = _round_trip(*guess_indent(body))
                node = editor.load(body)
            except YAMLError as exc:
                raise FixError(f"{source}: document {n}: invalid YAML: {exc}") from None
            if not self.fix_node(node, f"{source}[{n}]", results):
                out.append(chunk)  # nothing to change: the original bytes
                continue
            changed = True
            buffer = io.StringIO()
            editor.dump(node, buffer)
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
        self.read_objects(text, source)
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
    editor = YAML(typ="rt")
    editor.preserve_quotes = True
    editor.width = 4096  # never re-wrap long lines (commands, JSON in annotations)
    editor.default_flow_style = False
    editor.indent(mapping=mapping, sequence=sequence, offset=offset)
    return editor


def _json_indent(text: str) -> int | None:
    match = re.search(r"\n( +)\S", text)
    return len(match.group(1)) if match else None
