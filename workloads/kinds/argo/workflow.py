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

Every walk is iterative and every step is bounded: steps and nesting are linear in the
workflow's size, a DAG's heaviest set is a max flow (Dinic) on at most :data:`MAX_DAG_TASKS`
tasks and :data:`MAX_DAG_DEPENDENCIES` dependencies, and a workflow past a bound raises
:class:`TooLarge`, which the engine answers as "can't be judged" with the bound's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

POD_KEYS = ("container", "script", "containerSet")
Phase = dict[str, int]  # template name -> pods running at once
Weight = Callable[[str], int]

# What gpuguard judges of one workflow: above what real workflows write (tens of templates, DAGs
# of tens to hundreds of tasks; large fan-outs are ``withItems``, counted), and low enough that the
# worst workflow within them takes well under the 50 ms engine budget (bench/hostile.py).
MAX_TEMPLATES = 2_000  # templates in one WorkflowSpec
MAX_STEPS = 5_000  # step calls across all steps templates
MAX_DAG_TASKS = 500  # DAG tasks, all DAG templates together
MAX_DAG_DEPENDENCIES = 5_000  # their dependencies
MAX_FLOW_SIZE = 20_000  # tasks + dependencies the per-template counts' max flows cover, all together
# Fan-out (``withItems``, ``withSequence``) is counted, never expanded: a count of 10^18 costs
# what a count of 2 does; nesting depth costs nothing beyond the templates it takes.


class TooLarge(ValueError):
    """The workflow is past a bound gpuguard judges: the message names the bound and its value."""


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


def _together(phases: Iterable[tuple[Phase, int]], cap: Any, weight: Weight) -> Phase:
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


def _dependencies(task: dict, names: dict[str, int]) -> set[str]:
    deps = {d for d in task.get("dependencies") or [] if isinstance(d, str)} if isinstance(
        task.get("dependencies"), list) else set()
    depends = task.get("depends")
    if isinstance(depends, str):  # "a && (b.Succeeded || c.Failed)": the task names in it
        deps |= {w for w in _WORD.findall(depends) if w in names}
    return deps


def _dag_tasks(template: dict) -> list[dict]:
    """A DAG template's tasks by name, in first-seen order (the last task of a name wins, as in a map)."""
    dag = template.get("dag")
    tasks = dag.get("tasks") if isinstance(dag, dict) else None
    if not isinstance(tasks, list):
        return []
    return list({t["name"]: t for t in tasks if isinstance(t, dict) and isinstance(t.get("name"), str)}.values())


def _calls(template: dict) -> list[Any]:
    """The template names a steps or DAG template calls, in the order they are judged."""
    if isinstance(template.get("steps"), list):
        return [c.get("template") for group in template["steps"] for c in (group if isinstance(group, list)
                                                                            else [group]) if isinstance(c, dict)]
    return [t.get("template") for t in _dag_tasks(template)] if isinstance(template.get("dag"), dict) else []


def _dependency_count(template: dict) -> int:
    """An upper bound of a DAG template's dependency edges, counted without parsing ``depends``."""
    total = 0
    for task in _dag_tasks(template) if isinstance(template.get("dag"), dict) else []:
        deps, depends = task.get("dependencies"), task.get("depends")
        total += len(deps) if isinstance(deps, list) else 0
        total += len(_WORD.findall(depends)) if isinstance(depends, str) else 0
    return total


class _Dag:
    """One DAG template's tasks (by name, last one of a name wins) and their dependency edges."""

    def __init__(self, template: dict):
        self.tasks = _dag_tasks(template)
        index = {t["name"]: i for i, t in enumerate(self.tasks)}
        self.edges = [(index[d], i) for i, task in enumerate(self.tasks) for d in _dependencies(task, index)
                      if index[d] != i]


