"""What a mutation would change, in words and as a YAML diff.

Reports show users the engine's JSON patch; an RFC 6902 pointer is not what an ML engineer
reads, so this module turns each operation into ``add spec.template.spec.tolerations[+]:
{...}`` and renders the before/after objects as a unified YAML diff (``difflib``), which is
how people review manifest changes anyway.
"""

from __future__ import annotations

import difflib
from typing import Any

import orjson

from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION
from gpuguard.webhook.manifests import plain_yaml

_MAX_VALUE = 80


def pointer_to_path(pointer: str) -> str:
    """``/spec/containers/0/resources`` -> ``spec.containers[0].resources`` (``-`` -> ``[+]``)."""
    out = ""
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if token.isdigit():
            out += f"[{token}]"
        elif token == "-":
            out += "[+]"
        elif "." in token or "/" in token:
            out += f"[{token}]"
        else:
            out += f".{token}" if out else token
    return out


def short_value(value: Any, limit: int = _MAX_VALUE) -> str:
    """Compact JSON of a patch value, cut to ``limit`` characters."""
    text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_patch(patch: list[dict[str, Any]]) -> list[str]:
    """One short line per patch operation."""
    lines = []
    for op in patch:
        path = pointer_to_path(str(op.get("path", "")))
        verb = op.get("op", "?")
        if verb in ("add", "replace", "test"):
            lines.append(f"{verb} {path}: {short_value(op.get('value'))}")
        elif verb in ("move", "copy"):
            lines.append(f"{verb} {pointer_to_path(str(op.get('from', '')))} -> {path}")
        else:
            lines.append(f"{verb} {path}")
    return lines


def describe_changes(patch: list[dict[str, Any]]) -> list[str]:
    """``describe_patch`` minus gpuguard's own ``gpuguard.io/mutated-by`` bookkeeping annotation,
    which every mutated object gets and which tells a reader nothing about the workload."""
    def own(op: dict[str, Any]) -> bool:
        path = str(op.get("path", ""))
        value = op.get("value")
        if path == "/metadata/annotations" and isinstance(value, dict):
            return set(value) == {MUTATED_BY_ANNOTATION}
        return path == "/metadata/annotations/" + MUTATED_BY_ANNOTATION.replace("/", "~1")

    return describe_patch([op for op in patch if not own(op)])


def to_yaml(obj: Any) -> str:
    """Block YAML in the object's own key order, as users wrote it."""
    return plain_yaml(obj, default_flow_style=False, allow_unicode=True, width=100)


def yaml_diff(before: Any, after: Any, label: str) -> str:
    """Unified diff of the object's YAML before and after mutation; empty when unchanged."""
    if before == after:
        return ""
    lines = difflib.unified_diff(to_yaml(before).splitlines(keepends=True),
                                 to_yaml(after).splitlines(keepends=True),
                                 fromfile=f"{label} (submitted)", tofile=f"{label} (after gpuguard)", n=3)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
