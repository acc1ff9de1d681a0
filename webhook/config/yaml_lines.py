"""The line-aware, alias-bomb-safe YAML reader behind every config load.

A config is composed once into a node graph; the graph's expanded size is bounded before
anything is constructed, and each key path keeps its line so a refusal reads ``file:line:
reason`` and an admin can fix a ConfigMap without guessing.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from gpuguard.webhook.config.errors import ConfigError

# A YAML alias re-uses a node; expanding aliases of aliases grows exponentially ("billion
# laughs": 440 bytes took a live server to 2 GB).  The composed node graph is small, so its
# expanded size is counted there, before anything is constructed.  Real configs expand to a
# few thousand nodes.
MAX_EXPANDED_NODES = 100_000
MAX_NESTING = 64


def line_index(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Map each key path of a YAML document to its 1-based line, to point errors at the right line."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out[path + (key,)] = key_node.start_mark.line + 1
            line_index(value_node, path + (key,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            line_index(item, path + (i,), out)
    return out


def line_for(lines: dict[tuple, int], loc: tuple) -> int:
    """The line of ``loc``, or of its nearest ancestor the file spells out (a default has no line)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def validation_error(exc: ValidationError, prefix: tuple, lines: dict[tuple, int], source: str) -> ConfigError:
    """One ``file:line: key.path: reason`` line per pydantic error; ``prefix`` is where the model sits."""
    problems = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(f"{source}:{line_for(lines, loc)}: {where}: {message}")
    return ConfigError("\n".join(problems))


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse documents whose aliases expand beyond ``MAX_EXPANDED_NODES`` or that nest too deeply."""
    problem = expansion_problem(root, max_nodes=MAX_EXPANDED_NODES, max_depth=MAX_NESTING)
    if problem is not None:
        node, reason = problem
        raise ConfigError(f"{source}:{node.start_mark.line + 1}: {reason}")


def expansion_problem(root: yaml.Node, *, max_nodes: int, max_depth: int,
                      limit_text: str | None = None) -> tuple[yaml.Node, str] | None:
    """The node and reason when ``root`` expands beyond ``max_nodes`` nodes or nests beyond ``max_depth``.

    Iterative, with each distinct node's expanded size computed once, so checking a bomb costs
    as little as composing it.  A node that contains itself (a recursive alias) is refused too.
    ``limit_text`` says the limit in the message when it is not ``max_nodes`` itself.  Shared by
    the config reader and the manifest reader (``gpuguard.webhook.manifests``).
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > max_nodes:
                return node, (f"YAML aliases expand this document beyond {limit_text or max_nodes} nodes; "
                              "write the values out instead")
            continue
        if key in sizes:
            continue
        if key in on_path:
            return node, "a YAML alias refers to a node that contains it (recursive alias)"
        if depth > max_depth:
            return node, f"nested deeper than {max_depth} levels"
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


# libyaml's parser where PyYAML was built with it (its wheels are, on linux/amd64 and arm64): the same nodes, marks
# and errors as the pure-Python one, about ten times faster (a config's parse was a fifth of `gpuguard evaluate`).
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def compose_and_construct(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """Compose once, bound the expansion, then construct from the same node graph (no second parse)."""
    loader = SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_expansion(node, source)
        return node, loader.construct_document(node)
    finally:
        loader.dispose()

