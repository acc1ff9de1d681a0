"""``gpuguard scan``: the in-cluster background scan that keeps PolicyReports and cost metrics current.

Admission sees an object once; the scan says what breaks policy *now* (workloads admitted before
gpuguard, during an outage, before a policy changed, or by a trusted controller).  It is its own
command and Deployment so that its memory and any bug in it can never slow admission.

Modules, each with one job:

- ``report``: pure function from one workload's decision to its ``wgpolicyk8s.io/v1alpha2`` report;
- ``watch``: list (paginated) then watch (bookmarks, resume, re-list on 410) of one resource;
- ``index``: the workloads users write (not what controllers make from them), as compact JSON;
- ``writer``: creates, patches and deletes reports only when their content changed, rate-limited;
- ``lease``: a ``coordination.k8s.io/v1`` Lease so only one replica writes;
- ``metrics``: findings, GPU-hours a day at risk, accelerators, scan duration and lag;
- ``scanner``: the dirty set, debounced re-evaluation and the periodic resync;
- ``command``: the process.
"""
