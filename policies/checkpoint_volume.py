"""checkpoint-volume: GPU training must checkpoint to storage that outlives its pods.

A training pod that is preempted, evicted or OOM-killed restarts from its last checkpoint,
or from zero if the checkpoints lived in an emptyDir, a generic ephemeral volume, the
container's writable layer or a node's hostPath.  Who owns a claim matters as much as the
volume type: JobSet ``volumeClaimPolicies`` claims (``whenDeleted: Delete`` by default) and
Volcano's auto-created claims die with the job, and the job TTL deletes the job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.paths import dicts, dotted, get_path
from gpuguard.workloads.view import Container, PodTemplate, WorkloadView

_NOT_PERSISTENT = {
    "emptyDir": "an emptyDir (deleted with the pod)",
    "ephemeral": "a generic ephemeral volume (its claim is deleted with the pod)",
    "hostPath": "a hostPath (tied to one node; gone when the pod moves)",
    "configMap": "a configMap (read-only)",
    "secret": "a secret (read-only)",
    "downwardAPI": "a downwardAPI volume (read-only)",
    "projected": "a projected volume (read-only)",
    "image": "an image volume (read-only)",
}


class Settings(PolicySettings):
    classes: list[str] = Field(default_factory=lambda: ["training"], description="Workload classes checked.")
    persistent_volume_types: list[str] = Field(
        default_factory=lambda: ["persistentVolumeClaim", "nfs", "cephfs", "glusterfs", "iscsi", "rbd", "fc",
                                 "azureFile", "azureDisk", "awsElasticBlockStore", "gcePersistentDisk", "cinder",
                                 "portworxVolume", "vsphereVolume", "quobyte"],
        description="Pod volume types that outlive the pod.")
    persistent_csi_drivers: list[str] = Field(
        default_factory=lambda: ["gcsfuse.csi.storage.gke.io", "s3.csi.aws.com", "efs.csi.aws.com",
                                 "file.csi.azure.com", "blob.csi.azure.com", "filestore.csi.storage.gke.io"],
        description="Inline CSI drivers backed by durable storage (other inline CSI volumes are ephemeral).")
    object_store_env_vars: list[str] = Field(default_factory=lambda: ["CHECKPOINT_URI", "CHECKPOINT_URL"],
                                             description="Env vars that point checkpoints at an object store.")
    object_store_schemes: list[str] = Field(
        default_factory=lambda: ["s3://", "gs://", "gcs://", "az://", "abfs://", "abfss://", "wasbs://", "hdfs://",
                                 "oci://", "r2://"])
    checkpoint_mount_paths: list[str] = Field(default_factory=lambda: ["/checkpoints", "/checkpoint", "/ckpt"],
                                              description="Mount paths that hold checkpoints.")
    checkpoint_path_env_vars: list[str] = Field(default_factory=lambda: ["CHECKPOINT_DIR", "CHECKPOINT_PATH",
                                                                         "CKPT_DIR"],
                                                description="Env vars that name the checkpoint directory.")
    max_gpu_hours_at_risk: float = Field(
        4.0, ge=0, description="A workload whose deadline bounds what a restart can lose (deadline x GPUs) to at "
        "most this many GPU-hours needs no checkpoint storage: smoke tests, benchmarks, short evaluations.")


@dataclass(frozen=True)
class Mount:
    path: str
    persistent: bool
    what: str  # readable description of the backing storage
    read_only: bool = False  # persistent storage mounted readOnly: it cannot take a checkpoint


def _describe(volume: dict, settings: Settings) -> tuple[bool, str]:
    name = volume.get("name")
    csi = volume.get("csi")
    if isinstance(csi, dict):
        driver = csi.get("driver")
        if driver in settings.persistent_csi_drivers:
            return True, f"CSI volume '{name}' ({driver})"
        return False, f"an inline CSI volume '{name}' ({driver}; ephemeral, deleted with the pod)"
    for vtype in settings.persistent_volume_types:
        if vtype in volume:
            return True, f"{vtype} volume '{name}'"
    for vtype, what in _NOT_PERSISTENT.items():
        if vtype in volume:
            return False, f"{what} '{name}'"
    return False, f"volume '{name}' of a type not known to outlive the pod"


def _claim_policies(view: WorkloadView) -> dict[str, tuple[bool, str]]:
    """Claims a controller adds outside the pod spec, by name (``KindSpec.volume_claims``)."""
    out: dict[str, tuple[bool, str]] = {}
    claims = view.kind.volume_claims
    if claims is None:
        return out
    kind = view.kind.kind
    if claims.style == "claim-policies":  # JobSet volumeClaimPolicies
        for _, policy in dicts(get_path(view.obj, claims.path)):
            retention = get_path(policy, ("retentionPolicy", "whenDeleted")) or "Delete"
            for _, tmpl in dicts(policy.get("templates")):
                name = get_path(tmpl, ("metadata", "name"))
                if retention == "Retain":
                    out[name] = (True, f"{kind} claim '{name}' (whenDeleted: Retain)")
                else:
                    out[name] = (False, f"{kind} claim '{name}' (deleted with the {kind}: whenDeleted: {retention})")
    elif claims.style == "claim-templates":  # StatefulSet volumeClaimTemplates
        for _, tmpl in dicts(get_path(view.obj, claims.path)):
            name = get_path(tmpl, ("metadata", "name"))
            out[name] = (True, f"{kind} claim '{name}'")
    return out


def _volcano_mounts(view: WorkloadView) -> list[Mount]:
    """Volcano-style ``spec.volumes[]``: mounted into every container by the kind's controller."""
    mounts: list[Mount] = []
    claims = view.kind.volume_claims
    if claims is None or claims.style != "volcano-volumes":
        return mounts
    for _, vol in dicts(get_path(view.obj, claims.path)):
        path = str(vol.get("mountPath", ""))
        if isinstance(vol.get("volumeClaimName"), str):
            mounts.append(Mount(path, True, f"claim '{vol['volumeClaimName']}'"))
        elif "volumeClaim" in vol:
            mounts.append(Mount(path, False, f"a claim the Volcano {view.kind.kind} creates and deletes with itself"))
    return mounts


