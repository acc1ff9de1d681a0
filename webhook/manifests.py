"""Manifests in, Kubernetes objects out: files, folders and stdin, each object with its file and line.

Real inputs are messy: ``helm template`` output with empty documents and ``# Source`` comments,
``kubectl get -o yaml`` Lists, a JSON file, a broken document in the middle of a stream, a
``values.yaml`` lying next to the manifests.  An audit that stops at the first bad document
tells a team nothing about the rest, so every problem becomes an ``InputError`` on its own
``Document`` and loading goes on.  Every object keeps the line it starts at (from the YAML
node's ``start_mark``) so that SARIF and the table can point at it.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from typing import IO, Any

import orjson
import yaml

from gpuguard.webhook.config.yaml_lines import expansion_problem

STDIN = "-"
STDIN_NAME = "<stdin>"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# Kinds of input error, as they appear in the JSON output (``errorType``).
UNREADABLE = "unreadable"
INVALID_YAML = "invalid-yaml"
INVALID_JSON = "invalid-json"
NOT_KUBERNETES = "not-kubernetes"
TOO_LARGE = "too-large"

# Hostile or mistaken inputs must end in a clear error within seconds and bounded memory: a file
# (or stdin) beyond MAX_FILE_BYTES is refused unread, and a document whose YAML aliases expand
# to more than MAX_ALIAS_NODES nodes beyond those written out ("billion laughs": 600 bytes can
# stand for billions of nodes) is refused before anything walks or copies it.  Aliases that
# repeat a block a few times cost nothing; documents written out in full are never refused by
# size here, however long.
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ALIAS_NODES = 100_000
MAX_NESTING = 1_000

# A document marker at column 0: "---" starts a document ("--- # comment" and "--- !tag" too) and
# "..." ends one.  Neither can stand at column 0 inside a document's content, so cutting a stream
# at them is safe; this is the one rule for every reader of manifests (``gpuguard fix`` splits on
# it too).
_MARKER = re.compile(r"^(---|\.\.\.)(?:[ \t].*)?$")
DOCUMENT_START = "---"
DOCUMENT_END = "..."


@dataclass(frozen=True)
class InputError:
    """Why a document could not be audited; ``kind`` is one of the constants above."""

    kind: str
    message: str


@dataclass(frozen=True)
class Document:
    """One object (or one unusable document) and where it came from.

    ``index`` is the 0-based position among the non-empty documents of ``source``; ``item``
    is the position inside a ``kind: List`` (or a JSON array), ``None`` otherwise.  ``line``
    and ``column`` are 1-based and point at the object's first key, or at the error.
    """

    source: str
    index: int
    line: int | None = None
    column: int | None = None
    obj: dict[str, Any] | None = None
    item: int | None = None
    error: InputError | None = None
    # The workload already ran to its end (read from its status before the audit strips it): it holds
    # no GPUs, so no cost is at risk.
    finished: bool = False
    # dotted field path (as in Violation.path) -> 1-based line, for pointing at a finding's field
    lines: dict[str, int] | None = field(default=None, repr=False, compare=False)

    def line_of(self, path: str | None) -> int | None:
        """Line of the longest prefix of ``path`` present in the source, else the object's line."""
        if path and self.lines:
            probe = path
            while probe:
                if probe in self.lines:
                    return self.lines[probe]
                cut = max(probe.rfind("."), probe.rfind("["))
                probe = probe[:cut] if cut > 0 else ""
        return self.line

    @property
    def location(self) -> str:
        """``file:line`` for humans (``file`` alone when the line is unknown)."""
        return f"{self.source}:{self.line}" if self.line else self.source


