"""checkpoint-volume: GPU training must checkpoint to storage that outlives its pods.

A training pod that is preempted, evicted or OOM-killed restarts from its last checkpoint,
or from zero if the checkpoints lived in an emptyDir, a generic ephemeral volume, the
container's writable layer or a node's hostPath.  Who owns a claim decides what it outlives:
a generic ephemeral volume's claim dies with its pod, while the claims an operator creates for
the workload (StatefulSet and Argo ``volumeClaimTemplates``, JobSet ``volumeClaimPolicies`` —
Kubeflow Trainer's torchtune runtimes mount theirs so — and Volcano's ``spec.volumes`` claims)
outlive every pod and restart of the workload, which is what a checkpoint is for, so they count
even where they are deleted with the workload (``whenDeleted: Delete``: final results belong
elsewhere once a TTL removes the job).

Only training is checked: evaluations, quantizations, batch inference and smoke tests redo their
work on a restart, and servers and notebooks have no progress to lose.  The class comes from
evidence (``gpuguard.workloads.lifecycle``): work that runs to completion is training unless the
user declares otherwise, and a declaration that drops this check is honoured only on kinds whose
deadline ``job-limits`` then caps.  What the work looks like is a guess: it never drops the check
(a ``lm_eval`` before ``torchrun`` changes nothing), it only shapes the message ("it looks like a
smoke test: if so, label it …") and warns where the kind would skip the check (a Deployment that
runs ``torchrun train.py``) or where the class itself is only a guess (a bare Pod that runs to
completion).  A denial never offers as the way out a deadline shorter than
``minOfferedDeadlineSeconds``, nor a label on a kind where it would lower nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.classify import MAX_TEXT
from gpuguard.workloads.lifecycle import carries_deadline
from gpuguard.workloads.paths import dicts, dotted, get_path
from gpuguard.workloads.view import WORKLOAD_CLASS_LABEL, Container, PodTemplate, WorkloadView

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

# The classes a job denied as training may really be, with what each is for (``gpuguard explain``).
NOT_TRAINING = (("smoke-test", "a smoke test or benchmark"),
                ("batch-inference", "evaluation, quantization, batch inference"))
_NOUNS = {"smoke-test": "a smoke test", "batch-inference": "batch work", "inference": "a server",
          "notebook": "a notebook"}


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
    min_offered_deadline_seconds: int = Field(
        1800, ge=0, description="The shortest deadline a denial offers as the way out (a run's image pull and "
        "setup alone take minutes); a job for which the GPU-hours bound would mean less is offered the "
        "smoke-test and batch-inference classes instead.")


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
        for policy in view.controller_claim_entries():
            retention = get_path(policy, ("retentionPolicy", "whenDeleted")) or "Delete"
            for _, tmpl in dicts(policy.get("templates")):
                name = get_path(tmpl, ("metadata", "name"))
                # Either way the claim outlives the pods and the JobSet's restarts: persistent for checkpoints.
                out[name] = (True, f"{kind} claim '{name}' (whenDeleted: {retention})")
    elif claims.style == "claim-templates":  # StatefulSet volumeClaimTemplates
        for tmpl in view.controller_claim_entries():
            name = get_path(tmpl, ("metadata", "name"))
            out[name] = (True, f"{kind} claim '{name}'")
    return out


def _volcano_mounts(view: WorkloadView) -> list[Mount]:
    """Volcano-style ``spec.volumes[]``: mounted into every container by the kind's controller."""
    mounts: list[Mount] = []
    claims = view.kind.volume_claims
    if claims is None or claims.style != "volcano-volumes":
        return mounts
    for vol in view.controller_claim_entries():
        path = str(vol.get("mountPath", ""))
        if isinstance(vol.get("volumeClaimName"), str):
            mounts.append(Mount(path, True, f"claim '{vol['volumeClaimName']}'"))
        elif "volumeClaim" in vol:  # owned by the job: it outlives the job's pods and restarts
            mounts.append(Mount(path, True, f"a claim the Volcano {view.kind.kind} creates for itself"))
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
    deadline = view.job_value("deadline")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0:
        return None
    return deadline / 3600 * view.total_gpus


def _bound_hint(view: WorkloadView, settings: Settings) -> str:
    """The ways out besides checkpoints: a deadline that keeps the GPU-hours at risk under the bound, offered
    only when it leaves time for real work (a 64-chip job would get 225 s, shorter than its own
    ``pip install``); and, on kinds whose deadline ``job-limits`` caps, the classes that need no
    checkpoints — that cap is their price.  Where the work looks like one of them, that one comes first."""
    fields = view.kind.job
    hint = ""
    if fields and fields.deadline and view.total_gpus and settings.max_gpu_hours_at_risk > 0:
        seconds = int(settings.max_gpu_hours_at_risk * 3600 / view.total_gpus)
        if seconds >= max(settings.min_offered_deadline_seconds, 1):
            hint = (f"; or, for a short run, set {dotted(fields.deadline)} <= {seconds} so at most "
                    f"{settings.max_gpu_hours_at_risk:g} GPU-hours are at risk")
    if not carries_deadline(view.kind):
        return hint
    guessed = view.guessed_class
    values = " or ".join(sorted((value for value, _ in NOT_TRAINING), key=lambda value: value != guessed))
    looks = ""
    if guessed in _NOUNS and view.reading is not None and not view.reading.guess.by_kind:
        looks = f"; it looks like {_NOUNS[guessed]} ({view.reading.guess.reason})"
    return f"{hint}{looks}; if it is not training, label it {WORKLOAD_CLASS_LABEL}: {values} (deadline capped)"


