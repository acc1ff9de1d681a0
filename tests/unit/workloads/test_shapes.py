"""The template shapes: every name a kind may write has one adapter, and each adapter answers as its operator does."""

from __future__ import annotations

import typing

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.workloads.kinds import TemplateRef
from gpuguard.workloads.shapes import SHAPES, PodShape, shape_of

ACCELERATORS = parse_config_text("kind: GpuguardConfig\n").accelerators


def test_every_shape_name_a_template_may_carry_has_an_adapter_and_no_adapter_is_orphaned():
    hints = typing.get_type_hints(TemplateRef)
    allowed = set(typing.get_args(hints["shape"]))
    assert allowed == set(SHAPES)
    assert all(name == adapter.name for name, adapter in SHAPES.items())


def test_the_plain_shape_adds_nothing_and_owns_its_pod_level_resources():
    plain = SHAPES["pod"]
    ref = TemplateRef("main", ("spec",), ("metadata",), 1)
    assert shape_of(ref) is plain and not plain.adapted and plain.pod_level_resources
    assert plain.main_container({}, ref, {"containers": []}, ACCELERATORS) is None
    assert plain.unread_claims({"draResources": [{}]}, ("spec",), ACCELERATORS) == []
    assert plain.spec_where_absent({"spec": {}}, TemplateRef("x", ("spec", "missing"), None, 1)) is None


@pytest.mark.parametrize("name", sorted(set(SHAPES) - {"pod"}))
def test_every_operator_shape_is_adapted(name: str):
    assert SHAPES[name].adapted and isinstance(SHAPES[name], PodShape)


def test_an_inline_spec_s_resources_are_its_container_s_and_its_dra_resources_are_unread():
    inline = SHAPES["inline"]
    assert not inline.pod_level_resources
    unread = inline.unread_claims({"draResources": [{"resourceClaimName": "gpus"}]}, ("spec",), ACCELERATORS)
    assert [path for path, _ in unread] == [("spec", "draResources")]
    container = inline.main_container({"metadata": {"name": "llama"}}, TemplateRef("nim", ("spec",), None, 1),
                                      {"resources": {"limits": {"nvidia.com/gpu": 2}}}, ACCELERATORS)
    assert container is not None and container.name == "llama-ctr" and container.gpus == {"nvidia.com/gpu": 2}


def test_a_dynamo_service_without_an_extra_pod_spec_gets_one_where_its_service_is():
    obj = {"spec": {"services": {"decode": {"resources": {"limits": {"gpu": "1"}}}}}}
    ref = TemplateRef("decode", ("spec", "services", "decode", "extraPodSpec"), None, 1, shape="dynamo")
    spec = shape_of(ref).spec_where_absent(obj, ref)
    assert spec == {} and obj["spec"]["services"]["decode"]["extraPodSpec"] is spec
    assert shape_of(ref).spec_where_absent({"spec": {}}, ref) is None  # no service: nothing to create