class _Walk:
    """Templates in the order the workflow's calls reach them, each judged once, without recursion.

    ``judge(name, template, result)`` gets ``result(callee)``: what a called template came to
    ({} for one being judged further up the call chain, that is recursion, or not defined).
    """

    def __init__(self, spec: dict):
        templates = spec.get("templates")
        templates = templates if isinstance(templates, list) else []
        if len(templates) > MAX_TEMPLATES:
            raise TooLarge(f"the workflow has {len(templates)} templates; gpuguard judges at most {MAX_TEMPLATES} "
                           "(MAX_TEMPLATES)")
        self.templates = {t["name"]: t for t in templates if isinstance(t, dict) and isinstance(t.get("name"), str)}
        steps = sum(len(_calls(t)) for t in self.templates.values() if isinstance(t.get("steps"), list))
        if steps > MAX_STEPS:
            raise TooLarge(f"the workflow has {steps} steps; gpuguard judges at most {MAX_STEPS} (MAX_STEPS)")
        tasks = sum(len(_calls(t)) for t in self.templates.values() if not isinstance(t.get("steps"), list))
        if tasks > MAX_DAG_TASKS:
            raise TooLarge(f"the workflow has {tasks} DAG tasks; gpuguard judges at most {MAX_DAG_TASKS} "
                           "(MAX_DAG_TASKS)")
        dependencies = sum(_dependency_count(t) for t in self.templates.values())
        if dependencies > MAX_DAG_DEPENDENCIES:
            raise TooLarge(f"the workflow's DAG tasks have {dependencies} dependencies; gpuguard judges at most "
                           f"{MAX_DAG_DEPENDENCIES} (MAX_DAG_DEPENDENCIES)")

    def run(self, root: Any, judge: Callable[[str, dict, Callable[[Any], Any]], Any], memo: dict[str, Any]) -> Any:
        if not isinstance(root, str) or root not in self.templates:
            return {}
        active: set[str] = set()
        frames: list[tuple[str, list[str], int]] = []

        def result(name: Any) -> Any:
            return memo.get(name, {}) if isinstance(name, str) else {}

        def enter(name: str) -> None:
            active.add(name)
            frames.append((name, _calls(self.templates[name]), 0))

        if root not in memo:
            enter(root)
        while frames:
            name, calls, at = frames[-1]
            while at < len(calls):
                callee = calls[at]
                at += 1
                if isinstance(callee, str) and callee in self.templates and callee not in memo \
                        and callee not in active:
                    frames[-1] = (name, calls, at)
                    enter(callee)
                    break
            else:
                frames.pop()
                active.discard(name)
                memo[name] = judge(name, self.templates[name], result)
        return memo[root]


class _Peak:
    """The heaviest moment (by ``weight``) of each template: the pods of each pod template then."""

    def __init__(self, walk: _Walk, weight: Weight):
        self.walk, self.weight = walk, weight
        self.memo: dict[str, Phase] = {}

    def of(self, name: Any) -> Phase:
        return self.walk.run(name, self._judge, self.memo)

    def _judge(self, name: str, template: dict, result: Callable[[Any], Phase]) -> Phase:
        if is_pod_template(template):
            return {name: 1}
        if isinstance(template.get("steps"), list):
            phase: Phase = {}
            for group in template["steps"]:
                calls = group if isinstance(group, list) else [group]
                running = [(result(c.get("template")), fan_out(c)) for c in calls if isinstance(c, dict)]
                phase = _heavier(phase, _together(running, template.get("parallelism"), self.weight), self.weight)
            return phase
        if isinstance(template.get("dag"), dict):
            dag = _Dag(template)
            phases = [_together([(result(t.get("template")), fan_out(t))], None, self.weight) for t in dag.tasks]
            chosen = heaviest_antichain_indices(len(dag.tasks), dag.edges,
                                                [_weight(p, self.weight) for p in phases])
            return _together([(phases[i], 1) for i in chosen], template.get("parallelism"), self.weight)
        return {}