def _loader_base() -> type:
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_loader_base()):  # type: ignore[misc]
    """Safe loader that keeps timestamps as strings, as kubectl (sigs.k8s.io/yaml) does.

    PyYAML would turn an unquoted ``2024-05-01`` into a ``datetime``; an annotation value that
    changed type would show up as a bogus diff and break the JSON output.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001`` anchors and ``*id001`` aliases: a mutated object may hold one list twice (one node affinity
    term given to every template), and what gpuguard prints is read, diffed and applied as plain YAML."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def plain_yaml(value: Any, **options: Any) -> str:
    """``value`` as block YAML in its own key order, without anchors (``yaml.safe_dump``'s options otherwise)."""
    options.setdefault("sort_keys", False)
    return yaml.dump(value, Dumper=_PlainDumper, **options)


def iter_paths(paths: Iterable[str], exclude: Iterable[str] = ()) -> Iterator[str]:
    """Expand folders recursively (sorted, hidden entries skipped) into manifest files.

    Files named explicitly are always read whatever their suffix; inside folders only
    ``.yaml``, ``.yml`` and ``.json`` are, so READMEs and scripts next to manifests are ignored.
    ``exclude`` holds shell globs matched against the path and the base name.
    """
    patterns = tuple(exclude)

    def excluded(path: str) -> bool:
        return any(fnmatch(path, p) or fnmatch(os.path.basename(path), p) for p in patterns)

    for path in paths:
        if path == STDIN or not os.path.isdir(path):
            if path == STDIN or not excluded(path):
                yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not excluded(os.path.join(root, d)))
            for name in sorted(files):
                full = os.path.join(root, name)
                wanted = name.lower().endswith(MANIFEST_SUFFIXES) and not name.startswith(".")
                if wanted and not excluded(full):
                    yield full


class ManifestError(Exception):
    """An input that cannot be read, or a document that cannot be parsed, for readers that stop at it.

    ``error`` is the ``InputError`` the tolerant ``load`` would have put on a ``Document``;
    ``line`` and ``column`` are 1-based, where known.
    """

    def __init__(self, source: str, error: InputError, line: int | None = None, column: int | None = None) -> None:
        self.source, self.error, self.line, self.column = source, error, line, column
        super().__init__(f"{self.location}: {error.message}")

    @property
    def location(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


def read_text(path: str, stdin: IO[bytes] | IO[str] | None = None) -> tuple[str, str]:
    """``(source, text)`` of a file, or of stdin for ``-``, decoded as UTF-8 (a byte-order mark dropped).

    Raises ``ManifestError`` (``UNREADABLE``) for a file that cannot be opened, is not a regular
    file (a FIFO, a device, a symlink to one: the type is checked before opening, so a FIFO no
    one writes to never blocks), is larger than ``MAX_FILE_BYTES`` or is not UTF-8.
    """
    if path == STDIN:
        stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", sys.stdin)
        raw: bytes | str = stream.read(MAX_FILE_BYTES + 1)
        source = STDIN_NAME
    else:
        source = path
        raw = _read_regular_file(path)
    if len(raw) > MAX_FILE_BYTES:
        raise ManifestError(source, InputError(UNREADABLE, _too_large()))
    try:
        return source, raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ManifestError(source, InputError(UNREADABLE, f"not UTF-8 text ({exc.reason})")) from None


def _too_large() -> str:
    return f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, the limit for one manifest file"


def _read_regular_file(path: str) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most ``MAX_FILE_BYTES + 1`` of them."""
    try:
        info = os.stat(path)
        problem = _special_file(info.st_mode)
        if problem is None and info.st_size > MAX_FILE_BYTES:
            problem = _too_large()
        if problem is not None:
            raise ManifestError(path, InputError(UNREADABLE, problem))
        # O_NONBLOCK: should the path have been swapped for a FIFO since the stat, opening still returns.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            problem = _special_file(os.fstat(handle.fileno()).st_mode)
            if problem is not None:
                raise ManifestError(path, InputError(UNREADABLE, problem))
            return handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ManifestError(path, InputError(UNREADABLE, exc.strerror or str(exc))) from None


def _special_file(mode: int) -> str | None:
    """Why a file of this mode is not read as a manifest, or ``None`` for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "special")
    return f"not a regular file ({kind}); manifests are read from regular files or stdin"


class StdinText:
    """Stdin read once and kept, for a reader that passes over its inputs twice (``gpuguard audit``)."""

    def __init__(self, stream: IO[bytes] | IO[str] | None = None) -> None:
        self._stream = stream
        self._read: tuple[str, str] | ManifestError | None = None

    def read_text(self) -> tuple[str, str]:
        """``read_text(STDIN)``, read on the first call; its ``ManifestError`` raised again on every call."""
        if self._read is None:
            try:
                self._read = read_text(STDIN, self._stream)
            except ManifestError as exc:
                self._read = exc
        if isinstance(self._read, ManifestError):
            raise self._read
        return self._read


