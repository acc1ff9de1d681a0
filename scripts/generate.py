"""Write every file derived from the code, so each fact is written once, by its owner.

    python3 scripts/generate.py            write the files that are stale
    python3 scripts/generate.py --check    list the stale files and exit 1; write nothing

What is derived, and from what:

* ``policies/default-config.yaml``, its ``policies:`` section: each policy's action and its other
  settings at their defaults, from the policies' settings models (the rest of the file, the
  accelerator profiles and the comments, is written by hand);
* ``deploy/base/config.yaml``: the ConfigMap source, the shipped default config verbatim;
* ``deploy/base/rbac.yaml``, its rules that get the kinds ``kubectl scale`` scales, from the kind table;
* ``deploy/base/webhookconfigurations.yaml``: ``gpuguard webhook-config --service gpuguard/gpuguard``
  for the shipped config (rules and matchConditions follow the kind table), and the dev overlay's
  patch of every one of its webhooks (``deploy/overlays/dev/webhooks.yaml``); the same configurations
  as the self-managed overlay's ConfigMap source (``deploy/overlays/self-managed/webhooks.yaml``);
* ``deploy/monitoring/prometheusrule.yaml``: the PrometheusRule holding ``deploy/monitoring/rules.yaml``'s
  groups (the rule file is what ``promtool test rules`` checks);
* ``deploy/chart/gpuguard``: the Helm chart's templates, values and files, from the same sources as
  ``deploy/base`` (``scripts/helm_chart.py``), with ``values.schema.json`` and ``README.md`` from its
  ``VALUE_DOCS`` (each value's type and meaning) and the values' defaults;
* ``tests/support/cluster/crds/<kind>.yaml``: an open-schema stand-in CRD for every custom kind, which
  the e2e tests install instead of the operator (the Trainer's runtime CRDs are written by hand);
* ``tests/kinds/<kind>/{denied,allowed}/``: a custom-rule case pair for every kind the test builders
  make, the expected findings taken from the kind table (each template's PodSpec path), not from
  running gpuguard, so the cases check the engine rather than echo it;
* the README's policy table, from the policy registry;
* the trusted-controller table of ``docs/admin.md``, from ``DEFAULT_TRUSTED_CONTROLLERS``;
* the fields gpuguard owns, in ``docs/gitops.md`` and as an Argo CD ``ignoreDifferences``
  (``deploy/gitops/argocd-ignore-differences.yaml``), from the policies' ``writes`` and the kind table;
* ``bench/bodies/*.json``: the AdmissionReviews the benchmarks send (``bench/bodies.py``).

Markdown tables sit between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; the
config section between ``# generated: policies`` and ``# end generated`` comment lines.
``tests/unit/project/test_generated.py`` runs the check, and so does ``scripts/test.sh``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # tests.support.builders, when run as a script
    sys.path.insert(0, str(REPO))

COMMAND = "python3 scripts/generate.py"
DEFAULT_CONFIG = "policies/default-config.yaml"
KINDS_MATRIX = "tests/kinds"
END = "end generated"

Files = dict[str, bytes]  # repository-relative path -> content


# ---------------------------------------------------------------- marked regions


def replace_region(text: str, name: str, body: str, *, comment: str) -> str:
    """``text`` with the lines between the ``generated: name`` and ``end generated`` markers replaced.

    ``comment`` is ``"md"`` (HTML comments on their own lines) or ``"yaml"`` (``#`` lines, any
    indent).  The marker lines stay; a missing marker is an error naming it.
    """
    start_marker, end_marker = (f"<!-- generated: {name} -->", f"<!-- {END} -->") if comment == "md" else (
        f"# generated: {name}", f"# {END}")
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip().startswith(start_marker)]
    if len(starts) != 1:
        raise SystemExit(f"generate: expected one {start_marker!r} line, found {len(starts)}")
    start = starts[0]
    ends = [i for i in range(start + 1, len(lines)) if lines[i].strip() == end_marker]
    if not ends:
        raise SystemExit(f"generate: no {end_marker!r} after {start_marker!r}")
    return "".join(lines[:start + 1]) + body + "".join(lines[ends[0]:])


# ---------------------------------------------------------------- policies/default-config.yaml


def _flow_one(value: Any) -> str:
    """A value as one flow-style YAML line, quoted as it must be inside a flow collection."""
    text = yaml.safe_dump([value], default_flow_style=True, sort_keys=False, width=1 << 20, allow_unicode=True)
    return text.strip()[1:-1]


def _flow(value: Any, width: int) -> list[str]:
    """A value in flow-style YAML, its top-level items packed into lines of about ``width`` columns."""
    if isinstance(value, dict) and value:
        items, brackets = [f"{_flow_one(k)}: {_flow_one(v)}" for k, v in value.items()], "{}"
    elif isinstance(value, list) and value:
        items, brackets = [_flow_one(v) for v in value], "[]"
    else:
        return [_flow_one(value)]
    lines = [brackets[0]]
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else brackets[1])
        if len(lines[-1]) + len(piece.rstrip()) > width and lines[-1].strip() not in ("", brackets[0]):
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += piece
    return lines


def policy_settings_section(indent: str = "  ") -> str:
    """Each policy's ``action`` live and its other settings commented out at their defaults.

    Only ``action`` is written as a key: a deployed copy of this file then follows the models'
    defaults on upgrade, while an admin still reads every setting there is to change.
    """
    from gpuguard.policies import REGISTRY

    out = [f"{indent}# Every policy's action, and its other settings at their defaults (commented out);\n",
           f"{indent}# `gpuguard explain POLICY` describes each setting.\n"]
    for policy in REGISTRY.values():
        defaults = policy.settings_model().model_dump(by_alias=True, mode="json")
        out.append(f"{indent}{policy.id}:\n{indent}  action: {defaults.pop('action')}\n")
        for key, value in defaults.items():
            first = f"{indent}  # {key}: "
            lines = _flow(value, max(40, 100 - len(first)))
            assert yaml.safe_load(" ".join(lines)) == value, f"{policy.id}.{key}: {lines} does not read back"
            out.append(f"{first}{lines[0]}\n")
            out.extend(f"{indent}  #   {line.strip()}\n" for line in lines[1:])
    return "".join(out)


def default_config(text: str) -> str:
    """The shipped default config with its generated ``policies:`` section brought up to date."""
    return replace_region(text, "policies", policy_settings_section(), comment="yaml")


# ---------------------------------------------------------------- deploy/base


def webhook_configurations(config_text: str) -> str:
    """The base's webhook configurations for the shipped config, as ``gpuguard webhook-config`` writes them."""
    from gpuguard.webhook.cli.match_conditions import filters_from
    from gpuguard.webhook.cli.webhook_config import build_webhook_configurations, render_yaml
    from gpuguard.webhook.config import parse_config_text

    config = parse_config_text(config_text, DEFAULT_CONFIG)
    return render_yaml(build_webhook_configurations(service=("gpuguard", "gpuguard"), filters=filters_from(config)))


