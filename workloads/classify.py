"""What a workload does, read from the work itself: the class it asks for when nobody declares one.

A kind says little about the work: a StatefulSet may serve a model or run Jupyter, a RayCluster may
serve or run RL post-training, a Job may train, evaluate, quantize or check that the chips answer.
So the class is read from what the pods run, strongest evidence first, and the kind is only the
last hint (the kind table's ``default_class``, or the admin's ``workloadClasses.byKind``):

1. the operator: kinds whose controller only ever makes servers (KServe, RayService, the serving
   operators) or notebooks (Kubeflow ``Notebook``) are that, whatever their containers say;
2. tools: a command line naming what it runs (``vllm serve``, ``tritonserver``, ``verl.trainer``,
   ``tune run``, ``lm_eval``, ``llmcompressor``, ``jupyter lab`` …; a RayJob's ``entrypoint``);
3. script and module names (``train.py``, ``-m maxtext.train``, ``batch_infer.py``, ``serve.py``);
4. a distributed launcher alone (``torchrun``, ``accelerate launch``, ``deepspeed``): training,
   below the names because the launchers start evaluations and quantizations too;
5. smoke tests (``nvidia-smi``, NCCL's ``*_perf``, ``jax.device_count()``): below everything
   else said about the commands, since their class caps the deadline (``job-limits``);
6. images of one stack (``vllm/vllm-openai``, ``nvcr.io/nvidia/tritonserver``, ``jupyter/*``,
   ``verlai/verl``);
7. what the container exposes: a readiness or startup probe over HTTP/gRPC, a port named like a
   server, Jupyter's 8888;
8. general framework images (``pytorch/pytorch``, ``nvcr.io/nvidia/pytorch``): training.

Rungs 2 to 4 are read container by container (each container's strongest evidence); where
containers disagree, as within any rung, the class with the most checks wins (training, then
batch-inference, notebook, inference, smoke-test), so a sidecar never lowers a job's checks.

Evaluation, quantization and calibration are ``batch-inference``: offline work over a model with
no training loop, which a restart repeats rather than resumes (no checkpoints; the deadline and
retry limits still bound it).  Smoke tests and benchmarks are ``smoke-test``.

This only *asks* for a class.  The declared label outranks it, and whether a privileged class
(inference, notebook) is given is decided by ``effective_class`` from the namespace's profile.

Linear in the object: each container's command line is read once, up to ``MAX_TEXT`` characters,
and every pattern is a plain alternation without nested repetition.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gpuguard.workloads.kinds import KindSpec, TemplateRef
from gpuguard.workloads.paths import dicts, get_path
from gpuguard.workloads.shapes import shape_of
from gpuguard.workloads.view import WORKLOAD_CLASS_LABEL, WORKLOAD_CLASSES

TRAINING, INFERENCE, BATCH, NOTEBOOK, SMOKE = "training", "inference", "batch-inference", "notebook", "smoke-test"
# Several containers disagreeing within one rung: the class with the most checks wins.
PRECEDENCE = (TRAINING, BATCH, NOTEBOOK, INFERENCE, SMOKE)
# Characters of one container's command line read (an inline script longer than this is read in part).
MAX_TEXT = 8192

# Rung 2: tools, matched in the lower-cased command line.
TOOLS: dict[str, tuple[str, ...]] = {
    TRAINING: (r"verl\.trainer", r"openrlhf\.cli\.train", r"\btrl\s+(?:sft|dpo|grpo|kto|reward)\b",
               r"\bllamafactory-cli\s+train\b", r"\baxolotl(?:\.cli)?[\s.]train\b", r"\bnemo_rl\b",
               r"\btune\s+run\b[^;&|]*?\b(?:full_finetune|lora_finetune|lora_dpo|ppo|knowledge_distillation"
               r"|qat|dev/)", r"\bpretrain_(?:gpt|bert|t5|llama|mamba)\b", r"\bmaxtext[./]train\b",
               r"\bpython[\d.]*\s+-m\s+torchtitan\b"),
    BATCH: (r"\blm[_-]eval\b", r"\blighteval\b", r"\bopencompass\b", r"\bevalplus\b", r"\bevalscope\b",
            r"\bhelm-run\b", r"\binspect\s+eval\b", r"\btune\s+run\b[^;&|]*?\b(?:eleuther_eval|generate|quantize)\b",
            r"\bllmcompressor\b", r"\bllm-compressor\b", r"\bauto[_-]gptq\b", r"\bgptqmodel\b", r"\bautoawq\b",
            r"\boptimum-cli\s+export\b", r"\bhf_ptq\b", r"modelopt\.torch\.quantization", r"\btrtllm-build\b",
            r"\bvllm\s+run-batch\b", r"vllm\.entrypoints\.openai\.run_batch", r"\bray\.data\.llm\b"),
    NOTEBOOK: (r"\bjupyter(?:-|\s+)(?:lab|notebook|server)\b", r"\bjupyterhub-singleuser\b",
               r"\bsleep\s+(?:infinity|inf)\b", r"\btail\s+-f\s+/dev/null\b",
               r"\bstart-(?:notebook|singleuser)\.(?:sh|py)\b", r"\bcode-server\b", r"\brstudio-server\b"),
    INFERENCE: (r"\bvllm\s+serve\b", r"vllm\.entrypoints\.(?:openai\.)?api_server", r"\btext-generation-launcher\b",
                r"\btext-embeddings-router\b", r"\btritonserver\b", r"\bsglang\.launch_server\b",
                r"\blmdeploy\s+serve\b", r"\bollama\s+serve\b", r"\btorchserve\b", r"\btrtllm-serve\b",
                r"\bllama-server\b", r"\bserve\s+run\b", r"\bmlserver\s+start\b",
                r"\bllamafactory-cli\s+(?:api|webui)\b", r"\bdynamo\s+serve\b", r"\binfinity_emb\s+v2\b"),
}
# Rung 4: distributed launchers: training unless what they launch says otherwise.
LAUNCHERS = (r"\btorchrun\b", r"torch\.distributed\.(?:run|launch)\b", r"\baccelerate\s+launch\b",
             r"\bdeepspeed\b", r"\bcomposer\s+-n\b")
# Rung 5: smoke tests and benchmarks.
SMOKE_TOOLS = (r"\bnvidia-smi\b", r"\b(?:all_reduce|all_gather|alltoall|broadcast|reduce_scatter|reduce|"
               r"sendrecv|scatter|gather|hypercube)_perf\b", r"\bdcgmi\s+diag\b", r"\bgpu[_-]burn\b",
               r"device_count\(\)", r"\bjax\.(?:local_)?devices\(\)", r"cuda\.is_available\(\)", r"\btpu-info\b")

# Rung 3: words of a script's or module's name (split on ``_ - .``).
SCRIPT_WORDS: dict[str, frozenset[str]] = {
    TRAINING: frozenset({"train", "training", "trainer", "finetune", "finetuning", "pretrain", "pretraining", "sft",
                         "dpo", "ppo", "grpo", "rlhf", "distill", "distillation"}),
    BATCH: frozenset({"eval", "evaluate", "evaluation", "infer", "inference", "predict", "prediction", "generate",
                      "generation", "quantize", "quantization", "quant", "calibrate", "calibration", "gptq", "awq",
                      "batch", "offline", "test", "score", "scoring"}),
    INFERENCE: frozenset({"serve", "server", "serving", "app", "api"}),
    SMOKE: frozenset({"smoke", "sanity", "healthcheck", "bench", "benchmark", "nccl", "burn"}),
}
_SCRIPT_SUFFIXES = (".py", ".sh")

# Rungs 6 and 8: image repositories (registry and path, without tag or digest), matched with ``search``.
IMAGES: dict[str, tuple[str, ...]] = {
    TRAINING: (r"(?:^|/)verl(?:ai)?/verl\b", r"/verl$", r"openrlhf", r"axolotl", r"llama-?factory", r"torchtune",
               r"-training(?:$|[-_])", r"/nemo-rl\b", r"maxtext"),
    BATCH: (r"llm-compressor", r"lm-eval", r"lighteval"),
    NOTEBOOK: (r"(?:^|/)jupyter/", r"jupyter[\w-]*notebook", r"(?:^|/)jupyterhub/", r"notebook-servers?/",
               r"kubeflownotebookswg/", r"codeserver", r"code-server", r"rstudio"),
    INFERENCE: (r"(?:^|/)vllm/vllm-openai", r"(?:^|/)vllm/vllm-tpu", r"tritonserver", r"text-generation-inference",
                r"text-embeddings-inference", r"(?:^|/)lmsysorg/sglang", r"(?:^|/)ollama/ollama", r"torchserve",
                r"(?:^|/)openmmlab/lmdeploy", r"nvcr\.io/nim/", r"(?:^|/)kserve/", r"(?:^|/)seldonio/mlserver",
                r"-inference(?:$|[-_])", r"(?:^|/)llamacpp", r"llama\.cpp", r"(?:^|/)ai-dynamo/", r"jetstream"),
}
BASE_IMAGES: dict[str, tuple[str, ...]] = {
    TRAINING: (r"(?:^|/)pytorch/pytorch$", r"nvcr\.io/nvidia/(?:pytorch|nemo|jax|tensorflow)$",
               r"ghcr\.io/nvidia/jax", r"huggingface/transformers-pytorch", r"(?:^|/)deepspeed/",
               r"(?:^|/)mosaicml/", r"(?:^|/)rocm/pytorch"),
}
# Rung 7: what a container exposes.
NOTEBOOK_PORTS = frozenset({8888})
SERVER_PORT_NAMES = frozenset({"http", "https", "grpc", "serve", "serving", "api", "openai", "http-api", "http1",
                               "h2c", "inference"})
NOTEBOOK_PORT_NAMES = frozenset({"notebook", "notebook-port", "jupyter"})


def guard(pattern: str) -> str:
    """The longest literal every match of ``pattern`` contains: text outside groups and classes, cut at
    escapes such as ``\\b`` or ``\\s`` and before an optional character.  Checked with ``in`` first, so
    a command line that names none of a rung's tools costs substring tests, not regex searches."""
    runs, run, depth, i = [], "", 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if depth == 0 and not nxt.isalnum():
                run += nxt  # an escaped literal: \\. \\( …
            else:
                runs.append(run)
                run = ""
            i += 2
            continue
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "|" and depth == 0:
            return ""  # alternatives at the top: no literal is required (write them as separate patterns)
        elif char in "?*{" and depth == 0:
            run = run[:-1]  # the character before is optional
        elif depth == 0 and char not in "+|^$.":
            run += char
            i += 1
            continue
        runs.append(run)
        run = ""
        i += 1
    runs.append(run)
    return max(runs, key=len)


