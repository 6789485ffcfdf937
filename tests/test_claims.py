"""Every number the docs and the README quote from a stored result still matches it
(tests/doc_claims.py), and the check fails when either side moves."""

from __future__ import annotations

import copy
from pathlib import Path

import doc_claims as check_claims
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("claim", check_claims.CLAIMS,
                         ids=lambda c: f"{c.doc}: {c.quoted[:60]}")
def test_the_quoted_number_matches_its_results_file(claim):
    assert check_claims.check(claim) is None


def test_the_headline_docs_and_the_readme_have_claims():
    docs = {claim.doc for claim in check_claims.CLAIMS}
    assert {"docs/findings/study-by-hand.md", "docs/findings/sweeps-hand-read.md",
            "docs/scaling.md", "docs/recipe.md"} <= docs


def _claim(quoted_part: str):
    return next(c for c in check_claims.CLAIMS if quoted_part in c.quoted)


def test_a_number_edited_in_the_doc_fails():
    claim = _claim("| matched active | +0.0117")
    text = (REPO_ROOT / claim.doc).read_text().replace("+0.0117 | [0.0050", "+0.0118 | [0.0050")
    assert "no longer contains" in check_claims.check(claim, text)
    # The doc says the new number and the claim quotes it: the results file still disagrees.
    edited = check_claims.Claim(claim.doc, claim.quoted.replace("+0.0117", "+0.0118"),
                                claim.recompute)
    assert "its results give '| matched active | +0.0117" in check_claims.check(edited, text)


def test_a_results_file_that_changed_fails(monkeypatch):
    claim = _claim("| moe | 394.82K | 591.42K | 3.3598 ± 0.0138 | 6 |")
    stored = check_claims.load("studies/demo-seeds0-5.json")

    def load(name):
        if name != "studies/demo-seeds0-5.json":
            return check_claims.load.__wrapped__(name)
        rerun = copy.deepcopy(stored)
        rerun["arms"]["moe"]["runs"][0]["best_val_loss"] += 0.006  # one seed's loss moved
        return rerun

    monkeypatch.setattr(check_claims, "load", load)
    message = check_claims.check(claim)
    assert message is not None and "its results give '| moe | 394.82K | 591.42K | 3.3608" in message


def test_whitespace_in_the_doc_is_read_as_one_space():
    claim = _claim("falls from 1.64M to 3.28M")
    wrapped = claim.quoted.replace(" by ", "\n  by ")
    assert check_claims.check(claim, f"some text {wrapped} more") is None
