"""The AdmissionReview envelope (``admission.k8s.io/v1``): parsing the request, building the response.

Only the envelope is modelled with pydantic.  ``object``/``oldObject`` are typed ``Any`` so
pydantic passes the parsed dicts through untouched — validating or copying a 1 MiB pod template
on every request would cost more than the policies themselves, and the engine already reads
objects defensively.  ``userInfo.extra`` is deliberately not modelled: it can carry
credentials from authenticating proxies and nothing in gpuguard needs it.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from gpuguard.webhook.decision import Change, Decision, Violation

API_VERSION = "admission.k8s.io/v1"

# Limits of what the apiserver passes on: warnings travel as HTTP headers (aim 120 characters,
# over 256 each may be truncated, the whole set is capped near 4096).
WARNING_SOFT_LIMIT = 120
WARNING_HARD_LIMIT = 256
# A cut denial's reason, on its own "  why:" line: that line fits kubectl's 256 characters too.
WHY_PREFIX = "  why: "
DENIAL_REASON_LIMIT = 256 - len(WHY_PREFIX)
REASON_KEPT = 60  # characters of a long warning's reason kept beside its fix (envelope.fix_first)
WARNINGS_TOTAL_LIMIT = 4000
AUDIT_VALUE_LIMIT = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# The apiserver stores an audit annotation as "<webhook name>/<key>" and rejects keys that then
# have two slashes, so ours is a bare qualified name: [A-Za-z0-9][-A-Za-z0-9_.]*, <= 63 chars.
_AUDIT_KEY_BAD = re.compile(r"[^-A-Za-z0-9_.]")
# How deep a review body may nest (the review and request envelopes included): as deep as orjson
# can serialise (it stops at 255 levels).  Real objects stay under 20 levels; the engine
# serialises objects with orjson, so a deeper object would fail half-way through a review
# (and failureMode open would admit it unmutated): it is refused up front instead.
MAX_DEPTH = 254
GZIP_MAGIC = b"\x1f\x8b"


class ReviewError(Exception):
    """The body is not an AdmissionReview we can answer: HTTP ``status`` with ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class GroupVersionKind(_Envelope):
    group: str = ""
    version: str = ""
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class GroupVersionResource(_Envelope):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(_Envelope):
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()

    @field_validator("groups", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return () if value is None else value


class AdmissionRequest(_Envelope):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource = Field(default_factory=GroupVersionResource)
    sub_resource: str | None = Field(default=None, alias="subResource")
    name: str | None = None
    namespace: str | None = None
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default_factory=UserInfo, alias="userInfo")
    object: Any = None
    old_object: Any = Field(default=None, alias="oldObject")
    # Strict: the apiserver sends a JSON boolean; "yes" or 1 is a malformed review, not a dry run.
    dry_run: StrictBool = Field(default=False, alias="dryRun")

    @field_validator("dry_run", mode="before")
    @classmethod
    def _null_dry_run(cls, value: Any) -> Any:
        return False if value is None else value

    @field_validator("sub_resource", "name", "namespace", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="after")
    def _object_is_a_mapping(self) -> AdmissionRequest:
        # The apiserver always sends the object of a CREATE or UPDATE; anything else is a broken
        # review to refuse (400), not an object for the engine to fail on.
        if self.operation in ("CREATE", "UPDATE") and not isinstance(self.object, dict):
            raise ValueError(f"object must be a JSON object for {self.operation}")
        return self

    def object_name(self) -> str | None:
        """``request.name`` or, for generateName creates, the object's name/generateName."""
        if self.name:
            return self.name
        meta = self.object.get("metadata") if isinstance(self.object, dict) else None
        if isinstance(meta, dict):
            for key in ("name", "generateName"):
                if isinstance(meta.get(key), str) and meta[key]:
                    return meta[key]
        return None


class AdmissionReview(_Envelope):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "not an admission.k8s.io/v1 AdmissionReview: " + "; ".join(parts)


def depth_exceeds(data: Any) -> bool:
    """Whether parsed JSON ``data`` nests deeper than ``MAX_DEPTH`` levels.

    Asked of orjson itself: serialising fails exactly past its limit, in C, in microseconds
    (6 us for a GPU Job, 0.2 ms for 60 KB), where a Python walk over every node cost 40x more.
    Data from ``orjson.loads`` has nothing else orjson could refuse to serialise.
    """
    try:
        orjson.dumps(data)
    except orjson.JSONEncodeError:
        return True
    return False


