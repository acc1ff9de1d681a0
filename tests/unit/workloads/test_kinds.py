"""The kind table: every KindSpec has a test builder, and the facts policies, the webhook's matchConditions and the
trusted controllers read are where they belong."""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads import kinds
from gpuguard.workloads.controllers import DEFAULT_TRUSTED_CONTROLLERS, parse_group_kind
from tests.support.builders import (
    ADAPTED_KINDS,
    ALL_KINDS,
    BUILDER_NAMES,
    GANG_KINDS,
    RUNTIME_KINDS,
    has_builder,
    make,
    pvc_pod_spec,
    runtime_for,
)


@pytest.mark.parametrize("spec", kinds.KINDS, ids=lambda s: f"{s.kind}.{s.group or 'core'}")
def test_every_kind_has_a_builder_that_builds_that_kind(spec):
    name = BUILDER_NAMES[spec.api_group_kind]
    assert has_builder(name), f"add a builder for {name} to tests/support/builders.py:make"
    obj = make(name, pvc_pod_spec())
    assert kinds.lookup(obj["apiVersion"], obj["kind"]) is spec
    if spec.runtime is not None:  # its pod templates are in the runtime it names
        obj = spec.runtime.expand(obj, runtime_for(name, pvc_pod_spec()))
        spec = kinds.lookup(obj["apiVersion"], obj["kind"])
    assert list(spec.locate(obj)), f"{name}: the builder's object has no pod template the kind table finds"


def test_matrices_cover_every_kind_once():
    every = [*ALL_KINDS, *ADAPTED_KINDS]
    assert len(every) == len(set(every)) == len(kinds.KINDS) - len(RUNTIME_KINDS)


@pytest.mark.parametrize("name", RUNTIME_KINDS)
def test_runtime_kinds_are_judged_with_their_runtime_and_never_mutated(name):
    from gpuguard.webhook.objects import StaticLookup

    engine = Engine(parse_config_text("kind: GpuguardConfig\n"))
    obj = make(name, pvc_pod_spec(gpus=8), replicas=9)  # 9 nodes x 8 GPUs: over the 64 total
    ctx = RequestContext(namespace="ml", read_object=StaticLookup([runtime_for(name, pvc_pod_spec(gpus=8))]))
    decision = engine.evaluate(obj, ctx)
    assert decision.gpus == 72 and decision.patch == []
    assert "gpu-request-shape" in {v.policy for v in decision.denials}
    assert all(v.path.startswith("runtime ClusterTrainingRuntime torch: ") for v in decision.violations)
    # Without its runtime it can't be judged: refused (failureMode closed), saying what is missing and what to do.
    missing = engine.evaluate(obj, RequestContext(namespace="ml"))
    assert missing.error and "not found" in missing.error and not missing.allowed
    assert "create the ClusterTrainingRuntime first, then the TrainJob" in missing.error
    opened = Engine(parse_config_text("kind: GpuguardConfig\nfailureMode: open\n"))
    assert opened.evaluate(obj, RequestContext(namespace="ml")).allowed
    # The mutating webhook leaves it alone: its JobSet is mutated when the Trainer creates it.
    assert engine.evaluate(obj, RequestContext(namespace="ml", validate=False)).patch == []


