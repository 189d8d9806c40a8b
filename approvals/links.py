"""Decide-from-anywhere links (issue 18, B14): the approval email and webhook carry a signed,
single-use link to approve or reject one request.

A link only opens a confirmation page for a logged-in approver; the decision is the POST of
that page, through the same door as the review page (``runs.approval_outcomes``), so every
check of a decision (who, the typed confirmation, the digest, the deadline) still holds.

The token is Django's signing (HMAC with ``SECRET_KEY``, salted for links) of five values:
the request's id, the decision, the request's digest, the link's expiry (never later than
the request's) and a random nonce. It never holds the diff, a path or the request's text:
a link is pasted into chats and pagers, and its payload is only base64. The nonce makes each
link its own (each approver's email gets fresh ones) and is what a use records.
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.core import signing
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from .fingerprint import changes_since_asked
from .models import ApprovalLinkUse, ApprovalRequest
from .outcomes import AlreadyDecided, Decided

SALT = "harness-console.approvals.link"
DECISIONS: dict[str, str] = {"a": "approve", "r": "reject"}
# A request with no deadline (none is made so today) still gets links that end.
LINK_MAX_AGE = datetime.timedelta(hours=24)

LinkState = Literal["valid", "bad_signature", "expired", "used", "decided", "changed"]


@dataclass(frozen=True)
class LinkClaim:
    """What a token says, once its signature holds."""

    approval_id: str
    decision: str  # approve | reject
    digest: str
    expires: int  # unix seconds
    nonce: str

    @property
    def nonce_hash(self) -> str:
        return hashlib.sha256(self.nonce.encode()).hexdigest()


@dataclass(frozen=True)
class LinkReading:
    """A link read now: its state, the sentence its page says, and what it names (None
    when the signature does not hold or the request is gone)."""

    state: LinkState
    message: str
    claim: LinkClaim | None = None
    approval: ApprovalRequest | None = None

    @property
    def valid(self) -> bool:
        return self.state == "valid"


class LinkRefused(Exception):
    """The link cannot decide (any more): its reading says why."""

    def __init__(self, reading: LinkReading) -> None:
        super().__init__(reading.message)
        self.reading = reading


def link_token_make(
    *, approval: ApprovalRequest, decision: str, now: datetime.datetime | None = None
) -> str:
    """A fresh link token to ``decision`` (approve | reject) this request."""
    code = next(code for code, name in DECISIONS.items() if name == decision)
    now = now or timezone.now()
    expires = approval.expires_at or now + LINK_MAX_AGE
    payload = {
        "a": str(approval.pk),
        "d": code,
        "g": approval.digest,
        "e": int(expires.timestamp()),  # rounded down: never outlives the request
        "n": secrets.token_urlsafe(12),
    }
    return signing.dumps(payload, salt=SALT, compress=False)


def link_claim(token: str) -> LinkClaim | None:
    """The token's claim if its signature holds and its shape is ours, else None."""
    try:
        payload = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        return None
    if not isinstance(payload, dict) or set(payload) != {"a", "d", "g", "e", "n"}:
        return None
    strings = all(isinstance(payload[k], str) for k in ("a", "d", "g", "n"))
    if not strings or not isinstance(payload["e"], int) or payload["d"] not in DECISIONS:
        return None
    return LinkClaim(
        payload["a"], DECISIONS[payload["d"]], payload["g"], payload["e"], payload["n"]
    )


def link_read(*, token: str, now: datetime.datetime | None = None) -> LinkReading:
    """What a link would do now, or why it cannot, in this order:

    1. the signature does not hold, or the request is gone: ``bad_signature``;
    2. the link was used: ``used``;
    3. the link's or the request's deadline passed: ``expired``;
    4. the request is no longer pending: ``decided`` (``changed`` when it was invalidated);
    5. the request's digest is not the link's, or a file or the policy changed since it
       was asked (what the review page says): ``changed``;
    6. otherwise ``valid``.
    """
    now = now or timezone.now()
    claim = link_claim(token)
    approval = _approval(claim.approval_id) if claim else None
    if claim is None or approval is None:
        return LinkReading(
            "bad_signature",
            "This link is not one this console made, or it was altered: nothing can be "
            "decided with it.",
        )
    if used := ApprovalLinkUse.objects.filter(nonce_hash=claim.nonce_hash).first():
        return LinkReading(
            "used",
            f"This link was used already, by {used.user.get_username()} at "
            f"{used.used_at:%Y-%m-%d %H:%M:%S} UTC ({used.decision}). A link decides once.",
            claim,
            approval,
        )
    refusal = _state_refusal(claim, approval, now)
    if refusal is not None:
        state, message = refusal
        return LinkReading(state, message, claim, approval)
    return LinkReading("valid", f"This link will {claim.decision} the request.", claim, approval)


