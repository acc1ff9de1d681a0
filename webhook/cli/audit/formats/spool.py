"""Report text parked on disk until the format can write it in order.

Why: most formats put something computed from every object (counts, exit code, the rule list)
before the per-object results, or group results in an order other than the input's (by source,
namespace or verdict).  Holding the results in memory until the end made an audit's memory grow
with the number of manifests; a format writes each object's text here as soon as the object is
decided and copies it out, in order, at the end.  Memory holds only where each key's text lies.
"""

from __future__ import annotations

import codecs
import tempfile
from array import array
from collections.abc import Hashable, Iterator
from typing import TextIO

_CHUNK = 1 << 20


class Spool:
    """Append-only text on a temporary file, remembered by key; ``copy(key, out)`` writes one key's text.

    Consecutive writes to the same key make one segment, so a key whose text arrives in one run
    costs two integers however long it is.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - closed by close()
        self._segments: dict[Hashable, array] = {}
        self._end = 0
        self._reading = False

    def write(self, key: Hashable, text: str) -> None:
        if not text:
            return
        data = text.encode("utf-8")
        if self._reading:
            self._file.seek(self._end)
            self._reading = False
        self._file.write(data)
        start, self._end = self._end, self._end + len(data)
        segments = self._segments.get(key)
        if segments is None:
            self._segments[key] = array("q", (start, self._end))
        elif segments[-1] == start:
            segments[-1] = self._end
        else:
            segments.extend((start, self._end))

    def __contains__(self, key: Hashable) -> bool:
        return key in self._segments

    def __iter__(self) -> Iterator[Hashable]:
        """Keys in the order they were first written."""
        return iter(list(self._segments))

    def chunks(self, key: Hashable) -> Iterator[str]:
        """The text written under ``key``, in order, in pieces of about a MiB."""
        segments = self._segments.get(key)
        if segments is None:
            return
        self._file.flush()
        self._reading = True
        decoder = codecs.getincrementaldecoder("utf-8")()
        for i in range(0, len(segments), 2):
            start, end = segments[i], segments[i + 1]
            self._file.seek(start)
            while start < end:
                data = self._file.read(min(_CHUNK, end - start))
                if not data:
                    break
                start += len(data)
                text = decoder.decode(data)
                if text:
                    yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def copy(self, key: Hashable, out: TextIO) -> None:
        for text in self.chunks(key):
            out.write(text)

    def clear(self) -> None:
        """Forget everything written (the file is emptied too)."""
        self._file.seek(0)
        self._file.truncate()
        self._segments.clear()
        self._end = 0
        self._reading = False

    def close(self) -> None:
        self._file.close()


def indented_json(value: object, indent: int) -> str:
    """``value`` as orjson writes it with ``OPT_INDENT_2``, every line shifted right by ``indent`` spaces:
    the text it has as a list item inside a larger indented document (JSON strings hold no newline)."""
    import orjson

    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    pad = " " * indent
    return pad + text.replace("\n", "\n" + pad)


def write_json_around(out: TextIO, document: dict, placeholder: str, items: Iterator[str], indent: int) -> None:
    """``document`` (indented JSON) with the string ``placeholder`` replaced by a list of ``items``.

    Each item is already indented by ``indent`` spaces (``indented_json``); the list's closing bracket
    goes ``indent - 2`` spaces in, where its key stands.  ``placeholder`` must be a value no input can
    produce (a random token), so exactly one occurrence exists.
    """
    import orjson

    text = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    before, after = text.split(f'"{placeholder}"')
    out.write(before)
    first = True
    for piece in items:
        out.write("[\n" if first else "")
        out.write(piece)
        first = False
    out.write("[]" if first else "\n" + " " * (indent - 2) + "]")
    out.write(after)
    out.write("\n")