_Rung = list[tuple[str, list[tuple[str, re.Pattern[str]]]]]


def _compile(table: dict[str, tuple[str, ...]]) -> _Rung:
    """Per class, in PRECEDENCE order, each pattern with its guard (a substring test is far cheaper than
    a regex alternation, which tries every branch at every position)."""
    return [(cls, [(guard(p), re.compile(p)) for p in table[cls]]) for cls in PRECEDENCE if cls in table]


_TOOLS = _compile(TOOLS)
_LAUNCHERS = _compile({TRAINING: LAUNCHERS})
_SMOKE = _compile({SMOKE: SMOKE_TOOLS})
_IMAGES = _compile(IMAGES)
_BASE_IMAGES = _compile(BASE_IMAGES)
_RANK = {cls: i for i, cls in enumerate(PRECEDENCE)}
_TOKEN_TRIM = "'\"`;&|(),[]{}"
_WORD_SPLIT = re.compile(r"[_.\-/]")


@dataclass(frozen=True)
class Inference:
    """The class a workload's work asks for, and why (for messages): ``"runs `vllm serve` in container
    'server'"``, ``"its kind, Deployment (...)"``."""

    workload_class: str
    reason: str
    by_kind: bool = False
    # Read from a general framework image alone (``pytorch/pytorch``): too weak to warn on, only a default.
    weak: bool = False


