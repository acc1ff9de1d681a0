"""``gpuguard serve``: check everything the server needs, then run it (FastAPI on uvicorn, HTTPS only).

Every start-up problem — arguments, TLS files, the config, the listening address — is found
here, before uvicorn starts, and reported as one ``gpuguard: error: …`` line with exit status
2, never as a traceback.  The app itself is ``server.app``; one review is ``server.review``.
``register`` needs argparse and the stdlib only; the server's modules (FastAPI, uvicorn, the
engine) are imported when ``serve`` runs, so ``gpuguard serve --help`` stays light.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import sys
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.server.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_REQUESTER_CONCURRENCY,
    DEFAULT_REQUESTER_QUEUE,
    DEFAULT_REQUESTER_QUEUE_BYTES,
)

if TYPE_CHECKING:
    from gpuguard.webhook.server.certwatch import SelfManagedCerts
    from gpuguard.webhook.server.state import Active


class StartupError(Exception):
    """A problem the operator must fix before the server can start; printed without a traceback."""


def _dev_certs(out_dir: str) -> tuple[str, str]:
    """Reuse or issue a local CA and serving cert (127.0.0.1 SAN) in ``out_dir`` for local development."""
    from gpuguard.certs import CertError, write_bundle
    from gpuguard.certs.store import bundle_paths
    from gpuguard.webhook.server import logs

    paths = bundle_paths(out_dir)
    if paths.tls_cert.exists() and paths.tls_key.exists():
        return str(paths.tls_cert), str(paths.tls_key)
    try:
        paths = write_bundle(out_dir, "gpuguard", "gpuguard", ["127.0.0.1"], 30)
    except (CertError, OSError) as exc:
        raise StartupError(f"--dev-certs {out_dir}: {exc}") from None
    logs.server_logger().info("issued development certificates",
                              extra={"dir": out_dir, "ca": str(paths.ca_cert)})
    return str(paths.tls_cert), str(paths.tls_key)


def _readable(label: str, path: str) -> None:
    if not os.path.isfile(path):
        raise StartupError(f"{label} file not found: {path}")
    if not os.access(path, os.R_OK):
        raise StartupError(f"{label} file not readable: {path}")


def _tls_paths(args: argparse.Namespace) -> tuple[str, str]:
    """The serving pair, checked exactly as a hot reload would check a replacement."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise StartupError("--tls-cert and --tls-key go together: give both or neither")
    if args.tls_cert:
        cert, key = args.tls_cert, args.tls_key
    elif args.dev_certs:
        cert, key = _dev_certs(args.dev_certs)
    else:
        raise StartupError("--tls-cert FILE and --tls-key FILE are required (the apiserver only calls "
                           "webhooks over HTTPS); for local development use --dev-certs DIR")
    from gpuguard.webhook.server import tls

    _readable("TLS certificate", cert)
    _readable("TLS key", key)
    if args.tls_ca:
        _readable("TLS CA", args.tls_ca)
    try:
        trust = tls.TrustPolicy.from_files(args.tls_ca, tuple(args.tls_server_name or ()))
        tls.check_pair(tls.TlsMaterial.read(cert, key), trust)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise StartupError(f"TLS certificate {cert} and key {key} are not a usable pair: {exc}") from None
    return cert, key


