"""The part of gpuguard's policy set that the apiserver's own CEL policies can express.

MutatingAdmissionPolicy (``admissionregistration.k8s.io/v1alpha1`` on 1.33: feature gate
``MutatingAdmissionPolicy`` and ``--runtime-config``) and ValidatingAdmissionPolicy (v1) run inside
kube-apiserver: no process, no TLS hop.  What fits in CEL here, for Pods and Jobs:

* mutating: gpu-tolerations (JSON patch, guarded by a "not yet tolerated" match condition so the
  IfNeeded reinvocation does not add it twice), priority-class (apply configuration, dropping the
  Priority plugin's stale ``spec.priority``), job-ttl and job-limits defaults (apply configuration);
* validating: checkpoint-volume (PVC mount or object-store CHECKPOINT_URI) and gpu-request-shape
  (request equals limit, at most 8 GPUs per pod).

Not expressed: per-GPU sizing (CEL has no quantity multiplication), /dev/shm (needs the
tolerations-style guards per container), node affinity into every term, warnings per GPU.
Why a generator and not YAML files: a Pod and a Job keep the pod spec at different paths and
CEL is type-checked per resource, so each rule exists once per kind.
"""

from __future__ import annotations

from typing import Any

FEATURE_ARGS = ("--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1alpha1=true")
EXCLUDED = ["kube-system", "kube-node-lease", "kube-public", "gpuguard", "kyverno"]
_KINDS = {"pod": ("", "pods", "object.spec", "/spec"),
          "job": ("batch", "jobs", "object.spec.template.spec", "/spec/template/spec")}
_GPU = "{spec}.containers.exists(c, has(c.resources) && has(c.resources.limits) && " \
       "'nvidia.com/gpu' in c.resources.limits)"
_TOLERATED = "has({spec}.tolerations) && {spec}.tolerations.exists(t, " \
             "(has(t.key) && t.key == 'nvidia.com/gpu') || (!has(t.key) && has(t.operator) && t.operator == 'Exists'))"
_CHECKPOINT = """
{spec}.containers.all(c,
  !(has(c.resources) && has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits) ||
  (has(c.env) && c.env.exists(e, e.name == 'CHECKPOINT_URI' && has(e.value) &&
     ['s3://', 'gs://', 'az://'].exists(p, e.value.startsWith(p)))) ||
  (has(c.volumeMounts) && has({spec}.volumes) && c.volumeMounts.exists(m,
     {spec}.volumes.exists(v, v.name == m.name && has(v.persistentVolumeClaim)))))
""".strip()
_SHAPE = """
{spec}.containers.all(c, !has(c.resources) || !has(c.resources.requests) ||
  !('nvidia.com/gpu' in c.resources.requests) ||
  (has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits &&
   string(c.resources.requests['nvidia.com/gpu']) == string(c.resources.limits['nvidia.com/gpu'])))
""".strip()
_PER_NODE = "{spec}.containers.map(c, has(c.resources) && has(c.resources.limits) && " \
            "'nvidia.com/gpu' in c.resources.limits ? int(string(c.resources.limits['nvidia.com/gpu'])) : 0)" \
            ".sum() <= 8"


def _rules(group: str, resource: str) -> dict[str, Any]:
    return {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                               "resources": [resource]}]}


