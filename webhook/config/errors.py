"""The one error a config load raises: every module of this package reports through it."""

from __future__ import annotations


class ConfigError(Exception):
    """A config file gpuguard refuses; the message is ``file:line: reason``."""
