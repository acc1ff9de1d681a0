"""PersistentVolumeClaims a workload's pods share: the claims its pod templates name.

A pod's ``volumes[].persistentVolumeClaim.claimName`` is an existing claim every pod of the template
mounts (unlike StatefulSet ``volumeClaimTemplates`` or generic ephemeral volumes, one claim per pod), and
Volcano's ``spec.volumes[].volumeClaimName`` one its controller mounts into every pod.  Whether several
pods on several nodes can use it depends on the claim's access modes, which the manifest does not carry:
the webhook reads those claims before the review (``gpuguard.webhook.objects.ApiLookup.prefetch``), and
``shared-rwo-claim`` judges them.
"""

from __future__ import annotations

from gpuguard.workloads.kinds import KindSpec
from gpuguard.workloads.paths import dicts, get_path

MAX_CLAIMS = 16  # claims read per workload: far above real manifests, a bound for hostile ones


def shared_claims(obj: dict, kind: KindSpec) -> list[str]:
    """Names of the existing claims ``obj``'s pods mount, where it may run more than one pod at once (at most
    ``MAX_CLAIMS``, in the order written)."""
    names: dict[str, None] = {}
    pods = 0
    for ref in kind.locate(obj):
        pods += ref.replicas
        for path in ref.volume_paths or (ref.spec_path + ("volumes",),):
            for _, volume in dicts(get_path(obj, path)):
                source = volume.get("persistentVolumeClaim")
                name = source.get("claimName") if isinstance(source, dict) else None
                if isinstance(name, str) and name:
                    names.setdefault(name)
    claims = kind.volume_claims
    if claims is not None and claims.style == "volcano-volumes":
        for _, entry in dicts(get_path(obj, claims.path)):
            if isinstance(entry.get("volumeClaimName"), str) and entry["volumeClaimName"]:
                names.setdefault(entry["volumeClaimName"])
    if pods <= 1 and kind.peak is None:
        return []
    return list(names)[:MAX_CLAIMS]