class _MostAtOnce:
    """For each template, the most pods of each pod template it runs at once: all names in one walk
    (the same answer as a :class:`_Peak` weighing one name at a time)."""

    def __init__(self, walk: _Walk):
        self.walk, self.flow_size = walk, 0
        self.memo: dict[str, Phase] = {}

    def of(self, name: Any) -> Phase:
        return self.walk.run(name, self._judge, self.memo)

    def _judge(self, name: str, template: dict, result: Callable[[Any], Phase]) -> Phase:
        if is_pod_template(template):
            return {name: 1}
        cap = _count(template.get("parallelism"))
        out: Phase = {}
        if isinstance(template.get("steps"), list):
            for group in template["steps"]:
                calls = group if isinstance(group, list) else [group]
                running = _together([(result(c.get("template")), fan_out(c)) for c in calls if isinstance(c, dict)],
                                     None, _one)
                for pod, n in running.items():
                    out[pod] = max(out.get(pod, 0), min(n, cap) if cap > 0 else n)
        elif isinstance(template.get("dag"), dict):
            dag = _Dag(template)
            counts = [result(t.get("template")) for t in dag.tasks]
            fans = [fan_out(t) for t in dag.tasks]
            for pod, n in self._dag(dag, counts, fans).items():
                out[pod] = min(n, cap) if cap > 0 else n
        return {pod: n for pod, n in out.items() if n > 0}

    def _charge(self, size: int) -> None:
        self.flow_size += size
        if self.flow_size > MAX_FLOW_SIZE:
            raise TooLarge(f"counting each template's pods needs max flows over more than {MAX_FLOW_SIZE} tasks "
                           "and dependencies in all (MAX_FLOW_SIZE)")

    def _dag(self, dag: _Dag, counts: list[Phase], fans: list[int]) -> Phase:
        """Per pod template, its heaviest antichain's pods.  Tasks that reach each other are found
        once (bitsets); a name whose tasks are one, or pairwise unordered, needs no flow."""
        users: dict[str, list[int]] = {}
        for i, phase in enumerate(counts):
            for pod, n in phase.items():
                if n * fans[i] > 0:
                    users.setdefault(pod, []).append(i)
        later = _reach(len(dag.tasks), dag.edges) if any(len(u) > 1 for u in users.values()) else None
        out: Phase = {}
        for pod, tasks in users.items():
            weights = [counts[i][pod] * fans[i] for i in tasks]
            mask = sum(1 << i for i in tasks)
            if len(tasks) == 1 or later is not None and all(not later[i] & mask for i in tasks):
                out[pod] = sum(weights)
                continue
            ordered = sum((later[i] & mask).bit_count() for i in tasks) if later is not None else -1
            if 0 <= ordered + len(tasks) <= len(dag.tasks) + len(dag.edges):
                # the flow on these tasks alone, ordered as the whole DAG orders them, is the smaller one
                where = {t: k for k, t in enumerate(tasks)}
                pairs = [(where[a], where[b]) for a in tasks for b in _bits(later[a] & mask)]  # type: ignore[index]
                self._charge(len(tasks) + len(pairs))
                out[pod] = sum(weights[k] for k in heaviest_antichain_indices(len(tasks), pairs, weights))
                continue
            self._charge(len(dag.tasks) + len(dag.edges))
            weight = [0] * len(dag.tasks)
            for i, w in zip(tasks, weights, strict=True):
                weight[i] = w
            out[pod] = sum(weight[i] for i in heaviest_antichain_indices(len(dag.tasks), dag.edges, weight))
        return out


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _one(_: str) -> int:
    return 1


def _reach(count: int, edges: list[tuple[int, int]]) -> list[int] | None:
    """For each task, the bitset of tasks that run after it (directly or not); None for a cycle
    (which Argo refuses; the max flow handles it)."""
    after: list[list[int]] = [[] for _ in range(count)]
    indegree = [0] * count
    for a, b in edges:
        after[a].append(b)
        indegree[b] += 1
    order = [i for i in range(count) if not indegree[i]]
    for v in order:
        for u in after[v]:
            indegree[u] -= 1
            if not indegree[u]:
                order.append(u)
    if len(order) < count:
        return None
    later = [0] * count
    for v in reversed(order):
        bits = 0
        for u in after[v]:
            bits |= later[u] | (1 << u)
        later[v] = bits
    return later


def heaviest_antichain_indices(count: int, edges: list[tuple[int, int]], weight: list[int]) -> list[int]:
    """The nodes (``0..count-1``) of a maximum-weight antichain of a DAG (``edges``: (before, after)).

    Weighted Dilworth: the heaviest antichain weighs as much as the smallest flow that passes
    each node at least its weight.  Start from one path per node (source -> node -> sink, its
    weight), cancel as much as possible by a max flow from sink to source in the residual
    graph (merging paths into chains), and read the antichain off the final cut: the nodes
    whose exit the sink still reaches but whose entry it does not.  A cycle (which Argo
    refuses) just merges its tasks; positive weights only.  The flow is Dinic's (level graph,
    blocking flows found by an iterative search), not one breadth-first search per path.
    """
    if sum(1 for w in weight if w > 0) <= 1:
        return [i for i, w in enumerate(weight) if w > 0]
    source, sink = 2 * count, 2 * count + 1
    big = sum(max(w, 0) for w in weight) + 1
    to: list[int] = []
    cap: list[int] = []
    adj: list[list[int]] = [[] for _ in range(2 * count + 2)]

    def arc(a: int, b: int, forward: int, backward: int) -> None:
        adj[a].append(len(to))
        to.append(b)
        cap.append(forward)
        adj[b].append(len(to))
        to.append(a)
        cap.append(backward)

    for i in range(count):
        w = max(weight[i], 0)
        arc(source, 2 * i, big, w)  # entry; carrying w, which may be cancelled
        arc(2 * i, 2 * i + 1, big, 0)  # the node itself, at least w: nothing below it to cancel
        arc(2 * i + 1, sink, big, w)
    for before, after in edges:
        if 0 <= before < count and 0 <= after < count:
            arc(2 * before + 1, 2 * after, big, 0)
    level = _dinic(adj, to, cap, sink, source)
    return [i for i in range(count) if level[2 * i + 1] >= 0 > level[2 * i] and weight[i] > 0]


