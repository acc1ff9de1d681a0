"""Who may create objects from a template gpuguard already checked: controllers, by identity.

An object a controller makes from its parent's template (the ReplicaSet of a Deployment, the
Job of a CronJob or JobSet, the Pods of any of them) must come out of admission exactly as the
template says, or the controller's own comparisons fail: the Deployment controller took a
mutated ReplicaSet for a hash collision and made a new one, forever.  So gpuguard leaves such
objects alone: it neither mutates them nor, while ``trustControllerPods`` is on, validates them
again, and their workload class is their parent's.

"Made by a controller" is decided here and only here, from two facts, both required:

* the request's ``userInfo.username`` is that controller's identity — kube-controller-manager's
  per-controller service accounts (``--use-service-account-credentials``, the default of every
  kubeadm/managed cluster) or its own user ``system:kube-controller-manager``, and the operators'
  service accounts the kind table or the config names;
* the object's ``controller: true`` ownerReference points at a kind that controller creates this
  kind for (a ReplicaSet owned by a Deployment, from the deployment controller).

Object content alone (ownerReferences, labels, annotations) never grants anything: a user can
write any ownerReference, but cannot send a request as ``replicaset-controller``.

Which operator creates which kind, and under which service accounts, is declared with each kind
(``KindSpec.controllers``; the accounts are those of the operators' upstream install manifests
and Helm charts in their default namespaces); an admin whose operator runs elsewhere overrides
the entry by name in ``trustedControllers`` (see ``docs/admin.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuguard.workloads.kinds import KINDS, KindSpec

# The GroupKind notation used in the config: "Pod" (core group), "apps/ReplicaSet", "batch/Job".
GroupKind = tuple[str, str]


def group_kind_text(group: str, kind: str) -> str:
    """``("apps", "ReplicaSet")`` -> ``"apps/ReplicaSet"``; ``("", "Pod")`` -> ``"Pod"``."""
    return f"{group}/{kind}" if group else kind


def defaults_from(kinds: Iterable[KindSpec]) -> dict[str, dict[str, Any]]:
    """The ``trustedControllers`` entries the kinds' ``controllers`` declare, in the config's shape:
    name -> {users, creates: [{owner, kind[, mutate]}]}, in kind-table order."""
    table: dict[str, dict[str, Any]] = {}
    for spec in kinds:
        for made in spec.controllers:
            entry = table.setdefault(made.operator.name, {"users": list(made.operator.users), "creates": []})
            owner = made.owner or group_kind_text(spec.group, spec.kind)
            entry["creates"] += [{"owner": owner, "kind": kind, **({"mutate": True} if made.mutate else {})}
                                 for kind in made.kinds]
    return table


# The built-in entries, derived from the kind table; an admin's ``trustedControllers`` entries
# override them by name.
DEFAULT_TRUSTED_CONTROLLERS: dict[str, dict[str, Any]] = defaults_from(KINDS)


def parse_group_kind(text: str) -> GroupKind:
    """``"apps/ReplicaSet"`` -> ``("apps", "ReplicaSet")``; ``"Pod"`` -> ``("", "Pod")``."""
    group, _, kind = text.rpartition("/")
    return group, kind


def api_group(api_version: Any) -> str:
    """``batch/v1`` -> ``batch``; ``v1`` -> ``""``."""
    if not isinstance(api_version, str):
        return ""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@dataclass(frozen=True)
class ControllerOrigin:
    """What made an object: a trusted controller, for its controlling owner."""

    controller: str  # the trustedControllers entry name
    owner: GroupKind
    owner_name: str
    mutate: bool = False  # the controller's objects still get gpuguard's mutations (see the table)

    @property
    def reason(self) -> str:
        group, kind = self.owner
        owner = f"{kind}.{group}" if group else kind
        return (f"created by {self.controller} from {owner} {self.owner_name}, whose template gpuguard "
                "checked")


class TrustedControllers:
    """The compiled table: (username, owner GroupKind, created GroupKind) -> controller name."""

    def __init__(self, entries: Mapping[str, tuple[Iterable[str], Iterable[tuple[GroupKind, GroupKind, bool]]]]):
        self._edges: dict[tuple[str, GroupKind, GroupKind], tuple[str, bool]] = {}
        users: set[str] = set()
        for name, (usernames, edges) in entries.items():
            for user in usernames:
                users.add(user)
                for owner, child, mutate in edges:
                    self._edges.setdefault((user, owner, child), (name, mutate))
        self._users = frozenset(users)

    def users(self) -> frozenset[str]:
        """Every trusted controller identity (the webhook configurations keep their updates away)."""
        return self._users

    def left_alone(self) -> list[tuple[str, GroupKind, GroupKind]]:
        """(username, owner, created) for every edge whose objects gpuguard leaves alone (not ``mutate``):
        the webhook configurations keep those creates away while ``trustControllerPods`` is on."""
        return sorted((user, owner, child) for (user, owner, child), (_, mutate) in self._edges.items()
                      if not mutate)

    def is_controller(self, username: str) -> bool:
        """Whether the requester is a trusted controller at all (whatever the object)."""
        return username in self._users

    def origin(self, obj: dict, username: str) -> ControllerOrigin | None:
        """The controller that made ``obj`` in this request, or ``None`` (then it is a user's object)."""
        if username not in self._users:  # the common case (users): one set lookup
            return None
        meta = obj.get("metadata")
        refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
        if not isinstance(refs, list):
            return None
        child = (api_group(obj.get("apiVersion")), obj.get("kind"))
        for ref in refs:
            if not isinstance(ref, dict) or ref.get("controller") is not True:
                continue
            kind = ref.get("kind")
            if not isinstance(kind, str) or not isinstance(child[1], str):
                return None  # malformed: the apiserver refuses it; it grants nothing
            owner = (api_group(ref.get("apiVersion")), kind)
            edge = self._edges.get((username, owner, child))  # type: ignore[arg-type]
            if edge is not None:
                return ControllerOrigin(edge[0], owner, str(ref.get("name", "")), edge[1])
            return None  # one controller reference only: a wrong one grants nothing
        return None
