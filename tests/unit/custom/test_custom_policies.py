"""customPolicies: compile errors at load, evaluation errors as the rule's own finding, every
scope and variable, the Kubernetes quantity helpers, matching, actions and profiles.

Every test goes through the real config loader and the real engine (no mocks): what an admin
writes in a GpuguardConfig is what is tested.
"""

from __future__ import annotations

import textwrap

import pytest

from gpuguard.webhook.config import ConfigError, parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads import kinds
from tests.support.builders import (
    ADAPTED_KINDS,
    ALL_KINDS,
    RUNTIME_KINDS,
    bare_pod_spec,
    cpu_container,
    make,
    runtime_for,
    template_specs,
)

HEAD = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
# Built-in policies off, so that a test sees custom findings only.
ALL_OFF = "policies:\n" + "".join(f"  {pid}: {{action: 'off'}}\n" for pid in __import__("policies").REGISTRY)


def config(rules: str, extra: str = "", builtins: bool = False) -> str:
    return HEAD + ("" if builtins else ALL_OFF) + extra + "customPolicies:\n" + textwrap.indent(
        textwrap.dedent(rules).strip("\n") + "\n", "  ")


def engine(rules: str, extra: str = "", builtins: bool = False) -> Engine:
    return Engine(parse_config_text(config(rules, extra, builtins), "cfg.yaml"))


def refused(rules: str, extra: str = "") -> str:
    with pytest.raises(ConfigError) as info:
        parse_config_text(config(rules, extra), "cfg.yaml")
    return str(info.value)


def run(eng: Engine, obj: dict, **ctx) -> list[tuple[str, str, str, str]]:
    ctx.setdefault("namespace", "ml")
    decision = eng.evaluate(obj, RequestContext(**ctx))
    assert decision.error is None, decision.error
    return [(v.policy, v.verdict, v.path, v.message) for v in decision.violations]


def rule(expression: str, scope: str = "podTemplate", **fields: str) -> str:
    extra = "".join(f"  {k}: {v}\n" for k, v in fields.items())
    return f"- id: r\n  scope: {scope}\n{extra}  validations:\n    - expression: {expression!r}\n      message: bad\n"


GPU_JOB = make("Job", bare_pod_spec(2), replicas=3)


# ---------------------------------------------------------------- compile errors at load


def test_syntax_error_is_refused_with_file_line_and_cel_position():
    message = refused("""
        - id: r
          validations:
            - expression: "true"
            - expression: "podSpec.containers.all(c, c.image.startsWith('x')"
        """)
    # line 4 of the file is the rule's "- id", the second expression is on its line 7 (HEAD + ALL_OFF above)
    line = (HEAD + ALL_OFF).count("\n") + 5
    assert message.startswith(f"cfg.yaml:{line}: customPolicies[0].validations[1].expression: CEL error at 1:50:")
    assert "Syntax error" in message and "^" in message


def test_unknown_variable_is_refused_and_the_scope_variables_are_listed():
    message = refused(rule("spec.containers.size() > 0"))
    assert "undeclared reference to 'spec" in message
    assert "podTemplate scope variables: object, oldObject, request" in message


def test_pod_spec_is_unknown_in_object_scope():
    message = refused(rule("podSpec.containers.size() > 0", scope="object"))
    assert "undeclared reference to 'podSpec" in message and "object scope variables" in message


def test_a_non_bool_expression_is_refused():
    assert "evaluates to int, it must evaluate to bool" in refused(rule("size(podSpec.containers)"))


def test_a_non_string_message_expression_is_refused():
    message = refused("""
        - id: r
          validations:
            - expression: "true"
              messageExpression: "1 + 1"
        """)
    assert "validations[0].messageExpression: the expression evaluates to int, it must evaluate to string" in message


def test_bad_match_condition_and_variable_are_refused():
    assert "matchConditions[0].expression: CEL error" in refused("""
        - id: r
          matchConditions: [{name: gpu, expression: "workload.acceleratorsTotal >"}]
          validations: [{expression: "true"}]
        """)
    assert "variables[0].expression: CEL error" in refused("""
        - id: r
          variables: [{name: x, expression: "nope("}]
          validations: [{expression: "true"}]
        """)


