"""Which of an Argo workflow's pods run at the same time (``argoproj.io/v1alpha1``).

A workflow's ``templates`` are definitions, not pods: a ``container``/``script``/``containerSet``
template makes a pod each time a step or DAG task calls it, ``steps`` run their groups one
after another (the steps inside a group in parallel), DAG tasks run once their dependencies
are done, ``withItems``/``withSequence`` fan a step out, and ``parallelism`` caps how many
pods run at once.  Summing every template's GPUs would count a preprocess -> train ->
evaluate pipeline as if its three pods ran together; this module finds the heaviest moment
instead, so per-workload totals are what the workflow can really hold at once.

The analysis is static and takes the worst case where timing decides: DAG tasks that don't
wait for each other may all run together (the heaviest such set counts), ``withParam`` (a
runtime list) counts once, and a template called from another ``WorkflowTemplate`` (``templateRef``) is judged
in that object.  Recursive templates count once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

POD_KEYS = ("container", "script", "containerSet")
Phase = dict[str, int]  # template name -> pods running at once
Weight = Callable[[str], int]


def is_pod_template(template: Any) -> bool:
    return isinstance(template, dict) and any(isinstance(template.get(k), dict) for k in POD_KEYS)


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, 0)
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 18:
        return int(value)
    return -1  # not known before the workflow runs (an expression, a parameter)


def fan_out(call: dict) -> int:
    """How many times a step or task runs its template at once."""
    items = call.get("withItems")
    if isinstance(items, list):
        return len(items)
    sequence = call.get("withSequence")
    if isinstance(sequence, dict):
        count = _count(sequence.get("count"))
        if count >= 0 and "count" in sequence:
            return count
        start, end = _count(sequence.get("start", 0)), _count(sequence.get("end"))
        if start >= 0 and end >= 0:
            return abs(end - start) + 1
    return 1


def _weight(phase: Phase, weight: Weight) -> int:
    return sum(weight(name) * n for name, n in phase.items())


def _heavier(a: Phase, b: Phase, weight: Weight) -> Phase:
    return b if _weight(b, weight) > _weight(a, weight) else a


def _together(phases: list[tuple[Phase, int]], cap: Any, weight: Weight) -> Phase:
    """Phases that run at the same time (each ``times`` over), at most ``cap`` pods when capped
    (the heaviest ones: a cap lets any of them be the ones running)."""
    out: Phase = {}
    for phase, times in phases:
        for name, n in phase.items():
            out[name] = out.get(name, 0) + n * times
    limit = _count(cap)
    if limit <= 0 or sum(out.values()) <= limit:
        return out
    capped: Phase = {}
    for name in sorted(out, key=weight, reverse=True):
        take = min(out[name], limit)
        if take:
            capped[name] = take
        limit -= take
    return capped


_WORD = re.compile(r"[A-Za-z0-9_-]+")


def _dependencies(task: dict, names: set[str]) -> set[str]:
    deps = {d for d in task.get("dependencies") or [] if isinstance(d, str)} if isinstance(
        task.get("dependencies"), list) else set()
    depends = task.get("depends")
    if isinstance(depends, str):  # "a && (b.Succeeded || c.Failed)": the task names in it
        deps |= {w for w in _WORD.findall(depends) if w in names}
    return deps


class _Workflow:
    def __init__(self, spec: dict, weight: Weight):
        self.weight = weight
        self.templates = {t["name"]: t for t in spec.get("templates") or [] if isinstance(t, dict)
                          and isinstance(t.get("name"), str)} if isinstance(spec.get("templates"), list) else {}
        self.memo: dict[str, Phase] = {}

    def peak(self, name: Any, stack: tuple[str, ...] = ()) -> Phase:
        """The heaviest moment of running template ``name``."""
        if not isinstance(name, str) or name in stack or name not in self.templates:
            return {}
        if name in self.memo:
            return self.memo[name]
        template, stack = self.templates[name], stack + (name,)
        if is_pod_template(template):
            phase: Phase = {name: 1}
        elif isinstance(template.get("steps"), list):
            phase = {}
            for group in template["steps"]:
                calls = group if isinstance(group, list) else [group]
                running = [(self.peak(c.get("template"), stack), fan_out(c)) for c in calls if isinstance(c, dict)]
                phase = _heavier(phase, _together(running, template.get("parallelism"), self.weight), self.weight)
        elif isinstance(template.get("dag"), dict):
            phase = self._dag(template, stack)
        else:
            phase = {}
        self.memo[name] = phase
        return phase

    def _dag(self, template: dict, stack: tuple[str, ...]) -> Phase:
        """The heaviest set of tasks that can run together: tasks neither of which waits for the
        other, however long each one takes (a maximum-weight antichain of the dependency graph)."""
        tasks = [t for t in template["dag"].get("tasks") or [] if isinstance(t, dict)] if isinstance(
            template["dag"].get("tasks"), list) else []
        by_name = {t["name"]: t for t in tasks if isinstance(t.get("name"), str)}
        names = list(by_name)
        phases = {n: _together([(self.peak(by_name[n].get("template"), stack), fan_out(by_name[n]))], None,
                               self.weight) for n in names}
        edges = [(d, n) for n in names for d in _dependencies(by_name[n], set(by_name)) if d != n]
        chosen = heaviest_antichain(names, edges, {n: _weight(phases[n], self.weight) for n in names})
        return _together([(phases[n], 1) for n in chosen], template.get("parallelism"), self.weight)


def heaviest_antichain(nodes: list[str], edges: list[tuple[str, str]], weight: dict[str, int]) -> list[str]:
    """The nodes of a maximum-weight antichain of a DAG (``edges``: (before, after)).

    Weighted Dilworth: the heaviest antichain weighs as much as the smallest flow that passes
    each node at least its weight.  Start from one path per node (source -> node -> sink, its
    weight), cancel as much as possible by a max flow from sink to source in the residual
    graph (merging paths into chains), and read the antichain off the final cut: the nodes
    whose exit the sink still reaches but whose entry it does not.  A cycle (which Argo
    refuses) just merges its tasks; positive weights only.
    """
    index = {n: i for i, n in enumerate(nodes)}
    count = len(nodes)
    source, sink = 2 * count, 2 * count + 1
    big = sum(max(w, 0) for w in weight.values()) + 1
    residual: dict[int, dict[int, int]] = {v: {} for v in range(2 * count + 2)}

    def arc(a: int, b: int, forward: int, backward: int) -> None:
        residual[a][b] = residual[a].get(b, 0) + forward
        residual[b][a] = residual[b].get(a, 0) + backward

    for n, i in index.items():
        w = max(weight.get(n, 0), 0)
        arc(source, 2 * i, big, w)  # entry; carrying w, which may be cancelled
        arc(2 * i, 2 * i + 1, big, 0)  # the node itself, at least w: nothing below it to cancel
        arc(2 * i + 1, sink, big, w)
    for before, after in edges:
        if before in index and after in index:
            arc(2 * index[before] + 1, 2 * index[after], big, 0)
    while True:  # Edmonds-Karp from sink to source
        parent = {sink: sink}
        queue = [sink]
        for v in queue:
            for u, cap in residual[v].items():
                if cap > 0 and u not in parent:
                    parent[u] = v
                    queue.append(u)
        if source not in parent:
            break
        path, v = [], source
        while v != sink:
            path.append((parent[v], v))
            v = parent[v]
        push = min(residual[a][b] for a, b in path)
        for a, b in path:
            residual[a][b] -= push
            residual[b][a] += push
    reached = set(parent)
    return [n for n, i in index.items() if 2 * i + 1 in reached and 2 * i not in reached and weight.get(n, 0) > 0]


def peak(spec: Any, weight: Weight) -> Phase:
    """Pods per template at the workflow's heaviest moment, ``weight(name)`` being one pod's worth.

    From the ``entrypoint`` (then the ``onExit`` handler, which runs after it), capped by the
    workflow's ``parallelism``.  A workflow (template) without an entrypoint is a library whose
    templates others call one at a time: its heaviest pod template.
    """
    if not isinstance(spec, dict):
        return {}
    workflow = _Workflow(spec, weight)
    if isinstance(spec.get("entrypoint"), str):
        phase = _heavier(workflow.peak(spec["entrypoint"]), workflow.peak(spec.get("onExit")), weight)
    else:
        phase = {}
        for name in workflow.templates:
            phase = _heavier(phase, workflow.peak(name), weight)
    return _together([(phase, 1)], spec.get("parallelism"), weight)


def most_at_once(spec: Any, name: str) -> int:
    """The most pods of template ``name`` the workflow runs at once (at least 1)."""
    return max(peak(spec, lambda n: 1 if n == name else 0).get(name, 0), 1)