def prometheus_rule() -> str:
    """The PrometheusRule for prometheus-operator, carrying the rule file's groups as they are."""
    groups = yaml.safe_load(_read("deploy/monitoring/rules.yaml"))["groups"]
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "gpuguard", "namespace": "gpuguard",
                         "labels": {"app.kubernetes.io/name": "gpuguard"}},
            "spec": {"groups": groups}}
    return ("# Generated by scripts/generate.py from deploy/monitoring/rules.yaml; edit that file.\n"
            + yaml.safe_dump(rule, sort_keys=False, width=100))


DEV_WEBHOOK_SETTINGS = {"failurePolicy": "Ignore", "timeoutSeconds": 5}


def dev_webhook_patch() -> str:
    """The dev overlay's strategic-merge patch: every webhook of both configurations (merged by name)
    fails open and gives up sooner, however many webhooks the kind table makes."""
    from gpuguard.webhook.cli.webhook_config import build_webhook_configurations

    documents = [{"apiVersion": config["apiVersion"], "kind": config["kind"], "metadata": {"name": "gpuguard"},
                  "webhooks": [{"name": hook["name"], **DEV_WEBHOOK_SETTINGS} for hook in config["webhooks"]]}
                 for config in build_webhook_configurations(service=("gpuguard", "gpuguard"))]
    header = ("# Generated by scripts/generate.py from the webhook configurations: every webhook fails open\n"
              "# (failurePolicy Ignore) and gives up after 5 s.\n")
    return header + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)


