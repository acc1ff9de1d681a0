"""``gpuguard audit``: flags in, exit code out.

This module only parses flags, wires inputs (files or a cluster) to the engine and picks a
format; every decision comes from ``gpuguard.webhook.engine.core`` and every count from
``gpuguard.webhook.cli.audit.run``.  Exit codes (documented in docs/audit.md): 0 clean, 1 findings at or
above ``--fail-on``, 2 usage, config, input or cluster errors (2 wins over 1: an audit that
could not read everything must not pass as merely "has findings").  No traceback reaches
users: errors are one ``gpuguard: error: ...`` line (``GPUGUARD_DEBUG=1`` re-raises).
The engine, the config, rich and the kubernetes client are imported by the functions that run
the audit, so ``gpuguard audit --help`` loads none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from gpuguard.webhook.cli.audit.formats import FORMATS, HUMAN_FORMATS, RenderOptions, open_writer
from gpuguard.webhook.cli.audit.run import FAIL_ON, AuditItem, AuditReport, unknown_accelerators
from gpuguard.webhook.cli.common import (
    NO_WIDTH,
    UsageError,
    add_common_flags,
    add_nodes_flag,
    error,
    guard,
    load_config_or_exit,
    manifest_paths,
    note,
    with_nodes_or_exit,
)
from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from rich.progress import Progress

    from gpuguard.webhook.cli.audit import cost

def register(subparsers: Any) -> None:
    """Add ``audit`` to the ``gpuguard`` command."""
    parser = subparsers.add_parser(
        "audit", description="Evaluate manifests (files, folders, - for stdin) or a live cluster's workloads with the "
        "webhook's engine, without changing anything, and report what would be denied, warned about and "
        "changed, with an estimate of the GPU cost at risk.",
        epilog="Exit codes: 0 nothing at or above --fail-on; 1 findings at or above --fail-on; 2 usage, "
        "config, input or cluster errors (2 wins over 1). See docs/audit.md.")
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="manifest files or folders (recursive: *.yaml, *.yml, *.json); - reads stdin "
                        "(helm template | gpuguard audit -); -f PATH is the same")
    source = parser.add_argument_group("live cluster")
    source.add_argument("--cluster", action="store_true",
                        help="audit the workloads of the current kubeconfig context, as if each were created now")
    source.add_argument("-n", "--namespace",
                        help="with --cluster: the namespace to audit (default: the context's); with files: the "
                        "namespace of objects without one (default: default)")
    source.add_argument("-A", "--all-namespaces", action="store_true", help="with --cluster: every namespace")
    source.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, then "
                        "~/.kube/config)")
    source.add_argument("--context", help="kubeconfig context (default: the current one)")
    source.add_argument("--lookup-cluster", action="store_true",
                        help="with files: read what a workload names but the files lack (a TrainJob's "
                        "TrainingRuntime, an InferenceService's ServingRuntime) from the current kubeconfig "
                        "context; without it such a workload is reported not-fully-checked")
    source.add_argument("--chunk-size", type=_positive, default=500, metavar="N",
                        help="objects per list request (default: 500)")
    parser.add_argument("--config", metavar="FILE", help="GpuguardConfig file (default: the shipped default)")
    add_nodes_flag(parser)
    parser.add_argument("--namespace-label", action="append", default=[], metavar="KEY=VALUE",
                        help="with files: a label of the target namespace, for profiles chosen by label "
                        "(repeatable)")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="skip files or folders matching GLOB while walking folders (repeatable)")
    parser.add_argument("--ignore-non-kubernetes", action="store_true",
                        help="documents without apiVersion/kind (values.yaml, CI configs) are counted in a note "
                        "instead of being input errors; invalid YAML still is one (for pre-commit hooks)")
    output = parser.add_argument_group("output")
    add_common_flags(output, tuple(FORMATS), manifests=True, file_flag="--output-file",
                     quiet="print nothing (errors aside): the exit code says the result; --output-file is "
                     "still written")
    output.add_argument("--output-file", metavar="FILE", help="write the report to FILE instead of stdout")
    output.add_argument("--fail-on", choices=FAIL_ON, default="deny",
                        help="exit 1 when a finding is at or above this level (default: deny)")
    output.add_argument("--diff", action="store_true",
                        help="print each workload's unified YAML diff before/after mutation (with a format other "
                        "than table, the report needs --output-file)")
    output.add_argument("-v", "--verbose", action="store_true",
                        help="table: also list objects that are not checked (ConfigMaps, exempt namespaces ...)")
    output.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    parser.set_defaults(func=guard(run_audit))


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _note(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        note(message)


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--namespace-label {pair!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


def _check_flags(args: argparse.Namespace) -> None:
    args.paths = manifest_paths(args, "paths")
    if not args.paths and not args.cluster:
        raise UsageError("nothing to audit: give manifest paths (or - for stdin) or --cluster")
    if args.all_namespaces and args.namespace:
        raise UsageError("--namespace and --all-namespaces exclude each other")
    if args.lookup_cluster and not args.paths:
        raise UsageError("--lookup-cluster reads what audited files name: give manifest paths")
    if not args.cluster:
        for flag, value in (("--all-namespaces", args.all_namespaces), ("--kubeconfig", args.kubeconfig),
                            ("--context", args.context)):
            if value and not (args.lookup_cluster and flag != "--all-namespaces"):
                raise UsageError(f"{flag} needs --cluster" + ("" if flag == "--all-namespaces" else
                                                            " or --lookup-cluster"))
    if args.diff and args.format not in HUMAN_FORMATS and not args.output_file and not args.quiet:
        raise UsageError(f"--diff prints to stdout, so -o {args.format} needs --output-file FILE")


def _progress_enabled(args: argparse.Namespace) -> bool:
    """A live bar only for a person watching: both streams on a terminal, not CI, not asked off."""
    return (not args.no_progress and not os.environ.get("CI") and sys.stderr.isatty() and sys.stdout.isatty())


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[objects]} objects"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    with progress:
        yield progress


def run_audit(args: argparse.Namespace) -> int:
    _check_flags(args)
    labels = _labels(args.namespace_label)
    from gpuguard.webhook.catalog import load_catalog
    from gpuguard.webhook.cli.audit import cost
    from gpuguard.webhook.engine.core import Engine

    config = load_config_or_exit(args.config)
    engine = Engine(config)
    with_nodes_or_exit(engine, args.nodes)
    prices = cost.Prices.from_config(config)
    conn = None
    if args.cluster:
        from gpuguard.webhook.cli.audit.cluster import ClusterError, connect

        try:
            conn = connect(args.kubeconfig, args.context)
        except ClusterError as exc:
            error(str(exc))
            return ExitCode.USAGE
    report = AuditReport(fail_on=args.fail_on, catalog=load_catalog(engine.config))
    with _destination(args.output_file, args.quiet) as (out, tty):
        color = tty and not os.environ.get("NO_COLOR")
        # Off a terminal no width: a line is as long as its text (`| grep` sees it whole).
        options = RenderOptions(color=color, width=None if tty else NO_WIDTH, verbose=args.verbose,
                                diff=args.diff and args.format in HUMAN_FORMATS)
        writer = open_writer(report, args.format, out, options)
        diffs = _DiffPrinter() if args.diff and args.format not in HUMAN_FORMATS and not args.quiet else None
        seen = 0
        unknown: dict[str, int] = {}  # extended resources that may be accelerators no profile counts

        def each(item: AuditItem) -> None:
            """Every item, as soon as it is decided: counted, written, its diff printed; then dropped."""
            nonlocal seen
            seen += 1
            if item.decision is not None and not item.decision.skipped:
                for name in unknown_accelerators(item.obj, engine.config.accelerators):
                    unknown[name] = unknown.get(name, 0) + 1
            report.count(item)
            writer.add(item)
            if diffs is not None:
                diffs.print(item)
            if args.quiet and item.error:  # the report is not shown: its errors are said on stderr
                doc = item.doc
                error(f"{doc.source}{'' if doc.line is None else f':{doc.line}'}: {item.error}")

        try:
            with _progress(_progress_enabled(args)) as progress:
                if args.paths:
                    _audit_files(args, engine, prices, labels, report, each, progress)
                if conn is not None and _audit_cluster(args, conn, engine, prices, report, each,
                                                       progress) is not None:
                    return ExitCode.USAGE
            if not seen and not report.extra_errors:
                report.notes.append("no Kubernetes objects found in the given inputs")
            if unknown:
                report.notes.append(_unknown_note(unknown))
            if args.quiet:
                for message in report.extra_errors:
                    error(str(message))
            writer.finish()
        finally:
            writer.close()
    return report.exit_code


def _unknown_note(unknown: dict[str, int]) -> str:
    """What the audit could not count: resources that may be accelerators no profile names (docs/accelerators.md)."""
    listed = ", ".join(f"{name} ({n} object{'s' if n != 1 else ''})" for name, n in sorted(unknown.items()))
    return (f"not counted as accelerators, since no profile names them: {listed}; give the cluster's nodes "
            "(--nodes, or --cluster) to learn them, or add an accelerator profile")


def _audit_files(args: argparse.Namespace, engine: Any, prices: cost.Prices, labels: dict[str, str],
                 report: AuditReport, each: Callable[[AuditItem], None], progress: Progress | None) -> None:
    """The manifests of ``args.paths``, one document at a time.

    What a workload names may stand anywhere in the input (a TrainJob's runtime, the DRA claim templates
    and claims of pods' resourceClaims), so a first pass collects those objects alone: it parses only the
    inputs whose text can hold one (``manifests.may_hold``).  The second pass evaluates every document and
    lets it go; stdin, which can be read once, is kept as text in between (at most the 64 MiB input cap).
    """
    from gpuguard.webhook import manifests
    from gpuguard.webhook.cli.audit.run import evaluate_all, file_context
    from gpuguard.webhook.objects import LISTABLE_CORE, READABLE, READABLE_CORE, ApiLookup, FirstFound, StaticLookup
    from gpuguard.workloads.claims import CLAIM_MAKERS, PLURALS, StaticClaims
    from gpuguard.workloads.inventory import device_classes

    report.sources.extend(manifests.STDIN_NAME if p == manifests.STDIN else p for p in args.paths)
    task = progress.add_task("Auditing manifests", total=None, objects=0) if progress else None
    default_ns = args.namespace or "default"
    ignored = 0
    named_kinds = tuple(kind for _group, kind in (*READABLE, *READABLE_CORE, *LISTABLE_CORE)) + tuple(PLURALS) \
        + tuple(k for _g, k in CLAIM_MAKERS) + ("DeviceClass",)
    stdin = manifests.StdinText()

    def documents(only_if: tuple[str, ...] = ()) -> Iterator[manifests.Document]:
        nonlocal ignored
        for doc in manifests.load(args.paths, exclude=args.exclude, stdin=stdin, only_if=only_if):
            if args.ignore_non_kubernetes and doc.error and doc.error.kind == manifests.NOT_KUBERNETES:
                if not only_if:
                    ignored += 1
                continue
            yield doc

    named = [doc.obj for doc in documents(only_if=named_kinds) if doc.obj is not None]
    runtimes: Any = StaticLookup(named)
    if args.lookup_cluster:  # the files' objects first, the cluster's for what they lack
        runtimes = FirstFound(runtimes, ApiLookup(api=_cluster_api(args)))
    engine.claims = StaticClaims(named, origin="the audited files")
    if classes := device_classes(named):  # DeviceClasses in the input say what else counts as an accelerator
        engine.set_nodes(engine.inventory.with_device_classes(classes))
    del named
    pairs = ((doc, file_context(doc.obj, default_ns, labels, runtimes or None)) for doc in documents())

    def count(item: AuditItem) -> None:
        each(item)
        if progress is not None and task is not None:
            progress.update(task, advance=1, objects=report.tally.objects)

    deque(evaluate_all(pairs, engine.evaluate, prices, on_item=count), maxlen=0)  # run, keep nothing
    if ignored:
        report.notes.append(f"{ignored} documents that are not Kubernetes objects were ignored "
                            "(--ignore-non-kubernetes)")


def _cluster_api(args: argparse.Namespace) -> Any:
    """The custom-objects client of ``--kubeconfig``/``--context`` for ``--lookup-cluster``; a bad
    kubeconfig is a usage error said once, before any file is read."""
    from gpuguard.kubeapi.client import custom_objects
    from gpuguard.webhook.cli.audit.cluster import ClusterError, connect

    try:
        return custom_objects(connect(args.kubeconfig, args.context).api)
    except ClusterError as exc:
        raise UsageError(str(exc)) from None


def _audit_cluster(args: argparse.Namespace, conn: Any, engine: Any, prices: cost.Prices, report: AuditReport,
                   each: Callable[[AuditItem], None], progress: Progress | None) -> int | None:
    """The live cluster's workloads; ``ExitCode.USAGE`` (the error said) when it cannot be audited."""
    from dataclasses import replace

    from gpuguard.kubeapi.client import custom_objects
    from gpuguard.webhook.cli.audit.cluster import ClusterError, ClusterLister
    from gpuguard.webhook.cli.audit.run import evaluate_all
    from gpuguard.webhook.objects import ApiLookup

    namespace = None if args.all_namespaces else (args.namespace or conn.namespace)
    if namespace and not args.namespace:
        _note(args, f"auditing namespace {namespace!r} of context {conn.context!r} (-A for every namespace)")
    lister = ClusterLister(conn.api, namespace=namespace, chunk_size=args.chunk_size,
                           source=f"cluster:{conn.context}")
    task = progress.add_task("Discovering APIs", total=None, objects=0) if progress else None
    listed = 0

    def on_kind(label: str, done: int, total: int) -> None:
        if progress is not None and task is not None:
            progress.update(task, description=f"Listing {label}" if done < total else "Done",
                            completed=done, total=total)

    def on_item(item: AuditItem) -> None:
        nonlocal listed
        listed += 1
        each(item)
        if progress is not None and task is not None:
            progress.update(task, objects=listed)

    runtimes = ApiLookup(api=custom_objects(conn.api))
    pairs = ((doc, replace(ctx, read_object=runtimes) if ctx is not None else None)
             for doc, ctx in lister.objects(on_kind))
    try:
        engine.claims = lister.claims()  # DRA claim templates and claims, listed once
        if not args.nodes and (live := lister.nodes()) is not None:
            engine.set_nodes(live)  # the cluster's own nodes, as the webhook's node watch sees them
        if lister.device_classes:  # and its DeviceClasses: what else counts as an accelerator
            engine.set_nodes(engine.inventory.with_device_classes(lister.device_classes))
        deque(evaluate_all(pairs, engine.evaluate, prices, on_item=on_item), maxlen=0)  # run, keep nothing
    except ClusterError as exc:
        error(str(exc))
        return ExitCode.USAGE
    finally:
        with contextlib.suppress(Exception):
            conn.api.close()
    report.sources.append(lister.source)
    report.extra_errors.extend(lister.errors)
    report.notes.extend(lister.notes)
    if lister.skipped_owned:
        report.notes.append(f"{lister.skipped_owned} objects owned by a controller gpuguard also lists were not "
                            "counted twice (e.g. ReplicaSets of Deployments, Pods of Jobs)")
    return None


@contextlib.contextmanager
def _destination(path: str | None, quiet: bool) -> Iterator[tuple[TextIO, bool]]:
    """(stream, is_terminal) for the report: ``--output-file``, else stdout, else (``--quiet``) nowhere."""
    if not path or path == "-":
        if quiet and not path:
            with open(os.devnull, "w", encoding="utf-8") as null:
                yield null, False
            return
        yield sys.stdout, sys.stdout.isatty()
        return
    try:
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below, errors reported
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    with handle:
        yield handle, False


class _DiffPrinter:
    """``--diff`` with a machine format: each workload's diff goes to stdout as it is decided, the report to
    --output-file."""

    def __init__(self) -> None:
        self.console: Any = None
        if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
            from rich.console import Console

            self.console = Console(force_terminal=True, no_color=False, highlight=False)

    def print(self, item: AuditItem) -> None:
        if not item.is_workload or not item.patch or item.decision is None:
            return
        from gpuguard.webhook.cli.audit import mutation

        diff = mutation.yaml_diff(item.decision.original, item.decision.mutated, item.label)
        if self.console is not None:
            from rich.syntax import Syntax

            self.console.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
        else:
            sys.stdout.write(diff)
