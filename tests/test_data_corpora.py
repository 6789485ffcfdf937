"""Corpora beyond TinyStories: Parquet and Arrow files, ``save_to_disk`` folders and Hugging
Face datasets by name (``data.source: hf:NAME``), all built inside the test and read offline.

Stories are checked against the lists the test wrote (and the hold-out rule written out
here), not against the pipeline's own reading; the hub path runs the real
``datasets.load_dataset`` on a local dataset folder, streamed and from the datasets cache.
"""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from moelab.config import DataConfig
from moelab.data import EOT_TEXT, prepare_data
from moelab.data.prepare import check_data
from moelab.data.sources import resolve_source
from moelab.errors import MoelabError
from one_line_errors import refused_on_one_line

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")

VOCAB = 300


def sample_stories(count: int) -> list[str]:
    raw = resources.files("moelab.data").joinpath("sample", "tinystories-train.txt.xz").read_bytes()
    separator = f"\n{EOT_TEXT}\n"
    return lzma.decompress(raw).decode("utf-8").split(separator)[:count]


def held_out_by_hand(count: int, fraction: float) -> list[int]:
    """Indices held out: one in every 1/f, i.e. where floor((i + 1) f) steps up."""
    return [i for i in range(count) if int((i + 1) * fraction) > int(i * fraction)]


def read_splits(cfg: DataConfig) -> tuple[list[str], list[str]]:
    train, valid = resolve_source(cfg).load()
    return ([s for batch in train.read_batches() for s in batch],
            [s for batch in valid.read_batches() for s in batch])


@pytest.fixture(scope="module")
def stories() -> list[str]:
    return sample_stories(200)


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory, stories) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.parquet"
    pq.write_table(pa.table({"id": list(range(len(stories))), "body": stories}), path,
                   row_group_size=64)  # several row groups: batches cross them
    return path


def test_a_parquet_file_holds_out_a_slice_and_reads_its_text_column(parquet_file, stories):
    train, valid = read_splits(DataConfig(source=str(parquet_file), text_field="body"))
    held = held_out_by_hand(len(stories), 0.05)
    assert len(held) == 10
    assert valid == [stories[i].strip() for i in held]
    assert train == [s.strip() for i, s in enumerate(stories) if i not in held]


def test_a_cap_reads_the_first_documents_and_its_held_out_ones(parquet_file, stories):
    train, valid = read_splits(DataConfig(source=str(parquet_file), text_field="body",
                                          max_train_stories=50))
    # 50 training documents end at document 52 (19 and 39 are held out before it)
    assert train == [s.strip() for i, s in enumerate(stories[:52]) if i not in (19, 39)]
    assert valid == [stories[19].strip(), stories[39].strip()]


def test_a_changed_cap_or_field_is_another_cache(parquet_file, tmp_path):
    base = DataConfig(source=str(parquet_file), text_field="body", cache_dir=str(tmp_path))
    prints = {resolve_source(cfg).fingerprint for cfg in (
        base, DataConfig(**{**base.__dict__, "max_train_stories": 100}),
        DataConfig(**{**base.__dict__, "valid_fraction": 0.1}))}
    assert len(prints) == 3
    copy = tmp_path / "copy.parquet"
    pq.write_table(pa.table({"body": pq.read_table(parquet_file)["body"],
                             "title": pq.read_table(parquet_file)["body"]}), copy)
    by_field = {resolve_source(DataConfig(source=str(copy), text_field=f)).fingerprint
                for f in ("body", "title")}
    assert len(by_field) == 2  # the same text under another column name is still another read
    prepared = prepare_data(base, VOCAB, progress=False)
    assert (prepared.train.stories, prepared.valid.stories) == (190, 10)
    assert prepare_data(base, VOCAB, progress=False).cache_dir == prepared.cache_dir


def test_arrow_files_in_both_ipc_formats(tmp_path, stories):
    table = pa.table({"text": stories[:40]})
    for name, open_writer in (("file.arrow", pa.ipc.new_file), ("stream.arrow", pa.ipc.new_stream)):
        with open_writer(str(tmp_path / name), table.schema) as writer:
            for batch in table.to_batches(max_chunksize=16):
                writer.write_batch(batch)
        train, valid = read_splits(DataConfig(source=str(tmp_path / name)))
        assert valid == [stories[19].strip(), stories[39].strip()]
        assert len(train) == 38


