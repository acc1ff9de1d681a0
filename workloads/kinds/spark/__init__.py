"""The Kubeflow Spark operator (``sparkoperator.k8s.io``): SparkApplication and ScheduledSparkApplication.

Classed as batch work (ETL, feature engineering, batch scoring): Spark recomputes lost partitions
from lineage rather than restoring checkpoints; a team training on Spark declares the class
``training``.  GPUs are asked for in driver/executor ``gpu`` fields or in sparkConf strings, which
CEL can't read the way ``kinds.spark.operator`` does: the webhook is called for every object.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spark import operator as spark
from gpuguard.workloads.kinds.spec import Creates, JobFields, KindSpec, Locate, Operator, TemplateRef
from gpuguard.workloads.paths import Path, get_path

# Kubeflow Spark operator (namespace spark-operator; chart v2 and v1 service accounts): the driver pod
# spark-submit creates, and a ScheduledSparkApplication's runs.  Executor pods are created by the driver
# under the application's own service account, so they are judged as user pods.
SPARK_OPERATOR = Operator("spark-operator", ("system:serviceaccount:spark-operator:spark-operator-controller",
                                             "system:serviceaccount:spark-operator:spark-operator"))


def _spark_at(prefix: Path) -> Locate:
    """A SparkApplication spec at ``prefix``: its ``driver`` (one pod) and ``executor`` (``instances``
    pods, or up to dynamic allocation's ``maxExecutors``), each spec being a pod and its main
    container at once (``shape="spark"``), sharing the application's ``volumes``."""

    def locate(obj: dict) -> Iterator[TemplateRef]:
        app = get_path(obj, prefix)
        if not isinstance(app, dict):
            return
        for role in ("driver", "executor"):
            if not isinstance(app.get(role), dict):
                continue
            replicas, unbounded = (1, False) if role == "driver" else spark.executors(app)
            base = prefix + (role,)
            # The role spec carries the pod's labels and annotations itself, so it is its own metadata.
            yield TemplateRef(role, base, base, replicas, container_lists=(("initContainers",), ("sidecars",)),
                              volume_paths=(prefix + ("volumes",),), shape="spark",
                              unbounded=prefix + ("dynamicAllocation", "maxExecutors") if unbounded else None)

    return locate


def _spark_kind(kind: str, plural: str, prefix: Path, creates: tuple[str, ...]) -> KindSpec:
    """A Spark operator kind holding a SparkApplicationSpec at ``prefix``."""
    return KindSpec("sparkoperator.k8s.io", kind, plural, ("v1beta2",), "batch-inference", _spark_at(prefix),
                    JobFields(ttl=prefix + ("timeToLiveSeconds",)),
                    priority_class_paths=(prefix + ("batchSchedulerOptions", "priorityClassName"),),
                    controllers=(Creates(SPARK_OPERATOR, creates),))


SPARKAPPLICATION = _spark_kind("SparkApplication", "sparkapplications", ("spec",), ("Pod",))
SCHEDULEDSPARKAPPLICATION = _spark_kind("ScheduledSparkApplication", "scheduledsparkapplications",
                                        ("spec", "template"), ("sparkoperator.k8s.io/SparkApplication",))
