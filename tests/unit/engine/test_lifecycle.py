"""The rules of issue "safe in a live cluster": trust by identity, UPDATE, immutable fields, grandfathering.

Each case runs the engine directly, as the webhook does; ``tests/e2e/test_lifecycle_e2e.py`` proves
the same rules through a real kube-apiserver and kube-controller-manager.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from gpuguard.webhook.config import ConfigError, load_config, parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION, Engine
from gpuguard.webhook.engine.update import subject
from gpuguard.workloads.controllers import DEFAULT_TRUSTED_CONTROLLERS, api_group, parse_group_kind
from gpuguard.workloads.kinds import KINDS, lookup_group_kind
from tests.support.builders import BUILDER_NAMES, bare_pod_spec, cpu_container, gpu_container, make, pvc_pod_spec
from tests.support.paths import REPO

ENGINE = Engine(load_config())
ALICE = RequestContext(username="alice", groups=("system:authenticated",), namespace="ml")
# A namespace whose profile grants the privileged classes (a serving team's, a notebook namespace).
SERVING = Engine(parse_config_text("kind: GpuguardConfig\npolicies:\n"
                                   "  workload-class: {allowEscalationTo: [inference, notebook]}\n"))
GVK = {(k.group, k.kind): (f"{k.group}/{k.versions[0]}" if k.group else k.versions[0]) for k in KINDS}


def applies(decision) -> dict:
    """The JSON patch applied to the original with ``jsonpatch`` gives exactly the mutated object."""
    patched = jsonpatch.apply_patch(copy.deepcopy(decision.original), decision.patch)
    assert patched == decision.mutated
    return patched


def api_version(group_kind: tuple[str, str]) -> str:
    return GVK.get(group_kind) or (f"{group_kind[0]}/v1" if group_kind[0] else "v1")


def risky_object(group_kind: tuple[str, str]) -> dict:
    """An object of ``group_kind`` that gpuguard would mutate and deny."""
    group, kind = group_kind
    spec = lookup_group_kind(group, kind)
    if spec is None:  # a kind gpuguard does not check (TrainJob): any object will do
        return {"apiVersion": api_version(group_kind), "kind": kind, "metadata": {"name": "x", "namespace": "ml"}}
    # Over the 8-per-node cap: denied on every kind.
    obj = make(BUILDER_NAMES[spec.api_group_kind], bare_pod_spec(9), replicas=2)
    obj["apiVersion"] = api_version(group_kind)
    return obj


def owned(obj: dict, owner: tuple[str, str], controller: bool = True) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version(owner), "kind": owner[1], "name": "parent",
                                           "uid": "u-1", "controller": controller}]
    return obj


EDGES = [(name, user, parse_group_kind(edge["owner"]), parse_group_kind(edge["kind"]))
         for name, entry in DEFAULT_TRUSTED_CONTROLLERS.items() for user in entry["users"] for edge in entry["creates"]]


@pytest.mark.parametrize(("controller", "user", "owner", "child"), EDGES,
                         ids=[f"{e[0]}:{e[1].rsplit(':', 1)[-1]}:{e[2][1]}->{e[3][1]}" for e in EDGES])
def test_every_shipped_controller_identity_is_trusted_for_what_it_creates(controller, user, owner, child):
    obj = owned(risky_object(child), owner)
    decision = ENGINE.evaluate(obj, RequestContext(username=user, namespace="ml"))
    if lookup_group_kind(*child) is None:
        assert decision.skipped and "not a workload" in decision.skipped
        return
    mutates = any(e.get("mutate") and parse_group_kind(e["kind"]) == child and parse_group_kind(e["owner"]) == owner
                  for e in DEFAULT_TRUSTED_CONTROLLERS[controller]["creates"])
    if mutates:  # derived from a runtime: the first object with pod templates, mutated and judged in full
        assert decision.patch and decision.skipped is None
        assert not decision.allowed and decision.denials
    else:
        assert decision.allowed and decision.violations == []
        assert decision.patch == [] and controller in decision.skipped
    # The same object from an ordinary user is mutated and judged like any other.
    forged = ENGINE.evaluate(obj, ALICE)
    assert forged.mutated_by and not forged.allowed


@pytest.mark.parametrize(("controller", "user", "owner", "child"), EDGES[:8])
def test_right_identity_with_a_wrong_owner_kind_is_checked(controller, user, owner, child):
    if lookup_group_kind(*child) is None:
        pytest.fail("the first edges are kube-controller-manager's, whose children gpuguard checks")
    obj = owned(risky_object(child), ("", "ConfigMap"))
    decision = ENGINE.evaluate(obj, RequestContext(username=user, namespace="ml"))
    assert decision.skipped is None and not decision.allowed


def test_controller_false_reference_is_not_a_controller():
    obj = owned(risky_object(("", "Pod")), ("batch", "Job"), controller=False)
    user = "system:serviceaccount:kube-system:job-controller"
    assert not ENGINE.evaluate(obj, RequestContext(username=user)).allowed


def test_forged_deployment_owner_and_notebook_label_choose_no_class():
    pod = owned(make("Pod", bare_pod_spec(16)), ("apps", "Deployment"))
    pod["metadata"]["labels"] = {"notebook-name": "mine"}
    pod["spec"]["priorityClassName"] = "inference-critical"
    decision = ENGINE.evaluate(pod, ALICE)
    assert decision.workload_class == "training"
    assert {"priority-abuse", "gpu-request-shape"} <= {v.policy for v in decision.denials}
    # A bare Pod's class is only read from what it runs: its checkpoint finding warns.
    assert "checkpoint-volume" in {v.policy for v in decision.warnings}
    # Declaring the class by label is the user's way to correct it, but it cannot buy inference priority, nor
    # drop the checks of a pod that runs to completion.
    pod["metadata"]["labels"]["gpuguard.io/workload-class"] = "inference"
    declared = ENGINE.evaluate(pod, ALICE)
    assert declared.workload_class == "training"
    assert "priority-abuse" in {v.policy for v in declared.denials}
    assert "workload-class" in {v.policy for v in declared.warnings}


def test_parent_class_follows_the_trusted_owner():
    sts = owned(make("StatefulSet", pvc_pod_spec()), ("kubeflow.org", "Notebook"))
    user = "system:serviceaccount:kubeflow:notebook-controller-service-account"
    assert SERVING.evaluate(sts, RequestContext(username=user)).workload_class == "notebook"
    # The same StatefulSet from a user is an inference StatefulSet, label or no label.
    sts["spec"]["template"]["metadata"]["labels"]["notebook-name"] = "x"
    assert SERVING.evaluate(sts, ALICE).workload_class == "inference"
    # Where no profile grants preemption the classes are the same: a class is what the work is, not a grant.
    assert ENGINE.evaluate(sts, RequestContext(username=user)).workload_class == "notebook"
    assert ENGINE.evaluate(sts, ALICE).workload_class == "inference"


def test_trust_off_validates_controller_objects_but_never_mutates_them():
    engine = Engine(parse_config_text("kind: GpuguardConfig\ntrustControllerPods: false\n"))
    pod = owned(make("Pod", bare_pod_spec()), ("batch", "Job"))
    user = "system:serviceaccount:kube-system:job-controller"
    decision = engine.evaluate(pod, RequestContext(username=user))
    assert decision.patch == [] and not decision.allowed


def test_config_overrides_and_adds_controllers_by_name():
    engine = Engine(parse_config_text(
        "kind: GpuguardConfig\ntrustedControllers:\n"
        "  job-controller: {users: []}\n"
        "  my-operator:\n"
        "    serviceAccounts: [ops/my-operator]\n"
        "    creates: [{owner: example.com/Trainer, kind: batch/Job}]\n"))
    pod = owned(make("Pod", bare_pod_spec(9)), ("batch", "Job"))
    assert not engine.evaluate(pod, RequestContext(username=KCM_JOB)).allowed
    job = owned(make("Job", bare_pod_spec()), ("example.com", "Trainer"))
    decision = engine.evaluate(job, RequestContext(username="system:serviceaccount:ops:my-operator"))
    assert decision.allowed and decision.patch == [] and "my-operator" in decision.skipped


KCM_JOB = "system:serviceaccount:kube-system:job-controller"


def test_bad_controller_entry_is_refused_with_its_line():
    text = "kind: GpuguardConfig\ntrustedControllers:\n  x:\n    creates: [{owner: 'apps/', kind: Pod}]\n"
    with pytest.raises(ConfigError, match=r"<config>:4: .*GroupKind"):
        parse_config_text(text)


def test_request_namespace_decides_exemption_not_the_object():
    pod = make("Pod", bare_pod_spec(9), namespace="kube-system")
    decision = ENGINE.evaluate(pod, RequestContext(username="alice", namespace="ml"))
    assert decision.skipped is None and not decision.allowed
    assert decision.namespace == "ml"


# ---------------------------------------------------------------- UPDATE

def created(obj: dict) -> dict:
    """What the apiserver stored after gpuguard mutated the CREATE."""
    return ENGINE.evaluate(obj, ALICE).mutated


def update(new: dict, old: dict, **kw):
    decision = ENGINE.evaluate(new, RequestContext(operation="UPDATE", old_object=old, username="alice",
                                                   namespace="ml", **kw))
    applies(decision)
    return decision


@pytest.mark.parametrize("own", [False, True], ids=["plain", "own-tolerations-and-terms"])
def test_reapplied_job_keeps_its_stored_template(own):
    spec = pvc_pod_spec()
    if own:
        spec["tolerations"] = [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    manifest = make("Job", spec)
    stored = created(manifest)
    # kubectl apply replaces lists it owns: the template comes back as the manifest wrote it.
    incoming = copy.deepcopy(stored)
    incoming["spec"]["template"]["spec"]["tolerations"] = copy.deepcopy(spec.get("tolerations", []))
    if own:
        incoming["spec"]["template"]["spec"]["affinity"] = copy.deepcopy(spec["affinity"])
    decision = update(incoming, stored)
    assert decision.allowed
    assert decision.mutated["spec"]["template"] == stored["spec"]["template"]


def test_real_change_to_an_immutable_template_is_passed_on_unmutated():
    stored = created(make("Job", pvc_pod_spec()))
    incoming = copy.deepcopy(stored)
    incoming["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/example/train:2"
    incoming["spec"]["template"]["spec"].pop("tolerations")
    decision = update(incoming, stored)
    assert decision.mutated["spec"]["template"] == incoming["spec"]["template"]


def test_pod_updates_never_touch_the_pod_spec():
    legacy = make("Pod", pvc_pod_spec())  # created before gpuguard: nothing of gpuguard's in it
    legacy["spec"]["containers"][0]["resources"]["limits"]["memory"] = "64Gi"
    relabelled = copy.deepcopy(legacy)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert update(relabelled, legacy).mutated["spec"] == legacy["spec"]
    new_image = copy.deepcopy(legacy)
    new_image["spec"]["containers"][0]["image"] = "ghcr.io/example/train:2"
    assert update(new_image, legacy).mutated["spec"] == new_image["spec"]


def test_cpu_deployment_switched_to_gpus_is_mutated_on_update():
    stored = created(make("Deployment", {"containers": [cpu_container()]}))
    incoming = copy.deepcopy(stored)
    incoming["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    decision = SERVING.evaluate(incoming, RequestContext(operation="UPDATE", old_object=stored, username="alice",
                                                         namespace="ml"))
    applies(decision)
    spec = decision.mutated["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["containers"][0]["resources"]["limits"]["memory"] == "64Gi"
    assert decision.allowed and MUTATED_BY_ANNOTATION in decision.mutated["metadata"]["annotations"]


def test_update_past_the_deadline_and_ttl_caps_is_capped():
    stored = created(make("Job", pvc_pod_spec()))
    incoming = copy.deepcopy(stored)
    incoming["spec"]["activeDeadlineSeconds"] = 10 ** 7
    incoming["spec"]["ttlSecondsAfterFinished"] = 10 ** 8
    decision = update(incoming, stored)
    assert decision.mutated["spec"]["activeDeadlineSeconds"] == 604800
    assert decision.mutated["spec"]["ttlSecondsAfterFinished"] == 604800


def test_unchanged_update_is_a_no_op():
    stored = created(make("PyTorchJob", pvc_pod_spec(), replicas=2))
    decision = update(copy.deepcopy(stored), stored)
    assert decision.patch == [] and decision.allowed


def test_template_priority_is_dropped_with_the_class():
    spec = {**pvc_pod_spec(), "priority": 0, "preemptionPolicy": "PreemptLowerPriority"}
    decision = SERVING.evaluate(make("Deployment", spec), ALICE)
    template = decision.mutated["spec"]["template"]["spec"]
    assert template["priorityClassName"] == "inference-critical"
    assert "priority" not in template and "preemptionPolicy" not in template
    applies(decision)


# ---------------------------------------------------------------- grandfathering

def legacy_deployment(*containers: dict) -> dict:
    obj = make("Deployment", {"containers": list(containers)})
    obj["metadata"]["annotations"] = {}
    return obj


def test_sidecar_inserted_before_a_legacy_gpu_container_is_not_a_new_finding():
    old = legacy_deployment(gpu_container(name="server"))  # no memory limit: gpu-memory-guard
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"].insert(0, {**cpu_container("proxy"),
                                                             "resources": {"limits": {"memory": "1Gi"}}})
    decision = ENGINE.evaluate(new, RequestContext(operation="UPDATE", old_object=old, mutate=False))
    assert decision.allowed, [v.text for v in decision.denials]


def test_another_violating_container_at_the_same_index_is_a_new_finding():
    old = legacy_deployment(gpu_container(name="server"))
    new = legacy_deployment(gpu_container(name="other"))
    decision = ENGINE.evaluate(new, RequestContext(operation="UPDATE", old_object=old, mutate=False))
    assert not decision.allowed
    assert {v.subject for v in decision.denials} == {"spec.template.spec.containers[other]"}


def test_subject_names_items_and_keeps_indices_of_unnamed_ones():
    obj = {"spec": {"containers": [{"name": "a"}, {"image": "x"}]}}
    assert subject(obj, ("spec", "containers", 0)) == "spec.containers[a]"
    assert subject(obj, ("spec", "containers", 1)) == "spec.containers[#1]"
    assert api_group("batch/v1") == "batch" and api_group("v1") == ""


def test_a_controller_updating_a_users_object_changes_nothing():
    stored = make("Deployment", pvc_pod_spec())  # not in gpuguard's shape (created before it, or config changed)
    incoming = copy.deepcopy(stored)
    incoming["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    ctx = RequestContext(operation="UPDATE", old_object=stored, namespace="ml",
                         username="system:serviceaccount:kube-system:deployment-controller")
    assert ENGINE.evaluate(incoming, ctx).patch == []
    # The same metadata-only update by a user (kubectl label, annotate) rolls nothing out either:
    # gpuguard says the workload is not in shape and how to bring it there.
    by_user = update(incoming, stored)
    assert by_user.patch == [] and by_user.mutated == incoming and by_user.allowed
    (warning,) = by_user.warnings
    assert "not in gpuguard's shape" in warning.message and "gpuguard fix" in warning.fix
    # A change of its spec brings the template into shape (a rollout the user asked for).
    changed = copy.deepcopy(incoming)
    changed["spec"]["replicas"] = 2
    assert update(changed, stored).mutated_by


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "PyTorchJob", "RayCluster"])
def test_a_metadata_only_update_never_rewrites_the_pod_template(kind):
    stored = make(kind, pvc_pod_spec())  # created before gpuguard
    for edit in ({"labels": {"cost-center": "ml"}}, {"annotations": {"argocd.argoproj.io/tracking-id": "x"}},
                 {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"}]}):
        incoming = copy.deepcopy(stored)
        incoming["metadata"].update(edit)
        decision = update(incoming, stored)
        assert decision.patch == [] and decision.mutated == incoming
        assert any("not in gpuguard's shape" in v.message for v in decision.warnings)


def test_admin_guide_documents_every_built_in_controller_identity():

    guide = (REPO / "docs" / "admin.md").read_text()
    section = guide[guide.index("## Trusted controllers"):guide.index("## What happens on UPDATE")]
    for name, entry in DEFAULT_TRUSTED_CONTROLLERS.items():
        assert f"`{name}`" in section, name
        for user in entry["users"]:
            sa = user.rsplit(":", 1)[-1]
            assert sa in section, (name, user)


def test_malformed_names_and_kinds_are_judged_not_an_engine_error():
    """Lists where strings belong (found by the fuzzer): the engine decides, it never fails."""
    pod = make("Pod", pvc_pod_spec())
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": [], "mountPath": "/checkpoints"})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": ["Job"], "name": "x", "uid": "u",
                                           "controller": True}]
    for user in ("alice", "system:serviceaccount:kube-system:job-controller"):
        for operation in ("CREATE", "UPDATE"):
            decision = ENGINE.evaluate(pod, RequestContext(username=user, operation=operation, old_object=pod))
            assert decision.error is None
    from gpuguard.webhook.cli.audit.cost import is_finished

    assert not is_finished({"status": {"phase": ["Succeeded"], "conditions": [{"type": ["Complete"]}]}})