def parse_review(body: bytes) -> AdmissionRequest:
    """Parse a request body into the AdmissionRequest; :class:`ReviewError` (400) when it is not one.

    The nesting depth is checked right after parsing, before the envelope is validated or the
    engine sees the object.
    """
    if body.startswith(GZIP_MAGIC):
        raise ReviewError(400, "body is gzip-compressed data; send the AdmissionReview as plain JSON")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion" in str(exc).lower():
            raise ReviewError(400, f"body nests deeper than {MAX_DEPTH} levels") from None
        raise ReviewError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ReviewError(400, "body is not a JSON object (expected an AdmissionReview)")
    if depth_exceeds(data):
        raise ReviewError(400, f"body nests deeper than {MAX_DEPTH} levels")
    try:
        return AdmissionReview.model_validate(data).request
    except ValidationError as exc:
        raise ReviewError(400, _describe(exc)) from None


# ---------------------------------------------------------------- response


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def finding_line(violation: Violation, soft_limit: int = WARNING_SOFT_LIMIT, *, keep_path: bool = False) -> str:
    """A warning or a denial's line as kubectl prints it: whole, one line, at most 256 characters, never
    without its fix (a warning past 256 characters is cut by kubectl; a denial is held to the same line so the
    two read alike and a long one keeps its fix in view).

    The full sentence when it is within ``soft_limit``; past it the field path goes (the audit CLI shows it);
    past the hard limit the fix comes first, whole, then as much of the reason as fits and the command that
    shows the rest, so that a cut never takes what the user has to do.  ``keep_path`` (denials,
    ``denial_message``): the field path stays in every form, since it says which field to fix.
    """
    full = _one_line(violation.text)
    if len(full) <= soft_limit:
        return full
    if keep_path:
        return full if len(full) <= WARNING_HARD_LIMIT else fix_first(violation, _where(violation))
    short = _one_line(f"[{violation.policy}] {violation.message}; {violation.fix}")
    if len(short) <= WARNING_HARD_LIMIT:
        return short if len(short) < len(full) else full
    return fix_first(violation)


def _where(violation: Violation) -> str:
    """The field a long denial names: as much of ``path (target)`` as leaves its fix's first alternative whole
    (then the path alone, then its start)."""
    first = _one_line(violation.fix).rstrip(".").split("; ")[0]
    candidates = [f"{violation.path} ({violation.target})" if violation.target else violation.path,
                  violation.path, truncate(violation.path, 60)]
    for where in candidates:
        line = fix_first(violation, _one_line(where))
        if first in line:
            return _one_line(where)
    return _one_line(candidates[-1])


def fix_first(violation: Violation, where: str = "") -> str:
    """``[policy] fix: …. Why: …; more: kubectl gpuguard explain POLICY`` within the hard limit (``[policy] WHERE:
    fix: …`` where the field is given).

    A fix of several alternatives (``a; or, b; if …, c``) that does not fit keeps its first alternatives whole,
    as many as fit (within the first, whole items of its list: ``add a Kueue queue label (…), …``); the rest
    is one command away.
    """
    more = f"; more: kubectl gpuguard explain {violation.policy}"
    prefix = f"[{violation.policy}] {where}: fix: " if where else f"[{violation.policy}] fix: "
    message = _one_line(violation.message)
    # room kept for the start of the reason, which says what is wrong ("this Deployment is not in gpuguard's
    # shape"): a long fix gives up its later alternatives first
    reason = len(" Why: ") + min(REASON_KEPT, len(message))
    whole_fix = _one_line(violation.fix).rstrip(".")
    room = WARNING_HARD_LIMIT - len(prefix) - len(more) - 1
    fix = _fitted_fix(whole_fix, room - reason)
    if whole_fix.split("; ")[0] not in fix:  # the first alternative goes whole before any reason
        fix = _fitted_fix(whole_fix, room)
    head = prefix + fix + ("" if fix.endswith("…") else ".")
    room = WARNING_HARD_LIMIT - len(head) - len(more) - len(" Why: ")
    if room < 24:  # no room left for a reason worth reading: the fix and the command
        return head + more
    return f"{head} Why: {truncate(message, room)}{more}"


