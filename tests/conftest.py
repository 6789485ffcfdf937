"""Shared test fixtures.

Every test runs with MOELAB_CACHE set to one cache folder of the test session (under pytest's
base temp), so nothing touches the user's home. The folder is shared, not per test, because
preparing the sample data costs seconds and most training tests reuse it. Sharing is safe: a
cache sub-folder is keyed by (source fingerprint, vocab size, tokenizer recipe) and written
atomically, manifest last, so tests with other data get other folders and none sees a
half-built one; tests that damage a cache pass their own ``cache_dir``.

``shared_dir`` points at the project's shared data folder (a sibling of the repository) when
it exists; tests that need it are skipped elsewhere. The session's numerics are the default
``train.numerics`` (moelab.numerics), pinned before anything computes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moelab.numerics import PINNED_ENVIRONMENT

# The default train.numerics, set before any test computes with torch: the libraries read it
# at their first computation, and a run trained in this process must get the kernels its
# config pins (on an AVX-512 machine, torch's own would differ and the run would be refused).
os.environ.update(PINNED_ENVIRONMENT["portable"])

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED_DIR.is_dir():
        pytest.skip("the shared data folder is not beside the repository")
    return SHARED_DIR