def _guess_note(view: WorkloadView, settings: Settings) -> str:
    """Why a check the class would skip still warns: the work looks like training."""
    if view.workload_class in settings.classes or view.reading is None:
        return ""
    return f"this {view.kind.kind} looks like training ({view.reading.guess.reason}): "


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    if not view.is_gpu:
        return
    judged = view.workload_class in settings.classes
    declared = view.reading is not None and view.reading.declared is not None and not view.reading.declaration_note
    if not judged and (declared or view.guessed_class not in settings.classes
                       or (view.reading is not None and view.reading.guess.weak)):
        return  # a declaration the kind honours outranks the look of the work; a framework image alone is no sign
    # A class that is only a guess (the look of a long-running kind's work, a bare Pod's run) warns.
    advisory = not judged or not view.class_is_evidence
    at_risk = _gpu_hours_at_risk(view)
    if at_risk is not None and at_risk <= settings.max_gpu_hours_at_risk:
        return
    found = list(_findings(view, settings))
    if not found:
        return  # the ways out are worded only for a finding
    hint = _bound_hint(view, settings) if judged else "; if it is training, run it as a Job or a training kind"
    note = _guess_note(view, settings)
    for finding in found:
        yield Finding(finding.path, note + finding.message, finding.fix + hint, finding.target, advisory)


# A flag the user set that sends checkpoints or run output to an object store (``--output_dir gs://…``,
# ``base_output_directory=s3://…``, ``--checkpoint-path=az://…``, Ray Train's ``--storage-path s3://…``, TensorFlow's
# ``--model_dir gs://…``): evidence, like CHECKPOINT_URI.
_OUTPUT_FLAG = re.compile(r"(?:checkpoint|ckpt|output|save|storage|model[_-]dir)[\w.-]*(?:=|\s+)['\"]?"
                          r"([a-z][a-z0-9+]*://)", re.IGNORECASE)


def _output_flag_to_object_store(container: Container, settings: Settings, kind_commands: list[str]) -> bool:
    """The container's command line, or the one its operator runs for it (a RayJob's ``entrypoint``), sends
    checkpoints or output to an object store."""
    parts: list[str] = list(kind_commands)
    for key in ("command", "args"):
        value = container.body.get(key)
        parts += [part for part in value if isinstance(part, str)] if isinstance(value, list) else []
    text = " ".join(parts)[:MAX_TEXT]
    schemes = tuple(settings.object_store_schemes)
    return any(match.group(1).lower() in schemes for match in _OUTPUT_FLAG.finditer(text))


def _findings(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    """What is wrong with each GPU container's checkpoints; the fixes end where ``validate`` adds the ways out."""
    extra = _claim_policies(view)
    operator_commands = view.kind_commands()  # one read per workload, not per container
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
                                  "CHECKPOINT_URI at an object store", container.name)
                    continue
                where = backing.what if backing else "the container's writable layer (lost when the pod restarts)"
                yield Finding(container.path, f"checkpoint path {label} is on {where}",
                              "back it with a persistentVolumeClaim or point CHECKPOINT_URI at an object store",
                              container.name)
            if bad_path:
                continue
            # A value from a ConfigMap or Secret (valueFrom, or envFrom, which may define any variable) can't
            # be read here: it counts as set, like the team's shared CHECKPOINT_URI usually is.
            object_store = container.env_from() or any(
                var in env and (env[var] is None or env[var].startswith(tuple(settings.object_store_schemes)))
                for var in settings.object_store_env_vars) or _output_flag_to_object_store(container, settings,
                                                                                           operator_commands)
            if not object_store and not any(m.persistent for m in mounts):
                read_only = next((m for m in mounts if m.read_only), None)
                if read_only is not None:
                    yield Finding(container.path, f"GPU training job's only persistent storage is {read_only.what}: "
                                  "checkpoints cannot be written there", "mount a writable persistentVolumeClaim "
                                  "for checkpoints or set CHECKPOINT_URI to an object store", container.name)
                    continue
                yield Finding(container.path, "GPU training job has no persistent volume for checkpoints",
                              "mount a persistentVolumeClaim (e.g. at /checkpoints) or set CHECKPOINT_URI to an "
                              "object store", container.name)


POLICY = ValidatingPolicy(
    id="checkpoint-volume",
    title="Persistent checkpoints for GPU training",
    settings_model=Settings,
    run=validate,
    description="GPU training containers must mount writable persistent storage (PVC, NFS, durable CSI ...) or set "
    "`CHECKPOINT_URI` (a value, `valueFrom` or `envFrom`) to an object store, or pass a checkpoint or output flag an "
    "object-store URI (`--output_dir gs://…`); checkpoint paths on emptyDir, "
    "ephemeral volumes, hostPath, read-only mounts or the container filesystem are rejected; claims an operator "
    "creates for the workload (StatefulSet, JobSet `volumeClaimPolicies`, Volcano, Argo) count. A run whose deadline "
    "bounds what it can lose (deadline x GPUs <= 4 GPU-hours) needs none; smoke tests, evaluations and "
    "quantizations are other classes (`gpuguard.io/workload-class`).",
    rationale="A preempted or OOM-killed training pod restarts from its last checkpoint; if that lived on "
    "ephemeral storage, every GPU-hour since the start is lost.",
    cpu_scope=accelerator_objects_only,
)