def test_a_saved_dataset_dict_uses_its_validation_split(tmp_path, stories):
    saved = tmp_path / "saved"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"story": stories[:60] + ["  ", None]}),
        "validation": datasets.Dataset.from_dict({"story": stories[60:70]}),
        "test": datasets.Dataset.from_dict({"story": stories[70:75]}),
    }).save_to_disk(str(saved))
    train, valid = read_splits(DataConfig(source=str(saved)))
    assert train == [s.strip() for s in stories[:60]]  # blank and null rows dropped
    assert valid == [s.strip() for s in stories[60:70]]
    _, test = read_splits(DataConfig(source=str(saved), valid_split="test"))
    assert test == [s.strip() for s in stories[70:75]]
    one = tmp_path / "one"
    datasets.Dataset.from_dict({"text": stories[:40]}).save_to_disk(str(one))
    train, valid = read_splits(DataConfig(source=str(one)))
    assert (len(train), valid) == (38, [stories[19].strip(), stories[39].strip()])


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory, stories) -> Path:
    """A dataset laid out as a hub repository: data/<split>-*.parquet."""
    folder = tmp_path_factory.mktemp("hub") / "tiny-corpus"
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": stories[:150]}), folder / "data" / "train-00000.parquet")
    pq.write_table(pa.table({"text": stories[150:170]}),
                   folder / "data" / "validation-00000.parquet")
    return folder


def test_a_hub_dataset_by_name_streamed_and_from_the_cache(hub_folder, stories, tmp_path,
                                                         monkeypatch):
    cfg = DataConfig(source=f"hf:{hub_folder}", max_train_stories=80)
    streamed = read_splits(cfg)
    assert streamed == ([s.strip() for s in stories[:80]], [s.strip() for s in stories[150:170]])
    # offline, the same dataset is read from the datasets cache (kept under tmp_path here)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    assert read_splits(cfg) == streamed
    assert resolve_source(cfg).fingerprint == resolve_source(
        DataConfig(source=f"hf:{hub_folder}", max_train_stories=80)).fingerprint
    assert resolve_source(cfg).fingerprint != resolve_source(
        DataConfig(source=f"hf:{hub_folder}", max_train_stories=81)).fingerprint


def test_a_damaged_datasets_cache_entry_is_named_damaged_not_missing(hub_folder, tmp_path,
                                                                    monkeypatch):
    cfg = DataConfig(source=f"hf:{hub_folder}")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    read_splits(cfg)  # the entry is in the cache now
    arrows = sorted((tmp_path / "hf-cache").rglob("*.arrow"))
    assert arrows
    for arrow in arrows:  # a copy cut short, a disk error
        arrow.write_bytes(arrow.read_bytes()[:40])
    with pytest.raises(MoelabError) as info:
        read_splits(cfg)
    message = str(info.value)
    assert "\n" not in message and "not in the datasets cache" not in message
    assert "pip install" not in message
    assert "its copy in the datasets cache cannot be read" in message
    assert str(tmp_path / "hf-cache") in message  # where to delete it