def _self_managed(args: argparse.Namespace) -> SelfManagedCerts:
    """``--self-managed-certs``: the Secret brought to a servable state before the server listens."""
    import ipaddress

    from gpuguard.certs import selfmanaged as sm
    from gpuguard.certs.issue import serving_dns_names
    from gpuguard.kubeapi.client import KubeConfigError, connect
    from gpuguard.webhook.server import certwatch

    if args.tls_cert or args.tls_key or args.dev_certs:
        raise StartupError("--self-managed-certs replaces --tls-cert/--tls-key/--dev-certs: give one or the other")
    if args.workers != 1:
        raise StartupError("--self-managed-certs runs one worker per process (scale with replicas)")
    try:
        lifetimes = sm.Lifetimes(sm.parse_duration(args.ca_lifetime), sm.parse_duration(args.serving_lifetime),
                                 sm.parse_duration(args.ca_overlap))
    except ValueError as exc:
        raise StartupError(f"--ca-lifetime/--serving-lifetime/--ca-overlap: {exc}") from None
    if lifetimes.problems():
        raise StartupError("; ".join(lifetimes.problems()))
    if args.cert_check_interval <= 0:
        raise StartupError("--cert-check-interval must be more than 0 seconds")
    if lifetimes.serving.total_seconds() * (1 - sm.RENEW_AT) < 4 * args.cert_check_interval:
        raise StartupError("--serving-lifetime must be at least 12 times --cert-check-interval: a renewal, made "
                           "when 1/3 of the lifetime is left, must reach every replica before the old one expires")
    try:
        connection = connect(args.kubeconfig)
    except KubeConfigError as exc:
        raise StartupError(f"--self-managed-certs: {exc}") from None
    namespace = args.self_managed_namespace or connection.namespace
    ips, names = [], list(serving_dns_names(args.self_managed_service, namespace))
    for host in args.self_managed_host or ():
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            names.append(host)
    opts = certwatch.Options(args.self_managed_certs, namespace, sm.Hosts(tuple(names), tuple(ips)), lifetimes,
                             args.webhooks_configmap, args.self_managed_dir or "", args.cert_check_interval,
                             args.self_managed_service)
    try:
        certs = certwatch.from_client(connection.api, opts)
        certs.bootstrap()
    except (certwatch.CertSetupError, OSError) as exc:
        raise StartupError(f"--self-managed-certs {namespace}/{args.self_managed_certs}: {exc}") from None
    return certs


def _load(config_path: str | None) -> Active:
    from gpuguard.webhook.config import ConfigError
    from gpuguard.webhook.server.state import build_active

    try:
        return build_active(config_path)
    except ConfigError as exc:
        problems = str(exc).splitlines()
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise StartupError(problems[0] + more) from None
    except OSError as exc:
        raise StartupError(f"{config_path}: {exc.strerror or exc}") from None


def _check_kube_credentials(kubeconfig: str | None) -> None:
    from gpuguard.kubeapi.client import KubeConfigError
    from gpuguard.webhook.server.namespaces import NamespaceLabels

    try:
        NamespaceLabels.from_kubeconfig(kubeconfig)
    except KubeConfigError as exc:
        raise StartupError(f"--namespace-labels/--dra-claims/--node-inventory: {exc}") from None


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a taken port is a one-line error, not uvicorn's exit 1."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"--host {host}: {exc.strerror or exc}") from None
    family, socktype, proto, _, address = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def _check_numbers(args: argparse.Namespace) -> None:
    if args.workers < 1:
        raise StartupError("--workers must be at least 1")
    if args.read_timeout <= 0:
        raise StartupError("--read-timeout must be more than 0 seconds")
    if args.max_connections < 1:
        raise StartupError("--max-connections must be at least 1")
    if args.max_connections_per_client < 1:
        raise StartupError("--max-connections-per-client must be at least 1")
    if args.requester_concurrency < 1:
        raise StartupError("--requester-concurrency must be at least 1")
    if args.requester_queue < 0 or args.requester_queue_bytes < 0:
        raise StartupError("--requester-queue and --requester-queue-bytes must be at least 0")
    if not 0 <= args.port <= 65535:
        raise StartupError(f"--port {args.port} is not a TCP port")


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gpuguard.webhook.server import logs, tls
    from gpuguard.webhook.server.app import SETTINGS_ENV, create_app
    from gpuguard.webhook.server.protocol import GuardedHttpProtocol
    from gpuguard.webhook.server.state import ServeSettings

    logs.configure(args.log_level)
    certs = None
    try:
        _check_numbers(args)
        if args.self_managed_certs:
            certs = _self_managed(args)
            cert, key = certs.cert_path, certs.key_path
        else:
            cert, key = _tls_paths(args)
        active = _load(args.config)
        if args.namespace_labels or args.dra_claims or args.node_inventory:
            _check_kube_credentials(args.kubeconfig)
        sock = _bind(args.host, args.port)
    except StartupError as exc:
        logs.print_error(str(exc))
        return 2
    settings = ServeSettings(
        config_path=args.config, tls_cert=cert, tls_key=key, tls_ca=args.tls_ca,
        tls_server_names=tuple(args.tls_server_name or ()), host=args.host, port=args.port,
        workers=args.workers, max_body_bytes=args.max_body_bytes, reload_interval=args.reload_interval,
        shutdown_timeout=args.shutdown_timeout, keep_alive_timeout=args.keep_alive_timeout,
        read_timeout=args.read_timeout, max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        requester_concurrency=args.requester_concurrency, requester_queue=args.requester_queue,
        requester_queue_bytes=args.requester_queue_bytes,
        log_level=args.log_level, namespace_labels=args.namespace_labels, kubeconfig=args.kubeconfig,
        dra_claims=args.dra_claims, node_inventory=args.node_inventory, nodepool_refresh=args.nodepool_refresh,
    )
    common: dict[str, Any] = {
        "host": settings.host, "port": settings.port,
        "ssl_context_factory": tls.TlsContextFactory(cert, key, settings.tls_ca, settings.tls_server_names),
        "log_config": logs.uvicorn_log_config(settings.log_level), "access_log": False,
        "timeout_graceful_shutdown": settings.shutdown_timeout,
        # Longer than the apiserver's idle-connection timeout (90 s): if the server closed first, a
        # review sent on the dying connection would fail and trip failurePolicy.
        "timeout_keep_alive": settings.keep_alive_timeout,
        "http": GuardedHttpProtocol,
        "server_header": False, "lifespan": "on",
    }
    if settings.workers == 1:
        # The socket bound above is handed over as it is.  (Not as uvicorn's ``fd``: uvicorn takes an
        # fd for a Unix socket, so TCP_NODELAY is never set and Nagle + delayed ACKs add ~40 ms.)
        server = uvicorn.Server(uvicorn.Config(create_app(settings, active, certs), **common))
        server.run(sockets=[sock])
        return 0 if server.started else 1
    sock.close()  # the address was free a moment ago: uvicorn's supervisor binds it for the workers
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        logs.server_logger().warning("--workers > 1 without PROMETHEUS_MULTIPROC_DIR: /metrics shows one "
                                     "worker's counters per scrape (see docs/server.md)")
    os.environ[SETTINGS_ENV] = settings.to_json()
    uvicorn.run("gpuguard.webhook.server.app:app_from_env", factory=True, workers=settings.workers, **common)
    return 0


