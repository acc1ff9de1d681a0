"""``audit --cluster`` against a small fake apiserver (real HTTP, real kubernetes ApiClient).

The fake serves discovery, paginated lists and namespaces the way kube-apiserver does
(typed lists without per-item kind, ``metadata.continue`` tokens, 403/410 Status bodies), so
the lister's discovery, pagination, owner skipping and field stripping are exercised through
the same client code that talks to a real cluster.  The real control plane is covered in
``tests/e2e/test_audit_cluster.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client as k8s

from gpuguard.webhook.cli.audit.cluster import ClusterError, ClusterLister, controller_of, strip_server_fields
from gpuguard.webhook.cli.audit.cost import Prices
from gpuguard.webhook.cli.audit.run import AuditReport, evaluate_all
from gpuguard.webhook.config import load_config
from gpuguard.webhook.engine.core import Engine


def _resource(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "singularName": kind.lower(), "namespaced": True, "kind": kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}


def _group(name: str, *versions: str) -> dict[str, Any]:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def _meta(name: str, namespace: str, **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "42",
            "creationTimestamp": "2024-05-01T10:00:00Z", "generation": 1,
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}}
    meta.update(extra)
    return meta


def _gpu_template() -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "train", "image": "ghcr.io/example/train:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


JOB_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-train", "controller": True}
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-abc", "uid": "uid-rs", "controller": True}
DEPLOY_OWNER = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve", "uid": "uid-serve",
                "controller": True}
NODE_OWNER = {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "uid-node", "controller": True}

PODS = [
    {"metadata": _meta("train-xyz", "ml", ownerReferences=[JOB_OWNER]), **_gpu_template(), "status": {}},
    {"metadata": _meta("serve-abc-1", "ml", ownerReferences=[RS_OWNER]), **_gpu_template()},
    {"metadata": _meta("debug", "ml"), **_gpu_template(), "status": {"phase": "Pending"}},
    {"metadata": _meta("mirror", "kube-system", ownerReferences=[NODE_OWNER]), **_gpu_template()},
    {"metadata": _meta("notebook-0", "team-b"), **_gpu_template()},
]
JOBS = [{"metadata": _meta("train", "ml"), "spec": {"template": _gpu_template()}, "status": {"active": 1}}]
DEPLOYMENTS = [{"metadata": _meta("serve", "ml"), "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                                                           "template": _gpu_template()}}]
REPLICASETS = [{"metadata": _meta("serve-abc", "ml", ownerReferences=[DEPLOY_OWNER]),
                "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": _gpu_template()}}]
PYTORCHJOBS = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _meta("ddp", "team-b"),
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": _gpu_template()}}}}]
NAMESPACES = [{"metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n, **extra}}}
              for n, extra in (("ml", {"gpuguard.io/profile": "research"}), ("team-b", {}), ("kube-system", {}))]


class FakeApiServer:
    """Just enough of kube-apiserver's REST API for the lister; records every request path."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.forbidden: set[str] = set()
        self.expire_once: set[str] = set()
        self.collections: dict[str, tuple[str, list[dict[str, Any]]]] = {
            "/api/v1/pods": ("PodList", PODS),
            "/api/v1/namespaces": ("NamespaceList", NAMESPACES),
            "/apis/batch/v1/jobs": ("JobList", JOBS),
            "/apis/batch/v1/cronjobs": ("CronJobList", []),
            "/apis/apps/v1/deployments": ("DeploymentList", DEPLOYMENTS),
            "/apis/apps/v1/replicasets": ("ReplicaSetList", REPLICASETS),
            "/apis/apps/v1/statefulsets": ("StatefulSetList", []),
            "/apis/apps/v1/daemonsets": ("DaemonSetList", []),
            "/apis/kubeflow.org/v1/pytorchjobs": ("PyTorchJobList", PYTORCHJOBS),
        }
        self.discovery: dict[str, dict[str, Any]] = {
            "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1",
                        "resources": [_resource("pods", "Pod"), _resource("namespaces", "Namespace")]},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1",
                      "groups": [_group("batch", "v1"), _group("apps", "v1"), _group("kubeflow.org", "v1")]},
            "/apis/batch/v1": {"kind": "APIResourceList", "groupVersion": "batch/v1",
                               "resources": [_resource("jobs", "Job"), _resource("cronjobs", "CronJob")]},
            "/apis/apps/v1": {"kind": "APIResourceList", "groupVersion": "apps/v1",
                              "resources": [_resource(p, k) for p, k in (("deployments", "Deployment"),
                                                                         ("replicasets", "ReplicaSet"),
                                                                         ("statefulsets", "StatefulSet"),
                                                                         ("daemonsets", "DaemonSet"))]},
            # Only the PyTorchJob CRD of the Kubeflow group is installed.
            "/apis/kubeflow.org/v1": {"kind": "APIResourceList", "groupVersion": "kubeflow.org/v1",
                                      "resources": [_resource("pytorchjobs", "PyTorchJob")]},
        }

    def handle(self, raw_path: str) -> tuple[int, dict[str, Any]]:
        self.requests.append(raw_path)
        url = urlparse(raw_path)
        query = parse_qs(url.query)
        path = url.path.rstrip("/")  # the client asks for "/api/v1/" and "/apis/"
        if path in self.discovery:
            return 200, self.discovery[path]
        namespace = None
        parts = path.split("/")
        if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
            i = parts.index("namespaces")
            namespace = parts[i + 1]
            path = "/".join(parts[:i] + parts[i + 2:])
        elif path.startswith("/api/v1/namespaces/"):
            name = path.rsplit("/", 1)[1]
            found = [n for n in NAMESPACES if n["metadata"]["name"] == name]
            return (200, found[0]) if found else (404, _status(404, "NotFound", f'namespaces "{name}" not found'))
        if path not in self.collections:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        if path in self.forbidden:
            return 403, _status(403, "Forbidden", f"{path} is forbidden: User cannot list resource")
        kind, items = self.collections[path]
        if namespace:
            items = [i for i in items if i["metadata"]["namespace"] == namespace]
        limit = int(query.get("limit", ["500"])[0])
        start = int(query.get("continue", ["0"])[0])
        if start and path in self.expire_once:
            self.expire_once.discard(path)
            return 410, _status(410, "Expired", "The provided continue parameter is too old")
        page = json.loads(json.dumps(items[start:start + limit]))
        meta: dict[str, Any] = {"resourceVersion": "100"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        group_version = "v1" if path.startswith("/api/") else "/".join(path.split("/")[2:4])
        return 200, {"kind": kind, "apiVersion": group_version, "metadata": meta, "items": page}


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}