@dataclass(frozen=True)
class _Container:
    name: str
    text: str  # the command line, lower-cased, at most MAX_TEXT characters
    image: str  # repository without tag or digest, lower-cased
    body: dict


def infer(obj: dict, kind: KindSpec, fallback: str, refs: Sequence[TemplateRef] | None = None) -> Inference:
    """The class ``obj`` asks for by what it does; ``fallback`` (the kind's class) when nothing says.  ``refs``:
    ``kind.locate(obj)`` where the caller has it already (the engine locates once per evaluation)."""
    operator = operator_class(kind)
    if operator is not None:
        return Inference(operator, f"its operator: a {kind.kind} runs only {_noun(operator)}")
    containers = list(_containers(obj, kind, refs))
    found = _by_commands(containers) or _by_smoke(containers) or _by_image(containers, False) \
        or _by_exposure(containers)
    if found is None and (base := _by_image(containers, True)) is not None:
        found = Inference(base.workload_class, base.reason, weak=True)
    if found is not None:
        return found
    return Inference(fallback, f"its kind, {kind.kind} (nothing in its commands, images or ports says more)",
                     by_kind=True)


def operator_class(kind: KindSpec) -> str | None:
    """The class of every workload of ``kind`` when its operator makes only servers or notebooks (the family says
    so: ``KindSpec.class_fixed``)."""
    return kind.default_class if kind.class_fixed else None


