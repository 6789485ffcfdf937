"""Shared test fixtures.

Every test gets its own cache folder (MOELAB_CACHE) so nothing touches the user's home, and
``shared_dir`` points at the project's shared data folder (a sibling of the repository) when
it exists; tests that need it are skipped elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
