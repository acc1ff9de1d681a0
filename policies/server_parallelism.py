"""server-parallelism: a model server's parallelism must match the accelerators it is given.

A vLLM, SGLang, TGI or TensorRT-LLM server starts one rank per device its parallelism flags ask for
(tensor x pipeline x data-parallel ranks in the pod).  With more ranks than the devices its container
holds it fails at start, after the image pull and often the model download, and a Deployment retries it
forever; with fewer, the other devices sit idle for as long as the server runs.  A multi-node server (a
LeaderWorkerSet group, a multi-node KServe service) spreads its ranks over the group's pods: a group
smaller than the parallelism can't start, one larger leaves devices idle.

Only evidence counts: a server named by its command line (``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``, ``python -m sglang.launch_server``, ``text-generation-launcher``,
``trtllm-serve``, in ``command``/``args`` or a shell command line), parallelism flags with a literal value
(``--tensor-parallel-size 4``, ``--tp=4``, TGI's ``NUM_SHARD`` env value), and the serving kinds' own fields
(``KindSpec.serving_groups``: an LLMInferenceService's ``parallelism``, an InferenceService's
``workerSpec``).  A value the manifest does not fix (``$(TP)``, ``${TP}``, a ``valueFrom``, a ``--config``
file, ``$EXTRA_ARGS`` that may add flags) makes the reading unknown and the policy says nothing.  A server
known only by its image (``args`` for the vLLM or TGI image's own entrypoint) is a guess: it only warns.
Only the devices of the container running the server count (a container sees its own devices only);
devices that come from DRA claims or whose units are not one rank each (``skipResources``: a Neuron
device holds several NeuronCores) are not compared.

A RayService's Serve applications (``serveConfigV2``, read by ``kinds.ray.serve``) are weighed
against the Ray cluster it brings: a replica's ``engine_kwargs`` tensor x pipeline parallelism, placement
bundles or ``ray_actor_options.num_gpus`` that no pod (an actor, ``STRICT_PACK``) or the whole cluster can hold,
or minimum replicas beyond it, never start (deny); a cluster that doesn't autoscale and holds more GPUs than every
engine uses at its maximum keeps the rest idle (warn).  Idle devices are priced by the config's ``cost`` table,
the one the audit's cost at risk uses, so the warning and the audit name the same figure.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.classify import MAX_TEXT
from gpuguard.workloads.kinds.ray.serve import RayServe
from gpuguard.workloads.kinds.spec import ServingGroup
from gpuguard.workloads.prices import Prices, pinned_products, usd
from gpuguard.workloads.view import Container, PodTemplate, WorkloadView

HOURS_PER_DAY = 24


class Settings(PolicySettings):
    skip_resources: list[str] = Field(
        default_factory=lambda: ["aws.amazon.com/neuron", "aws.amazon.com/neurondevice"],
        description="Accelerator resources (names or globs) whose unit is not one server rank (a Neuron device "
        "holds 2 to 8 NeuronCores, which tensor parallelism counts): servers holding them are not compared.")


# ---------------------------------------------------------------- reading a command line

@dataclass(frozen=True)
class Server:
    """What one server's flags mean: the spellings of each dimension, its boolean flags, the flags whose
    presence says it runs over several nodes, and those that read settings from a file."""

    name: str
    dims: dict[str, str]  # spelling -> dimension (tp, pp, dp, dpl, nnodes, gpn)
    switches: frozenset[str] = frozenset()  # flags without a value
    spread: frozenset[str] = frozenset()  # multi-node markers: how much runs in this pod is not fixed here
    files: frozenset[str] = frozenset()  # settings from a file: the parallelism may be there


def _spellings(dim: str, *names: str) -> dict[str, str]:
    out = {}
    for name in names:
        out[name] = dim
        if name.startswith("--"):
            out["--" + name[2:].replace("-", "_")] = dim  # vLLM and TRT-LLM accept both
            out["--" + name[2:].replace("_", "-")] = dim
    return out


VLLM = Server("vLLM", {
    **_spellings("tp", "--tensor-parallel-size", "-tp"), **_spellings("pp", "--pipeline-parallel-size", "-pp"),
    **_spellings("dp", "--data-parallel-size", "-dp"), **_spellings("dpl", "--data-parallel-size-local", "-dpl"),
    **_spellings("nnodes", "--nnodes")},
    switches=frozenset({"--headless", "--data-parallel-hybrid-lb", "--data-parallel-external-lb",
                        "--enable-expert-parallel"}),
    spread=frozenset({"--headless", "--data-parallel-start-rank", "-dpr", "--data-parallel-address", "-dpa",
                      "--data-parallel-rank", "--node-rank", "--data-parallel-hybrid-lb",
                      "--data-parallel-external-lb"}),
    files=frozenset({"--config"}))
SGLANG = Server("SGLang", {
    **_spellings("tp", "--tensor-parallel-size", "--tp-size", "--tp"),
    **_spellings("pp", "--pipeline-parallel-size", "--pp-size", "--pp"),
    **_spellings("dp", "--data-parallel-size", "--dp-size", "--dp"), "--nnodes": "nnodes"},
    switches=frozenset({"--enable-dp-attention"}), files=frozenset({"--config"}))
TGI = Server("TGI", {"--num-shard": "shards"}, files=frozenset())
TRTLLM = Server("TensorRT-LLM", {
    **_spellings("tp", "--tp_size"), **_spellings("pp", "--pp_size"), **_spellings("gpn", "--gpus_per_node")},
    files=frozenset({"--extra_llm_api_options", "--extra-llm-api-options", "--config"}))

# Images whose own entrypoint is the server (a container that sets only ``args``): a guess, never a denial.
_IMAGE_SERVERS = ((re.compile(r"(?:^|/)vllm/vllm-(?:openai|tpu)$"), VLLM),
                  (re.compile(r"(?:^|/)huggingface/text-generation-inference$"), TGI))
_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
# Words that end a shell command (the flags after them are another command's).
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;", "|&", "then", "do", "else", "elif", "fi", "done", "esac"})
_SPECIAL = set(" \t\n;&|")
_INT = re.compile(r"^[0-9]{1,6}$")


@dataclass(frozen=True)
class Reading:
    """What one server's command line says it will use.

    ``per_pod``: devices its ranks in this pod use (``None``: the flags spread it over pods in a way not
    fixed here); ``total``: devices over all its pods; each with the flags that make it, as written
    (``vLLM --tensor-parallel-size 4 x -pp 2``).  ``per_node``: the flags themselves say how much runs in
    this pod (``--data-parallel-size-local``, ``--nnodes``), so ``per_pod`` holds inside a group too;
    ``nodes``: the node count the flags name; ``guessed``: the server is known by its image only;
    ``spans_ray``: it may place ranks anywhere in a Ray cluster (``ray start`` beside it, the Ray backend).
    """

    server: str
    per_pod: int | None
    per_pod_text: str
    total: int | None
    total_text: str
    per_node: bool = False
    nodes: tuple[str, int] | None = None
    guessed: bool = False
    spans_ray: bool = False


class _Unfixed(Exception):
    """A value the manifest does not fix: the reading is not evidence."""


def _shell_words(text: str) -> list[str]:
    """A shell command line as words, with ``;``, ``&&``, ``|`` … and line ends as words of their own."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ").replace("\n", " ; ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: the shell refuses it too; read it word by word
        return text.split()


def command_words(body: dict) -> list[str] | None:
    """The container's ``command`` and ``args`` as words, shell command lines split as the shell splits them;
    ``None`` when they can't be read whole (not strings, or longer than ``MAX_TEXT``)."""
    items: list[str] = []
    size = 0
    for key in ("command", "args"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            return None
        for item in value:
            size += len(item) + 1
            if size > MAX_TEXT:
                return None
            items.append(item)
    words: list[str] = []
    for item in items:
        if _SPECIAL.intersection(item):  # a shell command line (``sh -c "…"``, a script in args)
            words.extend(_shell_words(item))
        else:
            words.append(item)
    return words


def _invocations(words: list[str]) -> Iterator[tuple[Server, list[str]]]:
    """Each server the words start, with its arguments (up to the end of that shell command)."""
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        server, start = None, i + 1
        if (base == "vllm" and nxt == "serve") or (word == "-m" and nxt in _VLLM_MODULES):
            server, start = VLLM, i + 2
        elif word == "-m" and nxt == "sglang.launch_server":
            server, start = SGLANG, i + 2
        elif base == "text-generation-launcher":
            server = TGI
        elif base == "trtllm-serve":
            if nxt in ("disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve"):
                continue
            server, start = TRTLLM, i + 2 if nxt == "serve" else i + 1
        if server is None:
            continue
        end = next((j for j in range(start, len(words)) if words[j] in _SEPARATORS), len(words))
        yield server, words[start:end]


def _value(flag: str, raw: str | None) -> int:
    if raw is None or not _INT.match(raw) or int(raw) < 1:
        raise _Unfixed(flag)
    return int(raw)


def _flags(server: Server, args: list[str]) -> tuple[dict[str, tuple[str, int]], set[str]]:
    """(dimension -> (flag as written, value), other flags seen).  Raises ``_Unfixed`` for a value the manifest
    does not fix, or a word that may add flags (``$EXTRA_ARGS``, ``"$@"``)."""
    dims: dict[str, tuple[str, int]] = {}
    seen: set[str] = set()
    i, positional = 0, 0
    while i < len(args):
        word = args[i]
        if word.startswith("-") and len(word) > 1 and not word[1:].isdigit():
            name, eq, raw = word.partition("=")
            seen.add(name)
            takes_value = not eq and name not in server.switches
            value = raw if eq else (args[i + 1] if takes_value and i + 1 < len(args) else None)
            if name in server.dims:
                dims[server.dims[name]] = (name, _value(name, value))  # the last one wins, as argparse reads it
            if takes_value and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1  # the option's value (an expansion there is that option's, not more flags)
        elif word.endswith((">", "<")) or word in ("2>&1",):
            i += 1  # a redirection and its target
        else:
            positional += 1
            if "$" in word and not (positional == 1 and server in (VLLM, TRTLLM)):
                raise _Unfixed(word)  # an expansion that may hold more flags (the model argument aside)
        i += 1
    return dims, seen


def _product(server: Server, dims: dict[str, tuple[str, int]], names: tuple[str, ...]) -> tuple[int, str]:
    """The product of the dimensions ``names`` (unset ones count 1) and the flags that set them, as written."""
    value, shown = 1, []
    for name in names:
        if name in dims:
            flag, n = dims[name]
            value *= n
            shown.append(f"{flag} {n}")
    return value, f"{server.name} " + " x ".join(shown)


def _reading(server: Server, args: list[str], env: dict[str, str | None], guessed: bool) -> Reading | None:
    try:
        dims, seen = _flags(server, args)
        if server is TGI and "shards" not in dims and "NUM_SHARD" in env:
            dims["shards"] = ("NUM_SHARD", _value("NUM_SHARD", env["NUM_SHARD"]))
    except _Unfixed:
        return None
    if not dims or seen & server.files:
        return None  # nothing explicit (defaults are no evidence), or settings from a file
    if server is TGI:
        total, text = _product(server, dims, ("shards",))
        return Reading(server.name, total, text, total, text, True, guessed=guessed)
    ranks = ("tp", "pp") if server is TRTLLM or "--enable-dp-attention" in seen else ("tp", "pp", "dp")
    total, text = _product(server, dims, ranks)
    if text == server.name + " ":
        return None  # only flags that size nothing by themselves
    if server is TRTLLM:
        gpn = dims.get("gpn")
        if gpn is not None and total > gpn[1]:
            return Reading(server.name, gpn[1], f"{server.name} {gpn[0]} {gpn[1]}", total, text, True, guessed=guessed)
        return Reading(server.name, total, text, total, text, gpn is not None, guessed=guessed)
    spans_ray = "ray" in args or "--distributed-executor-backend=ray" in args
    nodes = dims.get("nnodes")
    if "dpl" in dims:
        local, local_text = _product(server, dims, ("tp", "pp", "dpl"))
        return Reading(server.name, local, local_text, total, text, True, nodes, guessed, spans_ray)
    if nodes is not None:
        per_pod = total // nodes[1] if total % nodes[1] == 0 else None
        return Reading(server.name, per_pod, f"{text} over {nodes[0]} {nodes[1]}", total, text,
                       per_pod is not None, nodes, guessed, spans_ray)
    if seen & server.spread:
        return Reading(server.name, None, "", total, text, False, None, guessed, spans_ray)
    return Reading(server.name, total, text, total, text, False, None, guessed, spans_ray)


def _image(body: dict) -> str:
    image = body.get("image")
    if not isinstance(image, str):
        return ""
    repo = image.split("@", 1)[0].lower()
    return repo[:repo.rfind(":")] if repo.rfind(":") > repo.rfind("/") else repo


def read_server(body: dict, env: dict[str, str | None] | None = None) -> Reading | None:
    """What the container's command line says its server will use, or ``None`` where it runs no server gpuguard
    reads, says nothing explicit, or says it in a way the manifest does not fix (several servers that
    disagree included).  ``env``: the container's env values (``None`` for a ``valueFrom``)."""
    words = command_words(body)
    if words is None:
        return None
    env = env or {}
    found = [_reading(server, args, env, False) for server, args in _invocations(words)]
    if not found and body.get("command") is None:  # the image's own entrypoint: a guess
        image = _image(body)
        for pattern, server in _IMAGE_SERVERS:
            if pattern.search(image):
                found = [_reading(server, words, env, True)]
    if not found or any(r is None for r in found):
        return None
    first = found[0]
    if any(r != first for r in found[1:]):
        return None
    if first is not None and not first.spans_ray and "ray" in words and "start" in words:
        return replace(first, spans_ray=True)  # ``ray start`` beside it: its ranks may be anywhere in the cluster
    return first


# ---------------------------------------------------------------- devices and findings

def _devices(container: Container, settings: Settings) -> tuple[int, str] | None:
    """(devices, resource names) the container holds, ``None`` where they can't be compared with ranks."""
    resources = container.resources()
    if container.claim_devices or (resources and resources.get("claims")):
        return None  # DRA: a claim may be shared with other containers or ask for All
    names = sorted(container.gpus)
    if any(fnmatchcase(n, p) for n in names for p in settings.skip_resources):
        return None
    return sum(container.gpus.values()), "+".join(names)


def _app_containers(template: PodTemplate) -> list[Container]:
    return [c for c in template.containers if not c.is_init]


def _server_of(template: PodTemplate) -> tuple[Container, Reading] | None:
    for container in _app_containers(template):
        reading = read_server(container.body, container.env())
        if reading is not None:
            return container, reading
    return None


def _main(template: PodTemplate, like: Container | None = None) -> Container | None:
    """The pod's main container: named like ``like`` (the leader's server), else ``main``, else the first app
    container holding accelerators, else the first."""
    apps = _app_containers(template)
    for name in ((like.name,) if like is not None else ()) + ("main",):
        found = next((c for c in apps if c.name == name), None)
        if found is not None:
            return found
    return next((c for c in apps if c.gpus or c.claim_devices), apps[0] if apps else None)


def _held(dev: int, resources: str) -> str:
    return f"{dev} {resources}" if dev else "no accelerator"


@dataclass(frozen=True)
class Pricing:
    """What idle devices cost a day, by the config's price table (``cost``) and the products the pods pin."""

    prices: Prices | None
    products: tuple[str, ...] = ()

    def idle(self, resources: str, count: int) -> tuple[tuple[tuple[str, int], ...], str]:
        """(the idle devices by resource, the words that say what they cost): ``48 device-hours a day (~$192)``,
        the dollars only where the devices are of one priced resource."""
        hours = f"{count * HOURS_PER_DAY} device-hours a day"
        if not resources or "+" in resources:
            return (), hours
        devices = ((resources, count),)
        cost = self.prices.per_day(dict(devices), self.products) if self.prices is not None else None
        return devices, hours if cost is None else f"{hours} (~{usd(cost)})"


def _pricing(view: WorkloadView, *templates: PodTemplate | None) -> Pricing:
    accelerators = view.accelerators
    products = (p for t in templates if t is not None for p in pinned_products(t.spec))
    return Pricing(accelerators.prices if accelerators is not None else None, tuple(dict.fromkeys(products)))


def _pod_findings(container: Container, need: int, what: str, pods: int, advisory: bool,
                  settings: Settings, pricing: Pricing) -> Iterator[Finding]:
    found = _devices(container, settings)
    if found is None:
        return
    dev, resources = found
    name = container.name
    if need > dev:
        yield Finding(container.path, f"{what} needs {need} devices but container {name!r} holds "
                      f"{_held(dev, resources)}: the server fails at start",
                      f"request {need} {resources or 'accelerators'} or lower the parallelism to {dev}", name,
                      advisory=advisory)
    elif need < dev:
        idle = (dev - need) * pods
        each = f"{dev - need} idle per pod, {idle} in all" if pods > 1 else f"{idle} idle"
        devices, cost = pricing.idle(resources, idle)
        yield Finding(container.path, f"{what} uses {need} of the {dev} {resources} container {name!r} holds: "
                      f"{each}, {cost}", f"request {need}, or raise the parallelism to use {dev}", name,
                      advisory=True, idle=devices)


def _group_findings(view: WorkloadView, group: ServingGroup, by_role: dict[str, PodTemplate],
                    settings: Settings) -> Iterator[Finding]:
    """One server over ``group.size`` pods: the group's devices against the parallelism, and each pod's."""
    leader, worker = by_role.get(group.leader), by_role.get(group.worker)
    if leader is None:
        return
    served = _server_of(leader) or (_server_of(worker) if worker is not None and group.size > 1 else None)
    reading = served[1] if served is not None else None
    lead = (served[0] if served is not None and any(c is served[0] for c in leader.containers) else None) \
        or _main(leader)
    if lead is None:
        return
    pricing = _pricing(view, leader, worker)
    groups = max(group.replicas, 1)
    advisory = reading is not None and reading.guessed
    per_pod: tuple[int, str] | None = None
    if reading is not None and reading.per_pod is not None and (reading.per_node or group.size == 1):
        per_pod = (reading.per_pod, reading.per_pod_text)
    elif reading is None and group.per_pod is not None:
        per_pod = (group.per_pod.devices, group.per_pod.fields)
    if group.size <= 1:
        if per_pod is not None and not (reading is not None and reading.spans_ray):
            yield from _pod_findings(lead, per_pod[0], per_pod[1], groups, advisory, settings, pricing)
        return
    if reading is not None and reading.nodes is not None and reading.nodes[1] != group.size:
        flag, nodes = reading.nodes
        yield Finding(lead.path, f"{reading.server} {flag} {nodes} but {group.size} pods per group "
                      f"({group.size_field}): the ranks and the pods don't match and the server fails at start",
                      f"set {flag} to {group.size}, or {group.size_field} to {nodes}", lead.name, advisory=advisory)
    other = _main(worker, lead) if worker is not None else None
    total: tuple[int, str] | None = None
    if reading is not None and reading.total is not None:
        total = (reading.total, reading.total_text)
    elif reading is None and group.total is not None:
        total = (group.total.devices, group.total.fields)
    pods: list[Finding] = []
    if per_pod is not None:
        pods.extend(_pod_findings(lead, per_pod[0], per_pod[1], groups, advisory, settings, pricing))
        if other is not None and worker is not leader:
            pods.extend(_pod_findings(other, per_pod[0], per_pod[1], groups * (group.size - 1), advisory, settings,
                                      pricing))
    yield from pods or _group_total(group, lead, other, total, groups, advisory, settings, pricing)  # pods first


def _group_total(group: ServingGroup, lead: Container, other: Container | None, total: tuple[int, str] | None,
                 groups: int, advisory: bool, settings: Settings, pricing: Pricing) -> Iterator[Finding]:
    lead_dev = _devices(lead, settings)
    other_dev = _devices(other, settings) if other is not None else None
    if total is None or lead_dev is None or other_dev is None:
        return
    need, what = total
    have = lead_dev[0] + (group.size - 1) * other_dev[0]
    resources = lead_dev[1] or other_dev[1] or "accelerators"
    shape = f"a group of {group.size} pods ({group.size_field}) has {have} {resources}"
    if need > have:
        yield Finding(lead.path, f"{what} needs {need} devices; {shape}: the server fails at start",
                      f"give a group {need} devices or lower the parallelism to {have}", lead.name, advisory=advisory)
    elif need < have:
        idle = (have - need) * groups
        devices, cost = pricing.idle(resources, idle)
        yield Finding(lead.path, f"{what} uses {need} devices; {shape}: {idle} idle, {cost}",
                      f"give a group {need} devices or raise parallelism", lead.name, advisory=True,
                      idle=devices)


# ---------------------------------------------------------------- Ray Serve on a RayService's own cluster

def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _ray_pod_gpus(template: PodTemplate, ray: RayServe, settings: Settings) -> tuple[int, str] | None:
    """(GPUs Ray sees in one pod of this group, their resource names), ``None`` where that isn't fixed here: a
    ``num-gpus`` start parameter that is not a literal, DRA claims, devices Ray doesn't count as GPUs."""
    names = sorted(template.effective_gpus)
    if template.claim_devices or any(c.claim_devices for c in template.containers) \
            or any(not n.endswith("/gpu") or any(fnmatchcase(n, p) for p in settings.skip_resources) for n in names):
        return None
    if template.ref.role in ray.num_gpus:
        raw = ray.num_gpus[template.ref.role]
        if not isinstance(raw, (str, int)) or isinstance(raw, bool) or not _INT.match(str(raw)):
            return None
        return int(raw), "+".join(names)
    return template.gpus_per_pod, "+".join(names)


def _ray_serve_findings(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    """A RayService's Serve engines against the Ray cluster it brings: a replica no pod or the whole cluster can
    hold never starts (deny); a cluster that doesn't scale and holds more GPUs than every engine at its maximum
    uses keeps the rest idle (warn, with what they cost)."""
    ray = view.ray_serve()
    if ray is None or not ray.demand.engines:
        return
    demand = ray.demand
    held: list[tuple[int, int, str]] = []  # (pods, GPUs per pod, resources)
    templates = []
    for template, pods in view.running_templates():
        gpus = _ray_pod_gpus(template, ray, settings)
        if gpus is None:
            return
        if pods and gpus[0]:
            held.append((pods, *gpus))
            templates.append(template)
    largest = max((per_pod for _, per_pod, _ in held), default=0)
    capacity = sum(pods * per_pod for pods, per_pod, _ in held)
    resources = "+".join(sorted({r for _, _, r in held})) or "GPUs"
    autoscaled = ray.autoscaled
    cluster = "the Ray cluster at maxReplicas" if autoscaled else "the Ray cluster"
    path = ray.path
    blocked = False
    for engine in demand.engines:
        need = engine.per_replica
        if engine.one_node and need > largest:
            blocked = True
            yield Finding(path, f"Ray Serve {engine.name!r} {engine.per_replica_text} needs {need:g} GPUs in one pod; "
                          f"{cluster}'s pods hold at most {largest}: it never starts",
                          f"give a worker group pods with {_gpus(math.ceil(need))}, or " + (
                              f"lower num_gpus to {largest}" if "num_gpus" in engine.per_replica_text
                              else "use strategy PACK"),
                          engine.name)
        elif need > capacity:
            blocked = True
            yield Finding(path, f"Ray Serve {engine.name!r} {engine.per_replica_text} needs {need:g} GPUs a replica; "
                          f"{cluster} holds {capacity} {resources}: it never starts",
                          f"grow the worker groups to {_gpus(math.ceil(need))}, or lower the parallelism", engine.name)
    if blocked:
        return
    floor = sum(e.per_replica * e.min_replicas for e in demand.engines)
    if floor > capacity:
        yield Finding(path, f"Ray Serve's engines need {floor:g} GPUs at their minimum replicas; {cluster} holds "
                      f"{capacity} {resources}: some replicas never start",
                      f"grow the worker groups to {_gpus(math.ceil(floor))}, or lower min_replicas", "")
        return
    peaks = [e.per_replica * e.max_replicas for e in demand.engines if e.max_replicas is not None]
    if autoscaled or not demand.complete or len(peaks) != len(demand.engines):
        return
    idle = capacity - math.ceil(sum(peaks))
    if idle > 0:
        devices, cost = _pricing(view, *templates).idle(resources, idle)
        yield Finding(path, f"Ray Serve's engines use at most {math.ceil(sum(peaks))} of the {capacity} {resources} "
                      f"{cluster} holds: {idle} idle, {cost}",
                      f"shrink the worker groups to {_gpus(math.ceil(sum(peaks)))}, or enable autoscaling", "",
                      advisory=True, idle=devices)


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    if not view.is_gpu:
        return
    yield from _ray_serve_findings(view, settings)
    pods = {id(t): n for t, n in view.running_templates()}
    by_role = {t.ref.role: t for t in view.templates}
    grouped: set[int] = set()
    for group in view.serving_groups():
        yield from _group_findings(view, group, by_role, settings)
        grouped.update(id(t) for t in (by_role.get(group.leader), by_role.get(group.worker)) if t is not None)
    for template in view.templates:
        if id(template) in grouped:
            continue
        for container in _app_containers(template):
            reading = read_server(container.body, container.env())
            if reading is None or reading.per_pod is None or reading.spans_ray:
                continue
            yield from _pod_findings(container, reading.per_pod, reading.per_pod_text, pods.get(id(template), 1),
                                     reading.guessed, settings, _pricing(view, template))


POLICY = ValidatingPolicy(
    id="server-parallelism",
    title="Model servers sized to their accelerators",
    settings_model=Settings,
    run=validate,
    description="Reads the parallelism a model server's command line fixes (vLLM `--tensor-parallel-size`/`-tp`, "
    "`--pipeline-parallel-size`, `--data-parallel-size[-local]`; SGLang `--tp`/`--pp`/`--dp`[`-size`]; TGI "
    "`--num-shard` or `NUM_SHARD`; TensorRT-LLM `trtllm-serve --tp_size/--pp_size`) or a serving kind's fields "
    "(LLMInferenceService `parallelism`, InferenceService `workerSpec`, a RayService's Ray Serve `engine_kwargs`, "
    "placement bundles and `ray_actor_options.num_gpus`) and denies a server needing more devices than its "
    "container, group or Ray cluster holds; warns with the idle devices and what they cost a day (the `cost` "
    "prices) where it uses fewer. Values the manifest does not fix (`$(TP)`, a config file) are not read.",
    rationale="A server with more ranks than devices fails at start, after pulling its image and model, and is "
    "restarted forever; one with fewer holds the other devices idle for as long as it runs.",
    cpu_scope=accelerator_objects_only,
)
