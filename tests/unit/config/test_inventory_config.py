"""The config's ``inventory`` section: declared node pools, checked at load with the line."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuguard.webhook.config import ConfigError, parse_config_text

POOL = """kind: GpuguardConfig
inventory:
  nodePools:
  - name: l4-pool
    labels: {cloud.google.com/gke-accelerator: nvidia-l4}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    allocatable: {cpu: 23830m, memory: 87Gi, nvidia.com/gpu: "2"}
    maxCount: 4
"""


def test_a_declared_pool_is_part_of_every_engine_inventory():
    config = parse_config_text(POOL)
    (pool,) = config.node_pools
    assert pool.source == "pool" and pool.count == 4 and pool.amount("nvidia.com/gpu") == Decimal(2)
    assert pool.amount("ephemeral-storage") is None  # not declared: unknown, never "none"
    from gpuguard.webhook.engine.core import Engine

    assert Engine(config).inventory.known


@pytest.mark.parametrize(("bad", "says"), [
    ("allocatable: {cpu: lots}", "not Kubernetes quantities: cpu: 'lots'"),
    ("taints: [{key: gpu}]", "a taint needs a key and an effect"),
    ("maxCount: -1", "maxCount"),
    ("shape: big", "shape"),
])
def test_a_bad_pool_names_the_line(bad: str, says: str):
    text = f"kind: GpuguardConfig\ninventory:\n  nodePools:\n  - name: p\n    {bad}\n"
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "cfg.yaml")
    assert str(info.value).startswith("cfg.yaml:5:") and says in str(info.value)
