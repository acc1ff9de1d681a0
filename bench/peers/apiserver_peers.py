"""gpuguard next to Kyverno and the apiserver's own CEL policies, on one real kube-apiserver.

``python bench/apiserver.py --peers`` (or ``python bench/peers/apiserver_peers.py``).  Scenarios,
interleaved in rounds so that drift hits all of them alike:

* ``none``          -- no admission beyond the apiserver's built-in plugins: the floor;
* ``allow-webhook`` -- the allow-all FastAPI app registered like gpuguard: the price of a Python webhook;
* ``gpuguard``      -- ``gpuguard serve`` with its full default policy set, ``gpuguard webhook-config``;
* ``kyverno``       -- Kyverno v1.15.2's admission controller (Helm chart flags) with the translated
  ClusterPolicies of ``bench/peers/kyverno/``;
* ``map+vap``       -- MutatingAdmissionPolicy + ValidatingAdmissionPolicy for the part of the set CEL
  can express (``bench/peers/map_vap.py``), inside the apiserver.

Both webhooks: failurePolicy Fail, reinvocationPolicy IfNeeded, timeout 10 s (Kyverno's registered
settings are read back and recorded); both pinned with ``taskset`` to the same CPU, one core each
(gpuguard is one Python process; Go sizes GOMAXPROCS from the affinity mask).  For a GPU Pod, a GPU
Job, a CPU Pod and a PyTorchJob: per-create latency on the client, the apiserver's admission
metrics (webhook calls per create, their time), the webhook processes' CPU seconds per 1,000
creates and RSS.  ``--load`` adds fixed-rate runs (GPU Pods; e.g. 50/s and 200/s from several
clients for a minute each per scenario): achieved rate, p50/p99 measured from each request's
scheduled send time (so a stalled server is not hidden by fewer requests), errors.

Writes ``bench/results/apiserver-peers.json``; never fails on speed.  Kyverno's scenario is
skipped with a message when Go is missing (``bench/peers/build_kyverno.sh`` exits 3).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent.parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

import orjson  # noqa: E402
from _common import (  # noqa: E402
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
from _paths import add_option, check_paths  # noqa: E402
from apiserver import (  # noqa: E402
    PRIORITY_CLASSES,
    Api,
    bare_in_force,
    denial_in_force,
    manifest,
    server_side_latencies,
    summarize,
    wait_until,
)

from peers import kyverno_proc, map_vap  # noqa: E402

SCENARIOS = ("none", "allow-webhook", "gpuguard", "kyverno", "map+vap")
KINDS = ("pod", "job", "cpu-pod", "pytorchjob")
WEBHOOK_CPU = 1  # both webhooks (and the allow-all app) share this CPU
PATHS = {"pod": "/api/v1/namespaces/{ns}/pods", "cpu-pod": "/api/v1/namespaces/{ns}/pods",
         "job": "/apis/batch/v1/namespaces/{ns}/jobs",
         "pytorchjob": "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"}
RESOURCE = {"pod": "pods", "cpu-pod": "pods", "job": "jobs", "pytorchjob": "pytorchjobs"}


def peer_manifest(kind: str, name: str) -> dict[str, Any]:
    """An object of ``kind`` that every scenario admits: GPU Pod/Job as bench/apiserver.py, a CPU Pod, a PyTorchJob."""
    if kind in ("pod", "job"):
        return manifest(kind, name)
    if kind == "cpu-pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "web", "image": "ghcr.io/example/web:2.1",
                                         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}
    template = {"spec": {"schedulerName": "volcano", "containers": [{
        "name": "pytorch", "image": "ghcr.io/example/train:1.4", "resources": {"limits": {"nvidia.com/gpu": 1}},
        "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]}}
    # runPolicy.schedulingPolicy: the operator makes a Volcano PodGroup of both pods (a gang gpuguard admits)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}}}


class PeerApi(Api):
    """``Api`` with creates of any benchmarked kind (reconnecting as ``Api.retrying`` does)."""

    def timed_create(self, kind: str, namespace: str, obj: dict[str, Any]) -> tuple[float, int, bytes]:
        return self.create(kind, namespace, obj)

    def create(self, kind: str, namespace: str, obj: dict[str, Any]) -> tuple[float, int, bytes]:
        data = orjson.dumps(obj)

        def send() -> tuple[float, int, bytes]:
            t0 = time.perf_counter()
            self._conn.request("POST", PATHS[kind].format(ns=namespace), body=data, headers=self._headers)
            resp = self._conn.getresponse()
            body = resp.read()
            return (time.perf_counter() - t0) * 1000, resp.status, body

        return self.retrying(send)


# ---------------------------------------------------------------- the apiserver's own view

_METRIC = re.compile(r'^(apiserver_request_duration_seconds|apiserver_admission_step_admission_duration_seconds|'
                     r'apiserver_admission_webhook_admission_duration_seconds)_(sum|count|bucket)\{([^}]*)\} (\S+)$')


def apiserver_metrics(api: Api) -> dict[tuple[str, ...], float]:
    """Counters from /metrics: ``(what, detail, field[, le])`` -> value, for CREATE only.

    ``request``: POST handling by resource; ``step``: the mutating (admit) / validating phase;
    ``webhook``: webhook calls by type (admit / validating) with their histogram buckets.
    """
    status, body = api.request("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"apiserver /metrics: {status}")
    out: dict[tuple[str, ...], float] = {}
    for line in body.decode().splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        metric, field, raw, value = m.groups()
        labels = dict(re.findall(r'(\w+)="([^"]*)"', raw))
        if metric == "apiserver_request_duration_seconds":
            if labels.get("verb") != "POST" or labels.get("subresource") or field == "bucket":
                continue
            key: tuple[str, ...] = ("request", labels.get("resource", "?"), field)
        elif labels.get("operation") != "CREATE":
            continue
        elif metric == "apiserver_admission_step_admission_duration_seconds":
            if field == "bucket":
                continue
            key = ("step", labels.get("type", "?"), field)
        else:
            key = ("webhook", labels.get("type", "?"), field) + ((labels["le"],) if field == "bucket" else ())
        out[key] = out.get(key, 0.0) + float(value)
    return out


def delta(after: dict[tuple[str, ...], float], before: dict[tuple[str, ...], float]) -> dict[tuple[str, ...], float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def histogram_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus-style quantile (linear within a bucket) of cumulative ``{le: count}``; seconds."""
    if not buckets:
        return None
    edges = sorted(buckets)
    total = buckets[edges[-1]]
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for le in edges:
        if buckets[le] >= rank:
            if le == float("inf"):
                return lower
            span = buckets[le] - below
            return lower + (le - lower) * ((rank - below) / span if span else 0.0)
        lower, below = le, buckets[le]
    return lower


