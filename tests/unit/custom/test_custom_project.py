"""Which fields of object/oldObject/podSpec a rule reads: conservative, so projections never change answers."""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.custom.project import fields_read, merge, project
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from tests.support.builders import bare_pod_spec, make


@pytest.mark.parametrize("expression, obj_fields, spec_fields", [
    ("object.metadata.name == 'x'", {"metadata"}, set()),
    ("has(object.spec.replicas) && object.?metadata.?labels.?team.orValue('') != ''", {"spec", "metadata"}, set()),
    ("podSpec.containers.all(c, c.image.startsWith('object.status'))", set(), {"containers"}),
    ("'podSpec' + \"object\" == ''", set(), set()),  # names inside strings are not uses
    ("size(object) > 0", None, set()),  # the whole object
    ("object['metadata'].name == 'x'", None, set()),
    ("[1].all(object, object > 0)", None, set()),  # a comprehension variable of the same name
    ("cel.bind(s, podSpec, s.containers.size() > 0)", set(), None),
    ("variables.object.x == 1 && x.podSpec == 1", set(), set()),  # fields named like variables
])
def test_fields_read(expression, obj_fields, spec_fields):
    reads = fields_read([expression])
    assert reads["object"] == (None if obj_fields is None else frozenset(obj_fields))
    assert reads["podSpec"] == (None if spec_fields is None else frozenset(spec_fields))


def test_merge_and_project():
    merged = merge([{"object": frozenset({"metadata"}), "oldObject": frozenset(), "podSpec": frozenset()},
                    {"object": frozenset({"spec"}), "oldObject": None, "podSpec": frozenset()}])
    assert merged == {"object": frozenset({"metadata", "spec"}), "oldObject": None, "podSpec": frozenset()}
    assert project({"metadata": 1, "spec": 2, "status": 3}, merged["object"]) == {"metadata": 1, "spec": 2}
    assert project({"a": 1}, None) == {"a": 1}


def test_a_projected_object_gives_the_same_findings_as_the_whole_one():
    """Two rules, one reading metadata only and one the whole object: both see what they need."""
    text = ("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\ncustomPolicies:\n"
            "  - id: meta-only\n    scope: object\n    validations:\n"
            "      - expression: \"!has(object.spec)\"\n        message: sees spec\n"
            "  - id: whole\n    scope: object\n    validations:\n"
            "      - expression: \"size(object) < 4\"\n        message: sees everything\n")
    obj = make("Job", bare_pod_spec())
    obj["status"] = {}
    decision = Engine(parse_config_text(text)).evaluate(obj, RequestContext(namespace="ml"))
    assert sorted(v.policy for v in decision.violations if v.policy in ("meta-only", "whole")) == ["meta-only", "whole"]
