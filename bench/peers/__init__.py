"""Peers of gpuguard on the same apiserver: Kyverno, and the apiserver's own CEL admission policies."""
