"""certs/selfmanaged.py: the self-managed certificates' steps as pure decisions over time and the Secret."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509

from gpuguard.certs import selfmanaged as sm

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
LIFE = sm.Lifetimes(ca=dt.timedelta(hours=30), serving=dt.timedelta(hours=3), overlap=dt.timedelta(minutes=10))
HOSTS = sm.Hosts(("gpuguard", "gpuguard.gpuguard.svc"), ("127.0.0.1",))
NOBODY: frozenset[str] = frozenset()


def _created(now: dt.datetime = T0) -> sm.CertState:
    step = sm.decide(sm.CertState(), now, LIFE, HOSTS, NOBODY)
    assert step is not None and step.action == "create"
    return sm.apply(step, sm.CertState(), now, LIFE, HOSTS)


def _trust(*certs: x509.Certificate) -> frozenset[str]:
    return frozenset(sm.fingerprint(c) for c in certs)


def _roundtrip(state: sm.CertState) -> sm.CertState:
    data, annotations = sm.render(state)
    return sm.parse(data, {k: v for k, v in annotations.items() if v is not None})


def _step(state: sm.CertState, now: dt.datetime, trusted: frozenset[str]) -> tuple[str | None, sm.CertState]:
    step = sm.decide(state, now, LIFE, HOSTS, trusted)
    if step is None:
        return None, state
    return step.action, _roundtrip(sm.apply(step, state, now, LIFE, HOSTS))


def test_an_empty_secret_with_no_trusted_ca_is_created_with_a_ca_and_a_serving_certificate() -> None:
    state = _roundtrip(_created())
    assert state.signer is not None and state.serving is not None and state.serial == 1
    assert state.bundle() == (state.signer.cert,)
    assert sm.issued_by(state.serving.cert, state.signer.cert) and HOSTS.matches(state.serving.cert)
    assert state.serving.cert.not_valid_after_utc == T0 + LIFE.serving
    assert sm.decide(state, T0, LIFE, HOSTS, _trust(state.signer.cert)) is None


def test_an_empty_secret_while_webhooks_trust_some_ca_stages_a_new_ca_instead_of_serving_an_untrusted_one() -> None:
    other = _created().signer
    assert other is not None
    step = sm.decide(sm.CertState(), T0, LIFE, HOSTS, _trust(other.cert))
    assert step is not None and step.action == "stage"
    state = sm.apply(step, sm.CertState(), T0, LIFE, HOSTS)
    assert state.serving is None and state.next is not None and state.signer is None
    # Nothing to serve until the webhooks trust the new CA: then mark, wait the overlap, switch.
    assert sm.decide(state, T0, LIFE, HOSTS, _trust(other.cert)) is None
    action, state = _step(state, T0, _trust(state.next.cert))
    assert action == "mark"
    assert sm.decide(state, T0 + LIFE.overlap / 2, LIFE, HOSTS, _trust(state.next.cert)) is None
    action, state = _step(state, T0 + LIFE.overlap, _trust(state.next.cert))  # type: ignore[union-attr]
    assert action == "switch" and state.serving is not None and state.signer is not None


def test_the_serving_certificate_is_renewed_at_two_thirds_of_its_life_under_the_same_ca() -> None:
    state = _created()
    assert state.signer is not None and state.serving is not None
    trusted = _trust(state.signer.cert)
    assert sm.decide(state, T0 + LIFE.serving * 0.66, LIFE, HOSTS, trusted) is None
    action, renewed = _step(state, T0 + LIFE.serving * 0.67, trusted)
    assert action == "renew" and renewed.signer is not None and renewed.serving is not None
    assert renewed.signer.cert == state.signer.cert and renewed.serial == state.serial  # bundle unchanged
    assert renewed.serving.cert != state.serving.cert
    assert sm.issued_by(renewed.serving.cert, state.signer.cert)


@pytest.mark.parametrize("damage", ["no tls", "other hosts", "other ca"])
def test_a_missing_or_wrong_serving_certificate_is_reissued(damage: str) -> None:
    state = _created()
    assert state.signer is not None
    if damage == "no tls":
        state = sm.CertState(signer=state.signer, serial=1)
    elif damage == "other hosts":
        state = sm.apply(sm.Step("renew", "test"), state, T0, LIFE, sm.Hosts(("elsewhere",)))
    else:
        stranger = _created().serving
        state = sm.CertState(signer=state.signer, serving=stranger, serial=1)
    step = sm.decide(state, T0, LIFE, HOSTS, _trust(state.signer.cert))
    assert step is not None and step.action == "renew", step


def test_a_ca_rotation_trusts_the_new_ca_before_serving_from_it_and_drops_the_old_one_after() -> None:
    """The whole rotation, checking at every step that what is served chains to a CA the webhooks trust."""
    state = _created()
    old = state.signer
    assert old is not None
    webhooks = _trust(*state.bundle())  # what the replicas wrote into the webhook configurations
    now = T0 + LIFE.ca * 0.67
    seen = []
    for _ in range(20):
        action, state = _step(state, now, webhooks)
        assert state.serving is not None
        assert sm.fingerprint(next(c for c in state.bundle() if sm.issued_by(state.serving.cert, c))) in webhooks
        if action is None:
            now += LIFE.overlap / 2
            webhooks = _trust(*state.bundle())  # the next pass writes the bundle into the webhooks
            if not state.previous and state.next is None and seen and seen[-1] == "retire":
                break
            continue
        seen.append(action)
        if action in ("create", "stage", "retire"):
            webhooks = _trust(*state.bundle())
    # The serving certificate (3 h) expired long before 2/3 of the CA's 30 h: renewed first.
    assert seen == ["renew", "stage", "mark", "switch", "retire"]
    assert state.signer is not None and state.signer.cert != old.cert
    assert state.bundle() == (state.signer.cert,) and state.serial == 3


def test_the_switch_waits_for_every_webhook_to_trust_the_new_ca() -> None:
    state = _created()
    assert state.signer is not None
    action, fresh = _step(state, T0 + LIFE.ca * 0.7, _trust(state.signer.cert))
    assert action == "renew"  # the 3 h serving certificate first, then the CA
    action, staged = _step(fresh, T0 + LIFE.ca * 0.7, _trust(state.signer.cert))
    assert action == "stage" and staged.next is not None and staged.serial == 2
    # The webhooks still carry the old bundle only: no step (the serving cert stays the old CA's).
    later = T0 + LIFE.ca * 0.7 + LIFE.overlap * 5
    assert sm.decide(staged, later, LIFE, HOSTS, _trust(state.signer.cert)) is None
    # Trusted, marked, then trust lost again (configuration re-created): the mark is withdrawn.
    both = _trust(state.signer.cert, staged.next.cert)
    _, marked = _step(staged, later, both)
    assert marked.trusted_at == later
    action, unmarked = _step(marked, later + LIFE.overlap, _trust(state.signer.cert))
    assert action == "mark" and unmarked.trusted_at is None


def test_an_admin_annotation_forces_a_ca_rotation_and_is_consumed() -> None:
    state = _created()
    assert state.signer is not None
    data, annotations = sm.render(state)
    forced = sm.parse(data, {**{k: v for k, v in annotations.items() if v is not None}, sm.ROTATE: "now"})
    action, staged = _step(forced, T0, _trust(state.signer.cert))
    assert action == "stage" and not staged.rotate_requested
    assert sm.ROTATE not in {k for k, v in sm.render(staged)[1].items() if v is not None}


def test_an_expired_or_broken_signer_is_replaced_through_a_rotation_not_a_reset() -> None:
    state = _created()
    assert state.signer is not None
    trusted = _trust(state.signer.cert)
    action, _ = _step(state, T0 + LIFE.ca + dt.timedelta(seconds=1), trusted)
    assert action == "stage"
    data, annotations = sm.render(state)
    data[sm.SIGNER_KEY] = b"garbage"
    broken = sm.parse(data, {k: v for k, v in annotations.items() if v is not None})
    assert broken.signer is None and broken.problems and broken.previous == (state.signer.cert,)
    step = sm.decide(broken, T0, LIFE, HOSTS, trusted)
    assert step is not None and step.action == "stage"


def test_durations() -> None:
    assert sm.parse_duration("90d") == dt.timedelta(days=90)
    assert sm.parse_duration("1.5h") == dt.timedelta(minutes=90)
    assert sm.parse_duration("30") == dt.timedelta(seconds=30)
    with pytest.raises(ValueError, match="not a duration"):
        sm.parse_duration("a week")
    assert sm.Lifetimes(dt.timedelta(minutes=30), dt.timedelta(minutes=5), dt.timedelta(minutes=5)).problems()
    assert not sm.Lifetimes().problems()


# ---------------------------------------------------------------- the webhook configurations


def _configuration(name: str, hooks: int) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name, "resourceVersion": "7", "labels": {"a": "b"}},
            "webhooks": [{"name": f"h{i}.gpuguard.io", "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
                          "sideEffects": "None", "admissionReviewVersions": ["v1"]} for i in range(hooks)]}


def test_the_webhooks_are_written_with_the_bundle_once_and_never_with_an_older_serial() -> None:
    state = _created()
    template, skeleton = _configuration("gpuguard", 3), _configuration("gpuguard", 0)
    body = sm.desired_configuration(skeleton, template, state.bundle_pem(), state.serial)
    assert body is not None and body["metadata"]["resourceVersion"] == "7"  # compare-and-swap
    assert body["metadata"]["labels"] == {"a": "b"}
    assert [h["clientConfig"]["caBundle"] for h in body["webhooks"]] == [
        base64.b64encode(state.bundle_pem()).decode()] * 3
    assert sm.trusted_by_all([body]) == _trust(*state.bundle())
    # Stored (with whatever the apiserver defaults): nothing more to write.
    stored = {**body, "webhooks": [{**h, "matchPolicy": "Equivalent"} for h in body["webhooks"]]}
    assert sm.desired_configuration(stored, template, state.bundle_pem(), state.serial) is None
    # An older replica's view (a lower serial) never overwrites a newer bundle.
    assert sm.desired_configuration(stored, template, b"", state.serial - 1) is None
    # A new template (an upgrade's webhooks) is written with the same bundle.
    assert sm.desired_configuration(stored, _configuration("gpuguard", 4), state.bundle_pem(), state.serial)


def test_trust_is_what_every_webhook_of_every_configuration_shares() -> None:
    one, two = _created(), _created()
    assert one.signer is not None and two.signer is not None
    a = sm.desired_configuration(_configuration("x", 0), _configuration("x", 2), one.bundle_pem(), 1)
    b = sm.desired_configuration(_configuration("y", 0), _configuration("y", 2), two.bundle_pem(), 1)
    assert a is not None and b is not None
    assert sm.trusted_by_all([a]) == _trust(one.signer.cert)
    assert sm.trusted_by_all([a, b]) == frozenset()
    assert sm.trusted_by_all([_configuration("z", 0)]) == frozenset()
