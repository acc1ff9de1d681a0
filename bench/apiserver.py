"""Through the real apiserver: what gpuguard adds to each create, next to no admission and to a CEL policy.

``python bench/apiserver.py`` (needs the e2e control plane binaries; ``tests/support/cluster/build.sh``
builds them, and ``ControlPlane`` does so on first use).  On one real kube-apiserver + etcd:

* ``none``     -- no webhook, no policy: the floor of a create;
* ``vap``      -- a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, CEL, in-process) doing
  the checkpoint check, with its binding: the in-process price of one rule;
* ``allow-webhook`` -- ``bench/allow_app.py`` (FastAPI on uvicorn, same TLS, answers "allowed" without
  looking) registered exactly like gpuguard: what any Python webhook costs per create, the
  price of the mechanism before gpuguard does any work;
* with ``--peers``: ``kyverno`` and ``map+vap`` next to ``none``, ``allow-webhook`` and ``gpuguard``
  (``bench/peers/apiserver_peers.py``; its options follow ``--peers``);
* ``gpuguard`` -- ``gpuguard serve`` registered with ``gpuguard webhook-config --url https://127.0.0.1:PORT``
  and certificates from ``gpuguard certs create --ip 127.0.0.1``: the mutating and the validating webhook,
  failurePolicy Fail, as an admin installs it.

N GPU Pods, N GPU Jobs that pass every policy and N CPU Pods (``cpu-pod``: no accelerator, so the
webhooks' matchConditions keep it away from gpuguard and the allow-all webhook alike: its added
latency is the apiserver evaluating the CEL conditions) are created one at a time over one keep-alive
HTTPS connection with the bearer token (no kubectl: its ~100 ms process start would drown the
signal), each in fresh namespaces; the latency of each POST is timed in-process.  The scenarios
run interleaved in rounds so that drift (etcd growth, a busy core) hits all of them alike.  The
first creates of each round are warm-up and not counted.  No controller manager runs, so a Job's
create is only the Job's admission (no pods appear in the background to disturb the timing).

Writes ``bench/results/apiserver.json``; never fails on speed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import re
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
from _common import (
    ALLOW_APP,
    ROOT,
    Server,
    free_port,
    gpuguard_cli,
    gpuguard_server,
    machine,
    machine_line,
    make_certs,
    quiet_warning,
    table,
    wait_quiet,
    write_results,
)
from _paths import add_option, check_paths

T = TypeVar("T")
SCENARIOS = ("none", "vap", "allow-webhook", "gpuguard")
KINDS = ("pod", "job", "cpu-pod")
PRIORITY_CLASSES = ROOT / "deploy" / "base" / "priorityclasses.yaml"
VAP_NAME = "bench-checkpoint"
# What --check-paths checks (bench/_paths.py); ``--peers --check-paths`` checks bench/peers/ as well.
NEEDS = (PRIORITY_CLASSES,)

# The checkpoint rule in CEL: every container with a GPU limit mounts a PVC-backed volume or sets
# CHECKPOINT_URI to an object store.  One policy per kind, since a Pod and a Job keep the pod spec
# at different paths and CEL is type-checked per resource.
_CEL_RULE = """
{spec}.containers.all(c,
  !(has(c.resources) && has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits) ||
  (has(c.env) && c.env.exists(e, e.name == 'CHECKPOINT_URI' && has(e.value) &&
     ['s3://', 'gs://', 'az://'].exists(p, e.value.startsWith(p)))) ||
  (has(c.volumeMounts) && has({spec}.volumes) && c.volumeMounts.exists(m,
     {spec}.volumes.exists(v, v.name == m.name && has(v.persistentVolumeClaim)))))
""".strip()


def vap_objects() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies and bindings (Pods and Jobs): the in-process floor to compare with."""
    out: list[dict[str, Any]] = []
    for kind, group, resource, spec in (("pod", "", "pods", "object.spec"),
                                        ("job", "batch", "jobs", "object.spec.template.spec")):
        name = f"{VAP_NAME}-{kind}"
        out.append({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"],
                                                        "operations": ["CREATE", "UPDATE"],
                                                        "resources": [resource]}]},
                "validations": [{"expression": _CEL_RULE.format(spec=spec),
                                 "message": "[checkpoint-volume] GPU training containers must mount a "
                                            "persistentVolumeClaim or set CHECKPOINT_URI to an object store"}],
            },
        })
        out.append({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": {"matchExpressions": [{
                         "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": ["kube-system", "kube-node-lease", "gpuguard"]}]}}},
        })
    return out


