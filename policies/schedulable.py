"""schedulable: refuse what no node or pool of this cluster can ever host.

A pod that asks for 16 GPUs where the largest node has 8, for more memory than any GPU node
has, for a product no node carries, or that tolerates none of the taints every GPU node has,
is accepted by the apiserver and pends forever; a distributed job whose pods must run together
and ask for more GPUs than the whole cluster (and its pools) can ever offer never starts, while
the pods that did start hold their GPUs.  Judged from the node inventory
(``workloads/inventory.py``: the Nodes, declared pools and Karpenter NodePools, and the devices DRA drivers
publish in ResourceSlices); without one nothing is judged here (``gpu-request-shape`` keeps the profiles' caps).
A pod's DRA claims are judged against the slices of the drivers their DeviceClass selects, only where that is
evidence: the class names its driver, some node's slices of it were read, and no pool may add nodes whose
devices are unknown.  Capacity in use is
not the question: nothing is denied for being busy now.

The checks narrow the groups a pod could land on step by step (offers its accelerators, enough
devices, enough CPU/memory/ephemeral storage, matches its node selection, tolerates the taints),
so the message names the first step no group passes and the largest shape there is.  A pool whose
node shape is unknown (a Karpenter NodePool) passes every size step.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from functools import partial

import orjson
from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.inventory import NODE_RESOURCES, Inventory, NodeGroup
from gpuguard.workloads.kinds import POD_CONTAINER_LISTS
from gpuguard.workloads.paths import dotted
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    check_gangs: bool = Field(True, description="Deny a distributed job whose pods, which must run together, ask "
                              "for more accelerators than every eligible node and pool can ever offer.")



NEVER_WHOLE = "it can never start whole"  # a gang no nodes can hold whole: the start of its finding

def _num(value: Decimal) -> str:
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _qty(name: str, value: Decimal) -> str:
    """CPU as cores, bytes as Gi (what an allocatable of 93415538688 means to a reader)."""
    if name == "cpu" or "/" in name:
        return _num(value.quantize(Decimal("0.001")))
    return f"{_num((value / 2**30).quantize(Decimal('0.1')))}Gi"


def _largest(groups: list[NodeGroup], resource: str) -> NodeGroup:
    """The group with the most of ``resource`` per node (a pool of unknown shape counts as none)."""
    return max(groups, key=lambda g: g.amount(resource) or Decimal(0))


def _asks(template: PodTemplate) -> dict[str, Decimal]:
    """Per pod: the accelerator units by extended resource and the CPU, memory and disk requests."""
    out = {r: Decimal(n) for r, n in template.effective_gpus.items() if "/" in r}
    for name in NODE_RESOURCES:
        asked = template.pod_request(name)
        if asked > 0:
            out[name] = asked
    return out


def _fits(group: NodeGroup, resource: str, amount: Decimal) -> bool:
    have = group.amount(resource)
    return have is None or have >= amount


def _too_many_devices(template: PodTemplate, asks: dict[str, Decimal], groups: list[NodeGroup]) -> Finding | None:
    for resource in sorted(r for r in asks if "/" in r):
        if not any(_fits(g, resource, asks[resource]) for g in groups):
            big = _largest(groups, resource)
            return Finding(template.spec_path, f"asks {_num(asks[resource])} {resource} per pod; the largest eligible "
                           f"node has {_num(big.amount(resource) or Decimal(0))} ({big.describe()}): it would pend "
                           "forever", f"ask for at most {_num(big.amount(resource) or Decimal(0))} per pod and add "
                           "pods (workers) instead")
    return None


def _too_big(template: PodTemplate, asks: dict[str, Decimal], groups: list[NodeGroup]) -> Finding | None:
    for name in NODE_RESOURCES:
        if name in asks and not any(_fits(g, name, asks[name]) for g in groups):
            big = _largest(groups, name)
            have = big.amount(name) or Decimal(0)
            return Finding(template.spec_path, f"asks {name} {_qty(name, asks[name])} per pod; the largest eligible "
                           f"node has {_qty(name, have)} allocatable ({big.describe()}): it would pend forever",
                           f"request at most {_qty(name, have)} {name} per pod")
    return None


def _names(groups: list[NodeGroup]) -> str:
    shown = [g.describe() for g in groups[:4]]
    return "; ".join(shown) + (f" and {len(groups) - 4} more" if len(groups) > 4 else "")


def _too_many_claimed(template: PodTemplate, inventory: Inventory) -> Finding | None:
    """DRA claims asking more devices of a class than any node's ResourceSlices publish (the class's drivers'
    devices: an upper bound).  Judged only on evidence: the class and its drivers known, slices of them read on
    some node, and no pool whose nodes' devices are unknown (``Inventory.dra_offer``)."""
    for device_class, count in sorted(template.claim_floor.items()):
        offer = inventory.dra_offer(device_class)
        if offer is None or any(have >= count for _, have in offer):
            continue
        group, most = max(offer, key=lambda pair: pair[1])
        found = inventory.device_class(device_class)
        required = found.requirements() if found is not None else ""
        selected = f" that the class selects ({required})" if required else ""
        fix = f"claim at most {most} per pod and add pods (workers) instead" if most else (
            "claim a DeviceClass whose requirements the nodes' devices meet, or add nodes whose devices do")
        return Finding(template.spec_path, f"claims {count} devices of DeviceClass {device_class} per pod (DRA); the "
                       f"most any node's ResourceSlices publish{selected} is {most} ({group.describe()}): it would "
                       "pend forever", fix)
    return None


