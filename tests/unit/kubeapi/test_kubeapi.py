"""``gpuguard.kubeapi.client.connect``: the one credential order every command uses.

Real kubeconfig files and the real kubernetes client; no API server is contacted (building a
client does not connect).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuguard.kubeapi.client import KubeConfigError, connect


def kubeconfig(path: Path, contexts: dict[str, str], current: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u", "namespace": ns}}
                     for name, ns in contexts.items()],
    }))
    return path


def test_explicit_kubeconfig_and_context_win_even_inside_a_pod(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    file = kubeconfig(tmp_path / "kc", {"dev": "ml", "prod": "serving"}, current="dev")
    conn = connect(str(file))
    assert (conn.context, conn.namespace) == ("dev", "ml")
    assert conn.api.configuration.host == "https://127.0.0.1:6443"
    assert connect(str(file), "prod").namespace == "serving"
    with pytest.raises(KubeConfigError, match=r"context 'nope' not found.*dev, prod"):
        connect(str(file), "nope")


def test_in_a_pod_without_kubeconfig_the_service_account_is_used(monkeypatch):
    """In-cluster is tried before ~/.kube/config: here it fails (no token file), which proves it was chosen."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match="in-cluster service account"):
        connect()


def test_broken_kubeconfig_is_a_clear_error(tmp_path):
    bad = tmp_path / "kc"
    bad.write_text("clusters: [\n")
    with pytest.raises(KubeConfigError, match="cannot load kubeconfig"):
        connect(str(bad))
    with pytest.raises(KubeConfigError, match="cannot load kubeconfig"):
        connect(str(tmp_path / "missing"))


def test_a_missing_kubeconfig_names_the_file_tried_and_the_flag(tmp_path, monkeypatch):
    """The error says which file was read, what named it, and that --kubeconfig names another."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    missing = tmp_path / "missing"
    with pytest.raises(KubeConfigError) as flag:
        connect(str(missing))
    assert f"{missing} (from --kubeconfig): no such file" in str(flag.value) and "--kubeconfig FILE" in str(flag.value)
    with pytest.raises(KubeConfigError) as default:
        connect()
    assert f"{tmp_path / 'home' / '.kube' / 'config'} (from the default, ~/.kube/config)" in str(default.value)
    assert "--kubeconfig FILE" in str(default.value)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    with pytest.raises(KubeConfigError, match=r"b \(from \$KUBECONFIG\): none of these files exists.*--kubeconfig"):
        connect()
    bad = tmp_path / "kc"
    bad.write_text("clusters: [\n")
    with pytest.raises(KubeConfigError, match=rf"cannot load kubeconfig {bad} \(from --kubeconfig\): .*--kubeconfig"):
        connect(str(bad))
