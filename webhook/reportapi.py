"""The report APIs gpuguard writes: the Policy WG's ``wgpolicyk8s.io`` PolicyReports and OpenReports.

Kyverno now writes OpenReports (``openreports.io/v1alpha1``) beside PolicyReports and plans to retire the latter;
Policy Reporter reads both.  Their fields are the same (results, summary, scope); OpenReports names the producing
engine once at the report level too.  ``gpuguard audit -o policyreport|openreports`` and ``gpuguard scan
--report-api`` write either, from this one description.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportApi:
    """One report API: its group and version, and the namespaced and cluster-scoped kinds with their plurals."""

    group: str
    version: str
    kind: str
    cluster_kind: str
    plural: str
    cluster_plural: str
    source_field: bool = False  # the producing engine at the report level (OpenReports)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def kind_for(self, namespace: str | None) -> str:
        return self.kind if namespace else self.cluster_kind

    def path(self, namespace: str | None, name: str | None = None) -> str:
        """The collection (or one report) in the API: namespaced reports under their namespace."""
        base = f"/apis/{self.api_version}/namespaces/{namespace}/{self.plural}" if namespace \
            else f"/apis/{self.api_version}/{self.cluster_plural}"
        return f"{base}/{name}" if name else base

    def everywhere(self) -> tuple[str, str]:
        """Both collections across all namespaces (lists and watches)."""
        return f"/apis/{self.api_version}/{self.plural}", f"/apis/{self.api_version}/{self.cluster_plural}"


POLICY_REPORTS = ReportApi("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "ClusterPolicyReport", "policyreports",
                           "clusterpolicyreports")
OPEN_REPORTS = ReportApi("openreports.io", "v1alpha1", "Report", "ClusterReport", "reports", "clusterreports",
                         source_field=True)
# ``gpuguard scan --report-api NAME``
REPORT_APIS = {"policyreports": POLICY_REPORTS, "openreports": OPEN_REPORTS}