@pytest.fixture
def fake() -> Iterator[tuple[FakeApiServer, k8s.ApiClient]]:
    server_state = FakeApiServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            code, body = server_state.handle(self.path)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    configuration = k8s.Configuration(host=f"http://127.0.0.1:{httpd.server_address[1]}")
    api = k8s.ApiClient(configuration)
    try:
        yield server_state, api
    finally:
        api.close()
        httpd.shutdown()
        httpd.server_close()


def _listed(lister: ClusterLister) -> dict[tuple[str, str, str], Any]:
    return {(d.obj["kind"], d.obj["metadata"].get("namespace"), d.obj["metadata"]["name"]): (d, ctx)
            for d, ctx in lister.objects()}


def test_lists_served_kinds_skips_controlled_objects_and_strips_server_fields(fake) -> None:
    server, api = fake
    lister = ClusterLister(api, chunk_size=2)
    listed = _listed(lister)
    assert set(listed) == {
        ("Pod", "ml", "debug"), ("Pod", "kube-system", "mirror"), ("Pod", "team-b", "notebook-0"),
        ("Job", "ml", "train"), ("Deployment", "ml", "serve"), ("PyTorchJob", "team-b", "ddp"),
    }
    # Pods of the Job and of the ReplicaSet, and the Deployment's ReplicaSet, are not counted twice.
    assert lister.skipped_owned == 3
    doc, ctx = listed[("Job", "ml", "train")]
    assert doc.obj["apiVersion"] == "batch/v1"  # typed list items carry no apiVersion/kind
    assert "status" not in doc.obj
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "annotations"):
        assert key not in doc.obj["metadata"]
    assert ctx.operation == "CREATE" and ctx.namespace == "ml"
    assert ctx.namespace_labels["gpuguard.io/profile"] == "research"
    # Pagination: 5 pods in pages of 2 -> three pod list requests with continue tokens.
    pod_requests = [p for p in server.requests if p.startswith("/api/v1/pods")]
    assert len(pod_requests) == 3 and all("limit=2" in p for p in pod_requests)
    assert any("continue=2" in p for p in pod_requests)
    # Kinds whose CRDs are absent are not listed, and that is said once.
    assert not any("tfjobs" in p or "ray.io" in p or "jobset" in p for p in server.requests)
    assert any("not served by this cluster" in n and "TFJob" in n for n in lister.notes)
    assert lister.errors == []


def test_namespace_scope_lists_one_namespace(fake) -> None:
    server, api = fake
    lister = ClusterLister(api, namespace="team-b")
    listed = _listed(lister)
    assert set(listed) == {("Pod", "team-b", "notebook-0"), ("PyTorchJob", "team-b", "ddp")}
    assert any(p.startswith("/apis/kubeflow.org/v1/namespaces/team-b/pytorchjobs") for p in server.requests)
    assert any(p.startswith("/api/v1/namespaces/team-b") for p in server.requests)


def test_forbidden_kind_is_an_error_but_the_rest_is_listed(fake) -> None:
    server, api = fake
    server.forbidden.add("/apis/batch/v1/jobs")
    lister = ClusterLister(api)
    listed = _listed(lister)
    assert ("Deployment", "ml", "serve") in listed
    assert len(lister.errors) == 1 and "403" in lister.errors[0] and "Job" in lister.errors[0]