def test_a_built_hub_cache_trains_without_the_hub(hub_folder, tmp_path, monkeypatch):
    cfg = DataConfig(source=f"hf:{hub_folder}", max_train_stories=100, cache_dir=str(tmp_path))
    prepared = prepare_data(cfg, VOCAB, progress=False)
    assert (prepared.train.stories, prepared.valid.stories) == (100, 20)

    def no_hub(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    check_data(cfg, VOCAB)  # the cache is built: the hub is not asked
    assert prepare_data(cfg, VOCAB, progress=False).cache_dir == prepared.cache_dir
    with pytest.raises(MoelabError, match="cannot load the dataset .*Couldn't reach the Hub"):
        check_data(DataConfig(**{**cfg.__dict__, "max_train_stories": 99}), VOCAB)


def run_offline(*argv: str, home: Path) -> subprocess.CompletedProcess:
    """``moelab ARGS`` in a fresh process with the hub offline (the libraries read it at import)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(home),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "moelab", *argv], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.slow
def test_an_unknown_hub_dataset_offline_is_one_line(tmp_path):
    result = run_offline("prepare-data", "--no-progress", "--out", str(tmp_path / "c"),
                         "--source", "hf:nobody/no-such-corpus", home=tmp_path / "hf")
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "hf:nobody/no-such-corpus" in result.stderr and "cannot load" in result.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("case, argv, expected", [
    ("missing field", ["--text-field", "content"], ["data.text_field='content'", "id, body"]),
    ("non-text column", ["--text-field", "id"], ["column 'id'", "int values, not text"]),
    ("no text column", [], ["no 'text' or 'story' column", "data.text_field"]),
    ("cap of 0", ["--text-field", "body", "--max-train-stories", "0"],
     ["data.max_train_stories=0"]),
    ("valid split of a file", ["--text-field", "body", "--valid-split", "test"],
     ["data.valid_split='test'"]),
])
def test_bad_parquet_input_is_one_line_and_writes_nothing(parquet_file, tmp_path, capsys, case,
                                                          argv, expected):
    out = tmp_path / "cache"
    refused_on_one_line(capsys, ["prepare-data", "--no-progress", "--out", str(out),
                                 "--source", str(parquet_file), *argv], *expected)
    assert not out.exists()


def test_an_empty_split_is_one_line_and_writes_nothing(tmp_path, stories, capsys):
    saved = tmp_path / "saved"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": stories[:30]}),
        "validation": datasets.Dataset.from_dict({"text": ["", "   "]}),
    }).save_to_disk(str(saved))
    out = tmp_path / "cache"
    refused_on_one_line(capsys, ["prepare-data", "--no-progress", "--out", str(out), "--source",
                                 str(saved)], "split 'validation'", "has no text")
    assert not out.exists()
    few = tmp_path / "few.parquet"
    pq.write_table(pa.table({"text": stories[:10]}), few)  # under 1/0.05 documents: none held out
    refused_on_one_line(capsys, ["prepare-data", "--no-progress", "--out", str(out), "--source",
                                 str(few)], "too few documents")
    assert not out.exists()


def test_a_missing_split_names_the_ones_there(hub_folder, capsys, tmp_path):
    refused_on_one_line(capsys, ["prepare-data", "--no-progress", "--out", str(tmp_path / "c"),
                                 "--source", f"hf:{hub_folder}", "--train-split", "training"],
                        "data.train_split='training'", "train, validation")


def test_a_bad_source_writes_no_run_study_or_sweep(parquet_file, tmp_path, capsys):
    sets = ["--set", f"data.source={parquet_file}", "--set", "data.text_field=nope"]
    refused_on_one_line(capsys, ["train", "demo", "--out", str(tmp_path / "run"), *sets],
                        "data.text_field='nope'")
    refused_on_one_line(capsys, ["study", "demo", "--out", str(tmp_path / "study"), *sets],
                        "data.text_field='nope'")
    refused_on_one_line(capsys, ["sweep-sparsity", "micro", "--out", str(tmp_path / "sweep"),
                                 *sets], "data.text_field='nope'")
    assert not any((tmp_path / name).exists() for name in ("run", "study", "sweep"))


def test_without_pyarrow_the_error_names_the_extra(parquet_file, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if absent
    extra = r"needs the 'pyarrow' package: pip install 'moelab\[hf\]'"
    with pytest.raises(MoelabError, match=extra):
        check_data(DataConfig(source=str(parquet_file), cache_dir=str(tmp_path)), VOCAB)


@pytest.mark.slow
def test_the_demo_study_runs_on_a_parquet_corpus_with_one_set(tmp_path, capsys):
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": sample_stories(400)}), corpus)
    tiny = ["model.vocab_size=320", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
            "model.n_kv_heads=2", "model.max_seq_len=32", "model.d_ff=64",
            "model.moe.d_expert=32", "train.batch_size=8", "train.max_tokens=1536",
            "train.eval_interval=3", "train.eval_windows=4", "train.log_interval=1",
            "train.logging.progress=false", "train.sample_tokens=0"]
    argv = ["study", "demo", "--seeds", "1", "--criteria", "active", "--out",
            str(tmp_path / "study"), "--set", f"data.source={corpus}"]
    for item in tiny:
        argv += ["--set", item]
    from moelab.cli import main

    assert main(argv) == 0
    report = (tmp_path / "study" / "report.md").read_text()
    assert f"data `{corpus}`" in report
    assert "| MaxVio | load p90 |" in report and "tokens/param (total / active)" in report
    summary = json.loads((tmp_path / "study/runs/moe/seed0/summary.json").read_text())
    assert summary["routing"][0]["max_violation"] >= 0 and summary["mfu"] > 0
    tokens_per_param = f"{summary['tokens'] / summary['total_params']:.3g}"
    assert f"moe {tokens_per_param} / " in report