def scale_get_rules(indent: str = "  ") -> str:
    """The ClusterRole rules that let the server get what ``kubectl scale`` scales (a Scale has no template), and
    the CRDs that say where a custom resource's Scale lands."""
    from gpuguard.workloads.kinds import KINDS

    by_group: dict[str, list[str]] = {}
    for spec in KINDS:
        if spec.scalable:
            plurals = by_group.setdefault(spec.group, [])
            if spec.plural not in plurals:
                plurals.append(spec.plural)
    rules = "".join(f"{indent}- apiGroups: {json.dumps([group])}\n{indent}  resources: {json.dumps(plurals)}\n"
                    f"{indent}  verbs: [\"get\"]\n" for group, plurals in by_group.items())
    # where a custom resource's Scale lands, when the kind table does not say: its CRD's scale subresource
    return rules + (f"{indent}- apiGroups: [\"apiextensions.k8s.io\"]\n{indent}  resources: "
                    f"[\"customresourcedefinitions\"]\n{indent}  verbs: [\"get\"]\n")


# ---------------------------------------------------------------- tests/kinds


def _case_folder(name: str) -> str:
    return {"VolcanoJob": "volcano-job"}.get(name) or name.lower()


def _dump(data: dict) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def kinds_matrix() -> Files:
    """A denied and an allowed case of the two custom rules in ``tests/kinds/config.yaml``, per kind."""
    from gpuguard.webhook.config import parse_config_text
    from gpuguard.workloads import kinds
    from gpuguard.workloads.paths import dotted
    from gpuguard.workloads.view import build_view
    from tests.support.builders import ADAPTED_KINDS, ALL_KINDS, gpu_container, make

    accelerators = parse_config_text("kind: GpuguardConfig\n").accelerators
    files: Files = {}
    for name in [*ALL_KINDS, *ADAPTED_KINDS]:
        folder = f"{KINDS_MATRIX}/{_case_folder(name)}"
        bad = make(name, {"restartPolicy": "Never", "containers": [gpu_container(1, image="ghcr.io/example/train:1")]},
                   replicas=2, namespace="ml")
        bad.setdefault("metadata", {}).setdefault("labels", {})["app"] = "train"
        spec = kinds.lookup(bad["apiVersion"], bad["kind"])
        assert spec is not None, f"the builder of {name} makes a kind gpuguard does not know"
        refs = [t.ref for t in build_view(bad, spec, accelerators, "training").gpu_templates]
        files[f"{folder}/denied/input.yaml"] = _dump(bad)
        files[f"{folder}/denied/expect.yaml"] = _dump({
            "description": f"A GPU {name} without a team label and with a ghcr.io image is denied by both rules, "
                           f"on each of its {len(refs)} GPU pod template(s)",
            "allowed": False,
            "violations": [{"policy": "team-label", "action": "deny", "path": "metadata.labels.team"}]
            + [{"policy": "gpu-registry", "action": "deny", "path": dotted(r.spec_path) + ".containers"}
               for r in refs]})
        good = make(name, {"restartPolicy": "Never",
                           "containers": [gpu_container(1, image="registry.corp/vision/train:1")]},
                    replicas=2, namespace="ml")
        good["metadata"]["labels"] = {"app": "train", "team": "vision"}
        files[f"{folder}/allowed/input.yaml"] = _dump(good)
        files[f"{folder}/allowed/expect.yaml"] = _dump({
            "description": f"A GPU {name} with a team label and registry.corp images passes both rules",
            "allowed": True, "violations": []})
    return files


