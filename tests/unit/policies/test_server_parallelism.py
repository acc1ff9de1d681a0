"""server-parallelism's command-line reader: which servers and flag forms it reads, and what it refuses to read.

The fixtures (tests/policies/server-parallelism) show the decisions; these tests pin the reader itself: every
flag spelling and placement, shell command lines, and the values that are no evidence (expansions, files).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.policies.server_parallelism import command_words, read_server
from gpuguard.webhook import suite
from gpuguard.workloads.classify import MAX_TEXT
from tests.support.paths import REPO


def _per_pod(body: dict, env: dict | None = None) -> int | None:
    reading = read_server(body, env)
    return reading.per_pod if reading is not None else None


@pytest.mark.parametrize(("body", "devices"), [
    # vLLM: args list, --flag=N, short flags, underscores, the module entry points, a path to the binary
    ({"command": ["vllm", "serve"], "args": ["m", "--tensor-parallel-size", "4"]}, 4),
    ({"command": ["vllm", "serve", "m", "--tensor-parallel-size=4", "--pipeline-parallel-size=2"]}, 8),
    ({"command": ["vllm", "serve", "m", "-tp", "2", "-pp", "2", "-dp", "2"]}, 8),
    ({"command": ["vllm", "serve", "m", "-tp=2"]}, 2),
    ({"command": ["vllm", "serve", "m", "--tensor_parallel_size", "4"]}, 4),
    ({"command": ["/usr/local/bin/vllm", "serve", "m", "--tensor-parallel-size", "2"]}, 2),
    ({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": ["--model", "m", "-tp", "8"]}, 8),
    ({"command": ["python", "-m", "vllm.entrypoints.api_server", "--tensor-parallel-size", "2"]}, 2),
    # the last value wins, as argparse reads it
    ({"command": ["vllm", "serve", "m", "-tp", "2", "--tensor-parallel-size", "4"]}, 4),
    # data parallelism: all ranks local, or --data-parallel-size-local of them in this pod
    ({"command": ["vllm", "serve", "m", "-tp", "2", "--data-parallel-size", "4"]}, 8),
    ({"command": ["vllm", "serve", "m", "-tp", "2", "-dp", "8", "--data-parallel-size-local", "2",
                  "--data-parallel-start-rank", "$(RANK)"]}, 4),
    # shell command lines: sh -c, a script in args, line continuations, other commands around it
    ({"command": ["sh", "-c", "vllm serve m --tensor-parallel-size 4"]}, 4),
    ({"command": ["/bin/bash", "-c"],
      "args": ["set -e\npip install x && exec vllm serve m \\\n  -tp 2 \\\n  -pp 2\n"]}, 4),
    ({"command": ["sh", "-c", "vllm serve $(MODEL) -tp 2 2>&1 | tee /tmp/log; echo done --tensor-parallel-size 9"]}, 2),
    ({"command": ["sh", "-c", "if [ -n \"$X\" ]; then vllm serve m -tp 2; else vllm serve m -tp 2; fi"]}, 2),
    # SGLang: every spelling, data-parallel attention sharing the tensor-parallel devices, nodes
    ({"command": ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "4"]}, 4),
    ({"command": ["python3", "-m", "sglang.launch_server", "--tp-size", "2", "--dp-size", "2"]}, 4),
    ({"command": ["python3", "-m", "sglang.launch_server", "--tensor-parallel-size", "2", "--pp-size", "2"]}, 4),
    ({"command": ["python3", "-m", "sglang.launch_server", "--tp", "8", "--dp", "8", "--enable-dp-attention"]}, 8),
    ({"command": ["python3", "-m", "sglang.launch_server", "--tp", "16", "--nnodes", "2", "--node-rank", "0"]}, 8),
    # TGI: the flag, or its environment variable
    ({"command": ["text-generation-launcher"], "args": ["--model-id", "m", "--num-shard", "2"]}, 2),
    ({"command": ["text-generation-launcher", "--num-shard=4"]}, 4),
    # TensorRT-LLM
    ({"command": ["trtllm-serve", "serve", "m", "--tp_size", "8", "--pp_size", "2"]}, 16),
    ({"command": ["trtllm-serve", "m", "--tp_size", "4"]}, 4),
    ({"command": ["trtllm-serve", "m", "--tp_size", "16", "--gpus_per_node", "8"]}, 8),
])
def test_flag_forms(body: dict, devices: int) -> None:
    assert _per_pod(body) == devices


def test_tgi_reads_num_shard_from_env_values_only() -> None:
    body = {"command": ["text-generation-launcher"], "args": ["--model-id", "m"]}
    assert _per_pod(body, {"NUM_SHARD": "2"}) == 2
    assert read_server(body, {"NUM_SHARD": None}) is None  # a valueFrom: not fixed here
    assert _per_pod({**body, "args": ["--num-shard", "4"]}, {"NUM_SHARD": "2"}) == 4  # the flag wins


@pytest.mark.parametrize("body", [
    {"command": ["vllm", "serve", "m", "--tensor-parallel-size", "$(TP)"]},  # Kubernetes expands it
    {"command": ["sh", "-c", "vllm serve m --tensor-parallel-size ${TP}"]},
    {"command": ["sh", "-c", "vllm serve m -tp $TP"]},
    {"command": ["sh", "-c", "vllm serve m -tp 2 $EXTRA_ARGS"]},  # may add or override flags
    {"command": ["sh", "-c", "vllm serve m -tp 2 \"$@\""]},
    {"command": ["vllm", "serve", "m", "-tp", "2", "$(VLLM_ARGS)"]},
    {"command": ["vllm", "serve", "m", "-tp", "2", "--config", "/etc/vllm/config.yaml"]},  # a file may set it
    {"command": ["trtllm-serve", "m", "--tp_size", "2", "--extra_llm_api_options", "/etc/trt.yaml"]},
    {"command": ["python3", "-m", "sglang.launch_server", "--tp", "$(TP)"]},
    {"command": ["vllm", "serve", "m", "-tp", "0"]},
    {"command": ["vllm", "serve", "m", "-tp"]},  # no value
    {"command": ["vllm", "serve", "m"]},  # nothing explicit: defaults are no evidence
    {"command": ["sh", "-c", "vllm serve m -tp 2; vllm serve n -tp 4"]},  # two servers that disagree
    {"command": ["python", "serve.py", "--tensor-parallel-size", "4"]},  # not a server gpuguard reads
    {"command": ["trtllm-serve", "disaggregated", "-c", "disagg.yaml"]},
    {"command": ["vllm", "serve", "m", "-tp", 4]},  # not a string: the apiserver refuses it
    {"command": ["vllm", "serve", "m", "-tp", "2", "x" * MAX_TEXT]},  # too long to read whole
])
def test_values_the_manifest_does_not_fix_are_no_evidence(body: dict) -> None:
    assert read_server(body) is None


def test_a_server_known_by_its_image_is_a_guess() -> None:
    reading = read_server({"image": "docker.io/vllm/vllm-openai:v0.10.1", "args": ["--model", "m", "-tp", "4"]})
    assert reading is not None and reading.guessed and reading.per_pod == 4
    tgi = read_server({"image": "ghcr.io/huggingface/text-generation-inference:3.3", "args": ["--num-shard", "2"]})
    assert tgi is not None and tgi.guessed and tgi.per_pod == 2
    # with a command of its own, the image says nothing
    assert read_server({"image": "vllm/vllm-openai:v0.10.1", "command": ["python", "app.py"], "args": ["-tp", "4"]}) \
        is None


def test_multi_node_flags() -> None:
    ray = read_server({"command": ["sh", "-c", "ray start --head --port=6379; vllm serve m -tp 8 -pp 2"]})
    assert ray is not None and ray.spans_ray and ray.total == 16
    backend = read_server({"command": ["vllm", "serve", "m", "-tp", "8", "--distributed-executor-backend", "ray"]})
    assert backend is not None and backend.spans_ray
    headless = read_server({"command": ["vllm", "serve", "m", "-tp", "2", "-dp", "8", "--headless"]})
    assert headless is not None and headless.per_pod is None and headless.total == 16
    nodes = read_server({"command": ["python3", "-m", "sglang.launch_server", "--tp", "16", "--nnodes", "2"]})
    assert nodes is not None and nodes.nodes == ("--nnodes", 2) and nodes.per_node and nodes.total == 16
    assert "over --nnodes 2" in nodes.per_pod_text


def test_messages_show_the_flags_as_written() -> None:
    reading = read_server({"command": ["vllm", "serve", "m", "-tp", "4", "--pipeline-parallel-size=2"]})
    assert reading is not None and reading.per_pod_text == "vLLM -tp 4 x --pipeline-parallel-size 2"
    sglang = read_server({"command": ["python3", "-m", "sglang.launch_server", "--tp", "8", "--dp", "8",
                                      "--enable-dp-attention"]})
    assert sglang is not None and sglang.per_pod_text == "SGLang --tp 8"  # dp attention adds no devices


def test_shell_words_split_as_the_shell_splits() -> None:
    assert command_words({"command": ["sh", "-c", "a 'b c' && d;e"]}) == ["sh", "-c", "a", "b c", "&&", "d", ";", "e"]
    assert command_words({"command": ["sh", "-c", "unbalanced 'quote -tp 2"]})[-2:] == ["-tp", "2"]


FIXTURES = REPO / "tests" / "policies"


@pytest.mark.parametrize("policy", ["server-parallelism", "mixed-vendors", "shared-rwo-claim"])
def test_findings_fit_what_kubectl_shows(policy: str) -> None:
    """``[policy] message; fix`` within 256 characters (the warning's short form, ``envelope.finding_line``)."""
    seen = 0
    for case in suite.discover([Path(FIXTURES / policy)]):
        decision = suite.run_case(case).decision
        for violation in decision.violations if decision is not None else []:
            text = f"[{violation.policy}] {violation.message}; {violation.fix}"
            assert len(text) <= 256, (case.path.name, text)
            seen += 1
    assert seen >= 3