def _judge_pod(template: PodTemplate, inventory: Inventory, claims_only: bool = False) -> Finding | None:
    claimed = _too_many_claimed(template, inventory) if template.claim_floor else None
    if claimed is not None or claims_only:
        return claimed
    asks = _asks(template)
    accelerators = sorted(r for r in asks if "/" in r)
    if not accelerators:
        return None  # DRA claims only: their devices were judged against the ResourceSlices above
    groups = inventory.eligible(accelerators)
    if not groups:
        return Finding(template.spec_path, f"asks {', '.join(accelerators)}, which no node or pool of the cluster "
                       "offers: it would pend forever", "ask for an accelerator the cluster has, or declare the "
                       "pool that adds it (inventory.nodePools, docs/inventory.md)")
    finding = _too_many_devices(template, asks, groups)
    if finding is not None:
        return finding
    groups = [g for g in groups if all(_fits(g, r, asks[r]) for r in accelerators)]
    finding = _too_big(template, asks, groups)
    if finding is not None:
        return finding
    groups = [g for g in groups if all(_fits(g, r, v) for r, v in asks.items())]
    node_selector, terms = template.node_selection()
    matched = [g for g in groups if g.matches(node_selector, terms)]
    if not matched:
        return Finding(template.spec_path, "its nodeSelector or required node affinity matches none of the nodes "
                       f"and pools that can hold it ({_names(groups)}): it would pend forever",
                       "select a product or label those nodes carry (kubectl get nodes --show-labels)")
    tolerations = template.spec.get("tolerations")
    tolerations = tolerations if isinstance(tolerations, list) else []
    if all(g.untolerated(tolerations) for g in matched):
        taints = sorted({t.text() for g in matched for t in g.untolerated(tolerations)})
        return Finding(template.spec_path, f"does not tolerate the taints of any node that can hold it "
                       f"({', '.join(taints)} on {_names(matched)}): it would pend forever",
                       f"add a toleration for {taints[0]}")
    return None