def phases(d: dict[tuple[str, ...], float], kind: str, creates: int) -> dict[str, float | None]:
    """Per create: apiserver request time, admission phases, webhook calls and their time and quantiles (ms)."""
    n = max(1, creates)
    res = RESOURCE[kind]
    out: dict[str, float | None] = {
        "request ms": d.get(("request", res, "sum"), 0.0) * 1000 / n,
        "mutating phase ms": d.get(("step", "admit", "sum"), 0.0) * 1000 / n,
        "validating phase ms": d.get(("step", "validate", "sum"), 0.0) * 1000 / n,
    }
    for typ in ("admit", "validating"):
        calls = d.get(("webhook", typ, "count"), 0.0)
        out[f"{typ} calls per create"] = calls / n
        out[f"{typ} webhook ms per create"] = d.get(("webhook", typ, "sum"), 0.0) * 1000 / n
        buckets = {float(k[3]): v for k, v in d.items() if k[:3] == ("webhook", typ, "bucket")}
        for q in (50, 99):
            v = histogram_quantile(buckets, q / 100)
            out[f"{typ} call p{q} ms"] = None if v is None or not calls else v * 1000
    return out


# ---------------------------------------------------------------- processes: CPU and memory

def proc_cpu_seconds(pid: int) -> float:
    import os

    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def proc_mem_mb(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return out


# ---------------------------------------------------------------- scenarios

@contextlib.contextmanager
def scenario(name: str, cp: Any, api: PeerApi, hooks: dict[str, str], bare: Server):
    """Put one set-up in force (and prove it is), then remove it (and prove it is gone)."""
    if name == "none":
        yield
        return
    if name == "allow-webhook":
        text, on, off = hooks[name], bare_in_force(api, bare, True), bare_in_force(api, bare, False)
    elif name == "gpuguard":
        text, on, off = hooks[name], denial_in_force(api, True), denial_in_force(api, False)
    elif name == "kyverno":
        text, on, off = kyverno_proc.policies_text(), denial_in_force(api, True), denial_in_force(api, False)
    else:
        text = "\n---\n".join(orjson.dumps(o).decode() for o in map_vap.objects())
        on, off = denial_in_force(api, True), denial_in_force(api, False)
    cp.kubectl("apply", "-f", "-", input=text)
    wait_until(on, 90, f"{name} in force")
    if name == "kyverno":
        time.sleep(3)  # let every policy's webhook rules land, not only the first one probed
    try:
        yield
    finally:
        cp.kubectl("delete", "-f", "-", "--wait=true", input=text)
        wait_until(off, 90, f"{name} gone")
        if name == "kyverno":
            time.sleep(3)


def reviews_by_kind(log: Path, kinds: list[str]) -> dict[str, Counter[str]]:
    """gpuguard's reviews in the measured windows, by benchmarked kind (from the namespace) and endpoint."""
    out: dict[str, Counter[str]] = {k: Counter() for k in kinds}
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
            entry = orjson.loads(line)
            ns = str(entry.get("namespace", ""))
            if entry.get("msg") != "admission review" or not ns.startswith("bench-gpuguard-"):
                continue
            kind = max((k for k in kinds if ns.startswith(f"bench-gpuguard-{k}-")), key=len, default=None)
            if kind:
                out[kind][str(entry.get("endpoint"))] += 1
    return out


def run_window(api: PeerApi, kind: str, ns: str, count: int, warmup: int, failures: dict[str, int],
               label: str) -> tuple[list[float], dict[tuple[str, ...], float]]:
    """``warmup`` uncounted then ``count`` sequential creates; latencies (ms) and the apiserver counters' delta."""
    samples: list[float] = []
    before: dict[tuple[str, ...], float] = {}
    for i in range(warmup + count):
        if i == warmup:
            before = apiserver_metrics(api)
        ms, status, body = api.create(kind, ns, peer_manifest(kind, f"{kind}-{i}"))
        if status != 201:
            failures[label] = failures.get(label, 0) + 1
            if failures[label] <= 3:
                print(f"  {label}: HTTP {status}: {body[:300]!r}", file=sys.stderr)
            continue
        if i >= warmup:
            samples.append(ms)
    return samples, delta(apiserver_metrics(api), before)


def fixed_rate(cp: Any, rate: float, seconds: float, clients: int, ns: str) -> dict[str, Any]:
    """GPU Pod creates at ``rate``/s from ``clients`` connections for ``seconds``; latency from the scheduled time."""
    total = int(rate * seconds)
    lock, nxt = threading.Lock(), [0]
    lat: list[float] = []
    errors: list[str] = []
    start = time.perf_counter() + 0.5

    def worker() -> None:
        api = PeerApi(cp.server, cp.token, cp.ca_file)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= total:
                return
            due = start + i / rate
            if time.perf_counter() > start + seconds * 1.5:  # a set-up far behind: stop, count the rest unsent
                return
            if (wait := due - time.perf_counter()) > 0:
                time.sleep(wait)
            try:
                _ms, status, body = api.create("pod", ns, manifest("pod", f"l-{i}"))
            except OSError as exc:
                status, body = 0, str(exc).encode()
            done = time.perf_counter()
            with lock:
                if status == 201:
                    lat.append((done - due) * 1000)
                else:
                    errors.append(f"{status} {body[:120]!r}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds * 4 + 60)
    wall = time.perf_counter() - start
    sent = min(total, nxt[0])
    out: dict[str, Any] = {"target_rate": rate, "seconds": seconds, "clients": clients, "scheduled": total,
                           "sent": sent, "not_sent": total - sent, "wall_s": round(wall, 1),
                           "ok": len(lat), "errors": len(errors), "achieved_rate": len(lat) / wall if wall else 0.0,
                           "first_errors": errors[:3]}
    if lat:
        out.update({f"latency_{k}": v for k, v in summarize(lat).items() if k != "n"})
    return out


def _selection(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[str], list[str], list[float]]:
    """``(kinds, scenarios, load rates)`` from the options, --quick applied; a wrong one ends the run here (exit 2)."""
    if args.quick:
        args.n, args.rounds, args.warmup = 20, 2, 3
    kinds = [k for k in args.kinds.split(",") if k]
    scenarios = [s for s in args.scenarios.split(",") if s]
    for what, got, known in (("--kinds", kinds, KINDS), ("--scenarios", scenarios, SCENARIOS)):
        if not got or (unknown := [g for g in got if g not in known]):
            parser.error(f"{what}: {', '.join(unknown) if got else 'none given'}; choose from {', '.join(known)}")
    try:
        rates = [float(r) for r in args.load.split(",") if r]
    except ValueError:
        parser.error(f"--load {args.load}: comma-separated rates per second, e.g. 50,200")
    if min(args.n, args.rounds, args.clients, *(rates or [1])) <= 0 or args.warmup < 0:
        parser.error("-n, --rounds, --clients and the --load rates must be positive, --warmup not negative")
    return kinds, scenarios, rates


def main(argv: list[str] | None = None) -> int:  # noqa: C901 - one long benchmark script, read top to bottom
    parser = argparse.ArgumentParser(description="gpuguard vs Kyverno vs MAP+VAP through a real kube-apiserver")
    parser.add_argument("-n", type=int, default=500, help="creates per scenario and kind (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=10, help="uncounted creates per round (default: %(default)s)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    parser.add_argument("--load", default="", metavar="RATES", help="fixed-rate runs, e.g. 50,200 (GPU Pods)")
    parser.add_argument("--load-seconds", type=float, default=60, help="per rate and scenario (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=8, help="connections for the load runs (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs gpuguard serve")
    parser.add_argument("--quiet-wait", type=float, default=60, metavar="SECONDS")
    parser.add_argument("--tag", default="", help="suffix for the results file")
    parser.add_argument("--quick", action="store_true", help="n=20, 2 rounds, 3 warm-up: a smoke run")
    add_option(parser)
    args = parser.parse_args(argv)
    kinds, scenarios, rates = _selection(parser, args)
    if args.check_paths:  # before anything is built or started
        return check_paths()
    per_round = max(1, args.n // args.rounds)
    skipped: dict[str, str] = {}
    if "kyverno" in scenarios:
        try:
            kyverno_proc.binaries(build=True)
        except kyverno_proc.KyvernoUnavailable as exc:
            print(f"SKIP kyverno: {exc}", file=sys.stderr)
            skipped["kyverno"] = str(exc)
            scenarios.remove("kyverno")

    from tests.support.cluster.controlplane import ControlPlane

    busy = wait_quiet(args.quiet_wait)
    samples: dict[tuple[str, str], list[float]] = {(s, k): [] for s in scenarios for k in kinds}
    inside: dict[tuple[str, str], dict[tuple[str, ...], float]] = {}
    cpu: dict[tuple[str, str], dict[str, float]] = {}
    kyv_inside: dict[tuple[str, str], tuple[float, int]] = {}
    loads: list[dict[str, Any]] = []
    failures: dict[str, int] = {}
    mem: dict[str, dict[str, float]] = {}
    settings_seen: dict[str, Any] = {}
    load_error: str | None = None
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-peers-") as tmp:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        server = gpuguard_server(workdir, certs, None, cpu=WEBHOOK_CPU, name="gpuguard", python=args.python)
        bare_port = free_port()
        bare = Server("allow-webhook", [args.python, str(ALLOW_APP), "--port", str(bare_port), "--cert",
                                        str(certs / "tls.crt"), "--key", str(certs / "tls.key")],
                      bare_port, certs / "ca.crt", workdir / "allow-webhook.log", WEBHOOK_CPU)
        hooks = {name: gpuguard_cli("webhook-config", "--url", srv.url, "--ca", str(certs / "ca.crt"),
                                    "--failure-policy", "Fail", "--timeout", "10")
                 for name, srv in (("gpuguard", server), ("allow-webhook", bare))}
        print("starting the control plane (etcd, kube-apiserver with MutatingAdmissionPolicy)...", file=sys.stderr)
        with ControlPlane(controller_manager=False, verbose=False, workdir=workdir / "cluster",
                          extra_apiserver_args=map_vap.FEATURE_ARGS) as cp:
            cp.kubectl("apply", "-f", str(PRIORITY_CLASSES))
            cp.install_crds("pytorchjob")
            api = PeerApi(cp.server, cp.token, cp.ca_file)
            kyv = kyverno_proc.Kyverno(cp, workdir, WEBHOOK_CPU) if "kyverno" in scenarios else None
            server.start()
            bare.start()
            procs = {"gpuguard": server.pid, "allow-webhook": bare.pid}
            try:
                if kyv:
                    kyv.install_crds()
                    kyv.start()
                    procs["kyverno"] = kyv.pid
                for rnd in range(args.rounds):
                    for name in scenarios:
                        with scenario(name, cp, api, hooks, bare):
                            if name == "kyverno" and kyv and "kyverno" not in settings_seen:
                                settings_seen["kyverno"] = kyv.webhook_settings()
                            for kind in kinds:
                                ns = f"bench-{name.replace('+', '-')}-{kind}-{rnd}-{uuid.uuid4().hex[:5]}"
                                api.namespace(ns)
                                k0 = kyv.metrics() if kyv else {}
                                c0 = {p: proc_cpu_seconds(pid) for p, pid in procs.items()}
                                got, d = run_window(api, kind, ns, per_round, args.warmup, failures, f"{name} {kind}")
                                c1 = {p: proc_cpu_seconds(pid) for p, pid in procs.items()}
                                samples[(name, kind)] += got
                                acc = inside.setdefault((name, kind), {})
                                for key, v in d.items():
                                    acc[key] = acc.get(key, 0.0) + v
                                sent = per_round + args.warmup
                                cacc = cpu.setdefault((name, kind), {})
                                cacc["creates"] = cacc.get("creates", 0) + sent
                                for p in procs:
                                    cacc[p] = cacc.get(p, 0.0) + c1[p] - c0[p]
                                if kyv and name == "kyverno":
                                    k1 = kyv.metrics()
                                    s = sum(v[0] for v in k1.values()) - sum(v[0] for v in k0.values())
                                    c = sum(v[1] for v in k1.values()) - sum(v[1] for v in k0.values())
                                    t, n = kyv_inside.get(("kyverno", kind), (0.0, 0))
                                    kyv_inside[("kyverno", kind)] = (t + s, n + c)
                        print(f"  round {rnd + 1}/{args.rounds} {name:13} done", file=sys.stderr)
                mem = {p: proc_mem_mb(pid) for p, pid in procs.items()}  # after the rounds
                try:  # a load run that breaks must not cost the rounds' numbers
                    for rate in rates:
                        for name in scenarios:
                            with scenario(name, cp, api, hooks, bare):
                                ns = f"load-{name.replace('+', '-')}-{int(rate)}-{uuid.uuid4().hex[:5]}"
                                api.namespace(ns)
                                c0 = {p: proc_cpu_seconds(pid) for p, pid in procs.items()}
                                res = fixed_rate(cp, rate, args.load_seconds, args.clients, ns)
                                c1 = {p: proc_cpu_seconds(pid) for p, pid in procs.items()}
                                res["scenario"] = name
                                res["webhook_cpu_seconds"] = {p: round(c1[p] - c0[p], 2) for p in procs}
                                loads.append(res)
                                print(f"  load {rate:g}/s {name:13} achieved {res['achieved_rate']:.1f}/s "
                                      f"p99 {res.get('latency_p99', 0):.1f} ms errors {res['errors']}", file=sys.stderr)
                except Exception as exc:  # noqa: BLE001 - reported in the results, not raised
                    load_error = f"{type(exc).__name__}: {exc}"
                    print(f"load runs stopped: {load_error}", file=sys.stderr)
            finally:
                server.stop()
                bare.stop()
                if kyv:
                    kyv.stop()
            server_side = server_side_latencies(server.log)
            gg_reviews = reviews_by_kind(server.log, kinds)

    stats = {f"{s}/{k}": summarize(v) for (s, k), v in samples.items() if v}
    ph = {f"{s}/{k}": phases(d, k, len(samples[(s, k)])) for (s, k), d in inside.items()}
    cpu_per_1000 = {f"{s}/{k}": {p: 1000 * v / c["creates"] for p, v in c.items() if p != "creates"}
                    for (s, k), c in cpu.items()}
    kyv_ms = {k: 1000 * t / n for (_s, k), (t, n) in kyv_inside.items() if n}
    reviews = {f"gpuguard/{k}": {e: c / cpu[("gpuguard", k)]["creates"] for e, c in v.items()}
               for k, v in gg_reviews.items() if ("gpuguard", k) in cpu}
    reviews |= {f"kyverno/{k}": {"all": n / cpu[("kyverno", k)]["creates"]}
                for (_s, k), (_t, n) in kyv_inside.items() if ("kyverno", k) in cpu}
    text = render(stats, ph, cpu_per_1000, mem, loads, kinds, scenarios, per_round * args.rounds, args.rounds,
                  server_side, kyv_ms, reviews)
    if warning := quiet_warning(busy):
        text += f"\n\n{warning}"
    info = machine()
    print(f"\nmachine: {machine_line(info)}\n")
    print(text)
    path = write_results(f"apiserver-peers{'-' + args.tag if args.tag else ''}", {
        "settings": {"n": per_round * args.rounds, "rounds": args.rounds, "warmup_per_round": args.warmup,
                     "kinds": kinds, "scenarios": scenarios, "webhook_cpu": WEBHOOK_CPU,
                     "kyverno_version": kyverno_proc.KYVERNO_VERSION, "kyverno_flags": list(kyverno_proc.CHART_FLAGS),
                     "load_seconds": args.load_seconds, "clients": args.clients},
        "skipped": skipped, "cpu_busy_before": busy, "failures": failures, "create_ms": stats,
        "apiserver_per_create": ph, "webhook_cpu_seconds_per_1000_creates": cpu_per_1000, "memory_mb": mem,
        "kyverno_server_side_ms_per_review": kyv_ms, "reviews_per_create_seen_by_webhook": reviews,
        "gpuguard_server_side_ms": {k: summarize(v) for k, v in server_side.items() if v},
        "kyverno_webhooks": settings_seen.get("kyverno"), "load": loads, "load_error": load_error, "tables": text,
    })
    print(f"\nresults: {path.relative_to(ROOT)}")
    return 0


def render(stats: dict[str, dict[str, float]], ph: dict[str, dict[str, float | None]],  # noqa: PLR0913
           cpu_per_1000: dict[str, dict[str, float]], mem: dict[str, dict[str, float]], loads: list[dict[str, Any]],
           kinds: list[str], scenarios: list[str], n: int, rounds: int, server_side: dict[str, list[float]],
           kyv_ms: dict[str, float], reviews: dict[str, dict[str, float]]) -> str:
    out = io.StringIO()
    owner = {"gpuguard": "gpuguard", "kyverno": "kyverno", "allow-webhook": "allow-webhook"}
    out.write(f"Per-create latency through kube-apiserver (ms; {n} creates per row, {rounds} interleaved rounds, "
              "sequential, one keep-alive connection); webhook CPU = CPU seconds of that scenario's webhook "
              "process per 1,000 creates\n")
    rows = []
    for kind in kinds:
        base = stats.get(f"none/{kind}")
        for s in scenarios:
            st = stats.get(f"{s}/{kind}")
            if not st:
                continue
            p = ph.get(f"{s}/{kind}", {})
            proc = owner.get(s)
            cpu_s = cpu_per_1000.get(f"{s}/{kind}", {}).get(proc) if proc else None
            rows.append([kind, s, st["n"], st["p50"], st["p99"],
                         None if not base or s == "none" else f"{st['p50'] - base['p50']:+.2f}",
                         None if not base or s == "none" else f"{st['p99'] - base['p99']:+.2f}",
                         f"{p.get('admit calls per create') or 0:.2f} / "
                         f"{p.get('validating calls per create') or 0:.2f}",
                         cpu_s])
    out.write(table(["kind", "admission", "n", "p50", "p99", "added p50", "added p99",
                     "webhook calls per create (mut / val)", "webhook CPU s / 1,000"], rows))
    out.write("\n\nAs the apiserver times it (its /metrics; ms per create, and per webhook call the p50/p99 "
              "interpolated from the apiserver's coarse histogram buckets: 5, 25, 100 ms ...)\n")
    prow = []
    for kind in kinds:
        for s in scenarios:
            p = ph.get(f"{s}/{kind}")
            if p:
                prow.append([kind, s, p["request ms"], p["mutating phase ms"], p["validating phase ms"],
                             p["admit webhook ms per create"], p["admit call p50 ms"], p["admit call p99 ms"],
                             p["validating webhook ms per create"], p["validating call p50 ms"],
                             p["validating call p99 ms"]])
    out.write(table(["kind", "admission", "request", "mutating phase", "validating phase", "mutating calls",
                     "mut. call p50", "mut. call p99", "validating calls", "val. call p50", "val. call p99"], prow))
    side = {k: summarize(v) for k, v in server_side.items() if v}
    if side or kyv_ms:
        out.write("\n\nInside the webhook process (ms per review): gpuguard's log latency_ms (all scenarios' "
                  "reviews it got); Kyverno's kyverno_admission_review_duration_seconds mean\n")
        srows = [[f"gpuguard {k}", v["n"], v["mean"], v["p50"], v["p99"]] for k, v in sorted(side.items())]
        srows += [[f"kyverno ({k})", None, v, None, None] for k, v in sorted(kyv_ms.items())]
        out.write(table(["review", "n", "mean", "p50", "p99"], srows))
    if reviews:
        out.write("\n\nReviews per create as the webhook process counts them (gpuguard: its log, by endpoint, "
                  "reinvocations included; Kyverno: kyverno_admission_review_duration_seconds_count)\n")
        out.write(table(["scenario/kind", "reviews per create"],
                        [[k, ", ".join(f"{e} {c:.2f}" for e, c in sorted(v.items()))]
                         for k, v in sorted(reviews.items())]))
    if mem:
        out.write("\n\nWebhook process memory at the end (MB): RSS, peak RSS\n")
        out.write(table(["process", "RSS", "peak RSS"], [[p, m.get("VmRSS"), m.get("VmHWM")] for p, m in mem.items()]))
    if loads:
        out.write("\n\nFixed-rate GPU Pod creates (latency from each request's scheduled send time, ms)\n")
        out.write("(sending stops at 1.5x the planned seconds: 'not sent' = never sent by a set-up that fell behind)\n")
        out.write(table(["target /s", "admission", "clients", "seconds", "achieved /s", "p50", "p99", "max",
                         "errors", "not sent", "webhook CPU s"],
                        [[r["target_rate"], r["scenario"], r["clients"], r["seconds"], r["achieved_rate"],
                          r.get("latency_p50"), r.get("latency_p99"), r.get("latency_max"), r["errors"],
                          r.get("not_sent"),
                          r["webhook_cpu_seconds"].get(owner.get(r["scenario"], ""), None)] for r in loads]))
    return out.getvalue()


if __name__ == "__main__":
    sys.exit(main())
