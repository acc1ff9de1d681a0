"""The one door to the Kubernetes API: every other package reaches the API through ``gpuguard.kubeapi.client``.

Kept apart from ``webhook``, ``certs`` and ``workloads`` so that each of them can use it
without importing the others, and so that "which credentials, in which order" is decided
once (an import-linter contract keeps ``kubernetes`` out of every other module).
"""