def _binding(kind: str, name: str, extra: dict[str, Any]) -> dict[str, Any]:
    api = "admissionregistration.k8s.io/v1alpha1" if kind.startswith("Mutating") else "admissionregistration.k8s.io/v1"
    return {"apiVersion": api, "kind": f"{kind}Binding", "metadata": {"name": name},
            "spec": {"policyName": name, **extra,
                     "matchResources": {"namespaceSelector": {"matchExpressions": [{
                         "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXCLUDED}]}}}}


def _map(name: str, group: str, resource: str, conditions: list[tuple[str, str]],
         mutation: dict[str, Any]) -> list[dict[str, Any]]:
    policy = {"apiVersion": "admissionregistration.k8s.io/v1alpha1", "kind": "MutatingAdmissionPolicy",
              "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
                       "matchConstraints": _rules(group, resource),
                       "matchConditions": [{"name": n, "expression": e} for n, e in conditions],
                       "mutations": [mutation]}}
    return [policy, _binding("MutatingAdmissionPolicy", name, {})]


def _vap(name: str, group: str, resource: str, validations: list[tuple[str, str]]) -> list[dict[str, Any]]:
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail", "matchConstraints": _rules(group, resource),
                       "validations": [{"expression": e, "message": m} for e, m in validations]}}
    return [policy, _binding("ValidatingAdmissionPolicy", name, {"validationActions": ["Deny"]})]


def objects() -> list[dict[str, Any]]:
    """Every MutatingAdmissionPolicy, ValidatingAdmissionPolicy and binding of the ``map+vap`` set."""
    out: list[dict[str, Any]] = []
    for kind, (group, resource, spec, path) in _KINDS.items():
        gpu = _GPU.format(spec=spec)
        toleration = ("Object" + path.replace("/", ".") +
                      ".tolerations{key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule'}")
        # Two policies, not one conditional JSON patch whose value is the new list: on 1.33 a JSONPatch
        # value that is a list of typed objects ([Object...tolerations{...}]) panics the apiserver
        # (reflect.Set: *structpb.Struct is not assignable to *structpb.Value; the connection drops), and
        # an apply configuration may not set the atomic tolerations list.  So: add an empty list, then
        # append to it.
        add = f"JSONPatch{{op: 'add', path: '{path}/tolerations/-', value: {toleration}}}"
        out += _map(f"bench-gpu-tolerations-{kind}", group, resource,
                    [("gpu", gpu), ("has-tolerations", f"has({spec}.tolerations)"),
                     ("not-yet-tolerated", f"!({_TOLERATED.format(spec=spec)})")],
                    {"patchType": "JSONPatch", "jsonPatch": {"expression": f"[{add}]"}})
        out += _map(f"bench-gpu-tolerations-first-{kind}", group, resource,
                    [("gpu", gpu), ("no-tolerations", f"!has({spec}.tolerations)")],
                    {"patchType": "JSONPatch", "jsonPatch": {"expression": (
                        f"[JSONPatch{{op: 'add', path: '{path}/tolerations', value: []}}, {add}]")}})
        # priority-class: a Pod has spec.priority from the Priority plugin already; drop it with the class.
        drop = (f"(has({spec}.priority) ? [JSONPatch{{op: 'remove', path: '{path}/priority'}}] : []) + "
                f"(has({spec}.preemptionPolicy) ? [JSONPatch{{op: 'remove', path: '{path}/preemptionPolicy'}}] : [])")
        out += _map(f"bench-priority-class-{kind}", group, resource,
                    [("gpu", gpu), ("no-class", f"!has({spec}.priorityClassName)")],
                    {"patchType": "JSONPatch", "jsonPatch": {"expression": (
                        f"[JSONPatch{{op: 'add', path: '{path}/priorityClassName', value: 'training-standard'}}]"
                        f" + {drop}")}})
        out += _vap(f"bench-checks-{kind}", group, resource, [
            (_CHECKPOINT.format(spec=spec), "[checkpoint-volume] GPU training containers must mount a "
             "persistentVolumeClaim or set CHECKPOINT_URI to an object store"),
            (_SHAPE.format(spec=spec), "[gpu-request-shape] a GPU request must equal its limit"),
            (_PER_NODE.format(spec=spec), "[gpu-request-shape] more GPUs than the largest node has (8)"),
        ])
    job_spec = _KINDS["job"][2]
    out += _map("bench-job-defaults", "batch", "jobs",
                [("gpu", _GPU.format(spec=job_spec)),
                 ("missing", "!has(object.spec.ttlSecondsAfterFinished) || !has(object.spec.activeDeadlineSeconds)")],
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
                    "Object{spec: Object.spec{"
                    "ttlSecondsAfterFinished: has(object.spec.ttlSecondsAfterFinished) ? "
                    "object.spec.ttlSecondsAfterFinished : 86400, "
                    "activeDeadlineSeconds: has(object.spec.activeDeadlineSeconds) ? "
                    "object.spec.activeDeadlineSeconds : 86400, "
                    "backoffLimit: object.spec.backoffLimit == 6 ? 3 : object.spec.backoffLimit}}")}})
    return out
