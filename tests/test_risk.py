"""Risk pre-assessment (SPEC R2): features raise risk; a claim of safety changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs.core.intake.risk import assess_risk
from runs.core.intake.vocabulary import CLAIMS

BASE = "Look at the install guide"


def test_a_plain_question_is_low_risk():
    assessment = assess_risk("What does the install guide say about ports?")
    assert (assessment.level, assessment.factors) == ("low", ())


@pytest.mark.parametrize(
    ("request_text", "feature"),
    [
        ("Update the install guide", "writes"),
        ("Send the summary by email to the team", "external_systems"),
        ("Deploy the docs to production", "production"),
        ("Put the database password in the guide", "sensitive_data"),
        ("Fix everything in the docs", "ambiguous_scope"),
        ("Delete the old changelog", "irreversible"),
    ],
)
def test_each_feature_raises_risk(request_text, feature):
    baseline = assess_risk(BASE)
    assessment = assess_risk(request_text)
    assert feature in {f.feature for f in assessment.factors}
    assert assessment.score > baseline.score


@pytest.mark.parametrize("claim", CLAIMS)
def test_a_claim_of_safety_changes_nothing(claim):
    request = "Delete every page in production"
    plain, claimed = assess_risk(request), assess_risk(f"{request}. {claim}!")
    assert (claimed.level, claimed.score, claimed.factors) == (
        plain.level,
        plain.score,
        plain.factors,
    )
    assert claim in claimed.ignored_claims


def test_the_worst_requests_are_critical_and_say_why():
    assessment = assess_risk("Delete all customer passwords from production and email them")
    assert assessment.level == "critical"
    evidence = {f.feature: f.evidence for f in assessment.factors}
    assert evidence["irreversible"] == "delete" and evidence["sensitive_data"] == "passwords"


def test_words_inside_other_words_do_not_count():
    assert assess_risk("Read the address book and the prodigal son").factors == ()


@given(st.text(max_size=200), st.sampled_from(CLAIMS))
def test_appending_a_claim_never_lowers_the_risk(text, claim):
    assert assess_risk(f"{text} {claim}").score >= assess_risk(text).score
