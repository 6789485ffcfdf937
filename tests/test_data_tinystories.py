"""``data.source: tinystories``, what the CPU presets read: the local copy ``$MOELAB_DATA``
names (read exactly as ``data.source=PATH``: same fingerprint, same token cache, same losses),
else roneneldan/TinyStories through ``datasets.load_dataset`` (the hub is unreachable here, so
the loader is handed local stories); a missing corpus is one line saying how to get it."""

from __future__ import annotations

import json
import lzma

import pytest

from moelab.cli import main
from moelab.config import DataConfig, load_config
from moelab.data.cache import cache_folder_name
from moelab.data.hub_sources import HF_DATASET
from moelab.data.sources import resolve_source
from moelab.data.story_text import split_stories
from moelab.data.text_sources import sample_path
from moelab.sweep.grid import load_grid
from tiny_overrides import TINY_MOE_RUN


def sample_stories(split: str, count: int) -> list[str]:
    return split_stories(lzma.decompress(sample_path(split).read_bytes()).decode())[:count]


@pytest.fixture
def local_copy(tmp_path):
    """A TinyStories-layout folder: train.txt and valid.txt from the bundled sample."""
    folder = tmp_path / "tinystories"
    folder.mkdir()
    for split, count in (("train", 300), ("valid", 60)):
        text = "".join(f"{story}\n<|endoftext|>\n" for story in sample_stories(split, count))
        (folder / f"{split}.txt").write_text(text, encoding="utf-8")
    return folder


def test_the_cpu_presets_read_tinystories():
    assert load_config("cpu-budgets").data.source == "tinystories"
    assert load_config("cpu-replication").data.source == "tinystories"
    assert "data.source=tinystories" in load_grid("cpu").overrides


def test_moelab_data_resolves_as_the_path_itself(local_copy, monkeypatch):
    monkeypatch.setenv("MOELAB_DATA", str(local_copy))
    named = resolve_source(DataConfig(source="tinystories"))
    direct = resolve_source(DataConfig(source=str(local_copy)))
    assert (named.label, named.fingerprint) == (direct.label, direct.fingerprint)
    assert cache_folder_name(named, 512) == cache_folder_name(direct, 512)
    train, valid = named.load()
    assert sum(len(batch) for batch in train.read_batches()) == 300
    assert sum(len(batch) for batch in valid.read_batches()) == 60


def _losses(run_dir) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record["loss"] for record in map(json.loads, lines) if "loss" in record]


@pytest.mark.slow
def test_a_run_through_moelab_data_trains_to_the_same_losses(local_copy, tmp_path, monkeypatch):
    tiny = [o for o in TINY_MOE_RUN if not o.startswith("data.")] + ["train.max_tokens=1024"]
    sets = [arg for override in tiny for arg in ("--set", override)]
    monkeypatch.delenv("MOELAB_DATA", raising=False)
    assert main(["train", "demo", *sets, "--set", f"data.source={local_copy}",
                 "--out", str(tmp_path / "by_path")]) == 0
    monkeypatch.setenv("MOELAB_DATA", str(local_copy))
    assert main(["train", "demo", *sets, "--set", "data.source=tinystories",
                 "--out", str(tmp_path / "by_name")]) == 0
    by_path, by_name = _losses(tmp_path / "by_path"), _losses(tmp_path / "by_name")
    assert len(by_path) == 4 and by_path == by_name  # bit for bit


class _FakeHub:
    """``datasets.load_dataset`` answering with local stories: what the hub would hand over."""

    def __init__(self):
        self.asked: list[str] = []

    def __call__(self, name, *args, **kwargs):
        import datasets

        self.asked.append(name)
        return datasets.DatasetDict({
            "train": datasets.Dataset.from_dict({"text": sample_stories("train", 200)}),
            "validation": datasets.Dataset.from_dict({"text": sample_stories("valid", 40)}),
        })


def test_without_moelab_data_tinystories_loads_the_hub_dataset(monkeypatch, tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    hub = _FakeHub()
    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.delenv("MOELAB_DATA", raising=False)
    source = resolve_source(DataConfig(source="tinystories"))
    assert hub.asked == [HF_DATASET]
    train, valid = source.load()
    assert [story for batch in train.read_batches() for story in batch] == sample_stories("train", 200)
    assert sum(len(batch) for batch in valid.read_batches()) == 40
    # The same dataset as data.source=hf: the same token cache.
    assert source.fingerprint == resolve_source(DataConfig(source="hf")).fingerprint
    assert main(["prepare-data", "--source", "tinystories", "--vocab-size", "320",
                 "--out", str(tmp_path / "cache"), "--json", "--no-progress"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["splits"]["train"]["stories"] == 200


def test_an_unreachable_hub_says_how_to_get_the_corpus(monkeypatch, tmp_path, capsys):
    datasets = pytest.importorskip("datasets")

    def offline(name, *args, **kwargs):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.delenv("MOELAB_DATA", raising=False)
    assert main(["prepare-data", "--source", "tinystories", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "moelab prepare-data --source tinystories" in err and "MOELAB_DATA" in err
    assert "pip install" not in err  # datasets is installed: that advice would mislead
    assert not (tmp_path / "c").exists()


def test_a_moelab_data_that_is_not_there_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MOELAB_DATA", str(tmp_path / "nope"))
    assert main(["train", "cpu-budgets", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"MOELAB_DATA='{tmp_path / 'nope'}'" in err
