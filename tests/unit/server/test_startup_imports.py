"""What a serving worker imports: the kubernetes client and the CEL runtime only for the features that use them.

Each is a large share of a worker's memory (``bench/README.md``: about 10 MiB for ``kubernetes``,
16 MiB for ``cel_expr_python``), so a server that talks to no API and has no custom rules must not
load them, even after judging reviews.  The server runs as a real process; on SIGTERM it writes
the names in its ``sys.modules`` to a file, and the tests read them.
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.server import REPO, REQUEST_BOUND, STARTUP_BOUND, _env, free_port, gpu_job, issue_certs, review

pytestmark = pytest.mark.timeout(600)  # a bound for a hung server, far above a busy machine's slowest run

# Runs ``gpuguard serve`` as the console script does; once it has stopped, the loaded modules go to argv[1].
# (uvicorn re-raises the SIGTERM it handled after its graceful shutdown, with the handler installed before it.)
_WRAPPER = """
import json, signal, sys
from gpuguard.webhook.main import main

def dump(*_):
    with open(sys.argv[1], "w") as f:
        json.dump(sorted(sys.modules), f)
    sys.exit(0)

signal.signal(signal.SIGTERM, dump)
main(sys.argv[2:])
dump()
"""

CUSTOM_RULE_CONFIG = """\
apiVersion: gpuguard.io/v1alpha1
kind: GpuguardConfig
customPolicies:
  - id: team-label
    title: GPU workloads carry a team label
    scope: object
    matchConditions:
      - name: uses-accelerators
        expression: workload.acceleratorsTotal > 0
    validations:
      - expression: "object.?metadata.?labels.?team.orValue('') != ''"
        message: GPU workloads need a team label
"""


class ModulesServer:
    """``gpuguard serve`` on 127.0.0.1 whose ``sys.modules`` is known once it has stopped."""

    def __init__(self, tmp: Path, extra: list[str]) -> None:
        ca, cert, key = issue_certs(tmp / "certs")
        self.modules_file = tmp / "modules.json"
        self.log = tmp / "server.log"
        port = free_port()
        argv = [sys.executable, "-c", _WRAPPER, str(self.modules_file), "serve", "--host", "127.0.0.1",
                "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key), *extra]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"https://127.0.0.1:{port}",
                                   verify=ssl.create_default_context(cafile=str(ca)), timeout=REQUEST_BOUND)

    def wait_ready(self, timeout: float = STARTUP_BOUND) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")
            with suppress(httpx.TransportError):
                if self.client.get("/readyz").status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"server not ready:\n{self.log.read_text(errors='replace')}")

    def answer(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.client.post(endpoint, content=orjson.dumps(body), headers={"Content-Type": "application/json"})
        assert resp.status_code == 200, resp.text
        return resp.json()["response"]

    def stop(self) -> set[str]:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert self.modules_file.exists(), self.log.read_text(errors="replace")
        return set(json.loads(self.modules_file.read_text()))


@contextmanager
def serving(tmp: Path, *extra: str) -> Iterator[ModulesServer]:
    server = ModulesServer(tmp, list(extra))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _loaded(modules: set[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


def test_serving_reviews_without_api_features_or_custom_rules_loads_neither(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        mutated = server.answer("/mutate", review(gpu_job()))
        assert mutated["allowed"] is True and mutated.get("patch")
        assert server.answer("/validate", review(gpu_job(gpus=1)))["uid"]
    modules = server.stop()
    assert "gpuguard.webhook.engine.core" in modules  # the reviews were judged in this process
    assert not _loaded(modules, "kubernetes")
    assert not _loaded(modules, "gpuguard.kubeapi")
    assert not _loaded(modules, "cel_expr_python")


def test_a_config_with_custom_rules_loads_cel_and_the_rule_still_denies(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CUSTOM_RULE_CONFIG)
    with serving(tmp_path, "--config", str(config)) as server:
        denied = server.answer("/validate", review(gpu_job()))
        assert denied["allowed"] is False
        assert "team label" in denied["status"]["message"]
        labelled = gpu_job()
        labelled["metadata"]["labels"] = {"team": "vision"}
        assert "team-label" not in json.dumps(server.answer("/validate", review(labelled)))
    modules = server.stop()
    assert _loaded(modules, "cel_expr_python")
    assert not _loaded(modules, "kubernetes")


def test_a_scale_review_loads_the_api_client_when_it_comes(tmp_path: Path) -> None:
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale",
             "metadata": {"name": "web", "namespace": "ml"}, "spec": {"replicas": 3}}
    body = review(scale, "UPDATE", old=scale, sub_resource="scale")
    body["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    with serving(tmp_path, "--kubeconfig", str(tmp_path / "no-such-kubeconfig")) as server:
        answer = server.answer("/validate", body)
        assert "cannot read the scaled deployments" in json.dumps(answer)
    assert _loaded(server.stop(), "kubernetes")
