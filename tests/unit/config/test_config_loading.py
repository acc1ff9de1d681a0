"""Config file loading: alias bombs, recursive aliases, deep nesting and non-UTF-8 files are
refused with ``file:line: reason`` (and, at start-up, one line and exit 2)."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from gpuguard.webhook.config import ConfigError, load_config, parse_config_text
from tests.support.server import issue_certs, run_cli

BOMB = "\n".join(
    ["kind: GpuguardConfig", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]) + "\n"


def test_alias_bomb_is_refused_before_it_expands():
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        parse_config_text(BOMB, "bomb.yaml")
    message = str(err.value)
    assert message.startswith("bomb.yaml:") and "aliases expand this document beyond 100000 nodes" in message
    line = int(message.split(":")[1])
    assert 3 <= line <= 10
    # 9^9 = 387 million nodes if expanded; refusing it must not have grown the process by 100 MB.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 100_000


def test_a_few_aliases_are_still_fine():
    text = ("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
            "exemptions:\n  namespaces: &ns [team-a, team-b]\nprofiles:\n"
            "- name: p\n  match: {namespaces: *ns}\n")
    config = parse_config_text(text, "ok.yaml")
    assert config.profiles[0].match.namespaces == ["team-a", "team-b"]


def test_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match=r"^r.yaml:\d+: a YAML alias refers to a node that contains it"):
        parse_config_text("kind: GpuguardConfig\na: &x\n  b: *x\n", "r.yaml")


def test_deep_nesting_is_refused_without_recursion_error():
    with pytest.raises(ConfigError, match=r"^d.yaml.*nested"):
        parse_config_text("a: " + "[" * 3000 + "]" * 3000 + "\n", "d.yaml")
    with pytest.raises(ConfigError, match=r"^d.yaml:1: nested deeper than 64 levels"):
        parse_config_text("a: " + "[" * 70 + "]" * 70 + "\n", "d.yaml")


def test_non_utf8_file_is_one_clear_error(tmp_path: Path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: GpuguardConfig\nfailureMode: \xe9\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:2: not UTF-8 text (byte 0xe9 at offset 34); save the config as UTF-8"


@pytest.mark.parametrize("content", [b"kind: GpuguardConfig\nx: \xff\n", BOMB.encode()])
def test_serve_refuses_bad_config_with_one_line_and_exit_2(tmp_path: Path, content: bytes):
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    started = time.monotonic()
    _, cert, key = issue_certs(tmp_path / "certs")
    result = run_cli("serve", "--config", str(path), "--tls-cert", str(cert), "--tls-key", str(key))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"gpuguard: error: {path}:")
    assert "Traceback" not in result.stderr + result.stdout
    assert time.monotonic() - started < 60
