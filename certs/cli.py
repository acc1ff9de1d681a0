"""``gpuguard certs create|inject|renew``: the command-line face of the ``certs`` package.

Every failure a user can cause (bad flag value, missing file, unreachable cluster) ends as one
``gpuguard: error: ...`` line and exit code 2 (``ExitCode.USAGE``, as for every gpuguard
command; argparse exits 2 for bad flags too), never as a traceback: the people running these
commands are cluster admins, not gpuguard developers.  Each sub-command imports what it
needs when it runs (the kubernetes client for ``inject`` only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import re
import sys
from typing import Any

from gpuguard.webhook.exitcodes import ExitCode

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None


def _label(pattern: re.Pattern[str], what: str):
    def check(text: str) -> str:
        if len(text) > 63 or not pattern.match(text):
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {what} (lower-case letters, digits "
                                             "and '-', at most 63 characters)")
        return text

    return check


def _error(message: str) -> int:
    """One ``gpuguard: error:`` line on stderr and exit code 2, as every gpuguard command reports user errors."""
    print(f"gpuguard: error: {message}", file=sys.stderr)
    return ExitCode.USAGE


def _date(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def cmd_create(args: argparse.Namespace) -> int:
    """Write the bundle and print the two commands that finish the install, so nobody has to look them up."""
    from gpuguard.certs.bundle import write_bundle
    from gpuguard.certs.issue import sans_of
    from gpuguard.certs.store import CertError, load_cert

    try:
        paths = write_bundle(args.out, args.service, args.namespace, args.ip or [], args.days,
                             ca_days=args.ca_days, key_type=args.key_type)
        leaf = load_cert(paths.tls_cert)
        ca = load_cert(paths.ca_cert)
    except CertError as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(f"cannot write to {args.out}: {exc.strerror or exc}")
    dns, ips = sans_of(leaf)
    ca_note = "created" if paths.ca_created else "reused (caBundle in the cluster stays valid)"
    print(f"CA          {paths.ca_cert} ({ca_note}; expires {_date(ca.not_valid_after_utc)})")
    print(f"CA key      {paths.ca_key}")
    print(f"certificate {paths.tls_cert} (expires {_date(leaf.not_valid_after_utc)})")
    print(f"key         {paths.tls_key}")
    print(f"names       {', '.join([*dns, *(str(ip) for ip in ips)])}")
    print("next:")
    print(f"  kubectl -n {args.namespace} create secret tls gpuguard-tls --cert={paths.tls_cert} "
          f"--key={paths.tls_key} --dry-run=client -o yaml | kubectl apply -f -")
    print(f"  gpuguard certs inject --ca {paths.ca_cert}")
    return ExitCode.OK


def cmd_inject(args: argparse.Namespace) -> int:
    """Validate the CA file locally first: a bad file must fail before any cluster call."""
    from gpuguard.certs.inject import MUTATING, inject_ca_bundle
    from gpuguard.certs.store import CertError, read_ca_bundle

    try:
        ca_pem = read_ca_bundle(args.ca)
        results = inject_ca_bundle(ca_pem, args.name, kubeconfig=args.kubeconfig, context=args.context)
    except CertError as exc:
        return _error(str(exc))
    for result in results:
        resource = ("mutatingwebhookconfiguration" if result.kind == MUTATING
                    else "validatingwebhookconfiguration")
        state = "patched" if result.changed else "unchanged (caBundle already current)"
        print(f"{resource}/{result.name}: {state}, {result.webhooks} webhook(s)")
    return ExitCode.OK


def _namespace_of(cert_path: Any) -> str:
    """The Service namespace a leaf was issued for (from its ``NAME.NS.svc`` SAN), for the hint we print."""
    from gpuguard.certs.issue import sans_of
    from gpuguard.certs.store import CertError, load_cert

    try:
        dns, _ips = sans_of(load_cert(cert_path))
    except CertError:
        return "gpuguard"
    return next((n.split(".")[1] for n in dns if n.endswith(".svc") and n.count(".") == 2), "gpuguard")


def cmd_renew(args: argparse.Namespace) -> int:
    """Renew if due and say so either way, so a cron log shows what happened each run."""
    from gpuguard.certs.renew import renew_serving_cert
    from gpuguard.certs.store import CertError

    try:
        result = renew_serving_cert(args.dir, days=args.days, before_days=args.before, force=args.force)
    except CertError as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(f"cannot write to {args.dir}: {exc.strerror or exc}")
    if result.renewed:
        print(f"renewed {result.tls_cert} ({result.reason}): was valid until {_date(result.old_not_after)}, "
              f"now until {_date(result.not_after)}; CA kept")
        print("a server reading these files reloads them by itself; for the in-cluster Secret run:")
        print(f"  kubectl -n {_namespace_of(result.tls_cert)} create secret tls gpuguard-tls "
              f"--cert={result.tls_cert} "
              f"--key={result.tls_key} --dry-run=client -o yaml | kubectl apply -f -")
    else:
        print(f"kept {result.tls_cert}: {result.reason} (until {_date(result.not_after)}); "
              "use --force to renew now")
    return ExitCode.OK


def register(subparsers: Any) -> None:
    """Add ``certs`` and its three sub-commands to the ``gpuguard`` parser."""
    from gpuguard.certs.issue import DEFAULT_CA_DAYS, DEFAULT_SERVING_DAYS
    from gpuguard.certs.renew import DEFAULT_RENEW_BEFORE_DAYS

    certs = subparsers.add_parser(
        "certs", description="Create a CA and serving certificate, inject the CA into the webhook configurations, "
                    "and renew the serving certificate.",
    )
    certs.set_defaults(func=lambda _args: (certs.print_help(), ExitCode.USAGE)[1])
    sub = certs.add_subparsers(dest="certs_command", metavar="SUBCOMMAND")

    create = sub.add_parser(
        "create", help="create a CA (or reuse the one in --out) and a serving certificate",
        description="Write ca.crt, ca.key, tls.crt and tls.key to --out. An existing CA in --out is reused, "
                    "so re-running keeps the injected caBundle valid.",
    )
    create.add_argument("--service", required=True, type=_label(_DNS1035, "Service name"),
                        help="Service name of the webhook (DNS SANs NAME, NAME.NS, NAME.NS.svc, "
                             "NAME.NS.svc.cluster.local)")
    create.add_argument("--namespace", required=True, type=_label(_DNS1123, "namespace"),
                        help="namespace of the Service")
    create.add_argument("--out", required=True, metavar="DIR", help="output directory (created 0700)")
    create.add_argument("--ip", action="extend", nargs="+", type=_ip, metavar="IP",
                        help="IP SAN(s), for webhooks registered by URL (e.g. 127.0.0.1); repeatable")
    create.add_argument("--days", type=_positive_int, default=DEFAULT_SERVING_DAYS,
                        help=f"serving certificate validity (default {DEFAULT_SERVING_DAYS})")
    create.add_argument("--ca-days", type=_positive_int, default=DEFAULT_CA_DAYS,
                        help=f"CA validity when a new CA is created (default {DEFAULT_CA_DAYS})")
    create.add_argument("--key-type", choices=("ec", "rsa"), default="ec",
                        help="EC P-256 (default) or RSA 2048")
    create.set_defaults(func=cmd_create)

    inject = sub.add_parser(
        "inject", help="patch caBundle into the webhook configurations",
        description="Set clientConfig.caBundle on every webhook of the Mutating- and "
                    "ValidatingWebhookConfiguration named --name.",
    )
    inject.add_argument("--ca", required=True, metavar="FILE", help="CA certificate PEM (ca.crt)")
    inject.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig (default: $KUBECONFIG, in-cluster, then ~/.kube/config)")
    inject.add_argument("--context", help="kubeconfig context (default: current)")
    inject.add_argument("--name", default="gpuguard",
                        help="name of both webhook configurations (default gpuguard)")
    inject.set_defaults(func=cmd_inject)

    renew = sub.add_parser(
        "renew", help="reissue the serving certificate from the existing CA when it nears expiry",
        description="Reissue tls.crt/tls.key in --dir (same names, new key) from ca.crt/ca.key in --dir. "
                    "Files are replaced atomically.",
    )
    renew.add_argument("--dir", required=True, metavar="DIR", help="directory written by `certs create`")
    renew.add_argument("--days", type=_positive_int, default=DEFAULT_SERVING_DAYS,
                       help=f"validity of the new certificate (default {DEFAULT_SERVING_DAYS})")
    renew.add_argument("--before", type=_non_negative_float, default=DEFAULT_RENEW_BEFORE_DAYS,
                       metavar="DAYS",
                       help=f"renew when it expires within DAYS (default {DEFAULT_RENEW_BEFORE_DAYS})")
    renew.add_argument("--force", action="store_true", help="renew whatever the expiry")
    renew.set_defaults(func=cmd_renew)