def pod_spec(checkpoint: bool) -> dict[str, Any]:
    """A one-GPU trainer pod spec, with a PVC-backed checkpoint mount unless ``checkpoint`` is False."""
    container: dict[str, Any] = {"name": "trainer", "image": "ghcr.io/example/train:1.4",
                                 "command": ["python", "train.py"], "resources": {"limits": {"nvidia.com/gpu": 1}}}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if checkpoint:
        container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
        spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    return spec


def manifest(kind: str, name: str, checkpoint: bool = True) -> dict[str, Any]:
    """A GPU Pod or Job that passes every gpuguard policy (and the CEL rule) when ``checkpoint``; or a CPU Pod."""
    if kind == "cpu-pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "restartPolicy": "Never", "containers": [{"name": "web", "image": "nginx", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}}]}}
    if kind == "pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec(checkpoint)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": pod_spec(checkpoint)}}}


class Api:
    """Raw HTTPS to the apiserver over one keep-alive connection, bearer token: nothing but the request."""

    def __init__(self, server: str, token: str, ca: Path) -> None:
        host, port = server.removeprefix("https://").rsplit(":", 1)
        if not host.startswith("127."):
            raise SystemExit(f"refusing a non-loopback apiserver {server}")
        self._ctx = ssl.create_default_context(cafile=str(ca))
        self._host, self._port = host, int(port)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": "application/json"}
        self._conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, context=self._ctx, timeout=30)

    def retrying(self, send: Callable[[], T]) -> T:
        """``send()`` on the connection, once more on a fresh one if the socket or TLS failed.

        Between two uses of a set-up (a minute-long load run) the apiserver closes the idle
        keep-alive connection; the next request then sees an EOF (an ``OSError``), not a refusal.
        """
        for attempt in (1, 2):
            try:
                return send()
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = self._connect()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = orjson.dumps(body) if body is not None else None

        def send() -> tuple[int, bytes]:
            self._conn.request(method, path, body=data, headers=self._headers)
            resp = self._conn.getresponse()
            return resp.status, resp.read()

        return self.retrying(send)

    def timed_create(self, kind: str, namespace: str, obj: dict[str, Any]) -> tuple[float, int, bytes]:
        path = (f"/api/v1/namespaces/{namespace}/pods" if kind in ("pod", "cpu-pod")
                else f"/apis/batch/v1/namespaces/{namespace}/jobs")
        data = orjson.dumps(obj)
        t0 = time.perf_counter()
        self._conn.request("POST", path, body=data, headers=self._headers)
        resp = self._conn.getresponse()
        body = resp.read()
        return (time.perf_counter() - t0) * 1000, resp.status, body

    def namespace(self, name: str) -> None:
        status, body = self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": name}})
        if status != 201:
            raise RuntimeError(f"namespace {name}: {status} {body[:300]!r}")


def wait_until(check: Any, timeout: float, what: str) -> None:
    """Poll ``check`` until true; a set-up that never takes effect must stop the run, not skew it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


PROBE = "job"  # the kind of the in-force probe (``denial_in_force``)


def denial_in_force(api: Api, expect: bool) -> Any:
    """A probe: a GPU Job without checkpoint storage (``PROBE``) is denied (``expect``) or admitted (not ``expect``).

    A Job, not a bare Pod: a Job runs to completion by its kind, so gpuguard judges it as training and denies it
    (a bare Pod is training only by its look, and that only warns); Kyverno's and the CEL translations deny it
    too.  ``tests/unit/project/test_bench_probe.py`` holds gpuguard's engine to both answers."""
    ns = f"bench-probe-{uuid.uuid4().hex[:6]}"
    api.namespace(ns)

    def check() -> bool:
        _ms, status, _body = api.timed_create(PROBE, ns, manifest(PROBE, f"p-{uuid.uuid4().hex[:8]}", False))
        return (status >= 400) == expect

    return check


