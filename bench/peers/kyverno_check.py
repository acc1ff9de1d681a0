"""Do the translated ClusterPolicies decide like gpuguard?  ``kubectl-kyverno apply`` on gpuguard's fixtures.

``python bench/peers/kyverno_check.py [--markdown]``.  The inputs are the manifests gpuguard's
tests use: ``tests/fixtures/manifests/`` (all but ``invalid/``) and, when present, every case's
``input.yaml`` under ``tests/policies/<policy-id>/`` (docs/policy-fixtures.md; the cases of one
policy are compared on that policy only, as their ``suite.yaml`` runs them).

For every object and policy id, the two outcomes compared are:

* gpuguard: ``gpuguard audit --format json`` with the default config -> ``deny`` / ``warn`` (a
  finding), ``mutate`` (in ``mutatedBy``) or ``-``;
* Kyverno: all translated policies at once with ``--policy-report`` (validate results: ``fail`` of an
  Enforce rule -> ``deny``, of an Audit rule -> ``warn``; the CLI chains the mutating policies before
  validating, as admission does), and each mutating policy alone with ``-o DIR`` (the written
  resource differs from the input -> ``mutate``).

Prints (or writes as Markdown for docs/compare-kyverno.md) every object/policy pair that differs,
and a count per policy.  Why here and not in the test suite: it needs the Kyverno build (minutes,
gigabytes), which the default test run must never pay.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

_BENCH = Path(__file__).resolve().parent.parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

import yaml  # noqa: E402
from _common import ROOT, table  # noqa: E402
from _paths import add_option, check_paths  # noqa: E402

from peers import kyverno_proc  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "manifests"
POLICY_CASES = ROOT / "tests" / "policies"
MUTATING = ("gpu-tolerations", "gpu-node-affinity", "default-resources", "priority-class", "job-ttl", "job-limits",
            "shm-volume")
# Annotations Kyverno's CLI adds to the resources it writes (its keys, not gpuguard's): not a mutation.
KYVERNO_ANNOTATIONS = ("policies.kyverno.io", "kyverno.io")
# What --check-paths checks (bench/_paths.py).
NEEDS = (FIXTURES, POLICY_CASES, *(kyverno_proc.POLICY_DIR / f"{pid}.yaml" for pid in MUTATING))
EXTERNAL_NAMES = KYVERNO_ANNOTATIONS
NEEDS_MODULES = ("gpuguard.webhook.__main__",)  # gpuguard_outcomes: python -m gpuguard.webhook audit
Key = tuple[str, str, str]  # kind, namespace, name


def _objects(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    docs = [json.loads(text)] if path.suffix == ".json" else list(yaml.safe_load_all(text))
    out: list[dict[str, Any]] = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind", "").endswith("List") and isinstance(d.get("items"), list):
            out += [i for i in d["items"] if isinstance(i, dict)]
        elif isinstance(d, dict) and d.get("kind"):
            out.append(d)
    return out


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind")), str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def collect(work: Path) -> tuple[Path, dict[Key, str | None]]:
    """Copy every input object to its own file in ``work`` (Kyverno reads a folder); object -> only-policy."""
    inputs = work / "inputs"
    inputs.mkdir()
    only: dict[Key, str | None] = {}
    files = [(p, None) for p in sorted(FIXTURES.rglob("*")) if p.is_file() and "invalid" not in p.parts
             and p.suffix in (".yaml", ".yml", ".json")]
    if POLICY_CASES.is_dir():
        files += [(p, p.relative_to(POLICY_CASES).parts[0]) for p in sorted(POLICY_CASES.rglob("input.yaml"))]
    n = 0
    for path, policy in files:
        for obj in _objects(path):
            obj.setdefault("metadata", {})
            if policy:  # cases reuse names: make them unique, keep the case in the name
                obj["metadata"]["name"] = f"{path.parent.name}-{obj['metadata'].get('name', 'x')}"[:63]
            obj["metadata"].setdefault("namespace", "default")
            key = key_of(obj)
            if key in only:
                continue
            only[key] = policy
            (inputs / f"{n:04d}.yaml").write_text(yaml.safe_dump(obj, sort_keys=False))
            n += 1
    return inputs, only


def gpuguard_outcomes(inputs: Path) -> dict[Key, dict[str, str]]:
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", str(inputs), "--format", "json",
                           "--fail-on", "never"], cwd=ROOT, capture_output=True, text=True, check=True)
    out: dict[Key, dict[str, str]] = {}
    for r in json.loads(proc.stdout)["results"]:
        k = (str(r["kind"]), str(r.get("namespace") or "default"), str(r.get("name") or ""))
        got = out.setdefault(k, {})
        for pid in r.get("mutatedBy", []):
            got[pid] = "mutate"
        for v in r.get("violations", []):
            got[v["policy"]] = v["action"] if got.get(v["policy"]) != "deny" else "deny"
    return out


def kyverno_outcomes(cli: Path, inputs: Path, work: Path) -> tuple[dict[Key, dict[str, str]], list[str]]:
    out: dict[Key, dict[str, str]] = {}
    notes: list[str] = []
    audit_rules = _audit_rules()
    proc = subprocess.run([str(cli), "apply", str(kyverno_proc.POLICY_DIR), "--resource", str(inputs),
                           "--policy-report", "--output-format", "json", "--remove-color"],
                          capture_output=True, text=True, check=False)
    start = proc.stdout.find('{"kind":"ClusterReport"')
    if start < 0:
        raise RuntimeError(f"kubectl-kyverno apply gave no report:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    for item in report.get("results", []):
        for res in item.get("resources", []):
            k = (res.get("kind", ""), res.get("namespace") or "default", res.get("name", ""))
            got = out.setdefault(k, {})
            policy, rule, result = item.get("policy", ""), item.get("rule", ""), item.get("result")
            if result in ("fail", "warn"):
                base = rule.removeprefix("autogen-cronjob-").removeprefix("autogen-")  # autogen'd copies
                verdict = "warn" if (policy, base) in audit_rules or result == "warn" else "deny"
                got[policy] = "deny" if got.get(policy) == "deny" else verdict
            elif result == "error":
                got[policy] = "error"
                notes.append(f"{policy}/{rule} on {'/'.join(k)}: {item.get('message', '')[:200]}")
    originals = {key_of(o): o for p in sorted(inputs.glob("*.yaml")) for o in _objects(p)}
    for pid in MUTATING:
        target = work / f"mutated-{pid}"  # one NAME-mutated.yaml per resource, a document per applied policy
        target.mkdir()
        subprocess.run([str(cli), "apply", str(kyverno_proc.POLICY_DIR / f"{pid}.yaml"), "--resource", str(inputs),
                        "-o", str(target), "--remove-color"], capture_output=True, text=True, check=False)
        for path in sorted(target.glob("*.yaml")):
            docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind")]
            if docs:
                k = key_of(docs[-1])
                if k in originals and _strip(docs[-1]) != _strip(originals[k]):
                    out.setdefault(k, {})[pid] = "mutate"
    return out, notes


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without fields Kyverno's CLI adds on output for its own bookkeeping."""
    obj = json.loads(json.dumps(obj, default=str))
    meta = obj.get("metadata") or {}
    for noise in ("creationTimestamp", "annotations"):
        if noise == "annotations" and isinstance(meta.get(noise), dict):
            meta[noise] = {a: v for a, v in meta[noise].items() if not a.startswith(KYVERNO_ANNOTATIONS)} or None
            if meta[noise] is None:
                meta.pop(noise)
        elif meta.get(noise) is None:
            meta.pop(noise, None)
    return obj