def leftovers(expected: Iterable[str]) -> list[str]:
    """Files an earlier run generated that this one does not (a kind that went away).

    Case files under ``tests/kinds`` and the stand-in CRDs that carry the generated header; the
    hand-written files beside them (``tests/kinds/config.yaml``, the runtime CRDs) are never touched.
    """
    keep = set(expected)
    cases = (REPO / KINDS_MATRIX).glob("*/*/*.yaml")
    crds = (p for p in (REPO / CRDS).glob("*.yaml") if COMMAND in p.read_text(encoding="utf-8").split("\n", 3)[1])
    found = (p.relative_to(REPO).as_posix() for p in (*cases, *crds))
    return sorted(p for p in found if p not in keep)


# ---------------------------------------------------------------- e2e stand-in CRDs

CRDS = "tests/support/cluster/crds"
BUILTIN_GROUPS = ("", "batch", "apps")


def crd_name(spec: Any, builtin_kinds: set[str]) -> str:
    """The stand-in's file name: ``pytorchjob``; ``volcano-job`` where a built-in kind has the name."""
    if spec.kind in builtin_kinds:
        return f"{spec.group.split('.')[1]}-{spec.kind.lower()}"
    return spec.kind.lower()


def _subresources(spec: Any) -> dict[str, Any]:
    """``status``, and ``scale`` where the kind has one (its replicas path from the kind table)."""
    out: dict[str, Any] = {"status": {}}
    if spec.scale_replicas is not None:
        out["scale"] = {"specReplicasPath": "." + ".".join(spec.scale_replicas),
                        "statusReplicasPath": ".status.replicas"}
    return out


def stand_in_crds() -> Files:
    """An open-schema CRD for every custom kind gpuguard knows, so e2e tests can create it without its operator.

    Same group, versions, kind, plural and scope as the operator's CRD, nothing copied from it: the
    apiserver then sends the objects through admission as it would on a real cluster.
    """
    from gpuguard.workloads.kinds import KINDS

    builtin = {k.kind for k in KINDS if k.group in BUILTIN_GROUPS}
    files: Files = {}
    for spec in (k for k in KINDS if k.group not in BUILTIN_GROUPS):
        annotations = {}
        if spec.group.endswith((".k8s.io", ".kubernetes.io")):  # protected groups need the annotation
            annotations = {"api-approved.kubernetes.io": "unapproved, gpuguard e2e stand-in"}
        singular = spec.kind.lower()
        metadata: dict[str, Any] = {"name": f"{spec.plural}.{spec.group}"}
        if annotations:
            metadata["annotations"] = annotations
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": metadata,
            "spec": {
                "group": spec.group, "scope": "Namespaced",
                "names": {"kind": spec.kind, "listKind": f"{spec.kind}List", "plural": spec.plural,
                          "singular": singular},
                "versions": [{"name": version, "served": True, "storage": i == 0, "subresources": _subresources(spec),
                              "schema": {"openAPIV3Schema": {"type": "object",
                                                             "x-kubernetes-preserve-unknown-fields": True}}}
                             for i, version in enumerate(spec.versions)],
            },
        }
        header = (f"# Stand-in for the {spec.kind} CRD ({spec.group}) for gpuguard's e2e tests, generated by\n"
                  f"# {COMMAND} from the kind table: the operator's group, versions, kind, plural and scope,\n"
                  "# an open schema, no controller.\n")
        files[f"{CRDS}/{crd_name(spec, builtin)}.yaml"] = (header + yaml.safe_dump(crd, sort_keys=False)).encode()
    return files


