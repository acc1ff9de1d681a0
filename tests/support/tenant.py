"""A tenant's view of the e2e cluster: namespaces administered by ``alice``, manifests applied as her.

The ML operators' custom resources are not in the aggregated ``edit`` role, so ``alice`` gets a
namespace-scoped RoleBinding to ``cluster-admin``; operators' identities can be given the same in a
namespace to create what they derive (``kubectl --as``).
"""

from __future__ import annotations

import uuid
from typing import Any

import yaml

USER = "alice"


def dump(obj: dict) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


class TenantEnv:
    """``namespace`` makes one for ``alice`` (and the operators named); ``apply`` runs as a user."""

    def __init__(self, cp: Any, prefix: str) -> None:
        self.cp, self.prefix = cp, prefix

    def namespace(self, *operators: str) -> str:
        ns = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
        self.cp.kubectl("create", "namespace", ns)
        self.cp.kubectl("create", "rolebinding", "alice-admin", "--clusterrole=cluster-admin", f"--user={USER}",
                        "-n", ns)
        for i, operator in enumerate(operators):
            self.cp.kubectl("create", "rolebinding", f"operator-{i}", "--clusterrole=cluster-admin",
                            f"--user={operator}", "-n", ns)
        return ns

    def apply(self, obj: dict, user: str | None = USER, check: bool = False):
        """``kubectl apply`` as ``user`` (``None``: the admin, for objects a platform team installs)."""
        as_user = [f"--as={user}"] if user else []
        return self.cp.kubectl(*as_user, "apply", "-f", "-", input=dump(obj), check=check)

    def get(self, *args: str) -> dict:
        return self.cp.kubectl_json("get", *args)