def test_unknown_kind_duplicate_and_builtin_ids_and_unknown_keys_are_refused():
    assert "unknown kind 'PyTorchJobs'" in refused(rule("true", match="{kinds: [PyTorchJobs]}"))
    assert "duplicate id 'r'" in refused(rule("true") + rule("true"))
    assert "'job-ttl' is a built-in policy" in refused(rule("true").replace("id: r", "id: job-ttl"))
    message = refused(rule("true", expresion="'typo'"))
    assert "customPolicies.0.expresion: unknown key" in message and message.startswith("cfg.yaml:")
    assert "customPolicies.0.id" in refused(rule("true").replace("id: r", "id: Not_Kebab"))


def test_a_profile_may_set_only_the_action_of_a_custom_rule():
    message = refused(rule("true"), extra="profiles:\n  - name: p\n    match: {namespaces: [x]}\n"
                                          "    policies:\n      r: {scope: object}\n")
    assert "custom policy 'r': only `action` can be set here" in message


# ---------------------------------------------------------------- evaluation errors


def test_an_evaluation_error_is_the_rules_finding_at_its_action_not_an_engine_failure():
    eng = engine(rule("podSpec.nope == 1"))
    decision = eng.evaluate(GPU_JOB, RequestContext(namespace="ml"))
    assert decision.error is None and not decision.allowed
    [v] = decision.violations
    assert (v.policy, v.verdict, v.path) == ("r", "deny", "spec.template.spec")
    assert "could not be evaluated" in v.message and "nope" in v.message


def test_failure_policy_ignore_reports_the_error_as_audit_and_allows():
    decision = engine(rule("podSpec.nope == 1", failurePolicy="Ignore")).evaluate(GPU_JOB, RequestContext())
    assert decision.allowed and [v.verdict for v in decision.violations] == ["audit"]


def test_a_dyn_result_that_is_not_bool_is_an_error_of_the_rule():
    # `object.metadata.name` type-checks as dyn; at run time it is a string.
    [(policy, verdict, _, message)] = run(engine(rule("object.metadata.name", scope="object")), GPU_JOB)
    assert (policy, verdict) == ("r", "deny") and "evaluated to str, not bool" in message


def test_a_failing_match_condition_is_the_rules_error_too():
    eng = engine("""
        - id: r
          failurePolicy: Fail
          action: warn
          matchConditions: [{name: broken, expression: "object.spec.nope > 0"}]
          validations: [{expression: "false"}]
        """)
    [(policy, verdict, _, message)] = run(eng, GPU_JOB)
    assert (policy, verdict) == ("r", "warn") and "matchConditions broken" in message


def test_a_failing_message_expression_falls_back_to_the_message():
    eng = engine("""
        - id: r
          validations:
            - expression: "false"
              messageExpression: "'x' + podSpec.nope"
              message: static message
        """)
    assert [m for *_, m in run(eng, GPU_JOB)] == ["static message"]


def test_no_message_reads_like_vap():
    eng = engine("- id: r\n  validations: [{expression: 'podSpec.containers.size() > 5'}]")
    assert [m for *_, m in run(eng, GPU_JOB)] == ["failed expression: podSpec.containers.size() > 5"]


# ---------------------------------------------------------------- scopes


@pytest.mark.parametrize("kind", [*ALL_KINDS, *ADAPTED_KINDS])
def test_a_pod_template_rule_runs_on_every_template_of_every_kind(kind):
    obj = make(kind, bare_pod_spec(1))
    eng = engine(rule("podSpec.containers.all(c, c.image.startsWith('registry.corp/'))"))
    found = run(eng, obj)
    spec = kinds.lookup(obj["apiVersion"], obj["kind"])
    expected_paths = sorted({".".join(str(p) for p in ref.spec_path) for ref in spec.locate(obj)})
    assert len(found) == len(template_specs(obj)) >= 1
    assert all(f[:2] == ("r", "deny") for f in found)
    # paths are dotted (list indices in brackets); compare without them
    assert sorted(p.replace("[", ".").replace("]", "") for _, _, p, _ in found) == expected_paths


def test_kinds_in_the_fixtures_cover_the_kind_table():
    """The parametrized test above must cover every kind gpuguard knows."""
    table = {(k.group, k.kind) for k in kinds.KINDS if k.runtime is None}  # runtime kinds: the next test
    built = (make(k, bare_pod_spec()) for k in [*ALL_KINDS, *ADAPTED_KINDS])
    covered = {(kinds.group_of(o["apiVersion"]), o["kind"]) for o in built}
    assert covered == table