def _mounts(container: Container, template: PodTemplate, extra: dict, volcano: list[Mount],
            settings: Settings) -> list[Mount]:
    volumes = template.volumes()
    mounts = list(volcano)
    for mount in container.mounts():
        name, path = mount.get("name"), mount.get("mountPath")
        if not isinstance(path, str):
            continue
        if not isinstance(name, str):  # malformed (the apiserver refuses it): no volume backs it
            name = ""
        if name in volumes:
            persistent, what = _describe(volumes[name], settings)
        elif name in extra:
            persistent, what = extra[name]
        else:
            persistent, what = False, f"volume '{name}', which the pod does not define"
        read_only = mount.get("readOnly") is True
        mounts.append(Mount(path.rstrip("/") or "/", persistent and not read_only,
                            f"{what}, mounted read-only" if persistent and read_only else what,
                            persistent and read_only))
    return mounts


def _backing(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount a path lives on: the longest mount path that is a prefix of it."""
    best = None
    for mount in mounts:
        if (path == mount.path or path.startswith(mount.path.rstrip("/") + "/")) and (
                best is None or len(mount.path) > len(best.path)):
            best = mount
    return best


def _gpu_hours_at_risk(view: WorkloadView) -> float | None:
    """Deadline x GPUs: the most a run without checkpoints can lose; ``None`` when no deadline bounds it."""
    fields = view.kind.job
    deadline = get_path(view.obj, fields.deadline) if fields and fields.deadline else None
    if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0:
        return None
    return deadline / 3600 * view.total_gpus


def _bound_hint(view: WorkloadView, settings: Settings) -> str:
    """How to get under the GPU-hours threshold instead: the deadline that would do it."""
    fields = view.kind.job
    if not fields or not fields.deadline or not view.total_gpus or settings.max_gpu_hours_at_risk <= 0:
        return ""
    seconds = int(settings.max_gpu_hours_at_risk * 3600 / view.total_gpus)
    return (f"; or, for a short run (smoke test, benchmark, evaluation), set {dotted(fields.deadline)} <= {seconds} "
            f"so at most {settings.max_gpu_hours_at_risk:g} GPU-hours are at risk")


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    if view.workload_class not in settings.classes or not view.is_gpu:
        return
    at_risk = _gpu_hours_at_risk(view)
    if at_risk is not None and at_risk <= settings.max_gpu_hours_at_risk:
        return
    hint = _bound_hint(view, settings)
    extra = _claim_policies(view)
    volcano = _volcano_mounts(view)
    for template in view.gpu_templates:
        for container in template.gpu_containers:
            mounts = _mounts(container, template, extra, volcano, settings)
            env = container.env()
            bad_path = False
            checkpoint_paths = [(f"{var}={env[var]}", env[var]) for var in settings.checkpoint_path_env_vars
                                if isinstance(env.get(var), str) and env[var].startswith("/")]
            checkpoint_paths += [(f"mount {m.path}", m.path) for m in mounts
                                 if m.path in settings.checkpoint_mount_paths]
            for label, path in checkpoint_paths:
                backing = _backing(path, mounts)
                if backing is not None and backing.persistent:
                    continue
                bad_path = True
                if backing is not None and backing.read_only:
                    yield Finding(container.path, f"checkpoint path {label} is on {backing.what}: checkpoints "
                                  "cannot be written there", "mount it read-write (drop readOnly: true), or point "
                                  "CHECKPOINT_URI at an object store" + hint, container.name)
                    continue
                where = backing.what if backing else "the container's writable layer (lost when the pod restarts)"
                yield Finding(container.path, f"checkpoint path {label} is on {where}",
                              "back it with a persistentVolumeClaim or point CHECKPOINT_URI at an object store" + hint,
                              container.name)
            if bad_path:
                continue
            # A value from a ConfigMap or Secret (valueFrom, or envFrom, which may define any variable) can't
            # be read here: it counts as set, like the team's shared CHECKPOINT_URI usually is.
            object_store = container.env_from() or any(
                var in env and (env[var] is None or env[var].startswith(tuple(settings.object_store_schemes)))
                for var in settings.object_store_env_vars)
            if not object_store and not any(m.persistent for m in mounts):
                read_only = next((m for m in mounts if m.read_only), None)
                if read_only is not None:
                    yield Finding(container.path, f"GPU training job's only persistent storage is {read_only.what}: "
                                  "checkpoints cannot be written there", "mount a writable persistentVolumeClaim "
                                  "for checkpoints or set CHECKPOINT_URI to an object store" + hint, container.name)
                    continue
                yield Finding(container.path, "GPU training job has no persistent volume for checkpoints",
                              "mount a persistentVolumeClaim (e.g. at /checkpoints) or set CHECKPOINT_URI to an "
                              "object store" + hint, container.name)


POLICY = ValidatingPolicy(
    id="checkpoint-volume",
    title="Persistent checkpoints for GPU training",
    settings_model=Settings,
    run=validate,
    description="GPU training containers must mount writable persistent storage (PVC, NFS, durable CSI ...) or set "
    "`CHECKPOINT_URI` (a value, `valueFrom` or `envFrom`) to an object store; checkpoint paths on emptyDir, "
    "ephemeral volumes, hostPath, read-only mounts, claims that die with the job or the container filesystem are "
    "rejected. A run whose deadline bounds what it can lose (deadline x GPUs <= 4 GPU-hours: smoke tests, "
    "benchmarks) needs none.",
    rationale="A preempted or OOM-killed training pod restarts from its last checkpoint; if that lived on "
    "ephemeral storage, every GPU-hour since the start is lost.",
    cpu_scope=accelerator_objects_only,
)