def may_hold(text: str, words: Iterable[str]) -> bool:
    """Whether a document of ``text`` can have one of ``words`` as a value: the word is written out, or
    a backslash escape (JSON, double-quoted YAML) could spell it.  Cheaper than parsing, never wrong the
    other way: a text for which it is false holds none."""
    return "\\" in text or any(word in text for word in words)


def load(paths: Iterable[str], *, stdin: IO[bytes] | IO[str] | StdinText | None = None,
         exclude: Iterable[str] = (), only_if: Iterable[str] = ()) -> Iterator[Document]:
    """Every document of every input, in order, one at a time; unreadable inputs become error documents.

    With ``only_if``, an input whose text cannot hold any of those words (``may_hold``) is read but not
    parsed, and yields nothing: a pass that looks for a few kinds skips the rest cheaply.
    """
    words = tuple(only_if)
    for path in iter_paths(paths, exclude):
        try:
            if path == STDIN and isinstance(stdin, StdinText):
                source, text = stdin.read_text()
            else:
                source, text = read_text(path, stdin if not isinstance(stdin, StdinText) else None)
        except ManifestError as exc:
            yield Document(exc.source, 0, error=exc.error)
            continue
        if words and not may_hold(text, words):
            continue
        yield from parse_text(text, source)


def parse_text(text: str, source: str) -> Iterator[Document]:
    """Documents of one YAML or JSON stream, one at a time.

    JSON (a ``.json`` file, or text that starts like JSON and parses as it) is read by JSON
    rules.  Otherwise the stream is parsed as one YAML stream, which is exact YAML, and each
    document is handed out as soon as it is read: a 60 MB ``helm template`` dump never has more
    than one document's node tree in memory.  Should a document fail, the rest of the stream is
    cut at ``---`` lines and each piece parsed alone, so one broken document costs only itself.
    (A ``---`` at column 0 cannot occur inside a valid document's content, so the cut is safe.)
    """
    try:
        value = _as_json(text, source)
    except ManifestError as exc:
        yield Document(source, 0, exc.line, exc.column, error=exc.error)
        return
    if value is not _NOT_JSON:
        yield from _documents(_json_positions(text, value), source)
        return
    handed = 0  # documents already handed out (the next index)
    last_line = 0  # the last line they start at: the pieces up to it were read
    try:
        for doc in _documents(_compose(text, 0), source):
            yield doc
            handed, last_line = doc.index + 1, max(last_line, doc.line or 0)
        return
    except yaml.YAMLError:
        pass
    renumber: tuple[int, int] | None = None  # (index in the pieces, index handed out)
    for doc in _split_documents(text, source):
        if last_line and (doc.line or 0) <= last_line:
            continue  # read whole before the broken document, and handed out already
        if renumber is None or renumber[0] != doc.index:
            renumber = (doc.index, handed)
            handed += 1
        yield doc if doc.index == renumber[1] else replace(doc, index=renumber[1])


def _split_documents(text: str, source: str) -> Iterator[Document]:
    """The documents of ``text`` cut at ``---`` lines, each piece parsed alone (an error costs only its piece)."""
    index = 0
    for chunk, first_line in split_text(text):
        try:
            pieces = list(_compose(chunk, first_line - 1))
        except ExpansionError as exc:
            line, column = _error_position(exc, first_line)
            yield Document(source, index, line, column, error=InputError(TOO_LARGE, exc.problem or ""))
            index += 1
            continue
        except yaml.YAMLError as exc:
            line, column = _error_position(exc, first_line)
            yield Document(source, index, line, column, error=InputError(INVALID_YAML, _yaml_message(exc)))
            index += 1
            continue
        for doc in _documents(pieces, source, start_index=index):
            index = doc.index + 1
            yield doc


def parse_values(text: str, source: str) -> list[Any]:
    """The values of the non-empty documents of one YAML or JSON stream, read as ``parse_text`` reads them.

    For files that hold other things than Kubernetes objects (a fixture's ``expect.yaml``): no
    object checks, Lists not flattened, and the first problem raised as ``ManifestError``.
    """
    value = _as_json(text, source)
    if value is not _NOT_JSON:
        return [] if value is None else [value]
    try:
        return [value for value, _node, _line, _column in _compose(text, 0) if value is not None]
    except ExpansionError as exc:
        line, column = _error_position(exc, 1)
        raise ManifestError(source, InputError(TOO_LARGE, exc.problem or ""), line, column) from None
    except yaml.YAMLError as exc:
        line, column = _error_position(exc, 1)
        raise ManifestError(source, InputError(INVALID_YAML, _yaml_message(exc)), line, column) from None