def _fitted_fix(fix: str, room: int) -> str:
    """The longest run of whole leading alternatives of ``fix`` within ``room`` (``…`` marks what was left)."""
    if len(fix) <= room:
        return fix
    for separator in ("; ", ", "):
        parts = fix.split(separator)
        kept = ""
        for part in parts:
            longer = f"{kept}{separator}{part}" if kept else part
            if len(longer) + 1 > room:
                break
            kept = longer
        if kept:
            return kept + "…"
        fix = parts[0]  # the first alternative alone is too long: its list items next
    return truncate(fix, room)


def change_warning(change: Change) -> str:
    """``gpuguard [job-ttl] capped spec.ttlSecondsAfterFinished on the Job: 2592000 -> 604800 (…)``."""
    return truncate(_one_line(f"gpuguard {change.text}"), WARNING_HARD_LIMIT)


def cap_warnings(texts: list[str]) -> list[str]:
    """Keep whole warnings while the total stays under the header budget; say how many were cut."""
    kept: list[str] = []
    used = 0
    for i, text in enumerate(texts):
        if used + len(text) > WARNINGS_TOTAL_LIMIT - 80:
            kept.append(f"gpuguard: {len(texts) - i} more warning(s) not shown; run `gpuguard audit` for all")
            break
        kept.append(text)
        used += len(text)
    return kept


def audit_key(policy: str) -> str:
    key = _AUDIT_KEY_BAD.sub("-", policy).strip("-_.") or "policy"
    return key[:63]


def audit_annotations(violations: list[Violation]) -> dict[str, str]:
    """One annotation per policy (messages of the same policy joined), each value capped."""
    out: dict[str, str] = {}
    for v in violations:
        key = audit_key(v.policy)
        text = _one_line(v.text)
        out[key] = f"{out[key]} | {text}" if key in out else text
    return {k: truncate(v, AUDIT_VALUE_LIMIT) for k, v in out.items()}


def denial_message(kind: str, denials: list[Violation]) -> str:
    """The 403's message: a header, then one line per denial in the warnings' form (``finding_line``).

    A denial cut to its fix-first line is followed by its reason on an indented ``why:`` line (itself within
    256 characters; ``more: kubectl gpuguard explain`` on the first line has the rest): the reason is the
    evidence — "a PodGroup of one", "it can never start whole" — that an ML engineer needs to believe the fix,
    and every line of the message fits what kubectl shows of a line, fix first.
    """
    header = f"gpuguard denied this {kind or 'object'}: {len(denials)} policy violation(s)"
    lines = [header]
    for violation in denials:
        line = finding_line(violation, keep_path=True)
        lines.append(line)
        reason = _one_line(violation.message)
        if reason not in line:
            lines.append(WHY_PREFIX + truncate(reason, DENIAL_REASON_LIMIT))
    return "\n".join(lines)


def review(uid: str, response: dict[str, Any]) -> dict[str, Any]:
    """Wrap a response in the AdmissionReview envelope the apiserver expects back."""
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": {"uid": uid, **response}}


def allow(uid: str, warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"allowed": True}
    if warnings:
        response["warnings"] = cap_warnings([truncate(_one_line(w), WARNING_HARD_LIMIT) for w in warnings])
    return review(uid, response)


def deny(uid: str, code: int, reason: str, message: str) -> dict[str, Any]:
    status = {"status": "Failure", "code": code, "reason": reason, "message": message}
    return review(uid, {"allowed": False, "status": status})


def from_decision(uid: str, kind: str, decision: Decision, *, with_patch: bool) -> dict[str, Any]:
    """The AdmissionReview answering ``decision``: patch, 403 status, warnings, audit annotations."""
    denials = decision.denials
    allowed = decision.allowed and not denials
    response: dict[str, Any] = {"allowed": allowed}
    if allowed and with_patch and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    if not allowed:
        code, reason = (422, "Invalid") if decision.invalid else (403, "Forbidden")
        response["status"] = {"status": "Failure", "code": code, "reason": reason,
                              "message": denial_message(kind, denials)}
    warnings = [finding_line(v) for v in decision.warnings]
    if allowed and with_patch and decision.patch:
        # What gpuguard changed of the user's own values: without it a capped TTL is a silent drift from Git.
        warnings.extend(change_warning(c) for c in decision.changes)
    if warnings:
        response["warnings"] = cap_warnings(warnings)
    if decision.audits:
        response["auditAnnotations"] = audit_annotations(decision.audits)
    return review(uid, response)