@pytest.mark.parametrize("name", RUNTIME_KINDS)
def test_a_kind_judged_through_its_runtime_gets_the_rule_on_the_runtimes_templates(name):
    """A TrainJob names its pod templates in a runtime: rules see the JobSet made from both."""
    from gpuguard.webhook.objects import StaticLookup

    obj = make(name, bare_pod_spec(1))
    ctx = RequestContext(namespace="ml", read_object=StaticLookup([runtime_for(name, bare_pod_spec(1))]))
    eng = engine(rule("podSpec.containers.all(c, c.image.startsWith('registry.corp/'))"))
    decision = eng.evaluate(obj, ctx)
    assert decision.error is None and not decision.allowed
    assert [v.policy for v in decision.violations] == ["r"]
    assert decision.violations[0].path.startswith("runtime ClusterTrainingRuntime torch: spec.replicatedJobs[0]")
    assert "match JobSet instead" in refused(rule("false", match=f"{{kinds: [{name}]}}"))


def test_object_scope_runs_once_and_points_at_field_path():
    eng = engine("""
        - id: team
          scope: object
          validations:
            - expression: "'team' in object.?metadata.?labels.orValue({})"
              message: GPU workloads carry a team label
              fieldPath: metadata.labels
        """)
    obj = make("PyTorchJob", bare_pod_spec(1), replicas=4)
    assert run(eng, obj) == [("team", "deny", "metadata.labels", "GPU workloads carry a team label")]
    obj["metadata"]["labels"] = {"team": "vision"}
    assert run(eng, obj) == []


def test_pod_template_field_path_is_under_the_template():
    eng = engine("""
        - id: r
          validations:
            - expression: "podSpec.containers[0].image.startsWith('registry.corp/')"
              fieldPath: containers[0].image
        """)
    [(_, _, path, _)] = run(eng, GPU_JOB)
    assert path == "spec.template.spec.containers[0].image"


# ---------------------------------------------------------------- every variable


def holds(expression: str, obj: dict = GPU_JOB, scope: str = "podTemplate", **ctx) -> bool:
    """Whether ``expression`` holds for ``obj`` (as the only custom rule)."""
    return run(engine(rule(expression, scope=scope)), obj, **ctx) == []


def test_template_variables_role_replicas_accelerators_path_and_metadata():
    obj = make("PyTorchJob", bare_pod_spec(2), replicas=4)
    eng = engine(rule("template.role == 'Master' || (template.replicas == 4 && template.acceleratorsPerPod == 2 "
                      "&& podMetadata.labels.app == 'x' && template.path.endsWith('Worker.template.spec'))"))
    assert run(eng, obj) == []
    eng = engine(rule("template.role == 'Master'"))
    assert [(p, path) for p, _, path, _ in run(eng, obj)] == [("r", "spec.pytorchReplicaSpecs.Worker.template.spec")]


def test_pod_metadata_is_empty_for_kinds_that_inline_a_pod_spec():
    assert holds("podMetadata == {}", make("InferenceService", bare_pod_spec(1)))


def test_workload_variables():
    obj = make("PyTorchJob", bare_pod_spec(2), replicas=3)
    assert holds("workload.kind == 'PyTorchJob' && workload.group == 'kubeflow.org' && workload.class == 'training' "
                 "&& workload.apiVersion == 'kubeflow.org/v1' && workload.name == 'w'", obj, scope="object")
    # Master 1 pod + 3 workers, 2 GPUs each
    assert holds("workload.acceleratorsPerPod == 2 && workload.acceleratorsTotal == 8 && workload.pods == 4 "
                 "&& workload.acceleratorsByResource['nvidia.com/gpu'] == 8", obj, scope="object")
    assert holds("workload.class == 'inference'", make("Deployment", bare_pod_spec(1)), scope="object")


def test_request_and_namespace_variables():
    ctx = {"operation": "CREATE", "namespace": "ml", "username": "alice", "groups": ("team-a", "system:authenticated"),
           "namespace_labels": {"tier": "gold"}}
    assert holds("request.operation == 'CREATE' && request.namespace == 'ml' && request.name == 'w' "
                 "&& request.userInfo.username == 'alice' && 'team-a' in request.userInfo.groups "
                 "&& request.kind.kind == 'Job' && request.kind.group == 'batch' && request.kind.version == 'v1' "
                 "&& namespaceObject.metadata.name == 'ml' && namespaceObject.metadata.labels.tier == 'gold'",
                 scope="object", **ctx)
    assert not holds("request.userInfo.username == 'bob'", scope="object", **ctx)


