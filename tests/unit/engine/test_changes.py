"""What the mutating pass changed of the user's own values: caps, dropped fields, grown lists.

Each change names the policy, the field (list items by name), the old and the new value; values
gpuguard adds where the user set nothing are not changes.  The webhook turns them into kubectl
warnings (``tests/unit/server/test_change_warnings.py``), the CLI into report lines.
"""

from __future__ import annotations

import copy
import dataclasses

from gpuguard.policies.base import MutatingPolicy, PolicySettings
from gpuguard.webhook import suite
from gpuguard.webhook.decision import Decision, RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.engine.update import subject
from gpuguard.workloads.paths import Replaced, get_path
from gpuguard.workloads.view import WorkloadView
from tests.support.engines import assert_patch_yields_mutated, engine_with, only
from tests.support.paths import REPO

THIRTY_DAYS, SEVEN_DAYS = 30 * 86400, 7 * 86400


def _job(**spec: object) -> dict:
    pod = {"restartPolicy": "Never",
           "containers": [{"name": "trainer", "image": "x",
                           "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"},
                                         "requests": {"memory": "64Gi"}},
                           "env": [{"name": "CHECKPOINT_URI", "value": "s3://bucket/run"}]}]}
    template_keys = {k: spec.pop(k) for k in ("tolerations", "priority", "preemptionPolicy") if k in spec}
    pod.update(template_keys)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
            "spec": {**spec, "template": {"spec": pod}}}


def test_a_job_asking_30_days_ttl_is_capped_with_both_values_named() -> None:
    decision = engine_with().evaluate(_job(ttlSecondsAfterFinished=THIRTY_DAYS))
    assert decision.mutated["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS
    [change] = [c for c in decision.changes if c.policy == "job-ttl"]
    assert (change.path, change.how, change.old, change.new) == (
        "spec.ttlSecondsAfterFinished", "capped", THIRTY_DAYS, SEVEN_DAYS)
    assert change.text.startswith(
        f"[job-ttl] capped spec.ttlSecondsAfterFinished on the Job: {THIRTY_DAYS} -> {SEVEN_DAYS} (")


def test_caps_on_a_cronjob_name_the_field_where_it_is() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ml"},
            "spec": {"schedule": "0 0 * * *", "jobTemplate": _job(
                ttlSecondsAfterFinished=THIRTY_DAYS, activeDeadlineSeconds=THIRTY_DAYS)}}
    del cron["spec"]["jobTemplate"]["apiVersion"], cron["spec"]["jobTemplate"]["kind"]
    decision = engine_with().evaluate(cron)
    found = {(c.policy, c.path, c.old, c.new) for c in decision.changes}
    assert found == {("job-ttl", "spec.jobTemplate.spec.ttlSecondsAfterFinished", THIRTY_DAYS, SEVEN_DAYS),
                     ("job-limits", "spec.jobTemplate.spec.activeDeadlineSeconds", THIRTY_DAYS, SEVEN_DAYS)}


def _halve_memory_limits(view: WorkloadView, settings: PolicySettings) -> bool:
    """A policy that replaces a user's value (no shipped one lowers a limit): records it as the rule says."""
    changed = False
    for template in view.templates:
        for i, container in enumerate(template.spec.get("containers", [])):
            limits = container.get("resources", {}).get("limits", {})
            if limits.get("memory") == "64Gi":
                limits["memory"] = "32Gi"
                view.changes.append(Replaced(
                    (*template.spec_path, "containers", i, "resources", "limits", "memory"), "64Gi", "32Gi"))
                changed = True
    return changed


def test_a_users_limit_replaced_is_named_by_container_and_attributed_to_its_policy() -> None:
    engine = only("job-ttl")
    halve = MutatingPolicy(id="halve-memory", title="t", settings_model=PolicySettings, run=_halve_memory_limits,
                           description="d", rationale="r")
    policies = engine.config.policies  # a fresh engine's own config: changing it touches no other test
    engine.config.policies = dataclasses.replace(policies, mutating=((halve, PolicySettings()), *policies.mutating))
    job = _job(ttlSecondsAfterFinished=THIRTY_DAYS)
    job["spec"]["template"]["spec"]["containers"].insert(0, {"name": "sidecar", "image": "y"})
    decision = engine.evaluate(job)
    assert [(c.policy, c.path, c.how, c.old, c.new) for c in decision.changes] == [
        ("halve-memory", "spec.template.spec.containers[trainer].resources.limits.memory", "replaced", "64Gi", "32Gi"),
        ("job-ttl", "spec.ttlSecondsAfterFinished", "capped", THIRTY_DAYS, SEVEN_DAYS)]
    assert decision.changes[0].text.startswith(
        "[halve-memory] replaced spec.template.spec.containers[trainer].resources.limits.memory on the Job: "
        "64Gi -> 32Gi (")


def test_defaults_added_where_the_user_set_nothing_are_not_changes() -> None:
    job = _job(backoffLimit=6)  # the apiserver's default, written before webhooks run: counts as unset
    decision = engine_with().evaluate(job)
    spec = decision.mutated["spec"]
    assert spec["ttlSecondsAfterFinished"] == 86400 and spec["backoffLimit"] == 3
    assert spec["template"]["spec"]["tolerations"] and spec["template"]["spec"]["priorityClassName"]
    assert decision.mutated_by and decision.changes == []


