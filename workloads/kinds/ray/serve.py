"""What a Ray Serve config says its replicas use: the accelerator demand of a RayService's ``serveConfigV2``.

A RayService carries its Serve applications as YAML text.  Two shapes fix how many GPUs a replica takes, in the
manifest itself:

- a Ray Serve LLM application (``import_path: ray.serve.llm:…``) lists ``llm_configs`` (or one ``llm_config``); each
  config's ``engine_kwargs`` sets vLLM's ``tensor_parallel_size`` and ``pipeline_parallel_size`` (one GPU per rank, the
  ranks placed as a Ray placement group that may span the cluster's pods unless its ``strategy`` is
  ``STRICT_PACK``), or its ``placement_group_config.bundles`` name the GPUs outright;
- any application's ``deployments`` may set ``ray_actor_options.num_gpus``: each replica is one Ray actor, so
  those GPUs must all be on one Ray node (one pod).

Replicas come from ``num_replicas`` or ``autoscaling_config.min_replicas``/``max_replicas`` (Ray Serve's default
is one replica).  A value the manifest doesn't fix -- ``num_replicas: auto``, a ``llm_configs`` entry that is a
file path, a ``$VAR``, a deployment left to the application's code -- is not read: the demand it would add is
unknown, so the reading says it is incomplete and only what was read counts (a lower bound).  Nothing here
guesses; the parsing is bounded (text size, nodes walked) and never raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from gpuguard.workloads.paths import Path, get_path

MAX_CONFIG_TEXT = 262_144  # a serveConfigV2 larger than this is not read (a manifest's own limit is far above)
_LLM_PREFIX = "ray.serve.llm:"


@dataclass(frozen=True)
class Engine:
    """One Serve deployment's demand: ``per_replica`` GPUs a replica takes (``per_replica_text`` says from which
    fields, as written), ``one_node`` when they must be on one Ray pod (an actor), ``min_replicas`` always running
    and ``max_replicas`` at most (``None``: not fixed in the manifest)."""

    name: str
    per_replica: float
    per_replica_text: str
    one_node: bool
    min_replicas: int
    max_replicas: int | None


@dataclass(frozen=True)
class RayServe:
    """A kind's Serve applications and the Ray cluster that runs them: the demand its config fixes, where that
    config is (``path``), whether the cluster autoscales, and each group's ``num-gpus`` start parameter as written
    (by template role; absent where the group doesn't set it, so Ray counts the pod's GPUs)."""

    demand: ServeDemand
    path: Path
    autoscaled: bool
    num_gpus: Mapping[str, object]


@dataclass(frozen=True)
class ServeDemand:
    """Every engine the config fixes, and whether they are all its GPU users (``complete``): only then is a Ray
    cluster bigger than their demand known to hold idle devices."""

    engines: tuple[Engine, ...]
    complete: bool


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
        return None
    return float(value)


def _replicas(config: dict) -> tuple[int, int | None] | None:
    """(min, max) replicas of a deployment config, ``None`` where the manifest does not fix the minimum."""
    if "num_replicas" in config:
        fixed = _int(config["num_replicas"])
        return None if fixed is None else (fixed, fixed)
    scaling = config.get("autoscaling_config")
    if scaling is None:
        return 1, 1  # Ray Serve's default: one replica
    if not isinstance(scaling, dict):
        return None
    low = _int(scaling.get("min_replicas", 1))
    high = _int(scaling.get("max_replicas", 1)) if "max_replicas" in scaling else None
    if low is None:
        return None
    return low, high if high is None or high >= low else low


def _llm_engine(index: int, config: object) -> Engine | None:
    """A Ray Serve LLM config's demand, ``None`` where it doesn't fix one (a file path, an unfixed value)."""
    if not isinstance(config, dict):
        return None
    model = get_path(config, ("model_loading_config", "model_id"))
    name = model if isinstance(model, str) else f"llm_configs[{index}]"
    deployment = config.get("deployment_config", {})
    replicas = _replicas(deployment) if isinstance(deployment, dict) else None
    if replicas is None:
        return None
    placement = config.get("placement_group_config")
    if isinstance(placement, dict) and "bundles" in placement:
        bundles = placement["bundles"]
        if not isinstance(bundles, list) or not all(isinstance(b, dict) for b in bundles):
            return None
        amounts = [_number(b.get("GPU", 0)) for b in bundles]
        if any(a is None for a in amounts):
            return None
        total = sum(a for a in amounts if a is not None)
        packed = placement.get("strategy") == "STRICT_PACK"
        return Engine(name, total, f"placement_group_config.bundles {len(bundles)} x GPU", packed, *replicas)
    kwargs = config.get("engine_kwargs", {})
    if not isinstance(kwargs, dict):
        return None
    shown, per_replica = [], 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if key in kwargs:
            value = _int(kwargs[key])
            if value is None or value == 0:
                return None
            per_replica *= value
            shown.append(f"{key} {value}")
    if not shown:
        return None  # vLLM's defaults are no evidence of what the author meant
    return Engine(name, float(per_replica), "engine_kwargs." + " x ".join(shown), False, *replicas)


def _actor_engines(app: dict) -> list[Engine]:
    """The deployments whose ``ray_actor_options.num_gpus`` the config fixes (a deployment the config doesn't
    list, or lists without them, keeps what the application's code sets: not read)."""
    engines: list[Engine] = []
    deployments = app.get("deployments", [])
    for i, deployment in enumerate(deployments if isinstance(deployments, list) else []):
        options = deployment.get("ray_actor_options") if isinstance(deployment, dict) else None
        gpus = _number(options.get("num_gpus")) if isinstance(options, dict) and "num_gpus" in options else None
        replicas = _replicas(deployment) if gpus else None
        if gpus and replicas is not None:
            name = deployment.get("name") if isinstance(deployment.get("name"), str) else f"deployments[{i}]"
            engines.append(Engine(str(name), gpus, f"ray_actor_options.num_gpus {gpus:g}", True, *replicas))
    return engines


def read_demand(text: object) -> ServeDemand | None:
    """The demand a ``serveConfigV2`` text fixes, ``None`` where it is absent, too large or not a Serve config."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_CONFIG_TEXT:
        return None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    applications = config.get("applications") if isinstance(config, dict) else None
    if not isinstance(applications, list):
        return None
    engines: list[Engine] = []
    complete = True
    for app in applications:
        if not isinstance(app, dict):
            complete = False
            continue
        import_path = app.get("import_path")
        configs = get_path(app, ("args", "llm_configs"))
        if configs is None and isinstance(get_path(app, ("args", "llm_config")), dict):
            configs = [get_path(app, ("args", "llm_config"))]  # one deployment's builder (build_llm_deployment)
        if isinstance(import_path, str) and import_path.startswith(_LLM_PREFIX) and isinstance(configs, list):
            for i, llm in enumerate(configs):
                engine = _llm_engine(i, llm)
                complete = complete and engine is not None
                if engine is not None:
                    engines.append(engine)
            complete = complete and not app.get("deployments")  # overrides of the LLM deployments: not read
        else:
            engines.extend(_actor_engines(app))
            complete = False  # the application's code may hold deployments and GPUs the config doesn't list
    return ServeDemand(tuple(engines), complete)

