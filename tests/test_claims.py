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
    # docs/findings/study-by-hand.md has no claims left: its checked readings are generated.
    assert {"docs/findings/sweeps-hand-read.md", "docs/findings/isoflop-sweep-hand-read.md",
            "docs/scaling.md", "docs/recipe.md"} <= docs


def _claim(quoted_part: str):
    return next(c for c in check_claims.CLAIMS if quoted_part in c.quoted)


def test_a_number_edited_in_the_doc_fails():
    claim = _claim("+0.0151 [+0.0039, +0.0263]")
    text = (REPO_ROOT / claim.doc).read_text().replace("+0.0151 [+0.0039", "+0.0152 [+0.0039")
    assert "no longer contains" in check_claims.check(claim, text)
    # The doc says the new number and the claim quotes it: the results file still disagrees.
    edited = check_claims.Claim(claim.doc, claim.quoted.replace("+0.0151", "+0.0152"),
                                claim.recompute)
    assert "its results give '+0.0151 [+0.0039" in check_claims.check(edited, text)


def test_a_results_file_that_changed_fails(monkeypatch):
    claim = _claim("+0.0151 [+0.0039, +0.0263]")
    stored = check_claims.load("fair_lr.json")

    def load(name):
        if name != "fair_lr.json":
            return check_claims.load.__wrapped__(name)
        rerun = copy.deepcopy(stored)
        runs = rerun["report_runs"]["own"]["moe"]
        runs[min(runs)]["best_val_loss"] += 0.008  # one seed's loss moved: the gap falls
        return rerun

    monkeypatch.setattr(check_claims, "load", load)
    message = check_claims.check(claim)
    assert message is not None and "its results give '+0.0141" in message


def test_whitespace_in_the_doc_is_read_as_one_space():
    claim = _claim("+0.0151 [+0.0039, +0.0263]")
    wrapped = claim.quoted.replace(" (p ", "\n  (p ")
    assert check_claims.check(claim, f"some text {wrapped} more") is None
