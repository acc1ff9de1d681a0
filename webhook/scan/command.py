"""``gpuguard scan``: the background scan process (its own Deployment, never inside the webhook).

A separate process because admission must not share memory, CPU or bugs with a cache of every
workload in the cluster: a scan that falls behind, grows or crashes leaves every review as fast as
before.  See docs/reports.md.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from gpuguard.webhook.cli.common import error, guard
from gpuguard.webhook.exitcodes import ExitCode


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scan", description="Watch every workload gpuguard knows, judge it with the webhook's engine and keep "
        "wgpolicyk8s.io/v1alpha2 PolicyReports or OpenReports (one per workload, owned by it) and Prometheus metrics "
        "(findings, "
        "GPU-hours a day at risk, accelerators) current. Replicas elect one writer with a Lease. See docs/reports.md.")
    parser.add_argument("--config", help="GpuguardConfig file, reloaded when it changes (default: built-in)")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--lease-namespace", help="namespace of the Lease (default: the context's or the pod's)")
    parser.add_argument("--lease-name", default="gpuguard-scan", help="name of the Lease (default: %(default)s)")
    parser.add_argument("--identity", default="", help="this replica's name in the Lease (default: host-pid; "
                        "the Deployment passes the pod name)")
    parser.add_argument("--resync", type=float, default=600.0, help="seconds between full passes (default: "
                        "%(default)s)")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds to gather a burst of changes into one "
                        "batch (default: %(default)s)")
    parser.add_argument("--page-size", type=int, default=500, help="objects per list page (default: %(default)s)")
    parser.add_argument("--write-qps", type=float, default=20.0, help="report writes a second at most, on "
                        "average (default: %(default)s)")
    parser.add_argument("--write-burst", type=int, default=50, help="report writes at once (default: %(default)s)")
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds a Lease lasts without renewal "
                        "(default: %(default)s)")
    parser.add_argument("--no-node-inventory", action="store_true", help="decide without watching Nodes (as the "
                        "webhook without --node-inventory)")
    parser.add_argument("--dra-claims", action="store_true", help="watch DRA ResourceClaimTemplates and "
                        "ResourceClaims to count the devices pods' resourceClaims ask for (as the webhook's flag)")
    parser.add_argument("--report-api", choices=("policyreports", "openreports"), default="policyreports",
                        help="the reports written: wgpolicyk8s.io/v1alpha2 PolicyReports, or openreports.io/v1alpha1 "
                        "Reports (Kyverno's newer API; Policy Reporter reads both) (default: %(default)s)")
    parser.add_argument("--metrics-host", default="0.0.0.0", help="metrics address (default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=9090, help="port of /metrics, 0 for none (default: "
                        "%(default)s)")
    parser.set_defaults(func=guard(run))


def run(args: argparse.Namespace) -> int:
    from gpuguard.webhook.cli.audit.cluster import ClusterError, connect
    from gpuguard.webhook.cli.common import load_config_or_exit
    from gpuguard.webhook.scan.scanner import Scanner, Settings

    load_config_or_exit(args.config)  # a bad config is one error line, before anything starts
    try:
        conn = connect(args.kubeconfig, args.context)
    except ClusterError as exc:
        error(str(exc))
        return ExitCode.USAGE
    # One JSON object a line, as the server logs: one log pipeline parses both Deployments.
    from gpuguard.webhook.server.logs import configure as json_logs

    json_logs("info")
    settings = Settings(config=args.config, lease_namespace=args.lease_namespace or conn.namespace,
                        lease_name=args.lease_name, identity=args.identity, resync=args.resync, settle=args.settle,
                        page_size=args.page_size, write_qps=args.write_qps, write_burst=args.write_burst,
                        lease_duration=args.lease_duration, node_inventory=not args.no_node_inventory,
                        dra_claims=args.dra_claims, report_api=args.report_api)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=args.metrics_host)
    scanner = Scanner(conn.api, settings)

    def stop(signum: int, _frame: Any) -> None:
        scanner.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        scanner.run()
    finally:
        scanner.lease.release()
    return ExitCode.OK