def test_expired_continue_token_relists_without_duplicates(fake) -> None:
    server, api = fake
    server.expire_once.add("/api/v1/pods")
    lister = ClusterLister(api, chunk_size=2)
    pods = [k for k in _listed(lister) if k[0] == "Pod"]
    assert len(pods) == len(set(pods)) == 3
    assert lister.errors == []


def test_unreachable_cluster_is_a_cluster_error() -> None:
    api = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    with pytest.raises(ClusterError, match="cannot reach"):
        ClusterLister(api).served_kinds()


def test_cluster_objects_go_through_the_engine(fake) -> None:
    _, api = fake
    config = load_config(None)
    lister = ClusterLister(api, source="cluster:test")
    items = list(evaluate_all(lister.objects(), Engine(config).evaluate, Prices.from_config(config)))
    report = AuditReport(items, sources=["cluster:test"])
    entries = report.to_dict()["results"]
    job = next(e for e in entries if e["kind"] == "Job")
    assert job["source"] == "cluster:test" and job["line"] is None
    # The engine saw a clean object: its patch never touches server-set fields.
    assert not any(op["path"].startswith(("/status", "/metadata/uid", "/metadata/managedFields"))
                   for op in job["patch"])
    summary = report.summary()
    assert summary["objects"] == 6
    assert summary["workloads"] + summary["skipped"] == 6  # kube-system may be exempt in the default config


def test_strip_and_controller_helpers() -> None:
    obj = {"metadata": {"name": "a", "uid": "u", "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                                                "{}", "team": "x"}}, "status": {"x": 1}}
    clean = strip_server_fields(obj)
    assert clean == {"metadata": {"name": "a", "annotations": {"team": "x"}}}
    assert obj["status"] == {"x": 1}  # the input is not modified
    assert controller_of({"metadata": {"ownerReferences": [{"kind": "Job", "controller": False}]}}) is None
    assert controller_of({"metadata": {"ownerReferences": [JOB_OWNER]}}) == JOB_OWNER


def _dra_only(fake: FakeApiServer) -> None:
    """Two nodes whose GPUs only a DRA driver publishes (no GPU allocatable), 4 devices per slice, and a
    DeviceClass mapping the driver to the extended resource pods ask for (KEP-5004)."""
    fake.discovery["/apis"]["groups"].append(_group("resource.k8s.io", "v1"))
    nodes = [{"metadata": {"name": f"dra-{i}", "labels": {}}, "spec": {},
              "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}} for i in range(2)]
    slices = [{"metadata": {"name": f"dra-{i}-{part}"}, "spec": {
        "driver": "gpu.example.com", "nodeName": f"dra-{i}", "pool": {"name": f"dra-{i}"},
        "devices": [{"name": f"d{part}{d}"} for d in range(4)]}} for i in range(2) for part in range(2)]
    shared = {"metadata": {"name": "fabric"}, "spec": {"driver": "gpu.example.com", "allNodes": True,
                                                       "devices": [{"name": "x"}] * 16}}  # no one node's
    classes = [{"metadata": {"name": "gpus.example.com"}, "spec": {
        "extendedResourceName": "example.com/gpu",
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}]
    fake.collections.update({
        "/api/v1/nodes": ("NodeList", nodes),
        "/apis/resource.k8s.io/v1/resourceslices": ("ResourceSliceList", [*slices, shared]),
        "/apis/resource.k8s.io/v1/deviceclasses": ("DeviceClassList", classes),
        "/apis/resource.k8s.io/v1/resourceclaimtemplates": ("ResourceClaimTemplateList", []),
        "/apis/resource.k8s.io/v1/resourceclaims": ("ResourceClaimList", []),
    })


def test_audit_cluster_counts_the_gpus_a_dra_driver_publishes_in_resourceslices(fake) -> None:
    server, api = fake
    _dra_only(server)
    lister = ClusterLister(api, source="cluster:test", chunk_size=3)
    lister.claims()
    inventory = lister.nodes()
    assert inventory is not None and not lister.notes
    assert [(g.count, g.allocatable.get("example.com/gpu")) for g in inventory.groups] == [(2, 8)]
    assert sum(1 for r in server.requests if r.startswith("/apis/resource.k8s.io/v1/resourceslices")) == 2


def test_audit_cluster_says_when_it_may_not_list_resourceslices(fake) -> None:
    server, api = fake
    _dra_only(server)
    server.forbidden.add("/apis/resource.k8s.io/v1/resourceslices")
    lister = ClusterLister(api, source="cluster:test")
    lister.claims()
    inventory = lister.nodes()
    assert inventory is not None and [g.allocatable.get("example.com/gpu") for g in inventory.groups] == [None]
    assert any("cannot list resourceslices" in n and "not counted" in n for n in lister.notes)