_NOT_JSON: Any = object()


def _as_json(text: str, source: str) -> Any:
    """The JSON value of a ``.json`` file, or of text that starts like JSON and parses as it; else ``_NOT_JSON``.

    JSON rules decide for JSON: PyYAML (YAML 1.1) reads ``"x": }`` as null and refuses ``"\\/"``.
    Raises ``ManifestError`` for a ``.json`` file that is not JSON.
    """
    json_file = source.lower().endswith(".json")
    if not (json_file or text.lstrip().startswith(("{", "["))):
        return _NOT_JSON
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if json_file:
            raise ManifestError(source, InputError(INVALID_JSON, f"invalid JSON: {exc.msg}"), exc.lineno,
                                exc.colno) from None
        return _NOT_JSON


def _json_positions(text: str, value: Any) -> list[tuple[Any, yaml.Node | None, int, int]]:
    """The JSON value with YAML nodes for line numbers when YAML reads the text the same way."""
    try:
        parsed = list(_compose(text, 0))
    except yaml.YAMLError:
        parsed = []
    if len(parsed) == 1 and parsed[0][0] == value:
        return parsed
    return [(value, None, 1, 1)]


class ExpansionError(yaml.MarkedYAMLError):
    """A document whose aliases expand too far (or refer to themselves): refused before it is constructed."""


def _check_aliases(root: yaml.Node) -> None:
    """Refuse ``root`` when aliases make it more than ``MAX_ALIAS_NODES`` nodes larger than written."""
    written, shared = _written_nodes(root)
    if not shared:
        return
    problem = expansion_problem(root, max_nodes=written + MAX_ALIAS_NODES, max_depth=MAX_NESTING,
                                 limit_text=f"the {written} written out plus {MAX_ALIAS_NODES}")
    if problem is not None:
        node, reason = problem
        raise ExpansionError(problem=reason, problem_mark=node.start_mark)


def _written_nodes(root: yaml.Node) -> tuple[int, bool]:
    """How many distinct nodes the graph holds, and whether any is reached twice (what an alias makes)."""
    seen: set[int] = set()
    shared = False
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            shared = True
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return len(seen), shared


def _compose(text: str, line_offset: int) -> Iterator[tuple[Any, yaml.Node | None, int, int]]:
    """(value, node, line, column) per document, via the composed node tree for positions.

    Each document's alias expansion is bounded before it is constructed (``ExpansionError``).
    """
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_aliases(node)
            value = loader.construct_document(node)
            yield value, node, node.start_mark.line + 1 + line_offset, node.start_mark.column + 1
    finally:
        loader.dispose()


def document_marker(line: str) -> str | None:
    """``DOCUMENT_START`` or ``DOCUMENT_END`` when ``line`` (its line ending ignored) is one, else ``None``."""
    match = _MARKER.match(line.rstrip("\r\n"))
    return match.group(1) if match else None


def split_text(text: str, *, at_end_markers: bool = False) -> list[tuple[str, int]]:
    """``text`` cut before each ``---`` line (and each ``...`` line with ``at_end_markers``).

    The pieces concatenate back to ``text`` exactly; each comes with the 1-based line it starts
    at.  Without ``at_end_markers`` a ``...`` stays with the document it ends, so that each piece
    parses alone.
    """
    cut_at = {DOCUMENT_START, DOCUMENT_END} if at_end_markers else {DOCUMENT_START}
    lines = text.splitlines(keepends=True)
    pieces: list[tuple[str, int]] = []
    start = 0
    for i, line in enumerate(lines):
        if i > start and document_marker(line) in cut_at:
            pieces.append(("".join(lines[start:i]), start + 1))
            start = i
    if start < len(lines):
        pieces.append(("".join(lines[start:]), start + 1))
    return pieces


def _error_position(exc: yaml.YAMLError, first_line: int) -> tuple[int, int | None]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return first_line, None
    return first_line + mark.line, mark.column + 1


