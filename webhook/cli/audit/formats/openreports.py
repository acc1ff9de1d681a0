"""``--format openreports``: the same reports as ``policyreport``, in the OpenReports API (``openreports.io/v1alpha1``).

Kyverno writes OpenReports beside PolicyReports and plans to retire the latter; Policy Reporter reads both.  The
fields are the Policy WG's (results, summary, scope), the kinds ``Report`` (one per namespace) and
``ClusterReport``, and the producing engine is named once at the report level (``source: gpuguard``) as well as
on each result.
"""

from __future__ import annotations

from gpuguard.webhook.cli.audit.formats import policyreport
from gpuguard.webhook.reportapi import OPEN_REPORTS


class Writer(policyreport.Writer):
    """``policyreport.Writer`` in the OpenReports API."""

    API = OPEN_REPORTS
