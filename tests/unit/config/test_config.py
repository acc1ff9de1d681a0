"""The config loader: the shipped default loads, bad files are refused with file:line: reason."""

from __future__ import annotations

import pytest

from gpuguard.policies import REGISTRY
from gpuguard.webhook.config import DEFAULT_CONFIG_PATH, ConfigError, load_config, parse_config_text


def test_shipped_default_loads_and_enables_every_policy():
    config = load_config()
    enabled = [p.id for p, _ in config.policies.mutating + config.policies.validating]
    assert enabled == list(REGISTRY)
    assert config.failure_mode == "closed"  # what can't be judged is refused unless the admin opens it
    assert config.accelerators.is_accelerator("nvidia.com/mig-1g.10gb")
    assert not config.accelerators.is_accelerator("cpu")


def test_default_file_values_equal_the_built_in_defaults():
    """The shipped YAML documents the defaults; it must not silently differ from the code's."""
    shipped = load_config()
    built_in = parse_config_text("kind: GpuguardConfig\n")
    for policy_id in REGISTRY:
        assert shipped.policies.settings(policy_id) == built_in.policies.settings(policy_id), policy_id


def err(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "cfg.yaml")
    return str(info.value)


def test_unknown_top_level_key_names_the_line():
    assert err("kind: GpuguardConfig\nfailureMode: open\nbogus: 1\n") == "cfg.yaml:3: bogus: unknown key"


def test_unknown_policy_names_the_line_and_lists_known():
    message = err("kind: GpuguardConfig\npolicies:\n  checkpoint-volumes: {}\n")
    assert message.startswith("cfg.yaml:3: unknown policy 'checkpoint-volumes'") and "checkpoint-volume" in message


def test_bad_policy_setting_names_the_line():
    text = "kind: GpuguardConfig\npolicies:\n  job-ttl:\n    action: enforce\n    ttlSecondsAfterFinished: -5\n"
    assert err(text).startswith("cfg.yaml:5: policies.job-ttl.ttlSecondsAfterFinished:")


def test_unknown_policy_setting_and_bad_action():
    assert "cfg.yaml:4: policies.shm-volume.sizeLimt: unknown key" in err(
        "kind: GpuguardConfig\npolicies:\n  shm-volume:\n    sizeLimt: 1Gi\n")
    assert err("kind: GpuguardConfig\npolicies:\n  shm-volume: {action: deny}\n").startswith(
        "cfg.yaml:3: policies.shm-volume.action: Input should be")


def test_bad_quantity_is_refused():
    assert "not a Kubernetes quantity" in err(
        "kind: GpuguardConfig\npolicies:\n  default-resources:\n    nonGpu: {cpu: lots, memory: 1Gi, "
        "ephemeralStorage: 1Gi}\n")
    assert "not a Kubernetes quantity" in err(
        "kind: GpuguardConfig\naccelerators:\n- name: tpu\n  sizing: {cpu: lots}\n")


def test_invalid_yaml_names_the_line():
    assert err("kind: GpuguardConfig\npolicies: [\n  x: y\n").startswith("cfg.yaml:")
    assert "invalid YAML" in err("kind: GpuguardConfig\n  bad: indent\n")


def test_wrong_kind_empty_file_and_non_mapping():
    assert "cfg.yaml:1: kind:" in err("kind: Other\n")
    assert "empty" in err("")
    assert "must be a mapping" in err("- a\n- b\n")


def test_profile_errors_point_into_the_profile():
    text = ("kind: GpuguardConfig\nprofiles:\n- name: x\n  match: {namespaces: [a]}\n  policies:\n"
            "    gang-scheduling: {schedulers: 5}\n")
    assert err(text).startswith("cfg.yaml:6: profiles.0.policies.gang-scheduling.schedulers:")


def test_profile_settings_merge_over_base():
    config = parse_config_text(
        "kind: GpuguardConfig\npolicies:\n  job-ttl: {ttlSecondsAfterFinished: 100}\nprofiles:\n- name: p\n"
        "  match: {namespaces: [p-*]}\n  policies:\n    job-ttl: {action: warn}\n")
    name, policy_set = config.policies_for("p-1", {})
    settings = policy_set.settings("job-ttl")
    assert name == "p" and settings.action == "warn" and settings.ttl_seconds_after_finished == 100


def test_yaml_off_means_action_off():
    config = parse_config_text("kind: GpuguardConfig\npolicies:\n  shm-volume: {action: off}\n")
    assert config.policies.settings("shm-volume") is None


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_default_path_is_packaged():
    assert DEFAULT_CONFIG_PATH.name == "default-config.yaml" and DEFAULT_CONFIG_PATH.is_file()