def test_values_under_the_cap_are_the_users_and_no_change() -> None:
    decision = engine_with().evaluate(_job(ttlSecondsAfterFinished=3600, activeDeadlineSeconds=7200))
    assert decision.mutated["spec"]["ttlSecondsAfterFinished"] == 3600
    assert decision.changes == []


def test_a_second_mutating_pass_changes_and_warns_about_nothing() -> None:
    engine = engine_with()
    first = engine.evaluate(_job(ttlSecondsAfterFinished=THIRTY_DAYS, activeDeadlineSeconds=THIRTY_DAYS,
                                 tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                                 preemptionPolicy="Never"))
    assert_patch_yields_mutated(first)
    assert {c.policy for c in first.changes} == {"job-ttl", "job-limits", "gpu-tolerations", "priority-class"}
    second = engine.evaluate(copy.deepcopy(first.mutated))
    assert second.patch == [] and second.changes == []


def test_extending_the_users_own_toleration_list_is_one_short_change() -> None:
    decision = only("gpu-tolerations").evaluate(
        _job(tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]))
    [change] = decision.changes
    assert (change.policy, change.path, change.how, change.old, change.new) == (
        "gpu-tolerations", "spec.template.spec.tolerations", "extended", 1, 2)
    assert change.text.startswith(
        "[gpu-tolerations] added 1 item to the user's spec.template.spec.tolerations on the Job (")
    # a list gpuguard starts itself is an addition, not a change
    assert only("gpu-tolerations").evaluate(_job()).changes == []


def test_a_bare_pods_apiserver_filled_fields_are_not_the_users() -> None:
    """DefaultTolerationSeconds fills a Pod's tolerations and the Priority admission its priority before webhooks."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
           "spec": {**_job()["spec"]["template"]["spec"], "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}]}}
    decision = engine_with().evaluate(pod)
    assert "priority" not in decision.mutated["spec"] and len(decision.mutated["spec"]["tolerations"]) == 2
    assert decision.changes == []


def test_priority_fields_dropped_from_a_template_are_named() -> None:
    decision = only("priority-class").evaluate(_job(priority=0, preemptionPolicy="Never"))
    assert [(c.path, c.how, c.old, c.new) for c in decision.changes] == [
        ("spec.template.spec.priority", "removed", 0, None),
        ("spec.template.spec.preemptionPolicy", "removed", "Never", None)]
    assert "preemptionPolicy on the Job: Never -> (unset)" in decision.changes[1].text


def test_a_metadata_only_update_left_as_is_reports_no_change() -> None:
    stored = _job(ttlSecondsAfterFinished=THIRTY_DAYS)
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"] = {"team": "a"}
    decision = engine_with().evaluate(relabelled, RequestContext(operation="UPDATE", old_object=stored,
                                                                 validate=False))
    assert decision.patch == [] and decision.changes == []


def test_the_json_entry_carries_the_changes() -> None:
    entry = only("job-ttl").evaluate(_job(ttlSecondsAfterFinished=THIRTY_DAYS)).result_entry("f.yaml", 0)
    assert entry["changes"] == [{"policy": "job-ttl", "path": "spec.ttlSecondsAfterFinished", "how": "capped",
                                 "old": THIRTY_DAYS, "new": SEVEN_DAYS, "message": entry["changes"][0]["message"]}]
    assert "2592000 -> 604800" in entry["changes"][0]["message"]


def test_an_engine_without_changes_keeps_the_list_empty() -> None:
    assert Engine(engine_with().config).evaluate({"apiVersion": "v1", "kind": "ConfigMap"}).changes == []


# Values the apiserver writes before webhooks run, which gpuguard replaces as if unset: (case, op, path).
APISERVER_FILLED = {
    ("job-limits/backoff-api-default-counts-as-unset", "replace", "spec.backoffLimit"),  # Job's default 6
    ("priority-class/bare-pod-priority-dropped", "remove", "spec.priority"),  # the Priority admission
    ("priority-class/bare-pod-priority-dropped", "remove", "spec.preemptionPolicy"),
}
CASES = suite.discover([REPO / "tests" / "policies", REPO / "tests" / "kinds"])


def _replaced_or_removed(decision: Decision) -> set[tuple[str, str]]:
    """(op, path users read) of every patch operation that overwrites or drops a value the object had."""
    out = set()
    for op in decision.patch:
        if op["op"] in ("replace", "remove"):
            tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
            path = tuple(int(t) if t.isdigit() else t for t in tokens)
            if get_path(decision.original, path) is not None:
                out.add((op["op"], subject(decision.original, path)))
    return out


def test_every_value_a_fixture_overwrites_is_a_recorded_change() -> None:
    """The rule holds for every policy, not only the ones tested above: a policy that overwrites or drops a
    user's value without recording it (``WorkloadView.changes``) fails here, naming the case."""
    unrecorded, checked = [], 0
    for case in CASES:
        decision = suite.run_case(case).decision
        if decision is None or not decision.patch:
            continue
        recorded = {c.path for c in decision.changes}
        where = case.path.relative_to(REPO / "tests" / "policies").as_posix() \
            if case.path.is_relative_to(REPO / "tests" / "policies") else case.path.as_posix()
        for op, path in _replaced_or_removed(decision):
            checked += 1
            if path not in recorded and (where, op, path) not in APISERVER_FILLED:
                unrecorded.append(f"{where}: {op} {path}")
    assert checked >= len(APISERVER_FILLED) + 2, "the fixtures no longer overwrite anything: the check is empty"
    assert not unrecorded, "values overwritten with no change recorded:\n" + "\n".join(unrecorded)
