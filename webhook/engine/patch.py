"""RFC 6902 JSON patch from one structural diff of before and after.

Policies never build patches: they edit a working copy, and this module compares it with the
original once.  It is written for the admission hot path: unchanged subtrees are skipped by
one C-level ``==`` each, and lists that only grew at the end become ``add`` operations at
their indices, which is what reinvocation-safe mutations produce (tolerations, volumes,
mounts appended).  ``jsonpatch.make_patch`` gives the same result far slower; the tests use
the ``jsonpatch`` library to prove each patch applies and yields the mutated object.
"""

from __future__ import annotations

from typing import Any

_MISSING: Any = object()


def _escape(token: str | int) -> str:
    if isinstance(token, int):
        return str(token)
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


def _diff(before: Any, after: Any, pointer: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        removed = False
        for key, old in before.items():
            new = after.get(key, _MISSING)
            if new is _MISSING:
                removed = True
                ops.append({"op": "remove", "path": f"{pointer}/{_escape(key)}"})
            elif new is not old and new != old:
                _diff(old, new, f"{pointer}/{_escape(key)}", ops)
        if removed or len(after) > len(before):  # else every key of after is one of before's
            for key, new in after.items():
                if key not in before:
                    ops.append({"op": "add", "path": f"{pointer}/{_escape(key)}", "value": new})
        return
    if isinstance(before, list) and isinstance(after, list) and len(after) >= len(before):
        for i, old in enumerate(before):
            new = after[i]
            if new is not old and new != old:
                _diff(old, new, f"{pointer}/{i}", ops)
        for i in range(len(before), len(after)):
            ops.append({"op": "add", "path": f"{pointer}/{i}", "value": after[i]})
        return
    ops.append({"op": "replace", "path": pointer, "value": after})


def make_patch(before: Any, after: Any) -> list[dict[str, Any]]:
    """The operations that turn ``before`` into ``after`` (empty when they are equal)."""
    if before == after:
        return []
    ops: list[dict[str, Any]] = []
    _diff(before, after, "", ops)
    return ops