def _yaml_message(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: the problem, then its context."""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        return f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    return "invalid YAML: " + " ".join(str(exc).split())


def _documents(parsed: Iterable[tuple[Any, yaml.Node | None, int, int]], source: str,
               start_index: int = 0) -> Iterator[Document]:
    index = start_index
    for value, node, line, column in parsed:
        if value is None:  # empty document, e.g. helm's "---" between templates
            continue
        yield from _objects(value, node, source, index, line, column)
        index += 1


def _item_positions(node: yaml.Node | None, key: str | None) -> list[tuple[int | None, int | None]]:
    """Start positions of the items of a List's ``items`` sequence (or of a top-level sequence)."""
    seq: yaml.Node | None = node
    if key is not None and isinstance(node, yaml.MappingNode):
        seq = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    if not isinstance(seq, yaml.SequenceNode):
        return []
    return [(item.start_mark.line + 1, item.start_mark.column + 1) for item in seq.value]


def is_list(value: Any) -> bool:
    """``kind: List`` and typed lists (``JobList`` from the API) with an ``items`` array."""
    return (isinstance(value, dict) and isinstance(value.get("kind"), str) and value["kind"].endswith("List")
            and isinstance(value.get("items"), list))


def _objects(value: Any, node: yaml.Node | None, source: str, index: int, line: int,
             column: int) -> Iterator[Document]:
    offset = line - (node.start_mark.line + 1) if node is not None else 0
    if is_list(value) or isinstance(value, list):
        items = value["items"] if isinstance(value, dict) else value
        positions = _item_positions(node, "items" if isinstance(value, dict) else None)
        for i, item in enumerate(items):
            item_line, item_col = positions[i] if i < len(positions) else (None, None)
            if item_line is not None:
                item_line += offset
            if isinstance(value, dict) and isinstance(item, dict):
                fill_list_item(value, item)
            item_node = _item_node(node, "items" if isinstance(value, dict) else None, i)
            yield _checked(Document(source, index, item_line or line, item_col or column, item, item=i,
                                    lines=_path_lines(item_node, offset)))
        return
    yield _checked(Document(source, index, line, column, value if isinstance(value, dict) else None,
                            lines=_path_lines(node, offset)), value)


def _item_node(node: yaml.Node | None, key: str | None, i: int) -> yaml.Node | None:
    seq: yaml.Node | None = node
    if key is not None and isinstance(node, yaml.MappingNode):
        seq = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    if isinstance(seq, yaml.SequenceNode) and i < len(seq.value):
        return seq.value[i]
    return None


def _path_lines(node: yaml.Node | None, offset: int) -> dict[str, int] | None:
    """Dotted path -> line for every key and list item under ``node`` (``workload.dotted`` form)."""
    if node is None:
        return None
    out: dict[str, int] = {}
    stack: list[tuple[yaml.Node, str]] = [(node, "")]
    while stack:
        current, prefix = stack.pop()
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue
                path = f"{prefix}.{key.value}" if prefix else str(key.value)
                out.setdefault(path, key.start_mark.line + 1 + offset)
                stack.append((value, path))
        elif isinstance(current, yaml.SequenceNode):
            for i, value in enumerate(current.value):
                path = f"{prefix}[{i}]"
                out.setdefault(path, value.start_mark.line + 1 + offset)
                stack.append((value, path))
    return out


def fill_list_item(lst: dict, item: dict) -> None:
    """Items of a typed list (``JobList``) omit apiVersion/kind: they are the list's."""
    if lst["kind"] != "List":
        item.setdefault("apiVersion", lst.get("apiVersion"))
        item.setdefault("kind", lst["kind"][: -len("List")])


def _checked(doc: Document, raw: Any = None) -> Document:
    """``doc`` unchanged if it holds a Kubernetes object, else the same place with an error."""
    value = doc.obj if doc.obj is not None else raw
    problem = kubernetes_problem(value)
    if problem is None:
        return doc
    return Document(doc.source, doc.index, doc.line, doc.column, item=doc.item,
                    error=InputError(NOT_KUBERNETES, problem))


def kubernetes_problem(value: Any) -> str | None:
    """Why ``value`` is not a Kubernetes object, or ``None`` if it is one."""
    if not isinstance(value, dict):
        return f"not a Kubernetes object: the document is a {_type_name(value)}, not a mapping"
    missing = [key for key in ("apiVersion", "kind") if not isinstance(value.get(key), str) or not value[key]]
    if missing:
        return f"not a Kubernetes object: no {' or '.join(missing)}"
    if value.get("metadata") is not None and not isinstance(value["metadata"], dict):
        return "not a Kubernetes object: metadata is not a mapping"
    return None


def _type_name(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list"
    return type(value).__name__