def test_old_object_is_null_on_create_and_the_stored_object_on_update():
    assert holds("oldObject == null", scope="object")
    old = make("Job", bare_pod_spec(2), replicas=1)
    eng = engine(rule("oldObject == null || object.spec.parallelism <= oldObject.spec.parallelism", scope="object"))
    decision = eng.evaluate(GPU_JOB, RequestContext(operation="UPDATE", namespace="ml", old_object=old, mutate=False))
    assert [v.policy for v in decision.denials] == ["r"]


def test_named_variables_like_vap():
    eng = engine("""
        - id: r
          variables:
            - {name: images, expression: "podSpec.containers.map(c, c.image)"}
            - {name: bad, expression: "variables.images.filter(i, !i.startsWith('registry.corp/'))"}
          validations:
            - expression: "size(variables.bad) == 0"
              messageExpression: "'images not from registry.corp: ' + variables.bad.join(', ')"
        """)
    assert [m for *_, m in run(eng, GPU_JOB)] == ["images not from registry.corp: ghcr.io/example/train:1"]


# ---------------------------------------------------------------- Kubernetes helpers


@pytest.mark.parametrize("expression", [
    "quantity('1') == quantity('1000m')",
    "quantity('64Gi').isGreaterThan(quantity('60G'))",
    "quantity('500m').isLessThan(quantity('1'))",
    "quantity('2Gi').compareTo(quantity('2048Mi')) == 0",
    "quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')",
    "quantity('3').sub(1) == quantity('2') && quantity('3').add(1).asInteger() == 4",
    "quantity('1.5').asApproximateFloat() == 1.5 && !quantity('1.5').isInteger() && quantity('2k').isInteger()",
    "quantity('-1').sign() == -1 && quantity('0').sign() == 0",
    "isQuantity('64Gi') && !isQuantity('64 gigs')",
    "quantity(2) == quantity('2')",
    "podSpec.containers.all(c, quantity(c.resources.limits['nvidia.com/gpu']).compareTo(quantity('8')) <= 0)",
    "'A-B'.lowerAscii() == 'a-b' && 'a,b'.split(',').size() == 2 && math.greatest([1, 3, 2]) == 3",
    "object.?metadata.?labels.?team.orValue('none') == 'none'",
])
def test_kubernetes_cel_helpers(expression):
    assert holds(expression)


def test_an_invalid_quantity_is_an_error_of_the_rule():
    [(_, _, _, message)] = run(engine(rule("quantity('lots').isGreaterThan(quantity('1'))")), GPU_JOB)
    assert "invalid quantity 'lots'" in message


def test_quantity_methods_are_type_checked():
    assert "no matching overload" in refused(rule("quantity('1').isGreaterThan(3)"))


# ---------------------------------------------------------------- matching


@pytest.mark.parametrize("match, obj, ns, labels, applies", [
    ("{kinds: [PyTorchJob]}", make("PyTorchJob", bare_pod_spec()), "ml", {}, True),
    ("{kinds: [PyTorchJob]}", GPU_JOB, "ml", {}, False),
    ("{kinds: [Job]}", make("VolcanoJob", bare_pod_spec()), "ml", {}, True),
    ("{kinds: [batch/Job]}", make("VolcanoJob", bare_pod_spec()), "ml", {}, False),
    ("{kinds: [batch.volcano.sh/Job]}", make("VolcanoJob", bare_pod_spec()), "ml", {}, True),
    ("{classes: [inference]}", GPU_JOB, "ml", {}, False),
    ("{classes: [inference]}", make("Deployment", bare_pod_spec()), "ml", {}, True),
    ("{namespaces: ['team-*']}", make("Job", bare_pod_spec(), namespace="team-a"), "team-a", {}, True),
    ("{namespaces: ['team-*']}", GPU_JOB, "ml", {}, False),
    ("{namespaceLabels: {tier: gold}}", GPU_JOB, "ml", {"tier": "gold"}, True),
    ("{namespaceLabels: {tier: gold}}", GPU_JOB, "ml", {"tier": "bronze"}, False),
    ("{kinds: [Job], classes: [training], namespaces: [ml]}", GPU_JOB, "ml", {}, True),
])
def test_match(match, obj, ns, labels, applies):
    found = run(engine(rule("false", scope="object", match=match)), obj, namespace=ns, namespace_labels=labels)
    assert bool(found) is applies


def test_match_conditions_select_gpu_workloads():
    eng = engine("""
        - id: r
          scope: object
          matchConditions: [{name: gpu, expression: "workload.acceleratorsTotal > 0"}]
          validations: [{expression: "false"}]
        """)
    assert run(eng, GPU_JOB)
    assert run(eng, make("Deployment", {"containers": [cpu_container()]})) == []


