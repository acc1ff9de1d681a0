"""Which top-level fields of the big variables a rule reads, so only those are handed to CEL.

Why: cel-expr-python converts a whole Python value the first time an expression touches it,
and converting ``object`` (and ``podSpec``) is most of a custom rule's cost.  A rule that only
reads ``object.metadata`` gets an ``object`` holding just ``metadata``: the same answer, a
fraction of the conversion.

The analysis is deliberately conservative.  String literals are blanked out, then every use of
a variable must be ``name.field`` or ``name.?field``; any other use (``name[...]``,
``size(name)``, ``name`` passed to a function or bound by ``cel.bind``, a comprehension variable
of the same name) means "the whole value".  A field named in a string (``'object.spec'``) is
never mistaken for a use, and an over-approximation only costs time, never correctness.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The variables worth projecting: large, and read field by field.
PROJECTED = ("object", "oldObject", "podSpec")

# CEL string literals, including raw (r'..') and triple-quoted forms, with escapes.
_STRING = re.compile(r"""(?:[rR])?(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""")
_FIELD = re.compile(r"\s*\.\s*\??\s*([A-Za-z_][A-Za-z0-9_]*)")


def _blank_strings(expression: str) -> str:
    return _STRING.sub(lambda m: '""', expression)


def fields_read(expressions: Iterable[str]) -> dict[str, frozenset[str] | None]:
    """For each projected variable: the top-level fields the expressions read, or ``None`` for all of it.

    Variables an expression never mentions map to an empty set.
    """
    out: dict[str, frozenset[str] | None] = {}
    texts = [_blank_strings(e) for e in expressions]
    for name in PROJECTED:
        use = re.compile(rf"(?<![\w.]){name}(?!\w)")
        fields: set[str] | None = set()
        for text in texts:
            for match in use.finditer(text):
                field = _FIELD.match(text, match.end())
                if field is None:
                    fields = None
                    break
                fields.add(field.group(1))
            if fields is None:
                break
        out[name] = None if fields is None else frozenset(fields)
    return out


def merge(reads: Iterable[dict[str, frozenset[str] | None]]) -> dict[str, frozenset[str] | None]:
    """The union of several rules' reads (``None``, the whole value, wins)."""
    out: dict[str, frozenset[str] | None] = {name: frozenset() for name in PROJECTED}
    for read in reads:
        for name, fields in read.items():
            current = out[name]
            out[name] = None if fields is None or current is None else current | fields
    return out


def project(value: object, fields: frozenset[str] | None) -> object:
    """``value`` with only ``fields`` at its top level (``None``: all of it; non-dicts as they are)."""
    if fields is None or not isinstance(value, dict):
        return value
    return {k: value[k] for k in fields if k in value}
