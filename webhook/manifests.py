"""Reading manifests: multi-document YAML or JSON, ``kind: List``, from files or stdin."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml


class ManifestError(Exception):
    """A manifest that can't be read at all (missing file)."""


@dataclass
class Document:
    source: str
    line: int
    obj: Any = None
    error: str | None = None


def _expand(obj: Any, source: str, line: int) -> list[Document]:
    if isinstance(obj, dict) and obj.get("kind") == "List" and isinstance(obj.get("items"), list):
        return [Document(source, line, item) for item in obj["items"]]
    if not isinstance(obj, dict) or "kind" not in obj or "apiVersion" not in obj:
        return [Document(source, line, obj, "not a Kubernetes object (needs apiVersion and kind)")]
    return [Document(source, line, obj)]


def read_documents(path: str) -> list[Document]:
    if path == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        try:
            with open(path, encoding="utf-8") as fh:
                text, source = fh.read(), path
        except OSError as exc:
            raise ManifestError(f"{path}: {exc.strerror or exc}") from None
    docs: list[Document] = []
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1
            obj = loader.construct_document(node)
            if obj is not None:
                docs.extend(_expand(obj, source, line))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        docs.append(Document(source, mark.line + 1 if mark else 1, None, f"invalid YAML: {exc.problem}"))
    finally:
        loader.dispose()
    return docs
