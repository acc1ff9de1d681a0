"""Hostile manifest text shared by the manifest reader's and the CLI verbs' tests."""

from __future__ import annotations

import yaml

# 9 levels of 9 aliases each: 9**9 (387 million) strings once expanded, in about 500 bytes.
BOMB = "\n".join(
    ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: lol}", "data:",
     '  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]) + "\n"

# Every C0 control character XML 1.0 forbids, and DEL: what YAML can carry in a quoted string.
CONTROL_CHARS = "".join(chr(c) for c in range(0x20) if chr(c) not in "\t\n\r") + "\x7f"


def gpu_job_yaml(name: str) -> str:
    """A one-GPU Job named ``name`` as YAML (escapes for whatever ``name`` holds)."""
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml"},
                           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                               {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}},
                          allow_unicode=False)