def _shape_key(template: PodTemplate) -> bytes:
    """Everything ``_judge_pod`` reads of a pod, as JSON (cheaper than reading the quantities)."""
    spec = template.spec
    if template.adapted or template.ref.container_keys or template.ref.container_lists != POD_CONTAINER_LISTS:
        return _json((spec, sorted(template.effective_gpus.items()), sorted(template.claim_floor.items()),
                      template.shares_claims))  # containers not in the usual lists
    parts = [spec.get(k) for k in ("nodeSelector", "affinity", "tolerations", "resources")]
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        parts.append([(c.get("resources"), c.get("restartPolicy")) if isinstance(c, dict) else c
                      for c in items] if isinstance(items, list) else items)
    parts.append(sorted(template.effective_gpus.items()))
    if template.claim_devices:
        parts.append([sorted(template.claim_floor.items()), template.shares_claims])
    return _json(parts)


def _json(value: object) -> bytes:
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)


def _pods_per_node(group: NodeGroup, asks: dict[str, Decimal]) -> int | None:
    """How many whole pods of this shape one node of ``group`` holds (``None``: not known, e.g. a pool of unknown
    shape); a node holds a pod only whole, so a 4-GPU pod on a 2-GPU node is none."""
    fits: list[int] = []
    for name, amount in asks.items():
        have = group.amount(name)
        if have is None:
            if "/" in name:
                return None
            continue  # a node that does not report its disk (or CPU) does not limit the count
        fits.append(int(have // amount) if amount > 0 else 1 << 30)
    return min(fits) if fits else None


def _may_land_on(template: PodTemplate, groups: list[NodeGroup]) -> list[NodeGroup]:
    """The groups a pod of ``template`` may land on by its node selection and tolerations."""
    node_selector, terms = template.node_selection()
    tolerations = template.spec.get("tolerations")
    tolerations = tolerations if isinstance(tolerations, list) else []
    return [g for g in groups if g.matches(node_selector, terms) and not g.untolerated(tolerations)]


def _gang_slots(template: PodTemplate, inventory: Inventory) -> tuple[int, list[NodeGroup]] | None:
    """Pods of the template's shape the cluster can ever hold at once (per node whole pods x nodes, on the groups it
    may land on by its selection and tolerations), and those groups; ``None``: a pool with no bound may grow."""
    asks = _asks(template)
    accelerators = [r for r in asks if "/" in r]
    if not accelerators:
        return _claim_slots(template, inventory, asks)
    groups = _may_land_on(template, inventory.eligible(accelerators))
    slots, holding = 0, []
    for group in groups:
        per_node = _pods_per_node(group, asks)
        if per_node is None or group.count is None:
            return None  # no bound known (an unbounded pool, a Karpenter pool): it may grow to fit
        slots += per_node * group.count
        if per_node:
            holding.append(group)
    return slots, holding


def _claim_slots(template: PodTemplate, inventory: Inventory,
                 asks: dict[str, Decimal]) -> tuple[int, list[NodeGroup]] | None:
    """``_gang_slots`` for pods whose accelerators are DRA claims only: whole pods per node by the devices each
    node's ResourceSlices publish for every class the pod claims (and its CPU and memory); ``None`` where the
    slices are no evidence (``Inventory.dra_offer``)."""
    if template.shares_claims or template.claim_floor != template.claim_devices:
        return None  # pods sharing a claim share its devices; a claim of unsure size is no evidence
    offers = [(count, inventory.dra_offer(device_class)) for device_class, count in template.claim_floor.items()]
    if not offers or any(offer is None for _, offer in offers):
        return None
    landing = {id(g) for g in _may_land_on(template, list(inventory.groups))}
    slots, holding = 0, []
    for index, group in enumerate(inventory.groups):
        if id(group) not in landing or group.count is None:
            continue
        per_node = min(offer[index][1] // count for count, offer in offers if offer is not None and count > 0)
        by_size = _pods_per_node(group, asks)
        per_node = min(per_node, by_size) if by_size is not None else per_node
        slots += per_node * group.count
        if per_node:
            holding.append(group)
    return slots, holding


def _gang(view: WorkloadView, inventory: Inventory, claims_only: bool = False) -> Finding | None:
    """A gang placed in part holds its GPUs and trains nothing: it fits only if every pod of it fits whole at once.
    Counted in whole pods per node group (four 4-GPU pods never fit on 2-GPU nodes, whatever their GPUs add up to);
    templates of one shape share the count."""
    by_shape: dict[bytes, tuple[PodTemplate, int]] = {}
    for template, pods in view.running_templates():
        if template.gpus_per_pod:
            key = _shape_key(template)
            seen = by_shape.get(key)
            by_shape[key] = (template, pods + (seen[1] if seen else 0))
    for template, pods in by_shape.values():
        if claims_only and any("/" in r for r in template.effective_gpus):
            continue  # nodes known only by their slices say nothing of extended resources
        found = _gang_slots(template, inventory)
        if found is None:
            continue
        slots, groups = found
        if pods > slots:
            where = _names(groups) if groups else "no node or pool it may land on"
            # the conclusion first: a long list of groups must not push it out of what kubectl shows
            return Finding(("spec",), f"{NEVER_WHOLE}: its {pods} pods must run together; whole pods of the shape "
                           f"of {dotted(template.spec_path)} fit at most {slots} at once ({where})",
                           "lower the replicas or the accelerators per pod, or add nodes (or raise a pool's "
                           "maxCount)")
    return None


def _not_now(finding: Finding) -> Finding:
    """What only cordoned nodes can host pends until they are uncordoned: a warning, not a denial."""
    # what the user is told first (kubectl shows a warning's first 256 characters): "now", and why
    message = finding.message
    if message.startswith(NEVER_WHOLE):
        message = "it can't start whole now, only cordoned nodes can take it" + message[len(NEVER_WHOLE):]
    elif message.endswith(": it would pend forever"):
        message = f"it would pend now, only cordoned nodes can take it: {message[:-len(': it would pend forever')]}"
    else:
        message += "; only cordoned nodes can take it now"
    return Finding(finding.path, message, "wait for the nodes to be uncordoned, or " + finding.fix, finding.target,
                   advisory=True)


def _judge(view: WorkloadView, inventory: Inventory, settings: Settings) -> Iterator[Finding]:
    claims_only = not inventory.known  # nodes whose only accelerators are DRA devices in ResourceSlices
    for template in view.gpu_templates:
        # the same shape is judged once per inventory summary: the key is everything _judge_pod reads
        key = ("schedulable", template.spec_path, _shape_key(template), claims_only)
        finding: Finding | None = inventory.memo(key, partial(_judge_pod, template, inventory, claims_only))
        if finding is not None:
            yield finding
    if settings.check_gangs and view.kind.gang is not None and view.pod_count() > 1:
        gang = _gang(view, inventory, claims_only)
        if gang is not None:
            yield gang


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    inventory = view.inventory
    if not inventory.known and not inventory.publishes_dra:
        return
    now = list(_judge(view, inventory.schedulable_now(), settings))
    if not now or not inventory.has_cordoned:
        yield from now
        return
    # With the cordoned nodes back, what could never be placed is still denied; the rest pends only now.
    ever = {(f.path, f.target) for f in _judge(view, inventory, settings)}
    for finding in now:
        yield finding if (finding.path, finding.target) in ever else _not_now(finding)


POLICY = ValidatingPolicy(
    id="schedulable",
    title="Only what some node or pool can ever host",
    settings_model=Settings,
    run=validate,
    description="With a node inventory (docs/inventory.md), denies a pod or pod template that no node group or "
    "declared pool can ever host (more devices per pod than any eligible node has, CPU/memory/ephemeral storage "
    "beyond every eligible node's allocatable, a node selection no such node matches, taints it does not tolerate "
    "on all of them, DRA claims for more devices of a class than any node's ResourceSlices publish) and a "
    "distributed job whose pods, which must run together, ask for more accelerators than all "
    "eligible nodes and pools can offer, naming what it asked for and the largest shape there is; never for "
    "capacity in use now.",
    rationale="The apiserver accepts a pod no node can hold; it pends forever, and a gang that can never fit holds "
    "the GPUs of the pods that did start.",
    cpu_scope=accelerator_objects_only,
)
