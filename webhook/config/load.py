"""Reading a config from a file or text: decode, parse with lines, then compile."""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from gpuguard.webhook.config.compile import Config, build_config
from gpuguard.webhook.config.errors import ConfigError
from gpuguard.webhook.config.schema import DEFAULT_CONFIG_PATH
from gpuguard.webhook.config.yaml_lines import compose_and_construct, line_index


def load_config(path: str | Path | None = None) -> Config:
    """Load a GpuguardConfig file (``None``: the shipped default) or raise ``ConfigError``."""
    file: Path | Traversable = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    source = str(file)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{source}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); save the config as UTF-8") from None
    return parse_config_text(text, source)


def parse_config_text(text: str, source: str = "<config>") -> Config:
    """Parse and compile config YAML text (used for files, ConfigMaps and tests)."""
    try:
        node, data = compose_and_construct(text, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ConfigError(f"{source}:{line}: invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None
    if node is None:
        raise ConfigError(f"{source}:1: the config file is empty")
    return build_config(data, source, line_index(node))