def test_kind_facts_policies_rely_on():
    by_name = {BUILDER_NAMES[k.api_group_kind]: k for k in kinds.KINDS}
    assert [n for n, k in by_name.items() if k.is_pod] == ["Pod"]
    assert by_name["VolcanoJob"].gang.own_scheduler == ("spec", "schedulerName")
    assert by_name["PyTorchJob"].gang.operator_policy == ("spec", "runPolicy", "schedulingPolicy")
    assert set(GANG_KINDS) == {"Job", "CronJob", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob",
                               "JAXJob", "JobSet", "VolcanoJob"}
    assert {n for n, k in by_name.items() if k.validated_by_apiserver} == {
        "Pod", "Job", "CronJob", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"}


def test_gang_kinds_setting_tells_the_two_jobs_apart():
    """``kinds: [Job.batch]`` checks the batch Job only; Volcano's Job shares the name but not the group."""
    engine = Engine(parse_config_text("kind: GpuguardConfig\npolicies:\n  gang-scheduling: {kinds: [Job.batch]}\n"))
    ctx = RequestContext(mutate=False)
    batch = engine.evaluate(make("Job", pvc_pod_spec(), replicas=4), ctx)
    volcano = make("VolcanoJob", pvc_pod_spec(), replicas=4)
    volcano["spec"]["schedulerName"] = "default-scheduler"
    assert [v.policy for v in batch.violations if v.policy == "gang-scheduling"] == ["gang-scheduling"]
    assert not [v for v in engine.evaluate(volcano, ctx).violations if v.policy == "gang-scheduling"]
    default = Engine(parse_config_text("kind: GpuguardConfig\n"))
    assert [v for v in default.evaluate(volcano, ctx).violations if v.policy == "gang-scheduling"]


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


def _merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into.setdefault(key, value)


@pytest.mark.parametrize("spec", [k for k in kinds.KINDS if k.pod_spec_paths],
                         ids=lambda s: f"{s.kind}.{s.group or 'core'}")
def test_pod_spec_paths_agree_with_locate(spec):
    """The patterns the webhook's CEL follows find exactly the pod specs ``locate`` finds."""
    obj: dict = {"apiVersion": f"{spec.group}/{spec.versions[0]}" if spec.group else "v1", "kind": spec.kind}
    expected = set()
    for pattern in spec.pod_spec_paths:
        assert sum(step in ("[]", "{}") for step in pattern) <= 1, f"{pattern}: CEL follows one wildcard at most"
        probe, path = _probe(pattern)
        _merge(obj, probe)
        expected.add(path)
    assert {ref.spec_path for ref in spec.locate(obj)} == expected


def test_kinds_cel_cannot_follow_say_so_by_leaving_pod_spec_paths_empty():
    """Containers under framework keys, pod-set paths in data, templates in another object, GPUs in Spark
    fields, Argo container templates, the serving operators' GPU shorthands and inline containers: these kinds are
    always sent to the webhook."""
    assert {BUILDER_NAMES[k.api_group_kind] for k in kinds.KINDS if not k.pod_spec_paths} == {
        "InferenceService", "AppWrapper", "TrainJob", "SparkApplication", "ScheduledSparkApplication", "Workflow",
        "WorkflowTemplate", "CronWorkflow", "DynamoGraphDeployment", "DynamoComponentDeployment", "NIMService",
        "VLLMRuntime", "Model"}


def test_controller_edges_name_kinds_of_the_table():
    """Owners and created kinds are written in the config's GroupKind notation: a typo would trust nothing.  An
    owner outside the table (Knative's Revision, which holds no template gpuguard judges) is of the family's own
    API group."""
    for spec in kinds.KINDS:
        for made in spec.controllers:
            for name in made.kinds:
                assert kinds.lookup_group_kind(*parse_group_kind(name)) is not None, f"{spec.kind}: {name}"
            if made.owner is not None:
                group, _ = parse_group_kind(made.owner)
                assert kinds.lookup_group_kind(*parse_group_kind(made.owner)) is not None or group == spec.group, \
                    f"{spec.kind}: {made.owner}"


def test_one_operator_per_controller_name():
    """Kinds of one family share their operator's identity: two entries of one name would be merged blindly."""
    operators: dict[str, object] = {}
    for spec in kinds.KINDS:
        for made in spec.controllers:
            assert operators.setdefault(made.operator.name, made.operator) == made.operator, made.operator.name


def test_default_trusted_controllers_are_derived_from_the_kind_table():
    assert DEFAULT_TRUSTED_CONTROLLERS["deployment-controller"] == {
        "users": ["system:serviceaccount:kube-system:deployment-controller", "system:kube-controller-manager"],
        "creates": [{"owner": "apps/Deployment", "kind": "apps/ReplicaSet"}]}
    assert DEFAULT_TRUSTED_CONTROLLERS["kubeflow-trainer"]["creates"] == [
        {"owner": "trainer.kubeflow.org/TrainJob", "kind": "jobset.x-k8s.io/JobSet", "mutate": True}]
    assert {"owner": "Pod", "kind": "apps/StatefulSet"} in DEFAULT_TRUSTED_CONTROLLERS["lws"]["creates"]
    assert DEFAULT_TRUSTED_CONTROLLERS["mpi-operator"]["creates"] == [
        {"owner": "kubeflow.org/MPIJob", "kind": "Pod"}, {"owner": "kubeflow.org/MPIJob", "kind": "batch/Job"}]
    edges = sum(len(entry["creates"]) for entry in DEFAULT_TRUSTED_CONTROLLERS.values())
    assert edges == sum(len(made.kinds) for spec in kinds.KINDS for made in spec.controllers)
