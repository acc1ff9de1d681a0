"""The Ray Serve reader: what a RayService's serveConfigV2 fixes, and every form it refuses to read.

The fixtures (tests/policies/server-parallelism/rayservice-*) show the decisions; these pin the reading: the
replica counts Ray Serve uses, the shapes of a replica's demand, and that nothing unfixed counts.
"""

from __future__ import annotations

import textwrap

import pytest

from gpuguard.workloads.kinds.ray.serve import MAX_CONFIG_TEXT, read_demand


def llm_app(config: str, extra: str = "") -> str:
    return textwrap.dedent("""\
        applications:
        - name: llm
          import_path: ray.serve.llm:build_openai_app
          args:
            llm_configs:
            - model_loading_config: {model_id: m}
        """) + textwrap.indent(textwrap.dedent(config), " " * 6) + extra


@pytest.mark.parametrize(("config", "per_replica", "replicas"), [
    ("engine_kwargs: {tensor_parallel_size: 4}\n", 4, (1, 1)),  # Ray Serve's default: one replica
    ("engine_kwargs: {tensor_parallel_size: 2, pipeline_parallel_size: 3}\n", 6, (1, 1)),
    ("engine_kwargs: {pipeline_parallel_size: 2}\ndeployment_config: {num_replicas: 3}\n", 2, (3, 3)),
    ("engine_kwargs: {tensor_parallel_size: 2}\n"
     "deployment_config: {autoscaling_config: {min_replicas: 0, max_replicas: 4}}\n", 2, (0, 4)),
    ("engine_kwargs: {tensor_parallel_size: 2}\ndeployment_config: {autoscaling_config: {min_replicas: 2}}\n",
     2, (2, None)),  # no maximum written: not fixed
    ("placement_group_config: {bundles: [{GPU: 1}, {GPU: 1}, {GPU: 0.5}]}\n", 2.5, (1, 1)),
])
def test_an_llm_config_fixes_its_replica_demand(config: str, per_replica: float, replicas: tuple) -> None:
    demand = read_demand(llm_app(config))
    assert demand is not None and demand.complete
    [engine] = demand.engines
    assert engine.name == "m" and engine.per_replica == per_replica
    assert (engine.min_replicas, engine.max_replicas) == replicas
    assert not engine.one_node  # vLLM's ranks are a placement group: they may span the Ray pods


def test_strict_pack_and_actors_must_fit_one_pod() -> None:
    packed = read_demand(llm_app("placement_group_config: {strategy: STRICT_PACK, bundles: [{GPU: 2}, {GPU: 2}]}\n"))
    assert packed is not None and packed.engines[0].one_node and packed.engines[0].per_replica == 4
    actors = read_demand(textwrap.dedent("""\
        applications:
        - name: app
          import_path: app:graph
          deployments:
          - {name: Ranker, num_replicas: 2, ray_actor_options: {num_gpus: 0.5}}
          - {name: Router, num_replicas: 1, ray_actor_options: {num_cpus: 1}}
          - {name: Generator, autoscaling_config: {min_replicas: 1, max_replicas: 3}, ray_actor_options: {num_gpus: 2}}
        """))
    assert actors is not None
    assert [(e.name, e.per_replica, e.one_node, e.min_replicas, e.max_replicas) for e in actors.engines] == [
        ("Ranker", 0.5, True, 2, 2), ("Generator", 2.0, True, 1, 3)]
    assert not actors.complete  # the application's code may hold deployments the config doesn't list


@pytest.mark.parametrize("config", [
    "engine_kwargs: {max_model_len: 8192}\n",  # no parallelism written: vLLM's default is no evidence
    "engine_kwargs: {tensor_parallel_size: '${TP}'}\n",
    "engine_kwargs: {tensor_parallel_size: 0}\n",
    "engine_kwargs: {tensor_parallel_size: true}\n",
    "engine_kwargs: {tensor_parallel_size: 4}\ndeployment_config: {num_replicas: auto}\n",
    "engine_kwargs: {tensor_parallel_size: 4}\ndeployment_config: {autoscaling_config: {min_replicas: -1}}\n",
    "placement_group_config: {bundles: [{GPU: '1'}]}\n",
    "placement_group_config: {bundles: {GPU: 1}}\n",
    "engine_kwargs: [tensor_parallel_size, 4]\n",
])
def test_values_the_manifest_does_not_fix_are_not_read(config: str) -> None:
    demand = read_demand(llm_app(config))
    assert demand is not None and demand.engines == () and not demand.complete


def test_a_config_file_or_deployment_overrides_leave_the_reading_incomplete() -> None:
    files = read_demand("applications:\n- import_path: ray.serve.llm:build_openai_app\n"
                        "  args: {llm_configs: [./models/qwen.yaml]}\n")
    assert files is not None and files.engines == () and not files.complete
    overridden = read_demand(llm_app("engine_kwargs: {tensor_parallel_size: 2}\n",
                                     "  deployments:\n  - {name: LLMServer, ray_actor_options: {num_gpus: 1}}\n"))
    assert overridden is not None and len(overridden.engines) == 1 and not overridden.complete


@pytest.mark.parametrize("text", [
    None, 42, "", "   ", "applications: {}", "[1, 2]", "applications: [\n", "key: value\n",
    "applications:\n- x\n" + " " * MAX_CONFIG_TEXT,  # larger than the bound: not parsed at all
])
def test_what_is_not_a_serve_config_says_nothing(text: object) -> None:
    demand = read_demand(text)
    assert demand is None or (demand.engines == () and not demand.complete)


def test_aliases_are_read_as_written_not_expanded() -> None:
    """YAML anchors a config reuses (a common way to share engine settings) count once per place they appear."""
    text = textwrap.dedent("""\
        common: &tp {tensor_parallel_size: 2}
        applications:
        - import_path: ray.serve.llm:build_openai_app
          args:
            llm_configs:
            - {model_loading_config: {model_id: a}, engine_kwargs: *tp}
            - {model_loading_config: {model_id: b}, engine_kwargs: *tp, deployment_config: {num_replicas: 2}}
        """)
    demand = read_demand(text)
    assert demand is not None and demand.complete
    assert [(e.name, e.per_replica, e.max_replicas) for e in demand.engines] == [("a", 2.0, 1), ("b", 2.0, 2)]


def test_one_deployment_builder_reads_its_single_config() -> None:
    demand = read_demand("applications:\n- import_path: ray.serve.llm:build_llm_deployment\n  args:\n"
                         "    llm_config: {model_loading_config: {model_id: one},\n"
                         "                 engine_kwargs: {tensor_parallel_size: 8}}\n")
    assert demand is not None and demand.complete and [e.per_replica for e in demand.engines] == [8.0]
