"""The report CRDs' schemas, made strict, for validating what gpuguard writes (PolicyReports, OpenReports).

Strict: ``additionalProperties: false`` wherever a schema lists properties, because the apiserver would silently
prune a field the CRD does not declare and Policy Reporter would never see it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def strict(schema: Any) -> Any:
    """The CRD's schema with ``additionalProperties: false`` wherever it lists properties."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_schemas(path: Path) -> dict[str, Any]:
    """Kind -> strict schema of every CRD in ``path`` (its first version)."""
    return {crd["spec"]["names"]["kind"]: strict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
            for crd in yaml.safe_load_all(path.read_text()) if crd}
