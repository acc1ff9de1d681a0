"""Hot reload while serving: config edits (ConfigMap symlink swap and in-place rewrite) and certificates.

Servers here poll every 0.2 s (``--reload-interval``), so each test waits at most a few seconds
for a change to take effect, then checks what new requests and new TLS handshakes see.
"""

from __future__ import annotations

import os
import shutil
import ssl
import threading
from pathlib import Path

import httpx
import pytest

from gpuguard.policies import REGISTRY
from tests.support.server import (
    Server,
    gpu_job,
    issue_certs,
    metric_value,
    review,
    serial_of,
    serve,
    served_serial,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)  # a bound for a hung server, far above a busy machine's slowest run


def config_text(action: str, failure_mode: str = "open", extra: str = "") -> str:
    """A GpuguardConfig where only checkpoint-volume decides (every other policy off)."""
    lines = ["apiVersion: gpuguard.io/v1alpha1", "kind: GpuguardConfig", f"failureMode: {failure_mode}",
             "policies:"]
    for policy_id in REGISTRY:
        # Quoted: YAML 1.1 reads a bare `off` as false.
        lines += [f"  {policy_id}:", f"    action: '{action if policy_id == 'checkpoint-volume' else 'off'}'"]
    return "\n".join(lines) + "\n" + extra


class ConfigMapDir:
    """A directory laid out like a mounted ConfigMap: ``config.yaml -> ..data/config.yaml``.

    The kubelet updates it by writing a new timestamped directory and renaming a new ``..data``
    symlink over the old one; the visible file is never written to.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / "config.yaml"

    def write(self, text: str) -> None:
        self.version += 1
        target = self.root / f"..2025_01_01_00_00_{self.version:02d}"
        target.mkdir()
        (target / "config.yaml").write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(target.name)
        os.replace(tmp, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/config.yaml")


def validate(server: Server, obj: object | None = None) -> dict:
    body = review(gpu_job())
    if obj is not None:
        body["request"]["object"] = obj
    resp = server.post("/validate", body)
    assert resp.status_code == 200, resp.text
    return resp.json()["response"]


def reloads(server: Server, name: str, result: str) -> float:
    return metric_value(server.client.get("/metrics").text, name, {"result": result})


def test_configmap_swap_reloads_and_a_bad_edit_keeps_the_old_config(tmp_path: Path) -> None:
    cm = ConfigMapDir(tmp_path / "cm")
    cm.write(config_text("enforce"))
    with serve(tmp_path, "--config", str(cm.path), "--reload-interval", "0.2") as server:
        first = validate(server)
        assert first["allowed"] is False and "[checkpoint-volume]" in first["status"]["message"]

        cm.write(config_text("warn"))
        warned = wait_for(lambda: (r := validate(server))["allowed"] and r, what="warn config")
        assert any(w.startswith("[checkpoint-volume]") for w in warned["warnings"])
        assert all(len(w) <= 256 for w in warned["warnings"])

        cm.write(config_text("audit"))
        audited = wait_for(lambda: "auditAnnotations" in (r := validate(server)) and r, what="audit config")
        assert audited["allowed"] is True and "warnings" not in audited
        assert set(audited["auditAnnotations"]) == {"checkpoint-volume"}
        assert reloads(server, "gpuguard_config_reloads_total", "success") == 2

        cm.write(config_text("audit", extra="surprise: true\n"))
        wait_for(lambda: reloads(server, "gpuguard_config_reloads_total", "error") == 1, what="reload error")
        still = validate(server)
        assert still["allowed"] is True and "checkpoint-volume" in still["auditAnnotations"]
        assert server.client.get("/readyz").status_code == 200
        errors = [line for line in server.logs().splitlines() if "config not reloaded" in line]
        assert errors and "config.yaml:" in errors[0] and "surprise" in errors[0]


def test_in_place_rewrite_switches_the_policy_action(tmp_path: Path) -> None:
    path = tmp_path / "gpuguard.yaml"
    path.write_text(config_text("enforce", failure_mode="closed"))
    with serve(tmp_path, "--config", str(path), "--reload-interval", "0.2") as server:
        denied = validate(server)
        assert denied["allowed"] is False and "[checkpoint-volume]" in denied["status"]["message"]

        with path.open("w") as fh:  # same inode, new contents
            fh.write(config_text("warn", failure_mode="closed"))
        warned = wait_for(lambda: (r := validate(server))["allowed"] and r, what="checkpoint-volume: warn")
        assert "checkpoint-volume" in warned["warnings"][0]


def test_cert_reload_serves_the_new_certificate_without_dropping_requests(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    with serve(tmp_path, "--reload-interval", "0.2", certs_dir=certs) as server:
        old_serial = served_serial(server.port, server.ca)
        assert old_serial == serial_of(server.cert)

        failures: list[str] = []
        sent = [0]
        stop = threading.Event()
        verify = ssl.create_default_context(cafile=str(server.ca))

        def hammer() -> None:
            """Reviews on one kept-alive connection and on fresh connections, throughout the swap."""
            with httpx.Client(base_url=server.base, verify=verify, timeout=10) as kept:
                while not stop.is_set():
                    for fresh in (False, True):
                        try:
                            if fresh:
                                with httpx.Client(base_url=server.base, verify=verify, timeout=10) as once:
                                    resp = once.post("/validate", json=review(gpu_job()))
                            else:
                                resp = kept.post("/validate", json=review(gpu_job()))
                            sent[0] += 1
                            if resp.status_code != 200:
                                failures.append(f"HTTP {resp.status_code}")
                        except httpx.HTTPError as exc:
                            failures.append(repr(exc))

        def answered() -> int:
            return sent[0] + len(failures)

        worker = threading.Thread(target=hammer)
        worker.start()
        try:
            # Counted, not slept for: a busy machine may answer few reviews in a fixed 0.3 s.
            wait_for(lambda: answered() >= 5, what="reviews flowing before the swap")
            _, cert, _ = issue_certs(certs)  # same CA, new leaf, written atomically (key first)
            new_serial = serial_of(cert)
            assert new_serial != old_serial
            wait_for(lambda: served_serial(server.port, server.ca) == new_serial, what="new certificate")
            swapped = answered()
            wait_for(lambda: failures or (answered() >= swapped + 5 and sent[0] > 10),
                     what="reviews flowing after the swap")
        finally:
            stop.set()
            worker.join()
        assert failures == [] and sent[0] > 10
        assert reloads(server, "gpuguard_cert_reloads_total", "success") >= 1

        # A certificate that does not match the key is refused; the working one stays in use.
        other = issue_certs(tmp_path / "other")[1]
        shutil.copyfile(other, certs / "tls.crt")
        wait_for(lambda: reloads(server, "gpuguard_cert_reloads_total", "error") >= 1,
                 what="cert reload error")
        assert served_serial(server.port, server.ca) == new_serial
        assert validate(server)["allowed"] is False
