"""matchConditions: derived from the kind table and the config, within the apiserver's limits.

Whether the apiserver accepts and evaluates them as intended is proven in
``tests/e2e/test_blast_radius_e2e.py``; here: every template path agrees with ``KindSpec.locate``,
which policies widen the conditions, and the limits.
"""

from __future__ import annotations

import re

import pytest

from gpuguard.webhook.cli import match_conditions as mc
from gpuguard.webhook.cli.webhook_config import build_webhook_configurations, match_conditions_for
from gpuguard.webhook.config import load_config, parse_config_text
from gpuguard.workloads.kinds import KINDS

HEADER = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
_QUALIFIED = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _probe(pattern: tuple[str, ...]) -> tuple[dict, tuple]:
    """An object with one pod spec at ``pattern`` (lists get one item, maps the key Worker), and its path."""
    root: dict = {}
    node: object = root
    path: tuple = ()
    for i, step in enumerate(pattern):
        last = i == len(pattern) - 1
        child: object = {"containers": []} if last else ([] if pattern[i + 1] == "[]" else {})
        if step == "[]":
            assert isinstance(node, list)
            node.append(child)
            path += (0,)
        else:
            key = "Worker" if step == "{}" else step
            assert isinstance(node, dict)
            node[key] = child
            path += (key,)
        node = child
    return root, path


@pytest.mark.parametrize("spec", KINDS, ids=lambda k: f"{k.group or 'core'}/{k.kind}")
def test_cel_template_paths_agree_with_the_kind_table(spec):
    patterns = mc.POD_SPEC_PATHS.get((spec.group, spec.kind))
    if patterns is None:
        assert (spec.group, spec.kind) in mc.ALWAYS_SENT, "a new kind needs its pod spec paths in POD_SPEC_PATHS"
        return
    obj: dict = {"apiVersion": f"{spec.group}/{spec.versions[0]}" if spec.group else "v1", "kind": spec.kind}
    expected = set()
    for pattern in patterns:
        probe, path = _probe(pattern)
        _merge(obj, probe)
        expected.add(path)
    assert {ref.spec_path for ref in spec.locate(obj)} == expected


def _merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into.setdefault(key, value)


def test_default_config_has_one_compact_deterministic_condition():
    conditions = match_conditions_for(None)
    assert len(conditions) == 1 <= mc.MAX_MATCH_CONDITIONS
    (condition,) = conditions
    assert _QUALIFIED.match(condition["name"]) and len(condition["name"]) <= 63
    assert conditions == match_conditions_for(None)
    expression = condition["expression"]
    # The apiserver's evaluation time grows with the expression's size (bench/apiserver.py): keep it small.
    assert len(expression) < 5000
    assert expression.count(".matches(") == 1, "the accelerator test is written once"
    for fragment in ("oldObject", "resourceClaims", "initContainers", "has(request.subResource)",
                     "'pods/'", "'jobs/batch.volcano.sh'", "'inference-critical'"):
        assert fragment in expression
    assert "'inferenceservices/serving.kserve.io'" not in expression, "InferenceServices are always sent"


def test_pod_spec_lists_follow_the_pattern():
    assert mc.pod_specs("o", ("spec",)) == "[o.?spec.orValue(null)]"
    assert mc.pod_specs("o", ("spec", "tasks", "[]", "template", "spec")) == (
        "o.?spec.?tasks.orValue([]).map(x, x.?template.?spec.orValue(null))")
    assert mc.pod_specs("o", ("spec", "tfReplicaSpecs", "{}", "template", "spec")) == (
        "o.?spec.?tfReplicaSpecs.orValue({}).map(k, o.spec.tfReplicaSpecs[k].?template.?spec.orValue(null))")


def test_both_webhooks_carry_the_conditions():
    mutating, validating = build_webhook_configurations(service=("gpuguard", "gpuguard"))
    assert mutating["webhooks"][0]["matchConditions"] == validating["webhooks"][0]["matchConditions"]
    assert mutating["webhooks"][0]["failurePolicy"] == "Fail"


def test_accelerator_globs_become_one_anchored_regex():
    test = mc.accelerator_test(["nvidia.com/gpu", "nvidia.com/mig-*", "gpu.intel.com/*"], "r")
    assert test == "r.matches('^(nvidia\\\\.com/gpu|nvidia\\\\.com/mig\\\\-.*|gpu\\\\.intel\\\\.com/.*)$')"
    regex = re.compile(test.split("'")[1].replace("\\\\", "\\"))
    assert regex.match("nvidia.com/mig-1g.5gb") and regex.match("nvidia.com/gpu")
    assert not regex.match("nvidia.com/gpux") and not regex.match("cpu")


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


def test_every_registered_policy_is_classified():
    from gpuguard.policies import REGISTRY

    known = mc.ACCELERATOR_ONLY | set(mc.CPU_SWITCHES) | {"priority-abuse"}
    assert set(REGISTRY) <= known, f"classify {sorted(set(REGISTRY) - known)} in webhook/cli/match_conditions.py"


def test_cli_says_why_it_emits_no_conditions(tmp_path):
    from tests.support.server import run_cli

    config = tmp_path / "config.yaml"
    config.write_text(HEADER + "policies:\n  job-ttl: {gpuOnly: false}\n")
    result = run_cli("webhook-config", "--service", "gpuguard/gpuguard", "--config", str(config))
    assert result.returncode == 0 and "matchConditions" not in result.stdout
    assert result.stderr.strip() == ("gpuguard: note: no matchConditions, every intercepted object reaches the "
                                     "webhook: job-ttl is configured to act on CPU objects")
    shipped = run_cli("webhook-config", "--service", "gpuguard/gpuguard")
    assert shipped.returncode == 0 and "matchConditions" in shipped.stdout and shipped.stderr == ""
