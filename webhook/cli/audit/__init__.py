"""``gpuguard audit``: what the webhook would change and reject, for manifests and live clusters.

The audit never re-implements a policy: it reads objects (``inputs`` for files and stdin,
``cluster`` for a live cluster), hands each to the same engine the webhook uses (``run``),
and renders the decisions (``formats``).  ``cost`` turns findings into an estimate of the
GPU money they put at risk.
"""