def register(subparsers: Any) -> None:
    """Add ``serve`` to the ``gpuguard`` parser."""
    from gpuguard.webhook.server.filewatch import DEFAULT_INTERVAL

    parser = subparsers.add_parser(
        "serve", description="Serve /mutate and /validate AdmissionReviews over HTTPS, with /healthz, /readyz and "
                    "/metrics. The config file and the TLS cert/key are reloaded when they change.",
    )
    parser.add_argument("--config", metavar="FILE", help="GpuguardConfig YAML (default: the built-in config)")
    parser.add_argument("--tls-cert", metavar="FILE", help="serving certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="serving private key (PEM)")
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="CA the apiserver trusts (the caBundle): a certificate, at start or on reload, is "
                             "used only if it chains to it")
    parser.add_argument("--tls-server-name", action="append", metavar="HOST",
                        help="host the certificate must name, e.g. gpuguard.gpuguard.svc (repeatable; default "
                             "with --tls-ca: the names of the certificate in use at start)")
    parser.add_argument("--dev-certs", metavar="DIR",
                        help="without --tls-cert/--tls-key: issue (or reuse) a local CA and cert in DIR")
    managed = parser.add_argument_group(
        "self-managed certificates", "the server keeps its own CA and serving certificate in a Secret, writes "
        "the webhooks with their caBundle into its own two configurations and rotates both before expiry "
        "(docs/admin.md#self-managed-certificates)")
    managed.add_argument("--self-managed-certs", metavar="SECRET",
                         help="the Secret holding the CA and serving certificate (instead of --tls-cert/--tls-key); "
                              "needs get/update on it, get on --webhooks-configmap and get/update on the two "
                              "webhook configurations it names")
    managed.add_argument("--self-managed-namespace", metavar="NS",
                         help="the Secret's and ConfigMap's namespace (default: the pod's, or the kubeconfig "
                              "context's)")
    managed.add_argument("--self-managed-service", default="gpuguard", metavar="NAME",
                         help="the Service the certificate names: NAME, NAME.NS, NAME.NS.svc[.cluster.local] "
                              "(default: %(default)s)")
    managed.add_argument("--self-managed-host", action="append", metavar="HOST",
                         help="one more DNS name or IP the certificate names, e.g. for url webhooks (repeatable)")
    managed.add_argument("--self-managed-dir", metavar="DIR",
                         help="where this replica keeps the pair it serves (default: a private temp directory; "
                              "the manifests mount a memory-backed emptyDir)")
    managed.add_argument("--webhooks-configmap", default="gpuguard-webhooks", metavar="NAME",
                         help="ConfigMap whose webhooks.yaml holds the two full webhook configurations to write "
                              "(default: %(default)s)")
    managed.add_argument("--ca-lifetime", default="1095d", metavar="DURATION",
                         help="CA lifetime; rotated with an overlap at 2/3 of it (default: %(default)s)")
    managed.add_argument("--serving-lifetime", default="90d", metavar="DURATION",
                         help="serving certificate lifetime; renewed at 2/3 of it (default: %(default)s)")
    managed.add_argument("--ca-overlap", default="10m", metavar="DURATION",
                         help="in a CA rotation, how long the webhooks trust the new CA before it signs the "
                              "served certificate, and the old one stays trusted after (default: %(default)s)")
    managed.add_argument("--cert-check-interval", type=float, default=10.0, metavar="SECONDS",
                         help="how often the Secret and the webhook configurations are checked (default: %(default)s)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8443, help="port to listen on (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes (default: 1; >1 needs PROMETHEUS_MULTIPROC_DIR for metrics)")
    parser.add_argument("--max-body-bytes", type=int, metavar="N",
                        help="413 for larger reviews (default: the config's maxBodyBytes)")
    parser.add_argument("--reload-interval", type=float, default=DEFAULT_INTERVAL, metavar="SECONDS",
                        help="how often to check the config and TLS files for changes (default: %(default)s)")
    parser.add_argument("--shutdown-timeout", type=int, default=20, metavar="SECONDS",
                        help="on SIGTERM, wait this long for in-flight reviews (default: %(default)s)")
    parser.add_argument("--keep-alive-timeout", type=int, default=100, metavar="SECONDS",
                        help="idle keep-alive connection timeout (default: %(default)s)")
    parser.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT, metavar="SECONDS",
                        help="close a connection whose request line, headers and body take longer "
                             "(default: %(default)s)")
    parser.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                        help="close connections beyond this many open ones, per worker (default: %(default)s)")
    parser.add_argument("--max-connections-per-client", type=int, default=DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
                        metavar="N", help="close connections beyond this many open ones from one client address, "
                                          "per worker, so one client can't take the whole cap (default: %(default)s)")
    parser.add_argument("--requester-concurrency", type=int, default=DEFAULT_REQUESTER_CONCURRENCY, metavar="N",
                        help="reviews of one requester (user or ServiceAccount, in one namespace) judged at a time, "
                             "per worker; the others wait in its fair queue (default: %(default)s)")
    parser.add_argument("--requester-queue", type=int, default=DEFAULT_REQUESTER_QUEUE, metavar="N",
                        help="reviews of one requester that may wait; the next is refused (429) saying so "
                             "(default: %(default)s)")
    parser.add_argument("--requester-queue-bytes", type=int, default=DEFAULT_REQUESTER_QUEUE_BYTES, metavar="N",
                        help="body bytes of one requester's waiting reviews, past which the next is refused "
                             "(default: %(default)s)")
    parser.add_argument("--namespace-labels", action="store_true",
                        help="read namespace labels from the API (cached 60 s) for profiles that match by label; "
                             "needs get on namespaces")
    parser.add_argument("--dra-claims", action="store_true",
                        help="watch DRA ResourceClaimTemplates/ResourceClaims (cached) to count the devices pods "
                             "claim; needs list and watch on them")
    parser.add_argument("--node-inventory", action="store_true",
                        help="watch Nodes (cached, summarised when they change): node affinity, sizing and the "
                             "schedulable policy follow the cluster's nodes (docs/inventory.md); needs list and "
                             "watch on nodes")
    parser.add_argument("--nodepool-refresh", type=float, default=30.0, metavar="SECONDS",
                        help="with --node-inventory: how often Karpenter NodePools (karpenter.sh/v1) are read, "
                             "where that API is served (default: 30); needs list on nodepools")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="for --namespace-labels, --dra-claims, kubectl scale checks and TrainJob runtimes "
                             "(default: $KUBECONFIG, in-cluster, then ~/.kube/config)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="(default: %(default)s)")
    parser.set_defaults(func=run_serve)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuguard.webhook.server.command ARGS``: the serve command alone, without the other sub-commands."""
    parser = argparse.ArgumentParser(prog="gpuguard serve")
    register(parser.add_subparsers(dest="command"))
    return run_serve(parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
