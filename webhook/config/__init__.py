"""The GpuguardConfig file: loaded once, validated fully, and compiled for the hot path.

The rooms of this package, top to bottom: ``load`` (read a file or text), ``compile`` (the
compiled ``Config`` and ``PolicySet`` a request uses), ``schema`` (the pydantic models of
the YAML keys) and ``legacy`` (keys from older configs), ``yaml_lines`` (the line-aware,
alias-bomb-safe YAML reader) and ``errors``.  A bad file is refused with ``file:line:
reason`` so an admin can fix a ConfigMap without guessing.  Callers import from here.
"""

from __future__ import annotations

from gpuguard.webhook.config.compile import (
    CompiledProfile,
    Config,
    PolicySet,
    build_config,
    compile_controllers,
    shipped_accelerators,
    with_learned_accelerators,
)
from gpuguard.webhook.config.errors import ConfigError
from gpuguard.webhook.config.load import load_config, parse_config_text
from gpuguard.webhook.config.schema import (
    CONFIG_KIND,
    DEFAULT_CONFIG_PATH,
    DEFAULT_MAX_BODY_BYTES,
    ConfigFile,
    Cost,
    TrustedController,
)

__all__ = [
    "CONFIG_KIND", "DEFAULT_CONFIG_PATH", "DEFAULT_MAX_BODY_BYTES", "CompiledProfile", "Config", "ConfigError",
    "ConfigFile", "Cost", "PolicySet", "TrustedController", "build_config", "compile_controllers", "load_config",
    "parse_config_text", "shipped_accelerators", "with_learned_accelerators",
]
