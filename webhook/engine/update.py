"""What UPDATE needs beyond CREATE: immutable fields kept, and findings matched by what they are about.

Two rules, both pure functions over plain objects:

* **Immutable fields** (``KindSpec.immutable``: a Pod's spec, a Job's template, a JobSet's
  replicatedJobs …) are never changed by gpuguard on UPDATE.  A re-apply often sends such a field
  *without* gpuguard's additions (``kubectl apply`` replaces a list it owns, like tolerations);
  mutating it back would be fine only when the result is what is stored.  So: when gpuguard's
  policies make the incoming value and the stored value the same, the stored value is kept (the
  update goes through unchanged there); when they still differ, the user really changed the
  field, and it is passed on as the user sent it, for the apiserver to judge.  gpuguard never turns
  a valid update into an invalid one.
* **Grandfathering**: on UPDATE only what the update changes can be denied.  A finding is matched
  to the stored object's findings by policy and by *subject*: its field path with list indices
  replaced by the names of the items (containers, volumes, replicated jobs, tasks …).  Inserting
  a sidecar before the GPU container keeps an old finding old; swapping another violating
  container into the same index makes a new one.  Message wording never counts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from gpuguard.workloads.kinds import KindSpec
from gpuguard.workloads.paths import Path, get_path


def subject(obj: Any, path: Path) -> str:
    """``path`` made stable: ``spec.containers[trainer]`` instead of ``spec.containers[0]``."""
    out: list[str] = []
    cur = obj
    for step in path:
        if isinstance(step, int):
            item = cur[step] if isinstance(cur, list) and 0 <= step < len(cur) else None
            name = item.get("name") if isinstance(item, dict) else None
            out.append(f"[{name}]" if isinstance(name, str) else f"[#{step}]")
            cur = item
        else:
            out.append(f".{step}" if out else str(step))
            cur = cur.get(step) if isinstance(cur, dict) else None
    return "".join(out)


def _set_path(obj: dict, path: Path, value: Any) -> None:
    parent = get_path(obj, path[:-1])
    if isinstance(parent, dict):
        if value is None:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value
    elif isinstance(parent, list) and isinstance(path[-1], int) and path[-1] < len(parent):
        parent[path[-1]] = value


def keep_immutable(kind: KindSpec, work: dict, incoming: dict, old: dict,
                   mutate_old: Callable[[], dict]) -> None:
    """Lay the stored or the incoming value back over each immutable field of ``work``.

    ``work`` is the incoming object after gpuguard's policies, ``incoming`` as the request
    carried it, ``old`` as stored; ``mutate_old`` runs the same policies over a copy of ``old``
    (called at most once, and only for kinds with immutable fields).
    """
    mutated_old: dict | None = None
    for path in kind.immutable:
        stored = get_path(old, path)
        if stored is None:
            continue
        if mutated_old is None:
            mutated_old = mutate_old()
        same = get_path(work, path) == get_path(mutated_old, path)
        _set_path(work, path, copy.deepcopy(stored if same else get_path(incoming, path)))