def bare_calls(bare: Server) -> int:
    """How many reviews the allow-all webhook has answered so far."""
    context = ssl.create_default_context(cafile=str(bare.ca))
    with urllib.request.urlopen(f"{bare.url}/stats", context=context, timeout=5) as resp:
        return int(orjson.loads(resp.read())["reviews"])


def bare_in_force(api: Api, bare: Server, expect: bool) -> Any:
    """A probe: creating a Pod reaches the allow-all webhook (``expect``) or no longer does."""
    ns = f"bench-probe-{uuid.uuid4().hex[:6]}"
    api.namespace(ns)

    def check() -> bool:
        before = bare_calls(bare)
        api.timed_create("pod", ns, manifest("pod", f"p-{uuid.uuid4().hex[:8]}"))
        return (bare_calls(bare) > before) == expect

    return check


@contextlib.contextmanager
def scenario(name: str, cp: Any, api: Api, hooks: dict[str, str], bare: Server) -> Iterator[None]:
    """Put one admission setup in force (and prove it is), then remove it (and prove it is gone)."""
    if name == "none":
        yield
        return
    if name == "vap":
        text = "\n---\n".join(orjson.dumps(o).decode() for o in vap_objects())
        probe_on, probe_off = denial_in_force(api, True), denial_in_force(api, False)
    elif name == "allow-webhook":
        text = hooks[name]
        probe_on, probe_off = bare_in_force(api, bare, True), bare_in_force(api, bare, False)
    else:
        text = hooks[name]
        probe_on, probe_off = denial_in_force(api, True), denial_in_force(api, False)
    cp.kubectl("apply", "-f", "-", input=text)
    wait_until(probe_on, 60, f"{name} in force")
    try:
        yield
    finally:
        cp.kubectl("delete", "-f", "-", "--wait=true", input=text)
        wait_until(probe_off, 60, f"{name} gone")


_METRIC = re.compile(r'^(apiserver_request_duration_seconds|apiserver_admission_step_admission_duration_seconds|'
                     r'apiserver_admission_webhook_admission_duration_seconds|'
                     r'apiserver_admission_match_condition_evaluation_seconds)_(sum|count)\{([^}]*)\} (\S+)$')


