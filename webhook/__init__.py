"""gpuguard: a Kubernetes admission webhook that keeps ML workloads from burning GPU budget."""

__version__ = "0.1.0"
