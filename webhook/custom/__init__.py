"""Admins' own validating rules (``customPolicies``), written in CEL as for ValidatingAdmissionPolicy.

``model`` is the config schema, ``celenv`` the CEL environment (variables and the Kubernetes
helpers), ``compile`` turns the config into compiled rules once at load, and ``evaluate`` runs
them on a workload view.  A pod-template rule is written once and runs on every pod template of
every kind in ``gpuguard.workloads.kinds.KINDS``: that is what Kyverno's autogen and VAP cannot do for
PyTorchJobs, JobSets or RayJobs.
"""