# ---------------------------------------------------------------- actions and profiles


@pytest.mark.parametrize("action, verdicts, allowed", [
    ("enforce", ["deny"], False), ("warn", ["warn"], True), ("audit", ["audit"], True), ("'off'", [], True),
    ("off", [], True),  # unquoted: YAML reads false, which means off
])
def test_actions(action, verdicts, allowed):
    decision = engine(rule("false", action=action)).evaluate(GPU_JOB, RequestContext(namespace="ml"))
    assert [v.verdict for v in decision.violations] == verdicts and decision.allowed is allowed


def test_profiles_override_a_custom_rules_action_like_a_builtin_policys():
    extra = ("profiles:\n"
             "  - name: sandbox\n    match: {namespaceLabels: {env: sandbox}}\n    policies: {r: {action: warn}}\n"
             "  - name: legacy\n    match: {namespaces: [legacy]}\n    policies: {r: {action: 'off'}}\n")
    eng = engine(rule("false"), extra=extra)
    assert [v for _, v, _, _ in run(eng, GPU_JOB)] == ["deny"]
    assert [v for _, v, _, _ in run(eng, GPU_JOB, namespace_labels={"env": "sandbox"})] == ["warn"]
    legacy = make("Job", bare_pod_spec(2), namespace="legacy")
    assert run(eng, legacy, namespace="legacy") == []


def test_the_base_policies_section_may_set_a_custom_action_too():
    text = config(rule("false")).replace("policies:\n", "policies:\n  r: {action: audit}\n", 1)
    eng = Engine(parse_config_text(text, "cfg.yaml"))
    assert [v for _, v, _, _ in run(eng, GPU_JOB)] == ["audit"]


def test_exempt_namespaces_skip_custom_rules():
    eng = engine(rule("false"), extra="exemptions: {namespaces: [kube-system]}\n")
    decision = eng.evaluate(make("Job", bare_pod_spec(), namespace="kube-system"), RequestContext())
    assert decision.skipped and not decision.violations


def test_update_denies_only_what_the_update_introduces():
    eng = engine(rule("podSpec.containers.all(c, c.image.startsWith('registry.corp/'))"))
    old = make("Job", bare_pod_spec(2))
    new = make("Job", bare_pod_spec(2))
    new["metadata"]["labels"] = {"touched": "yes"}
    decision = eng.evaluate(new, RequestContext(operation="UPDATE", namespace="ml", old_object=old, mutate=False))
    assert decision.allowed and decision.violations == []


def test_custom_and_builtin_findings_share_the_violation_shape():
    eng = engine(rule("false"), builtins=True)
    decision = eng.evaluate(GPU_JOB, RequestContext(namespace="ml"))
    entries = decision.result_entry()["violations"]
    custom = [e for e in entries if e["policy"] == "r"]
    builtin = [e for e in entries if e["policy"] != "r"]
    assert custom and builtin and {tuple(sorted(e)) for e in entries} == {tuple(sorted(custom[0]))}
    assert custom[0]["message"].startswith("[r] spec.template.spec (job): bad;")


def test_rules_that_read_namespace_labels_make_the_server_look_them_up():
    from gpuguard.webhook.server.namespaces import profiles_use_labels as _profiles_use_labels

    plain = parse_config_text(config(rule("true")), "cfg.yaml")
    by_match = parse_config_text(config(rule("true", match="{namespaceLabels: {tier: gold}}")), "cfg.yaml")
    by_variable = parse_config_text(config(rule("namespaceObject.metadata.labels.tier == 'gold'")), "cfg.yaml")
    assert not plain.custom.uses_namespace_labels and not _profiles_use_labels(plain)
    assert by_match.custom.uses_namespace_labels and _profiles_use_labels(by_match)
    assert by_variable.custom.uses_namespace_labels and _profiles_use_labels(by_variable)


def test_the_commented_example_in_the_shipped_config_compiles_and_works():
    from gpuguard.webhook.config import DEFAULT_CONFIG_PATH

    text = DEFAULT_CONFIG_PATH.read_text()
    example = text[text.index("# customPolicies:"):]
    uncommented = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in example.splitlines())
    eng = Engine(parse_config_text(HEAD + uncommented, "example"))
    assert {p for p, *_ in run(eng, GPU_JOB)} >= {"team-label", "gpu-registry"}
