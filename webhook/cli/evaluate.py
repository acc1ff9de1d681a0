"""``gpuguard evaluate FILE``: the engine's decision for each object of a manifest.

The quickest way to see what gpuguard would do to a manifest: violations, the JSON patch
and the mutated object.  Its JSON per object is the ``results[]`` entry of the audit
contract, so scripts can switch between the two commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.cli.common import (
    UsageError,
    add_common_flags,
    add_nodes_flag,
    error,
    guard,
    load_config_or_exit,
    manifest_paths,
    with_nodes_or_exit,
)
from gpuguard.webhook.decision import unresolved_as_finding
from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpuguard.webhook.decision import Decision


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("evaluate", description="Evaluate every object of a manifest as a CREATE and print "
                                   "violations, the JSON patch and the mutated object.")
    parser.add_argument("paths", nargs="*", metavar="FILE",
                        help="manifest file or folder (YAML or JSON, multi-document); - for stdin; -f FILE is the same")
    add_common_flags(parser, ("text", "json"), manifests=True,
                     quiet="print nothing (input errors aside); with --fail-on-deny the exit code says whether "
                     "anything would be denied")
    parser.add_argument("--config", help="GpuguardConfig file (default: the shipped default)")
    parser.add_argument("--namespace", default="default", help="namespace for objects without one")
    add_nodes_flag(parser)
    parser.add_argument("--fail-on-deny", action="store_true",
                        help="exit 1 when any object would be denied (default: exit 0 once all were evaluated)")
    parser.set_defaults(func=guard(run))  # one error line, never a traceback (`evaluate ... | head` too)


def _text(decision: Decision, index: int) -> str:
    import orjson

    from gpuguard.webhook.manifests import plain_yaml

    head = f"--- [{index}] {decision.kind} {decision.namespace or '-'}/{decision.name or '-'}"
    lines = [head]
    if decision.error:
        lines.append(f"error: {decision.error} ({'allowed' if decision.allowed else 'denied'} by failureMode)")
    elif decision.skipped:
        lines.append(f"skipped: {decision.skipped}")
    else:
        lines.append(f"decision: {'allowed' if decision.allowed else 'DENIED'}  class: {decision.workload_class}"
                     f"  gpus: {decision.gpus}")
    for violation in decision.violations:
        lines.append(f"  {violation.verdict.upper():5} {violation.text}")
    lines.extend(f"  CHANGED {change.text}" for change in decision.changes)  # the user's values gpuguard changed
    if decision.mutated_by:
        lines.append(f"mutated by: {', '.join(decision.mutated_by)}")
        lines.append("patch:")
        lines.extend(f"  {orjson.dumps(op).decode()}" for op in decision.patch)
        lines.append("mutated object:")
        lines.append(plain_yaml(decision.mutated).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import orjson

    from gpuguard.webhook.cli.audit.run import file_context
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.manifests import load as load_documents
    from gpuguard.webhook.objects import StaticLookup
    from gpuguard.workloads.claims import StaticClaims

    paths = manifest_paths(args, "paths")
    if not paths:
        raise UsageError("nothing to evaluate: give a manifest (FILE, -f FILE, or - for stdin)")
    engine = Engine(load_config_or_exit(args.config))
    with_nodes_or_exit(engine, args.nodes)
    results: list[dict[str, Any]] = []
    denied = bad_input = False
    docs = list(load_documents(paths))
    # DRA: claim templates and claims in the same manifest resolve the pods' resourceClaims.
    engine.claims = StaticClaims((d.obj for d in docs if d.obj is not None), origin=", ".join(paths))
    runtimes = StaticLookup(d.obj for d in docs)  # a TrainJob's runtime in the same manifest
    for doc in docs:
        if doc.error:
            bad_input = True
            error(f"{doc.location}: {doc.error.message}")
            continue
        # As the apiserver would get it: in the object's namespace, else the default one.
        ctx = file_context(doc.obj, args.namespace, None, runtimes or None)
        decision = unresolved_as_finding(engine.evaluate(doc.obj, ctx))
        denied = denied or not decision.allowed
        if args.quiet:
            continue
        if args.format == "json":
            results.append(decision.result_entry(doc.source, doc.index))
        else:
            print(_text(decision, doc.index))
    if args.format == "json" and not args.quiet:
        sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    if bad_input:
        return ExitCode.USAGE
    return ExitCode.FINDINGS if args.fail_on_deny and denied else ExitCode.OK
