"""The scan's index: which objects are tracked, and which events make a workload need a new decision."""

from __future__ import annotations

import copy

from gpuguard.webhook.scan.discovery import Collection
from gpuguard.webhook.scan.index import CachedRuntimes, Index
from gpuguard.workloads.kinds import lookup
from tests.support.builders import bare_pod_spec, make

JOBS = Collection("batch", "v1", "Job", "jobs", lookup("batch/v1", "Job"))
PODS = Collection("", "v1", "Pod", "pods", lookup("v1", "Pod"))
RUNTIMES = Collection("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes")
TRAINJOBS = Collection("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs",
                       lookup("trainer.kubeflow.org/v1alpha1", "TrainJob"))


def _stored(obj: dict, uid: str = "u1", rv: str = "1") -> dict:
    out = copy.deepcopy(obj)
    out["metadata"].update(uid=uid, resourceVersion=rv, managedFields=[{"manager": "kubectl"}])
    return out


def _index() -> Index:
    index = Index()
    index.listed = {("batch", "Job"), ("", "Pod"), ("trainer.kubeflow.org", "TrainJob")}
    return index


def test_a_status_only_update_marks_nothing_and_a_spec_change_marks_the_workload() -> None:
    index = _index()
    job = _stored(make("Job", bare_pod_spec(1), name="j"))
    index.workload_event(JOBS, "ADDED", job)
    batch, _, since = index.take()
    assert [k for k, _ in batch] == [("batch", "Job", "ml", "j")] and since is not None  # for the lag metric
    counted = {**copy.deepcopy(job), "status": {"active": 1}}
    counted["metadata"]["resourceVersion"] = "2"
    index.workload_event(JOBS, "MODIFIED", counted)
    assert index.pending() == 0 and not index.changed.is_set() and index.dirty_since is None
    changed = copy.deepcopy(counted)
    changed["spec"]["backoffLimit"] = 1
    index.workload_event(JOBS, "MODIFIED", changed)
    batch, _, _ = index.take()
    assert len(batch) == 1 and batch[0][1].obj()["spec"]["backoffLimit"] == 1
    assert "status" not in batch[0][1].obj() and "uid" not in batch[0][1].obj()["metadata"]


def test_finishing_is_remembered_for_the_cost_model() -> None:
    index = _index()
    job = _stored(make("Job", bare_pod_spec(1), name="j"))
    index.workload_event(JOBS, "ADDED", job)
    index.take()
    done = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    index.workload_event(JOBS, "MODIFIED", done)
    batch, _, _ = index.take()
    assert batch[0][1].finished


def test_what_a_listed_controller_made_is_not_tracked_but_an_owner_it_does_not_list_is() -> None:
    index = _index()
    pod = _stored(make("Pod", bare_pod_spec(1), name="j-abc"), uid="p1")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1",
                                           "controller": True}]
    index.workload_event(PODS, "ADDED", pod)
    assert not index.entries and index.skipped_owned == 1
    foreign = _stored(make("Pod", bare_pod_spec(1), name="x"), uid="p2")
    foreign["metadata"]["ownerReferences"] = [{"apiVersion": "example.io/v1", "kind": "Thing", "name": "t",
                                               "uid": "t1", "controller": True}]
    index.workload_event(PODS, "ADDED", foreign)
    assert list(index.entries) == [("", "Pod", "ml", "x")]


def test_deletes_and_relists_hand_the_removed_subjects_to_the_scanner() -> None:
    index = _index()
    for name in ("a", "b"):
        index.workload_event(JOBS, "ADDED", _stored(make("Job", bare_pod_spec(1), name=name), uid=f"u-{name}"))
    index.take()
    index.workload_event(JOBS, "DELETED", _stored(make("Job", bare_pod_spec(1), name="a"), uid="u-a"))
    index.workload_sync(JOBS, set())  # a re-list that no longer has b either
    _, removed, _ = index.take()
    assert {s.uid for s in removed.values()} == {"u-a", "u-b"} and not index.entries
    index.workload_event(JOBS, "ADDED", _stored(make("Job", bare_pod_spec(1), name="c"), uid="old"))
    index.take()
    index.workload_event(JOBS, "MODIFIED", _stored(make("Job", bare_pod_spec(1), name="c"), uid="new"))
    batch, removed, _ = index.take()  # deleted and re-created between two events: the old report goes
    assert [s.uid for s in removed.values()] == ["old"] and batch[0][1].subject.uid == "new"


def test_namespace_labels_and_runtimes_mark_the_workloads_that_read_them() -> None:
    index = _index()
    index.namespace_event("ADDED", {"metadata": {"name": "ml", "labels": {"team": "a"}}})
    index.workload_event(JOBS, "ADDED", _stored(make("Job", bare_pod_spec(1), name="j")))
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "t", "namespace": "ml", "uid": "t1"},
                "spec": {"runtimeRef": {"name": "torch"}}}
    index.workload_event(TRAINJOBS, "ADDED", trainjob)
    index.take()
    runtime = {"metadata": {"name": "torch", "namespace": "ml"}, "spec": {"template": {}}}
    index.runtime_event(RUNTIMES, "ADDED", runtime)
    batch, _, _ = index.take()
    assert [k[1] for k, _ in batch] == ["TrainJob"]
    lookup_runtime = CachedRuntimes(index)
    assert lookup_runtime("trainer.kubeflow.org", "TrainingRuntime", "ml", "torch")["kind"] == "TrainingRuntime"
    assert lookup_runtime.list_objects("trainer.kubeflow.org", "TrainingRuntime", "ml") == [runtime]
    index.namespace_event("MODIFIED", {"metadata": {"name": "ml", "labels": {"team": "b"}}})
    batch, _, _ = index.take()
    assert sorted(k[1] for k, _ in batch) == ["Job", "TrainJob"]
    assert index.namespace_labels["ml"] == {"team": "b"}


def test_a_large_workload_is_kept_as_its_digest_and_still_tells_status_from_spec() -> None:
    """Past MAX_KEPT_BYTES only the digest stays (bounded memory per workload); the scanner reads it again."""
    from gpuguard.webhook.scan.index import MAX_KEPT_BYTES

    index = _index()
    job = _stored(make("Job", bare_pod_spec(1), name="big"))
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": f"V{i}", "value": "x" * 1000} for i in range(MAX_KEPT_BYTES // 1000 + 8)]
    index.workload_event(JOBS, "ADDED", job)
    (key, entry), = index.take()[0]
    assert entry.body is None and entry.obj() is None and len(entry.digest) == 16
    assert entry.path == "/apis/batch/v1/namespaces/ml/jobs/big"
    counted = {**copy.deepcopy(job), "status": {"active": 1}}
    index.workload_event(JOBS, "MODIFIED", counted)
    assert index.pending() == 0  # the digest is of the cleaned object: a status change is no change
    changed = copy.deepcopy(counted)
    changed["spec"]["backoffLimit"] = 1
    index.workload_event(JOBS, "MODIFIED", changed)
    (_, after), = index.take()[0]
    assert after.digest != entry.digest and after.body is None
    small = _stored(make("Job", bare_pod_spec(1), name="small"))
    index.workload_event(JOBS, "ADDED", small)
    (_, kept), = index.take()[0]
    assert kept.obj()["metadata"]["name"] == "small" and len(kept.body) <= MAX_KEPT_BYTES


def test_a_cluster_scoped_and_a_core_object_are_read_where_the_api_serves_them() -> None:
    assert PODS.object_path("ml", "p") == "/api/v1/namespaces/ml/pods/p"
    assert RUNTIMES.object_path(None, "torch") == "/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes/torch"