def admission_metrics(api: Api) -> dict[tuple[str, str], tuple[float, int]]:
    """The apiserver's own timings of creates, from its /metrics: ``{(what, detail): (seconds, count)}``.

    * ``("request", resource)``  -- POST handling, admission included (apiserver_request_duration_seconds);
    * ``("step", "admit|validate")`` -- the mutating / validating admission phase (webhooks included);
    * ``("webhook", "admit|validating")`` -- webhook calls as the apiserver times them: the round trip,
      and for mutating calls the decoding and application of the returned patch;
    * ``("match", "admit|validating")`` -- evaluating the webhooks' CEL matchConditions.
    """
    status, body = api.request("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"apiserver /metrics: {status}")
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for line in body.decode().splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        metric, field, raw_labels, value = m.groups()
        labels = dict(re.findall(r'(\w+)="([^"]*)"', raw_labels))
        if metric == "apiserver_request_duration_seconds":
            if labels.get("verb") != "POST" or labels.get("resource") not in ("pods", "jobs") \
                    or labels.get("subresource"):
                continue
            key = ("request", labels["resource"])
        elif metric == "apiserver_admission_match_condition_evaluation_seconds":
            # the webhooks' CEL matchConditions, evaluated by the apiserver (type: admit|validating)
            key = ("match", labels.get("type", "?"))
        elif metric == "apiserver_admission_step_admission_duration_seconds":
            # no resource label in 1.33; only the measured kind is created inside a window
            if labels.get("operation") != "CREATE":
                continue
            key = ("step", labels.get("type", "?"))
        else:
            if labels.get("operation") != "CREATE":
                continue
            key = ("webhook", labels.get("type", "?"))
        total, count = out.get(key, (0.0, 0))
        if field == "sum":
            out[key] = (total + float(value), count)
        else:
            out[key] = (total, count + int(float(value)))
    return out


def per_create_phases(deltas: dict[tuple[str, str], tuple[float, int]], kind: str, creates: int) -> dict[str, float]:
    """Milliseconds per create in each phase the apiserver times, and webhook calls per create."""
    resource = "pods" if kind in ("pod", "cpu-pod") else "jobs"
    n = max(1, creates)

    def ms(key: tuple[str, str]) -> float:
        return deltas.get(key, (0.0, 0))[0] * 1000 / n

    def calls(kind_: str) -> float:
        return deltas.get(("webhook", kind_), (0.0, 0))[1] / n

    return {"request": ms(("request", resource)), "mutating step": ms(("step", "admit")),
            "validating step": ms(("step", "validate")),
            "mutating webhook calls": ms(("webhook", "admit")), "mutating calls per create": calls("admit"),
            "validating webhook calls": ms(("webhook", "validating")),
            "validating calls per create": calls("validating"),
            "matchConditions": ms(("match", "admit")) + ms(("match", "validating"))}


def summarize(samples: list[float]) -> dict[str, float]:
    """n, mean, p50/p90/p99 (nearest rank) and max of a list of milliseconds."""
    ordered = sorted(samples)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    return {"n": len(ordered), "mean": statistics.fmean(ordered), "p50": q(50), "p90": q(90), "p99": q(99),
            "max": ordered[-1]}


def server_side_latencies(log: Path) -> dict[str, list[float]]:
    """gpuguard's own per-review latency (its JSON log's ``latency_ms``), by ``KIND endpoint``."""
    out: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            entry = orjson.loads(line)
            if entry.get("msg") == "admission review" and str(entry.get("namespace", "")).startswith("bench-gpuguard"):
                out.setdefault(f"{entry.get('kind')} /{entry.get('endpoint')}", []).append(float(entry["latency_ms"]))
    return out


def _variants(hooks: dict[str, str], args: argparse.Namespace) -> dict[str, str]:
    """The webhook manifests as the options change them (the allow-all's conditions, reinvocation)."""
    if args.allow_webhook_conditions != "same":
        hooks["allow-webhook"] = _other_conditions(hooks["allow-webhook"], args.allow_webhook_conditions)
    if args.reinvocation_policy:
        hooks = {k: re.sub(r"reinvocationPolicy: \w+", f"reinvocationPolicy: {args.reinvocation_policy}", v)
                 for k, v in hooks.items()}
    return hooks


def _other_conditions(manifest: str, which: str) -> str:
    """``manifest``'s webhooks with other matchConditions: ``name`` (one that reads only the object's name,
    false for the cpu-pods) or those listed in the YAML file ``which``."""
    import yaml

    conditions = ([{"name": "not-cpu-pods", "expression": "!object.metadata.name.startsWith('cpu-pod-')"}]
                  if which == "name" else yaml.safe_load(Path(which).read_text()))
    documents = list(yaml.safe_load_all(manifest))
    for document in documents:
        for hook in document.get("webhooks", []):
            hook["matchConditions"] = conditions
    return yaml.safe_dump_all(documents, sort_keys=False)


def _arguments(argv: list[str]) -> argparse.Namespace:
    """The options of the gpuguard-only run, checked (a missing --allow-webhook-conditions file ends it here)."""
    parser = argparse.ArgumentParser(description="per-create latency through a real kube-apiserver")
    parser.add_argument("-n", type=int, default=1000, help="creates per scenario and kind (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs gpuguard serve (e.g. bench/.build/venv-std/bin/python)")
    parser.add_argument("--quiet-wait", type=float, default=120, metavar="SECONDS",
                        help="wait up to this long for other work to leave the CPUs idle first (default: %(default)s)")
    parser.add_argument("--reinvocation-policy", choices=("IfNeeded", "Never"), default=None,
                        help="override the mutating webhook's reinvocationPolicy in the generated configuration "
                             "(to measure what the Pod reinvocation costs)")
    parser.add_argument("--allow-webhook-conditions", default="same", metavar="same|name|FILE",
                        help="the allow-all webhook's matchConditions: gpuguard's (default); 'name', one that only "
                             "reads the object's name (false for the cpu-pod creates): the apiserver's fixed price "
                             "of evaluating any condition, so the cpu-pod rows tell what gpuguard's costs beyond it; "
                             "or a YAML file holding a list of matchConditions to measure beside gpuguard's")
    parser.add_argument("--tag", default="", help="suffix for the results file (apiserver-TAG.json)")
    parser.add_argument("--warmup", type=int, default=10, help="uncounted creates per round (default: %(default)s)")
    parser.add_argument("--keep-log", metavar="FILE", help="copy gpuguard's log here")
    parser.add_argument("--quick", action="store_true", help="n=40, 2 rounds: a smoke run")
    add_option(parser)
    args = parser.parse_args(argv)
    conditions = args.allow_webhook_conditions
    if conditions not in ("same", "name") and not Path(conditions).is_file():
        parser.error(f"--allow-webhook-conditions {conditions}: same, name or a YAML file (no such file)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Start the control plane and both webhooks, run the interleaved rounds, print and write apiserver.json."""
    argv = sys.argv[1:] if argv is None else argv
    if "--peers" in argv:  # kyverno and map+vap next to none, allow-webhook and gpuguard: bench/peers/
        from peers.apiserver_peers import main as peers_main

        return peers_main([a for a in argv if a != "--peers"])
    args = _arguments(argv)
    if args.check_paths:  # before anything is built or started
        return check_paths()
    if args.quick:
        args.n, args.rounds, args.warmup = 40, 2, 5
    per_round = max(1, args.n // args.rounds)

    from tests.support.cluster.controlplane import ControlPlane

    busy = wait_quiet(args.quiet_wait)
    samples: dict[tuple[str, str], list[float]] = {(s, k): [] for s in SCENARIOS for k in KINDS}
    failures: dict[str, int] = {}
    inside: dict[tuple[str, str], dict[tuple[str, str], tuple[float, int]]] = {}  # apiserver's own timings
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-api-") as tmp:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        server = gpuguard_server(workdir, certs, None, cpu=None, name="gpuguard", python=args.python)
        port = free_port()
        bare = Server("allow-webhook", [args.python, str(ALLOW_APP), "--port", str(port), "--cert",
                                        str(certs / "tls.crt"), "--key", str(certs / "tls.key")],
                      port, certs / "ca.crt", workdir / "allow-webhook.log", None)
        hooks = {name: gpuguard_cli("webhook-config", "--url", srv.url, "--ca", str(certs / "ca.crt"),
                                    "--failure-policy", "Fail")
                 for name, srv in (("gpuguard", server), ("allow-webhook", bare))}
        hooks = _variants(hooks, args)
        print("starting the control plane (etcd, kube-apiserver)...", file=sys.stderr)
        with ControlPlane(controller_manager=False, verbose=False, workdir=workdir / "cluster") as cp:
            cp.kubectl("apply", "-f", str(PRIORITY_CLASSES))
            api = Api(cp.server, cp.token, cp.ca_file)
            server.start()
            bare.start()
            try:
                for rnd in range(args.rounds):
                    for name in SCENARIOS:
                        with scenario(name, cp, api, hooks, bare):
                            for kind in KINDS:
                                ns = f"bench-{name}-{kind}-{rnd}-{uuid.uuid4().hex[:5]}"
                                api.namespace(ns)
                                for i in range(args.warmup + per_round):
                                    if i == args.warmup:
                                        before = admission_metrics(api)
                                    ms, status, body = api.timed_create(kind, ns, manifest(kind, f"{kind}-{i}"))
                                    if status != 201:
                                        failures[name] = failures.get(name, 0) + 1
                                        if failures[name] <= 3:
                                            print(f"  {name} {kind}: HTTP {status}: {body[:300]!r}", file=sys.stderr)
                                        continue
                                    if i >= args.warmup:
                                        samples[(name, kind)].append(ms)
                                after = admission_metrics(api)
                                acc = inside.setdefault((name, kind), {})
                                for key, (total, count) in after.items():
                                    old_total, old_count = before.get(key, (0.0, 0))
                                    t, c = acc.get(key, (0.0, 0))
                                    acc[key] = (t + total - old_total, c + count - old_count)
                        print(f"  round {rnd + 1}/{args.rounds} {name:8} done", file=sys.stderr)
            finally:
                server.stop()
                bare.stop()
            server_side = server_side_latencies(server.log)
            if args.keep_log:
                Path(args.keep_log).write_bytes(server.log.read_bytes())

    stats = {f"{s}/{k}": summarize(v) for (s, k), v in samples.items() if v}
    phases = {f"{s}/{k}": per_create_phases(m, k, len(samples[(s, k)])) for (s, k), m in inside.items()}
    text = render(stats, server_side, args, per_round, phases)
    if warning := quiet_warning(busy):
        text += f"\n\n{warning}"
    info = machine()
    print(f"\nmachine: {machine_line(info)}\n")
    print(text)
    path = write_results(f"apiserver{'-' + args.tag if args.tag else ''}", {
        "settings": {"n": per_round * args.rounds, "rounds": args.rounds, "warmup_per_round": args.warmup,
                     "python": args.python, "reinvocation_policy": args.reinvocation_policy or "as generated"},
        "cpu_busy_before": busy, "failures": failures, "create_ms": stats,
        "gpuguard_server_side_ms": {k: summarize(v) for k, v in server_side.items() if v},
        "apiserver_phases_ms_per_create": phases,
        "vap": vap_objects(), "tables": text,
    })
    print(f"\nresults: {path}")
    return 0


def render(stats: dict[str, dict[str, float]], server_side: dict[str, list[float]], args: argparse.Namespace,
           per_round: int, phases: dict[str, dict[str, float]]) -> str:
    out = io.StringIO()
    override = f"; mutating webhooks with reinvocationPolicy {args.reinvocation_policy}" \
        if args.reinvocation_policy else ""
    out.write(f"Per-create latency through kube-apiserver (ms; {per_round * args.rounds} creates per row, "
              f"{args.rounds} interleaved rounds, one keep-alive HTTPS connection, sequential{override})\n")
    rows = []
    for kind in KINDS:
        base = stats.get(f"none/{kind}")
        for s in SCENARIOS:
            st = stats.get(f"{s}/{kind}")
            if not st:
                continue
            added50 = st["p50"] - base["p50"] if base and s != "none" else None
            added99 = st["p99"] - base["p99"] if base and s != "none" else None
            rows.append([kind, s, st["n"], st["mean"], st["p50"], st["p90"], st["p99"], st["max"],
                         None if added50 is None else f"{added50:+.2f}",
                         None if added99 is None else f"{added99:+.2f}"])
    out.write(table(["kind", "admission", "n", "mean", "p50", "p90", "p99", "max", "added p50", "added p99"], rows))
    if phases:
        out.write("\n\nWhere the time goes, as the apiserver times it (its /metrics: means in ms per create; the "
                  "client's 'mean' above includes the round trip to the apiserver)\n")
        prow = []
        for kind in KINDS:
            for s in SCENARIOS:
                ph = phases.get(f"{s}/{kind}")
                if ph:
                    prow.append([kind, s, ph["request"], ph["mutating step"], ph["validating step"],
                                 f"{ph['mutating webhook calls']:.2f} ({ph['mutating calls per create']:.0f})",
                                 f"{ph['validating webhook calls']:.2f} ({ph['validating calls per create']:.0f})",
                                 round(ph.get("matchConditions", 0.0), 3)])
        out.write(table(["kind", "admission", "request, server side", "mutating phase", "validating phase",
                         "mutating webhook calls (n)", "validating webhook calls (n)", "matchConditions (both)"],
                        prow))
    side = {k: summarize(v) for k, v in server_side.items() if v}
    # creates sent in the gpuguard scenario, warm-up included (the log has those reviews too)
    sent = args.rounds * (args.warmup + per_round)
    creates = {"Pod": sent, "Job": sent}
    if side:
        out.write("\n\ngpuguard's own time per review inside the server (its log's latency_ms: parse, engine, "
                  "response; not TLS or HTTP)\n")
        out.write(table(["review", "n", "per create", "p50", "p90", "p99", "max"],
                        [[k, v["n"], f"{v['n'] / creates[k.split()[0]]:.2f}" if creates.get(k.split()[0]) else None,
                          v["p50"], v["p90"], v["p99"], v["max"]] for k, v in sorted(side.items())]))
    return out.getvalue()


if __name__ == "__main__":
    sys.exit(main())
