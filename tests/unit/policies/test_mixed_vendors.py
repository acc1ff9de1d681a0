"""Who makes a device (``Accelerators.vendor_of``), which mixed-vendors compares: a profile's ``vendor``, else
its domain, a slice's being the sliced device's."""

from __future__ import annotations

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine

CONFIG = parse_config_text("kind: GpuguardConfig\n")


def _vendor(name: str, device_class: bool = False) -> str:
    accelerators = CONFIG.accelerators
    profile = accelerators.for_device_class(name) if device_class else accelerators.profile_for(name)
    assert profile is not None, name
    return accelerators.vendor_of(profile, name)


def test_vendors_of_the_shipped_profiles() -> None:
    assert _vendor("nvidia.com/gpu") == _vendor("nvidia.com/mig-1g.10gb") == _vendor("nvidia.com/gpu.shared") \
        == _vendor("gpu.nvidia.com", device_class=True) == _vendor("kai.scheduler/gpu-sharing", device_class=True) \
        == "nvidia.com"
    assert _vendor("amd.com/gpu") == "amd.com"
    assert _vendor("aws.amazon.com/neuron") == _vendor("neuron.aws.com", device_class=True) == "amazon.com"
    assert _vendor("gpu.intel.com/i915") == _vendor("gpu.intel.com/xe") == "intel.com"
    assert _vendor("iluvatar.ai/vgpu") == _vendor("iluvatar.com/gpu")


def _pod(limits: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "x:1", "command": ["python", "a.py"], "resources": {"limits": limits}}]}}


def test_a_profile_may_say_who_makes_its_device() -> None:
    pod = _pod({"nvidia.com/gpu": 1, "example.com/gpu": 1})
    ctx = RequestContext(namespace="ml")
    learned = "accelerators:\n- {name: example-gpu, resources: [example.com/gpu]}\n"
    plain = Engine(parse_config_text("kind: GpuguardConfig\n" + learned)).evaluate(pod, ctx)
    assert [v.verdict for v in plain.violations if v.policy == "mixed-vendors"] == ["deny"]
    said = "accelerators:\n- {name: example-gpu, resources: [example.com/gpu], vendor: nvidia.com}\n"
    same = Engine(parse_config_text("kind: GpuguardConfig\n" + said)).evaluate(pod, ctx)
    assert [v for v in same.violations if v.policy == "mixed-vendors"] == []
