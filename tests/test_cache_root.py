"""Where token caches go by default: $MOELAB_CACHE, else $XDG_CACHE_HOME/moelab, else
~/.cache/moelab (an empty or relative XDG_CACHE_HOME is ignored, as the XDG base-directory
specification says)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moelab.config import DataConfig
from moelab.data import prepare_data


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home of the test's own, and no MOELAB_CACHE (the suite sets one for every test)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MOELAB_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return home


def cache_folder() -> Path:
    """Where a small token cache of the bundled sample is built."""
    prepared = prepare_data(DataConfig(source="sample", max_train_stories=40), 300, progress=False)
    assert (prepared.cache_dir / "tokenizer.json").is_file()
    return prepared.cache_dir


def test_the_cache_goes_under_xdg_cache_home(tmp_path, home, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder().parent == tmp_path / "xdg" / "moelab" / "data"
    assert list(home.iterdir()) == []  # nothing in ~/.cache


def test_moelab_cache_comes_before_xdg_cache_home(tmp_path, home, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("MOELAB_CACHE", str(tmp_path / "mine"))
    assert cache_folder().parent == tmp_path / "mine" / "data"
    assert not (tmp_path / "xdg").exists()


@pytest.mark.parametrize("xdg", [None, "", "relative/cache"])
def test_without_a_usable_xdg_cache_home_the_cache_is_in_the_home(tmp_path, home, monkeypatch, xdg):
    if xdg is not None:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.chdir(tmp_path)
    assert cache_folder().parent == home / ".cache" / "moelab" / "data"
    assert not (tmp_path / "relative").exists()
