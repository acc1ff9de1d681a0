"""Policies read only the workload view: kind facts (job fields, gang settings, claims a controller makes,
priority classes kept outside the pods) are interpreted once, in ``gpuguard.workloads.view`` from the kind table,
so that a new operator family is one kind entry, not an edit of every policy that walks its object."""

from __future__ import annotations

import ast

from tests.support.paths import REPO


def test_no_policy_walks_the_raw_object_or_compares_kind_names() -> None:
    offenders = []
    for path in sorted((REPO / "policies").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "obj":
                offenders.append(f"{path.name}:{node.lineno}: .obj")
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "kind" and isinstance(side.value, ast.Attribute)
                    and side.value.attr == "kind" for side in (node.left, *node.comparators)):
                offenders.append(f"{path.name}:{node.lineno}: compares view.kind.kind")
    assert offenders == []