def relabel(current: str, options: tuple[tuple[str, str], ...]) -> str:
    """The sentence a message whose outcome depends on the class ends with: the class it was judged as,
    the label and each value that would change it, with what that value is for."""
    values = " or ".join(f"{value} ({what})" if what else value for value, what in options)
    return f"judged as {current}; if it is not, label it {WORKLOAD_CLASS_LABEL}: {values}"


def _noun(workload_class: str) -> str:
    return {INFERENCE: "model servers", NOTEBOOK: "notebooks"}.get(workload_class, workload_class)


def _containers(obj: dict, kind: KindSpec, refs: Sequence[TemplateRef] | None = None) -> Iterator[_Container]:
    """Every app container of every template (init containers only prepare), plus the operator's own command."""
    for path in kind.command_paths:  # command lines the operator keeps outside the pod templates
        text = get_path(obj, path)
        if isinstance(text, str):
            yield _Container(str(path[-1]), text[:MAX_TEXT].lower(), "", {})
    for ref in kind.locate(obj) if refs is None else refs:
        spec = get_path(obj, ref.spec_path)
        if not isinstance(spec, dict):
            continue
        if shape_of(ref).spec_is_container:  # serving operators' shapes: the spec may be the container itself
            yield _read(spec)
        for list_path in ref.container_lists:
            if list_path[-1] == "initContainers":
                continue
            for _, body in dicts(get_path(spec, list_path)):
                yield _read(body)
        for key in ref.container_keys:
            single = spec.get(key)
            if isinstance(single, dict):
                yield _read(single)


def _read(body: dict) -> _Container:
    parts: list[str] = []
    size = 0
    for key in ("command", "args", "source"):  # ``source``: an Argo script template's inline script
        value = body.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and size < MAX_TEXT:
                parts.append(item)
                size += len(item) + 1
    image = body.get("image")
    repo = ""
    if isinstance(image, str):
        repo = image.split("@", 1)[0].lower()
        slash = repo.rfind("/")
        colon = repo.rfind(":")
        if colon > slash:
            repo = repo[:colon]
    name = body.get("name")
    return _Container(name if isinstance(name, str) else "", " ".join(parts)[:MAX_TEXT].lower(), repo, body)


def _where(container: _Container) -> str:
    return f" in container {container.name!r}" if container.name else ""


def _by_commands(containers: list[_Container]) -> Inference | None:
    """Rungs 2-4, container by container (each its strongest evidence), then the most checks across them."""
    best: Inference | None = None
    for container in containers:
        found = _command_evidence(container.text) if container.text else None
        if found is not None and (best is None or _RANK[found[0]] < _RANK[best.workload_class]):
            best = Inference(found[0], found[1] + _where(container))
    return best


def _by_smoke(containers: list[_Container]) -> Inference | None:
    for container in containers:
        found = _smoke_evidence(container.text) if container.text else None
        if found is not None:
            return Inference(found[0], found[1] + _where(container))
    return None


