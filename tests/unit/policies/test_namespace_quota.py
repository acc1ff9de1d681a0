"""namespace-quota's reading of the namespace's ResourceQuotas: through the real API client and HTTP (a scripted
apiserver), cached per namespace, and nothing judged where they can't be listed."""

from __future__ import annotations

from typing import Any

from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.objects import ApiLookup
from tests.support.engines import only
from tests.support.fake_apiserver import Call, serve, status

ENGINE = only("namespace-quota")


def _quota(name: str, hard: dict[str, str], **spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"hard": hard, **spec}}


def _gang(pods: int, gpus: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp", "namespace": "ml"},
            "spec": {"completionMode": "Indexed", "parallelism": pods, "completions": pods,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
                                           "containers": [{"name": "t", "image": "registry.example/t:1",
                                                           "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                                                           "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def _quota_findings(decision: Any) -> list[tuple[str, str]]:
    return [(v.verdict, v.message) for v in (*decision.denials, *decision.warnings) if v.policy == "namespace-quota"]


def test_the_quotas_are_listed_from_the_core_api_once_per_namespace_and_judged() -> None:
    quotas = [_quota("team", {"requests.nvidia.com/gpu": "16"}),
              _quota("scoped", {"requests.nvidia.com/gpu": "1"}, scopes=["BestEffort"])]

    def answer(call: Call) -> tuple[int, Any]:
        if call.path == "/api/v1/namespaces/ml/resourcequotas":
            return 200, {"kind": "ResourceQuotaList", "apiVersion": "v1", "items": quotas}
        return 404, status(404, "NotFound")

    with serve(answer) as (server, client):
        lookup = ApiLookup(api=type("Api", (), {"api_client": client})())
        assert lookup.stale_list("", "ResourceQuota", "ml")
        assert lookup.list_objects("", "ResourceQuota", "ml") == quotas
        assert not lookup.stale_list("", "ResourceQuota", "ml")
        assert lookup.list_objects("", "ResourceQuota", "ml") == quotas  # cached: one call
        assert [c.path for c in server.calls] == ["/api/v1/namespaces/ml/resourcequotas"]
        ctx = RequestContext(namespace="ml", read_object=lookup, list_objects=lookup.cached_list)
        over = _quota_findings(ENGINE.evaluate(_gang(4, 8), ctx))
        assert over == [("deny", "its 4 pods must run together and ask 32 of requests.nvidia.com/gpu in all, more "
                         "than ResourceQuota team allows in namespace ml (16): the pods that fit start and hold "
                         "their accelerators while the rest are refused")]
        assert _quota_findings(ENGINE.evaluate(_gang(2, 8), ctx)) == []  # 16: the scoped quota of 1 is not judged


def test_quotas_that_cant_be_listed_judge_nothing() -> None:
    with serve(lambda call: (403, status(403, "Forbidden"))) as (_server, client):
        lookup = ApiLookup(api=type("Api", (), {"api_client": client})())
        assert lookup.list_objects("", "ResourceQuota", "ml") is None
        ctx = RequestContext(namespace="ml", read_object=lookup, list_objects=lookup.cached_list)
        assert _quota_findings(ENGINE.evaluate(_gang(4, 8), ctx)) == []