def _state_refusal(
    claim: LinkClaim, approval: ApprovalRequest, now: datetime.datetime
) -> tuple[LinkState, str] | None:
    request_past = approval.expires_at is not None and approval.expires_at <= now
    if approval.status == ApprovalRequest.Status.EXPIRED or (approval.is_pending and request_past):
        return "expired", "This link expired with its request: nobody can decide it any more."
    if approval.is_pending and claim.expires <= now.timestamp():  # made with an older deadline
        when = datetime.datetime.fromtimestamp(claim.expires, datetime.UTC)
        return "expired", (
            f"This link expired at {when:%Y-%m-%d %H:%M} UTC: it can no longer decide. The "
            "request is still pending: decide it on its review page."
        )
    if approval.status == ApprovalRequest.Status.INVALIDATED:
        why = approval.status_reason or "what it asked about changed"
        return (
            "changed",
            f"This request changed since the link was sent ({why}); it was asked again.",
        )
    if not approval.is_pending:
        return "decided", _decided_sentence(approval)
    if claim.digest != approval.digest:
        return "changed", "This request is not the one the link was made for."
    if changes := changes_since_asked(approval):
        return "changed", f"This request changed since it was asked: {'; '.join(changes)}."
    return None


def _decided_sentence(approval: ApprovalRequest) -> str:
    status = approval.status  # approved, rejected, cancelled
    if approval.decided_by is not None:
        return f"This request was {status} already, by {approval.decided_by.get_username()}."
    reason = f" ({approval.status_reason})" if approval.status_reason else ""
    return f"This request was {status} already{reason}."


def link_decide(
    *,
    token: str,
    user: Any,
    decide: Callable[..., Decided],
    comment: str = "",
    confirm: str = "",
) -> Decided:
    """Decide with a link: read it again, then record its use and the decision in one
    transaction. ``decide`` is the run side's door (``runs.approval_outcomes.
    approval_decide``: approvals never imports the run), called with the link's digest so
    a request that changed is refused.

    1. A link that is not valid now raises :class:`LinkRefused`.
    2. The use row goes first, in a savepoint: a concurrent use of the same link waits on
       its unique nonce and is refused once this one commits (:class:`LinkRefused`).
    3. A decision that raises (not allowed, a missing reason or typed path: the caller shows
       it) rolls the use back with it: the link still works.
    4. A decision refused as taken already (someone else, or the deadline, first) keeps
       what it recorded (an expiry stands) and drops the use; ``AlreadyDecided`` is raised.
    """
    reading = link_read(token=token)
    if not reading.valid or reading.claim is None or reading.approval is None:
        raise LinkRefused(reading)
    claim, approval = reading.claim, reading.approval
    refused: AlreadyDecided | None = None
    outcome: Decided | None = None
    with transaction.atomic():
        try:
            with transaction.atomic():
                use = ApprovalLinkUse.objects.create(
                    nonce_hash=claim.nonce_hash,
                    approval=approval,
                    decision=claim.decision,
                    user=user,
                )
        except IntegrityError:
            raise LinkRefused(link_read(token=token)) from None
        try:
            outcome = decide(
                approval=approval,
                user=user,
                decision=claim.decision,
                comment=comment,
                confirm=confirm,
                digest=claim.digest,
            )
        except AlreadyDecided as error:
            ApprovalLinkUse.objects.filter(pk=use.pk).delete()
            refused = error
    if refused is not None or outcome is None:
        raise refused or AssertionError("a decision either returns or raises")
    return outcome


def _approval(approval_id: str) -> ApprovalRequest | None:
    try:
        return (
            ApprovalRequest.objects.select_related(
                "run__agent", "run__requester", "run__workspace", "decided_by"
            )
            .defer("run__loop")
            .filter(pk=approval_id)
            .first()
        )
    except ValidationError:  # not a UUID: only a token signed with a leaked key says so
        return None