def _audit_rules() -> set[tuple[str, str]]:
    rules = set()
    for path in kyverno_proc.policy_files():
        for doc in yaml.safe_load_all(path.read_text()):
            for rule in (doc or {}).get("spec", {}).get("rules", []):
                if (rule.get("validate") or {}).get("failureAction") == "Audit":
                    rules.add((doc["metadata"]["name"], rule["name"]))
    return rules


def compare(only: dict[Key, str | None], g: dict[Key, dict[str, str]], k: dict[Key, dict[str, str]],
            policies: list[str]) -> list[list[str]]:
    rows = []
    for key in sorted(only):
        for pid in ([only[key]] if only[key] else policies):
            a, b = g.get(key, {}).get(pid, "-"), k.get(key, {}).get(pid, "-")
            if a != b:
                rows.append(["/".join(key), pid, a, b])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="translated Kyverno policies vs gpuguard on gpuguard's fixtures")
    parser.add_argument("--markdown", metavar="FILE", help="also write the differences as Markdown tables")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.markdown and not Path(args.markdown).resolve().parent.is_dir():
        parser.error(f"--markdown {args.markdown}: no folder {Path(args.markdown).resolve().parent}")
    if args.check_paths:
        return check_paths()
    try:
        cli, _ = kyverno_proc.binaries(build=True)
    except kyverno_proc.KyvernoUnavailable as exc:
        print(f"SKIP: {exc}", file=sys.stderr)
        return 0
    policies = [p.stem for p in kyverno_proc.policy_files()]
    with tempfile.TemporaryDirectory(prefix="gpuguard-kyverno-check-") as tmp:
        work = Path(tmp)
        inputs, only = collect(work)
        g = gpuguard_outcomes(inputs)
        k, notes = kyverno_outcomes(cli, inputs, work)
    rows = compare(only, g, k, policies)
    per_policy = Counter(r[1] for r in rows)
    agree = {pid: sum(1 for key in only if (only[key] in (None, pid))) - per_policy.get(pid, 0) for pid in policies}
    summary = table(["policy", "objects compared", "same outcome", "different"],
                    [[pid, agree[pid] + per_policy.get(pid, 0), agree[pid], per_policy.get(pid, 0)]
                     for pid in policies])
    detail = table(["object (kind/namespace/name)", "policy", "gpuguard", "kyverno"], rows) if rows else "none"
    text = f"{len(only)} objects from gpuguard's fixtures\n\n{summary}\n\nDifferences:\n{detail}"
    if notes:
        text += "\n\nKyverno errors and notes:\n" + "\n".join(f"- {n}" for n in notes)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