# ---------------------------------------------------------------- markdown tables


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped, ``docs/*.md`` paths as links."""
    return re.sub(r"\b(docs/[\w-]+\.md)\b", r"[\1](\1)", " ".join(text.split()).replace("|", "\\|"))


def policy_table() -> str:
    """The README's policy table: id, phase, default action and description of every registered policy."""
    from gpuguard.policies import REGISTRY

    rows = ["| id | phase | default action | what it does |\n", "|---|---|---|---|\n"]
    rows += [f"| `{p.id}` | {p.phase} | {p.default_action} | {_cell(p.description)} |\n" for p in REGISTRY.values()]
    return "".join(rows)


def _group_kinds(edges: list[dict[str, Any]]) -> str:
    """``[{owner: apps/ReplicaSet, kind: Pod}, ...]`` -> "`Pod` of `apps/ReplicaSet`; ...", by created kind."""
    by_kind: dict[str, list[str]] = {}
    for edge in edges:
        owner = f"`{edge['owner']}`" + (" (mutated)" if edge.get("mutate") else "")
        by_kind.setdefault(edge["kind"], []).append(owner)
    return "; ".join(f"`{kind}` of {', '.join(owners)}" for kind, owners in by_kind.items())


def controller_table() -> str:
    """The admin guide's built-in trusted controllers: name, identities, what each creates for which owner."""
    from gpuguard.workloads.controllers import DEFAULT_TRUSTED_CONTROLLERS

    rows = ["| name | identity (username) | creates |\n", "|---|---|---|\n"]
    for name, entry in DEFAULT_TRUSTED_CONTROLLERS.items():
        users = [*entry.get("users", ()),
                 *("system:serviceaccount:" + sa.replace("/", ":", 1) for sa in entry.get("serviceAccounts", ()))]
        rows.append(f"| `{name}` | {', '.join(f'`{u}`' for u in users)} | {_group_kinds(entry['creates'])} |\n")
    return "".join(rows)


# ---------------------------------------------------------------- GitOps: the fields gpuguard owns

ARGOCD_IGNORE = "deploy/gitops/argocd-ignore-differences.yaml"


def _job_field_names(attribute: str) -> list[str]:
    """The names a job field (``ttl``, ``deadline`` ...) has across the kind table, e.g. ``ttlSecondsAfterFinished``."""
    from gpuguard.workloads.kinds import KINDS

    names: dict[str, None] = {}
    for kind in KINDS:
        value = getattr(kind.job, attribute, None) if kind.job else None
        for path in ((value or ()) if attribute == "ttl_variants" else ((value,) if value else ())):
            names[str(path[-1])] = None
    return list(names)


def owned_fields_table() -> str:
    """``docs/gitops.md``: what each mutating policy writes, from its ``writes`` and the kind table."""
    from gpuguard.policies import REGISTRY

    rows = ["| policy | fields it writes (in every pod spec of the workload, or where the kind keeps the job "
            "field) |\n", "|---|---|\n"]
    for policy in REGISTRY.values():
        fields = [", ".join(f"`{n}`" for n in _job_field_names(w.removeprefix("job."))) if w.startswith("job.")
                  else f"`{w}`" for w in getattr(policy, "writes", ())]
        if fields:
            rows.append(f"| `{policy.id}` | {'; '.join(fields)} |\n")
    rows.append("| (every change) | the annotations " + ", ".join(f"`{a}`" for a in _owned_annotations()) + " |\n")
    return "".join(rows)


def _owned_annotations() -> tuple[str, ...]:
    from gpuguard.webhook.catalog import OWNED_ANNOTATIONS

    return OWNED_ANNOTATIONS


def path_less_kinds() -> str:
    """``docs/gitops.md``: the kinds whose pod fields no fixed path reaches (their operators' own shapes)."""
    from gpuguard.workloads.kinds import KINDS

    return ", ".join(f"`{k.kind}`" for k in KINDS if not k.pod_spec_paths) + "\n"


def argocd_ignore_differences() -> str:
    """An Argo CD Application's ``ignoreDifferences`` for the fields gpuguard owns, per workload kind."""
    from gpuguard.webhook.catalog import argocd_ignore_differences as entries

    header = (f"# Generated by {COMMAND} from the policies' `writes` and the kind table: the fields gpuguard's\n"
              "# mutating policies write, per workload kind, for an Argo CD Application's spec (docs/gitops.md).\n"
              "# Server-Side Diff with IncludeMutationWebhook=true needs none of this.\n")
    return header + yaml.safe_dump({"ignoreDifferences": entries()}, sort_keys=False, width=200)


# ---------------------------------------------------------------- bench/bodies


def bench_bodies() -> Files:
    """The benchmark AdmissionReviews, built and checked against the engine by ``bench/bodies.py``."""
    spec = importlib.util.spec_from_file_location("gpuguard_bench_bodies", REPO / "bench" / "bodies.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {module.body_path(name, endpoint).relative_to(REPO).as_posix(): data
            for name, pair in module.build_all().items() for endpoint, data in pair.items()}


# ---------------------------------------------------------------- deploy/chart


def helm_chart() -> Files:
    """The Helm chart's generated files, made from deploy/'s own sources by ``scripts/helm_chart.py``."""
    spec = importlib.util.spec_from_file_location("gpuguard_helm_chart", REPO / "scripts" / "helm_chart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files: Files = module.chart_files(REPO, _read(DEFAULT_CONFIG), DEFAULT_CONFIG)
    return files


# ---------------------------------------------------------------- all of them


def _read(path: str) -> str:
    return (REPO / path).read_text(encoding="utf-8")


def config_files() -> Files:
    """The shipped default config and its ConfigMap copy: what the other generated files load."""
    config = default_config(_read(DEFAULT_CONFIG)).encode()
    return {DEFAULT_CONFIG: config, "deploy/base/config.yaml": config}


def derived_files() -> Files:
    """Every other generated file (regions filled into the hand-written rest), for the config on disk."""
    files: Files = {
        "deploy/base/webhookconfigurations.yaml": webhook_configurations(_read(DEFAULT_CONFIG)).encode(),
        "deploy/overlays/dev/webhooks.yaml": dev_webhook_patch().encode(),
        # The self-managed overlay's ConfigMap source: the webhooks its server writes (kustomize reads
        # no file outside the overlay, so the base's configurations are copied there).
        "deploy/overlays/self-managed/webhooks.yaml": webhook_configurations(_read(DEFAULT_CONFIG)).encode(),
        "deploy/monitoring/prometheusrule.yaml": prometheus_rule().encode(),
        "deploy/base/rbac.yaml": replace_region(_read("deploy/base/rbac.yaml"), "scale-gets", scale_get_rules(),
                                                comment="yaml").encode(),
        "README.md": replace_region(_read("README.md"), "policies", policy_table(), comment="md").encode(),
        "docs/admin.md": replace_region(_read("docs/admin.md"), "trusted-controllers", controller_table(),
                                        comment="md").encode(),
        "docs/gitops.md": replace_region(replace_region(_read("docs/gitops.md"), "owned-fields", owned_fields_table(),
                                                        comment="md"), "path-less-kinds", path_less_kinds(),
                                         comment="md").encode(),
        ARGOCD_IGNORE: argocd_ignore_differences().encode(),
    }
    files.update(kinds_matrix())
    files.update(stand_in_crds())
    files.update(bench_bodies())
    files.update(helm_chart())
    return files


def stale(files: Files) -> tuple[list[str], list[str]]:
    """(files whose content differs or that are missing, files generated before but no longer)."""
    changed = [path for path, data in files.items()
               if not (REPO / path).is_file() or (REPO / path).read_bytes() != data]
    owns_leftovers = any(path.startswith(KINDS_MATRIX + "/") for path in files)
    return changed, leftovers(files) if owns_leftovers else []


def write(files: Files, changed: list[str], extra: list[str], say: Callable[[str], None]) -> None:
    for path in changed:
        (REPO / path).parent.mkdir(parents=True, exist_ok=True)
        (REPO / path).write_bytes(files[path])
        say(f"wrote {path}")
    for path in extra:
        (REPO / path).unlink()
        say(f"removed {path}")
    for folder in sorted({(REPO / p).parent for p in extra}, reverse=True):
        for empty in (folder, folder.parent):
            if empty.is_dir() and not any(empty.iterdir()):
                empty.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write every file derived from the code.")
    parser.add_argument("--check", action="store_true", help="list stale files and exit 1; write nothing")
    args = parser.parse_args(argv)
    stale_paths: list[str] = []
    # The config first: the webhook configurations and the benchmark bodies load it from disk.
    for stage in (config_files, derived_files):
        files = stage()
        changed, extra = stale(files)
        if args.check:
            stale_paths += [f"stale: {p}" for p in changed] + [f"no longer generated: {p}" for p in extra]
        else:
            write(files, changed, extra, print)
    if stale_paths:
        print("\n".join(stale_paths))
        print(f"run `{COMMAND}` and commit the result")
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
