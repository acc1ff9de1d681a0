"""Field paths into Kubernetes objects: reading, showing and writing them, tolerant of bad input.

A path is a tuple of dict keys and list indices from the object's root, e.g.
``("spec", "template", "spec", "containers", 0)``.  Everything here accepts malformed
objects (nulls, wrong types): user input must get a decision, never an exception.  Writers
never overwrite a value of the wrong type; they leave it for the apiserver to reject.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Replaced:
    """A value the user set that a mutating policy changed, recorded where the policy writes it.

    The engine names the policy that was running and warns with it (``gpuguard.webhook.decision.Change``):
    a capped TTL or a dropped field otherwise leaves Git and the cluster disagreeing with nobody told.
    ``how`` is ``capped`` (a number lowered to a maximum), ``replaced``, ``removed`` (``new`` is None) or
    ``extended`` (items appended to a list the user wrote whose items have no merge key, so every
    client-side diff sees them; ``old`` and ``new`` are the list's lengths).  Values a policy adds where
    the user set nothing are not recorded: nothing in Git disagrees with them.
    """

    path: Path
    old: Any
    new: Any
    how: str = "replaced"


def get_path(obj: Any, path: Path) -> Any:
    """Follow ``path`` through dicts and lists; ``None`` when any step is missing or mistyped."""
    cur = obj
    for step in path:
        if isinstance(step, int):
            if not isinstance(cur, list) or step >= len(cur):
                return None
            cur = cur[step]
        elif isinstance(cur, dict):
            cur = cur.get(step)
        else:
            return None
    return cur


def dotted(path: Path) -> str:
    """``("spec", "containers", 0)`` -> ``spec.containers[0]``: the form kubectl users read."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


def child_dict(parent: Any, key: str) -> dict | None:
    """``parent[key]`` as a dict, created when absent; ``None`` when it holds something else.

    Mutating policies use this so that a user's wrong-typed field is left for the apiserver
    to reject rather than silently overwritten.
    """
    if not isinstance(parent, dict):
        return None
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    return value if isinstance(value, dict) else None


def child_list(parent: Any, key: str) -> list | None:
    """``parent[key]`` as a list, created when absent; ``None`` when it holds something else."""
    if not isinstance(parent, dict):
        return None
    value = parent.get(key)
    if value is None:
        value = parent[key] = []
    return value if isinstance(value, list) else None


def dicts(value: Any) -> Iterator[tuple[int, dict]]:
    """The dict items of a list, with their index; nothing for a non-list."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield i, item


def set_int_field(obj: dict, path: Path, default: int, maximum: int | None, api_default: int | None = None,
                  changes: list[Replaced] | None = None) -> bool:
    """Set an integer field at ``path`` when absent, cap it at ``maximum`` when above.

    Used by the job policies (TTL, deadline, backoff), each of which owns one field and leaves
    a wrong-typed value alone.  ``api_default`` is the value the apiserver fills in before
    webhooks run (Job's ``backoffLimit: 6``); it counts as absent.  A cap is recorded in
    ``changes`` (the view's), a default where nothing was set is not.  Returns whether it changed
    anything, which names the policy in the mutated-by annotation.
    """
    parent = obj
    for step in path[:-1]:
        child = child_dict(parent, step)  # type: ignore[arg-type]
        if child is None:
            return False
        parent = child
    last = path[-1]
    assert isinstance(last, str), "integer fields are named, not indexed"
    current = parent.get(last)
    if current is None or (api_default is not None and current == api_default and not isinstance(current, bool)):
        value = default if maximum is None else min(default, maximum)
        if current == value:
            return False
        parent[last] = value
        return True
    if isinstance(current, int) and not isinstance(current, bool) and maximum is not None and current > maximum:
        parent[last] = maximum
        if changes is not None:
            changes.append(Replaced(path, current, maximum, "capped"))
        return True
    return False
