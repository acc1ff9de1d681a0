"""matchConditions: derived from the kind table and the policies, within the apiserver's limits.

Whether the apiserver accepts and evaluates them as intended is proven in
``tests/e2e/test_blast_radius_e2e.py``; here: which kinds the chain lists, which policies widen
the conditions, and the limits.  That each kind's ``pod_spec_paths`` agree with its ``locate`` is
checked in ``tests/unit/workloads/test_kinds.py``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from gpuguard.policies import REGISTRY
from gpuguard.policies.base import PolicySettings, ValidatingPolicy, any_cpu_object
from gpuguard.webhook.cli import match_conditions as mc
from gpuguard.webhook.cli.webhook_config import build_webhook_configurations, filters_for, kind_groups
from gpuguard.webhook.config import load_config, parse_config_text
from gpuguard.workloads.kinds import KINDS

HEADER = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
_QUALIFIED = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@pytest.mark.parametrize("spec", KINDS, ids=lambda k: f"{k.group or 'core'}/{k.kind}")
def test_a_kind_is_in_the_chain_exactly_when_it_says_where_its_pod_specs_are(spec):
    """``KindSpec.pod_spec_paths`` decides; a kind without them is always sent (the conservative default)."""
    (condition,) = mc.build_match_conditions(("nvidia.com/gpu",))
    listed = f"'{spec.plural}/{spec.group}'" in condition["expression"]
    assert listed == bool(spec.pod_spec_paths)


def test_every_webhook_of_the_default_config_has_one_compact_deterministic_condition():
    mutating, validating = build_webhook_configurations(service=("gpuguard", "gpuguard"))
    assert build_webhook_configurations(service=("gpuguard", "gpuguard")) == [mutating, validating]
    for (group, kinds), hook in zip(kind_groups(), mutating["webhooks"], strict=True):
        (condition,) = hook["matchConditions"]
        assert len(hook["matchConditions"]) <= mc.MAX_MATCH_CONDITIONS
        assert _QUALIFIED.match(condition["name"]) and len(condition["name"]) <= 63
        expression = condition["expression"]
        # The apiserver's cost grows with the expression's size, evaluated or not (bench/mcbench): each
        # webhook carries only its own kinds' paths, and no kind's paths appear in another group's.
        assert len(expression) < 6000, group
        for other in KINDS:
            if other.group != group and other.pod_spec_paths:
                assert f"'{other.plural}/{other.group}'" not in expression
        if any(k.pod_spec_paths for k in kinds):
            assert expression.count(".startsWith('nvidia.com/mig-')") == 1, "the accelerator test is written once"
            # Exact names and prefixes need no regex; the open-world test runs its regexes only on vendor names none
            # of them matched, after its cheapest test (a CPU pod's cpu and memory have no '/').
            assert expression.count(".matches(") == 1 and expression.count("r.contains('/') && (r in [") == 1
            for fragment in ("oldObject", "resourceClaims", "initContainers", "'inference-critical'"):
                assert fragment in expression
    core = mutating["webhooks"][0]["matchConditions"][0]["expression"]
    assert "?" + " [" not in core and "rk in" not in core, "one kind: its pod spec is tested directly"
    kserve = next(h for h in mutating["webhooks"] if h["name"].startswith("serving.kserve.io."))
    assert "'inferenceservices'" not in kserve["matchConditions"][0]["expression"], "InferenceServices always sent"


def test_pod_spec_lists_follow_the_pattern():
    assert mc.pod_specs("o", ("spec",)) == "[o.?spec.orValue(null)]"
    assert mc.pod_specs("o", ("spec", "tasks", "[]", "template", "spec")) == (
        "o.?spec.?tasks.orValue([]).map(x, x.?template.?spec.orValue(null))")
    assert mc.pod_specs("o", ("spec", "tfReplicaSpecs", "{}", "template", "spec")) == (
        "o.?spec.?tfReplicaSpecs.orValue({}).map(k, o.spec.tfReplicaSpecs[k].?template.?spec.orValue(null))")


def test_both_webhooks_of_a_group_carry_the_same_conditions():
    mutating, validating = build_webhook_configurations(service=("gpuguard", "gpuguard"))
    for mutate, validate in zip(mutating["webhooks"], validating["webhooks"][:-1], strict=True):
        assert mutate["matchConditions"] == validate["matchConditions"] and mutate["rules"] == validate["rules"]
        assert mutate["failurePolicy"] == "Fail"
    assert "matchConditions" not in validating["webhooks"][-1]  # scale.gpuguard.io: every request is a Scale


def test_filters_follow_the_config():
    assert filters_for(None).scope.priority_classes == frozenset({"inference-critical"})


def test_accelerator_globs_become_the_cheapest_test_that_matches_them():
    test = mc.accelerator_test(["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-*", "gpu.intel.com/*"], "r")
    assert test == ("r in ['nvidia.com/gpu', 'amd.com/gpu'] || r.startsWith('nvidia.com/mig-') || "
                    "r.startsWith('gpu.intel.com/')")
    # Only globs with a wildcard elsewhere than at the end need a regex, anchored and escaped.
    other = mc.accelerator_test(["nvidia.com/gpu", "vendor.example/*-gpu", "x?.io/tpu"], "r")
    assert other.startswith("r in ['nvidia.com/gpu'] || r.matches(")
    regex = re.compile(other.split("matches('")[1].split("')")[0].replace("\\\\", "\\"))
    assert regex.match("vendor.example/big-gpu") and regex.match("xy.io/tpu")
    assert not regex.match("vendor.example/gpu") and not regex.match("nvidia.com/gpu")
    assert mc.accelerator_test([], "r") == "false"


def test_default_config_needs_only_reserved_priority_classes_of_cpu_objects():
    scope = mc.cpu_scope(load_config(None))
    assert not scope.everything and scope.priority_classes == frozenset({"inference-critical"})


@pytest.mark.parametrize("policies", [
    "default-resources: {applyToNonGpuPods: true}",
    "job-ttl: {gpuOnly: false}",
    "priority-class: {gpuOnly: false}",
    "gpu-node-affinity: {keepNonGpuPodsOff: true}",
])
def test_a_policy_configured_for_cpu_objects_removes_the_conditions(policies):
    config = parse_config_text(HEADER + "policies:\n  " + policies + "\n", "c.yaml")
    scope = mc.cpu_scope(config)
    assert scope.everything and scope.reason
    assert mc.build_match_conditions(("nvidia.com/gpu",), scope) == []


def test_a_profile_counts_too():
    text = HEADER + ("profiles:\n- name: batch\n  match: {namespaces: [etl]}\n  policies:\n"
                     "    job-ttl: {gpuOnly: false}\n")
    assert mc.cpu_scope(parse_config_text(text, "c.yaml")).everything


@pytest.mark.parametrize("policy_id", list(REGISTRY))
def test_every_shipped_policy_says_which_cpu_objects_it_needs(policy_id):
    """None relies on the default (every object), which would turn the conditions off for every config."""
    assert REGISTRY[policy_id].cpu_scope is not any_cpu_object


def test_a_policy_that_does_not_say_keeps_every_object_sent():
    """A new policy left without ``cpu_scope`` may act on anything: the conditions go, nothing is missed."""
    made_up = ValidatingPolicy(id="made-up", title="Made up", settings_model=PolicySettings, run=lambda view, s: (),
                               description="", rationale="")
    config = load_config(None)
    with_it = replace(config.policies, validating=(*config.policies.validating, (made_up, PolicySettings())))
    scope = mc.cpu_scope(SimpleNamespace(policies=with_it, profiles=()))
    assert scope.everything and scope.reason.startswith("made-up may act on CPU objects")
    assert mc.build_match_conditions(("nvidia.com/gpu",), scope) == []


def test_priority_abuse_sends_cpu_objects_using_its_reserved_classes():
    text = HEADER + "policies:\n  priority-abuse: {reserved: {serve-first: [inference]}}\n"
    config = parse_config_text(text, "c.yaml")
    scope = mc.cpu_scope(config)
    assert not scope.everything and scope.priority_classes == frozenset({"serve-first"})
    (condition,) = mc.build_match_conditions(("nvidia.com/gpu",), scope)
    # In pod templates and where Kubeflow (runPolicy) and Volcano (spec) keep one.
    assert condition["expression"].count("in ['serve-first']") == 3
    assert "o.?spec.?runPolicy.?schedulingPolicy.?priorityClass.orValue('')" in condition["expression"]


def test_cli_says_why_it_emits_no_conditions(tmp_path):
    from tests.support.server import run_cli

    config = tmp_path / "config.yaml"
    config.write_text(HEADER + "policies:\n  job-ttl: {gpuOnly: false}\n")
    result = run_cli("webhook-config", "--service", "gpuguard/gpuguard", "--config", str(config))
    # Only the accelerator filter goes; controllers' and finalizer-only updates are still kept away.
    assert result.returncode == 0 and "resourceClaims" not in result.stdout
    assert "system:serviceaccount:kube-system:job-controller" in result.stdout
    assert result.stderr.strip() == ("gpuguard: note: no accelerator matchConditions, every intercepted object "
                                     "reaches the webhook: job-ttl is configured to act on CPU objects")
    shipped = run_cli("webhook-config", "--service", "gpuguard/gpuguard")
    assert shipped.returncode == 0 and "matchConditions" in shipped.stdout and shipped.stderr == ""


NAMES = ["nvidia.com/gpu", "acme.ai/npu", "huawei.com/Ascend910B", "example.com/accel", "cpu", "memory",
         "hugepages-2Mi", "ephemeral-storage", "kubernetes.io/batch", "foo.kubernetes.io/x", "k8s.io/thing",
         "rdma/hca_shared_devices_a", "nvidia.com/rdma_shared_device_a", "intel.com/intel_sriov_netdevice",
         "vpc.amazonaws.com/pod-eni", "vpc.amazonaws.com/efa", "smarter-devices/fuse", "Intel.com/SGX_epc",
         "gpu.intel.com/millicores", "gpu.intel.com/i915", "nodomain/device", "acme.example/", "qat.intel.com/generic",
         "x.lab1/probe", "x.lab12/probe"]


def _cel_matches(test: str, name: str) -> bool:
    """The open-world test evaluated as CEL would: read back into Python (``matches`` is RE2's search; ``in``,
    ``contains``, ``startsWith`` and ``endsWith`` are string tests; ``&&``, ``||`` and ``!`` as in Python)."""
    python = test.replace("&&", " and ").replace("||", " or ").replace("!(", " not (")
    python = re.sub(r"r\.matches\(('(?:[^'\\]|\\.)*')\)", r"(re.search(\1, r) is not None)", python)
    python = re.sub(r"r\.contains\(", "_contains(r, ", python)
    python = re.sub(r"r\.startsWith\(", "r.startswith(", python)
    python = re.sub(r"r\.endsWith\(", "r.endswith(", python)
    return "/" in name and bool(eval(python, {"re": re, "_contains": str.__contains__, "r": name}))  # noqa: S307


@pytest.mark.parametrize("name", NAMES)
def test_the_open_world_test_agrees_with_what_may_be_an_accelerator(name: str) -> None:
    from gpuguard.workloads.accelerators import NOT_ACCELERATORS, may_be_accelerator

    test = mc.may_be_accelerator_test(NOT_ACCELERATORS + ("acme.ai/*", "*.lab?/probe"), "r")
    assert ".matches(" in test and "!(" in test
    sent, counted = _cel_matches(test, name), may_be_accelerator(name, ("acme.ai/*", "*.lab?/probe"))
    if name == name.lower():
        assert sent == counted
    else:  # the list is matched as written: a name in other case is sent (a review, never a skipped judgement)
        assert sent or not counted


def test_learned_resources_reach_the_webhook_unless_learning_is_off() -> None:
    learning = mc.filters_from(load_config(None))
    assert learning.open_world is not None and "*rdma*" in learning.open_world
    off = mc.filters_from(parse_config_text("kind: GpuguardConfig\ninventory: {learnAccelerators: false}\n"))
    assert off.open_world is None
    (condition,) = off.conditions_for([k for k in KINDS if k.kind == "Job"])
    assert ".matches(" not in condition["expression"]
