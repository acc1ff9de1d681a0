"""One evaluation per create: the mutating review's pass answers the validating review too.

The apiserver sends a create to /mutate and then, with the same request uid, the mutated object to /validate.
Evaluated apart, the second review reads, classifies and walks again what the first just did.  Evaluated once
(mutate and validate, as ``gpuguard evaluate`` does: validation sees the mutated object), the decision is split
here into what each review answers; the server keeps the validating half for the object it returned
(``gpuguard.webhook.server.onepass``) and uses it only when /validate receives that very object.

The split is pure: the mutating half carries the patch, the changes and the mutating policies' own findings
(warn-mode mutations, Knative take-backs); the validating half carries the validating policies' findings and
nothing to patch.  Each half is allowed unless one of its own findings denies, as its review would be.
"""

from __future__ import annotations

from dataclasses import replace

from gpuguard.webhook.decision import Decision


def can_split(decision: Decision) -> bool:
    """Whether ``decision`` holds both halves as separate reviews would give them: a create judged in full.

    Errors, skips and invalid quantities are answered by the mutating review as they are (the apiserver stops
    there, or the validating review evaluates again): nothing of them is kept.
    """
    return (decision.validated_from is not None and not decision.error and not decision.skipped
            and not decision.invalid)


def mutating_half(decision: Decision) -> Decision:
    """What /mutate answers: the patch, the changes and the findings made before validation."""
    if decision.validated_from is None:
        return decision
    own = decision.violations[:decision.validated_from]
    return replace(decision, violations=own, allowed=not any(v.verdict == "deny" for v in own),
                   validated_from=None)


def validating_half(decision: Decision) -> Decision:
    """What /validate answers for the object the mutating half returned: its findings, no patch, no objects.

    The objects are dropped (a server keeps this half between the two reviews; its memory is bounded by what it
    keeps, not by the object's size).
    """
    assert decision.validated_from is not None
    own = decision.violations[decision.validated_from:]
    return replace(decision, violations=own, allowed=not any(v.verdict == "deny" for v in own), patch=[],
                   mutated_by=[], changes=[], original=None, mutated=None, validated_from=None)


def unchanged(kept: Decision, received: object) -> Decision:
    """What /mutate answers for an object it returned moments before (``kept``: that create's validating half):
    allowed, nothing to patch (gpuguard's mutations are idempotent), no findings (the first answer gave them)."""
    return replace(kept, violations=[], allowed=True, patch=[], mutated_by=[], changes=[], original=received,
                   mutated=received, validated_from=None)
