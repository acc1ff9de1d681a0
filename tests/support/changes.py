"""The Job the change-warning and GitOps e2e tests apply: gpuguard caps its 30-day TTL to 7 days and grows the
tolerations list it writes (one spot toleration), so both kinds of change to a manifest's own values show."""

from __future__ import annotations

THIRTY_DAYS, SEVEN_DAYS = 30 * 86400, 7 * 86400
SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def job(ns: str, name: str, ttl: int = THIRTY_DAYS) -> dict:
    """A checkpointed one-GPU training Job with ``ttl`` and the user's own spot toleration."""
    trainer = {"name": "trainer", "image": "ghcr.io/example/train:1", "command": ["python", "train.py"],
               "resources": {"limits": {"nvidia.com/gpu": 1}},
               "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}
    pod = {"restartPolicy": "Never", "containers": [trainer], "tolerations": [SPOT],
           "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {"spec": pod}}}
