"""``gpuguard policies`` and ``gpuguard explain``: what each policy does, for the people who configure it.

Everything shown comes from ``gpuguard.webhook.catalog`` (the registry and each policy's settings
model), so the docs users read cannot drift from what the engine runs.  Works from an
installed package: a policy's example is package data (``policies/examples/<id>.yaml``), which
the fixture suite runs as a passing case (``gpuguard.webhook.suite.run_example``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.cli.common import add_common_flags, error, guard, print_whole, whole_line_console
from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from gpuguard.webhook.catalog import PolicyInfo


def register(subparsers: Any) -> None:
    """Add ``policies`` and ``explain`` to the ``gpuguard`` command."""
    policies = subparsers.add_parser("policies", description="List every policy gpuguard ships: id, phase (mutating or "
                                     "validating), default action and what it does.")
    add_common_flags(policies, ("table", "json"))
    policies.add_argument("--config", metavar="FILE", help="also list this GpuguardConfig's customPolicies")
    policies.set_defaults(func=guard(run_policies))
    explain = subparsers.add_parser("explain", description="Explain one policy: what it checks, why it matters, its "
                                    "settings (name, type, default) and a manifest that passes it.")
    explain.add_argument("policy", help="policy id, e.g. job-ttl (see `gpuguard policies`)")
    add_common_flags(explain, ("text", "json"))
    explain.add_argument("--config", metavar="FILE", help="a GpuguardConfig whose customPolicies may be explained")
    explain.set_defaults(func=guard(run_explain))


def _catalog(args: argparse.Namespace) -> dict[str, PolicyInfo] | None:
    """The built-in policies, plus the custom rules of ``--config`` (``None`` after printing why it failed)."""
    from gpuguard.webhook.catalog import load_catalog
    from gpuguard.webhook.config import ConfigError, load_config

    if not getattr(args, "config", None):
        return load_catalog()
    try:
        return load_catalog(load_config(args.config))
    except ConfigError as exc:
        error(str(exc))
        return None


def run_policies(args: argparse.Namespace) -> int:
    import orjson
    from rich.table import Table

    policies = _catalog(args)
    if policies is None:
        return ExitCode.USAGE
    if args.format == "json":
        rows = [{"id": p.id, "phase": p.phase, "defaultAction": p.default_action, "title": p.title,
                 "description": p.description} for p in policies.values()]
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return ExitCode.OK
    console = _stdout_console()
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("POLICY", no_wrap=True)
    table.add_column("PHASE", no_wrap=True)
    table.add_column("DEFAULT", no_wrap=True)
    table.add_column("WHAT IT DOES")
    for p in policies.values():
        table.add_row(p.id, p.phase, p.default_action, p.one_line)
    print_whole(console, table)
    print_whole(console, "[dim]`gpuguard explain POLICY` tells what it checks, why, its settings and an example.[/dim]")
    return ExitCode.OK


def _stdout_console() -> Console:
    return whole_line_console()


def config_snippet(info: PolicyInfo) -> str:
    """The policy's block of a GpuguardConfig with every setting at its default."""
    import orjson
    import yaml

    settings: dict[str, Any] = {} if info.settings else {"action": info.default_action}
    for s in info.settings:
        try:
            settings[s.name] = orjson.loads(s.default)
        except orjson.JSONDecodeError:
            settings[s.name] = s.default
    doc = {"apiVersion": "gpuguard.io/v1alpha1", "kind": "GpuguardConfig", "policies": {info.id: settings}}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def run_explain(args: argparse.Namespace) -> int:
    import orjson
    from rich.syntax import Syntax
    from rich.table import Table

    from gpuguard.webhook.catalog import UnknownPolicyError, find

    policies = _catalog(args)
    if policies is None:
        return ExitCode.USAGE
    try:
        info = find(policies, args.policy)
    except UnknownPolicyError as exc:
        error(str(exc))
        return ExitCode.USAGE
    if args.format == "json":
        data = {"id": info.id, "title": info.title, "phase": info.phase, "defaultAction": info.default_action,
                "description": info.description, "rationale": info.rationale, "example": info.example,
                "settings": [{"name": s.name, "type": s.type, "default": s.default, "description": s.description}
                             for s in info.settings]}
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        return ExitCode.OK
    console = _stdout_console()
    print_whole(console, f"[bold]{info.id}[/bold] — {info.title}")
    print_whole(console, f"{info.phase}, default action: {info.default_action}\n")
    print_whole(console, "[bold]What it checks[/bold]")
    print_whole(console, info.description or "-")
    print_whole(console, "\n[bold]Why it matters[/bold]")
    print_whole(console, info.rationale or "-")
    if not info.configurable:
        print_whole(console, "\nAn engine check: always on, with no action or setting in the config.")
        return ExitCode.OK
    print_whole(console, "\n[bold]Settings[/bold]")
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for column in ("NAME", "TYPE", "DEFAULT", "DESCRIPTION"):
        table.add_column(column, overflow="fold")
    for s in info.settings:
        table.add_row(s.name, s.type, s.default, s.description)
    print_whole(console, table)
    print_whole(console, "\n[bold]Configure it[/bold] (defaults shown)")
    print_whole(console, Syntax(config_snippet(info), "yaml", theme="ansi_dark", background_color="default"))
    if info.example:
        print_whole(console, "[bold]Passes[/bold]")
        print_whole(console, Syntax(info.example.rstrip(), "yaml", theme="ansi_dark", background_color="default"))
    return ExitCode.OK