def _levels(adj: list[list[int]], to: list[int], cap: list[int], start: int) -> list[int]:
    level = [-1] * len(adj)
    level[start] = 0
    queue = [start]
    for v in queue:
        for e in adj[v]:
            u = to[e]
            if cap[e] > 0 and level[u] < 0:
                level[u] = level[v] + 1
                queue.append(u)
    return level


def _dinic(adj: list[list[int]], to: list[int], cap: list[int], start: int, end: int) -> list[int]:
    """Max flow from ``start`` to ``end`` in place; returns the final levels (>= 0: the nodes
    ``start`` still reaches, one side of the minimum cut)."""
    while True:
        level = _levels(adj, to, cap, start)
        if level[end] < 0:
            return level
        at = [0] * len(adj)
        path: list[int] = []
        v = start
        while True:
            if v == end:
                push = min(cap[e] for e in path)
                for e in path:
                    cap[e] -= push
                    cap[e ^ 1] += push
                path.clear()
                v = start
                continue
            edges = adj[v]
            while at[v] < len(edges):
                e = edges[at[v]]
                if cap[e] > 0 and level[to[e]] == level[v] + 1:
                    break
                at[v] += 1
            else:
                if v == start:
                    break
                level[v] = -1  # a dead end for the rest of this phase
                e = path.pop()
                v = to[e ^ 1]
                at[v] += 1
                continue
            path.append(edges[at[v]])
            v = to[edges[at[v]]]


def heaviest_antichain(nodes: list[str], edges: list[tuple[str, str]], weight: dict[str, int]) -> list[str]:
    """:func:`heaviest_antichain_indices` by node name."""
    index = {n: i for i, n in enumerate(nodes)}
    chosen = heaviest_antichain_indices(len(nodes), [(index[a], index[b]) for a, b in edges
                                                     if a in index and b in index],
                                        [weight.get(n, 0) for n in nodes])
    return [nodes[i] for i in chosen]


def _entry(spec: dict, walk: _Walk, of: Callable[[Any], Phase], heavier: Callable[[Phase, Phase], Phase]) -> Phase:
    if isinstance(spec.get("entrypoint"), str):
        return heavier(of(spec["entrypoint"]), of(spec.get("onExit")))
    phase: Phase = {}
    for name in walk.templates:
        phase = heavier(phase, of(name))
    return phase


def peak(spec: Any, weight: Weight) -> Phase:
    """Pods per template at the workflow's heaviest moment, ``weight(name)`` being one pod's worth.

    From the ``entrypoint`` (then the ``onExit`` handler, which runs after it), capped by the
    workflow's ``parallelism``.  A workflow (template) without an entrypoint is a library whose
    templates others call one at a time: its heaviest pod template.  :class:`TooLarge` past a bound.
    """
    if not isinstance(spec, dict):
        return {}
    walk = _Walk(spec)
    phase = _entry(spec, walk, _Peak(walk, weight).of, lambda a, b: _heavier(a, b, weight))
    return _together([(phase, 1)], spec.get("parallelism"), weight)


def most_at_once(spec: Any) -> dict[str, int]:
    """For every pod template the workflow runs, the most pods of it at once (at least 1), all in
    one walk (a template it never runs is absent).  :class:`TooLarge` past a bound."""
    if not isinstance(spec, dict):
        return {}
    walk = _Walk(spec)
    counts = _entry(spec, walk, _MostAtOnce(walk).of,
                    lambda a, b: {n: max(a.get(n, 0), b.get(n, 0)) for n in a.keys() | b.keys()})
    limit = _count(spec.get("parallelism"))
    return {name: max(min(n, limit) if limit > 0 else n, 1) for name, n in counts.items()}