# The same templates come back again and again (a Deployment, its ReplicaSets, their pods), so what
# one command line or image says is remembered; keys are at most MAX_TEXT characters.
@lru_cache(maxsize=512)
def _command_evidence(text: str) -> tuple[str, str] | None:
    """What one command line says, the class with the most checks winning across tools and script names
    (``lm_eval …; python train.py`` is training, whatever comes first); a launcher alone says training,
    but not over what it launches (``accelerate launch -m lm_eval`` is an evaluation)."""
    one = [_Container("", text, "", {})]
    found = [f for f in (_by_text(_TOOLS, one), _by_scripts(one)) if f is not None]
    best = min(found, key=lambda f: _RANK[f.workload_class]) if found else _by_text(_LAUNCHERS, one)
    return (best.workload_class, best.reason) if best is not None else None


@lru_cache(maxsize=512)
def _smoke_evidence(text: str) -> tuple[str, str] | None:
    found = _by_text(_SMOKE, [_Container("", text, "", {})])
    return (found.workload_class, found.reason) if found is not None else None


@lru_cache(maxsize=512)
def _image_evidence(image: str, base: bool) -> str | None:
    for cls, entries in _BASE_IMAGES if base else _IMAGES:
        if _search(entries, image):
            return cls
    return None


def _search(entries: list[tuple[str, re.Pattern[str]]], text: str) -> re.Match[str] | None:
    for literal, pattern in entries:
        if literal in text:
            match = pattern.search(text)
            if match:
                return match
    return None


def _by_text(rung: _Rung, containers: list[_Container]) -> Inference | None:
    for cls, entries in rung:  # in PRECEDENCE order: the first class any container shows wins
        for container in containers:
            match = _search(entries, container.text) if container.text else None
            if match:
                return Inference(cls, f"runs `{match.group(0).strip()}`{_where(container)}")
    return None


def _script_words(text: str) -> Iterator[tuple[str, str]]:
    """(name, word) for each script (``x.py``, ``x.sh``) or module (``-m a.b``) the command line runs."""
    tokens = text.split()
    for i, raw in enumerate(tokens):
        token = raw.strip(_TOKEN_TRIM)
        if token.endswith(_SCRIPT_SUFFIXES):
            name = token.rsplit("/", 1)[-1][:-3]
        elif i > 0 and tokens[i - 1] == "-m":
            name = token
        else:
            continue
        for word in _WORD_SPLIT.split(name):
            yield name, word


def _by_scripts(containers: list[_Container]) -> Inference | None:
    found: dict[str, tuple[str, _Container]] = {}
    for container in containers:
        for name, word in _script_words(container.text):
            for cls, words in SCRIPT_WORDS.items():
                if word in words and cls not in found:
                    found[cls] = (name, container)
    for cls in PRECEDENCE:
        if cls in found:
            name, container = found[cls]
            return Inference(cls, f"runs {name!r}{_where(container)}")
    return None


def _by_image(containers: list[_Container], base: bool) -> Inference | None:
    best: Inference | None = None
    for container in containers:
        cls = _image_evidence(container.image, base) if container.image else None
        if cls is not None and (best is None or _RANK[cls] < _RANK[best.workload_class]):
            best = Inference(cls, f"image {container.image}{_where(container)}")
    return best


def _by_exposure(containers: list[_Container]) -> Inference | None:
    """A notebook's port, else a server's: an HTTP/gRPC readiness or startup probe, or a port named like one."""
    server: Inference | None = None
    for container in containers:
        for _, port in dicts(container.body.get("ports")):
            name = port.get("name")
            if port.get("containerPort") in NOTEBOOK_PORTS or name in NOTEBOOK_PORT_NAMES:
                return Inference(NOTEBOOK, f"port {port.get('containerPort')}{_where(container)}")
            if server is None and name in SERVER_PORT_NAMES:
                server = Inference(INFERENCE, f"port {name!r}{_where(container)}")
        for probe in ("readinessProbe", "startupProbe"):
            spec = container.body.get(probe)
            if server is None and isinstance(spec, dict) and ("httpGet" in spec or "grpc" in spec):
                server = Inference(INFERENCE, f"a {probe} over {'HTTP' if 'httpGet' in spec else 'gRPC'}"
                                   f"{_where(container)}")
    return server


assert set(PRECEDENCE) == set(WORKLOAD_CLASSES)
