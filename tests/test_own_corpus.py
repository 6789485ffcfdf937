"""Your own corpus works first time: a ~200 KB .txt file that the default evaluation cannot
serve is refused on one line naming the fix before any folder is written, and the command with
that fix then trains; a file without separators is refused the same way; a study folder a
failed try left names the one command that starts afresh."""

from __future__ import annotations

import lzma
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.config import load_config
from moelab.data import EOT_TEXT
from moelab.data.preflight import check_runs_fit_data
from moelab.errors import MoelabError
from one_line_errors import refused_on_one_line

CORPUS_BYTES = 200_000
# TINY of tests/test_study_e2e.py with the demo's context (128) and evaluation (128 windows):
# what a user who took the demo preset to their own text asks for.
TINY_AT_DEMO_CONTEXT = [
    "model.vocab_size=320", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.d_ff=64", "model.moe.d_expert=32", "train.batch_size=4",
    "train.max_tokens=2048", "train.eval_interval=2", "train.log_interval=2",
    "train.logging.progress=false", "train.sample_tokens=0",
]


def sample_stories() -> list[str]:
    raw = resources.files("moelab.data").joinpath("sample", "tinystories-train.txt.xz").read_bytes()
    return lzma.decompress(raw).decode("utf-8").split(f"\n{EOT_TEXT}\n")


def write_corpus(path: Path, separator: str = f"\n{EOT_TEXT}\n") -> Path:
    """About CORPUS_BYTES of the sample's stories, joined by ``separator``."""
    chosen, size = [], 0
    for story in sample_stories():
        chosen.append(story)
        size += len(story.encode()) + len(separator.encode())
        if size >= CORPUS_BYTES:
            break
    path.write_text(separator.join(chosen) + separator)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "my_corpus.txt")


def settings(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def study_argv(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["study", "demo", "--seeds", "1", "--criteria", "active", "--out", str(out),
            *settings(f"data.source={corpus}", *TINY_AT_DEMO_CONTEXT, *extra)]


def suggested(message: str, key: str) -> str:
    found = re.search(rf"--set {re.escape(key)}=([0-9.]+)", message)
    assert found, message
    return found.group(1)


def test_the_corpus_is_the_size_of_the_issue(corpus):
    assert CORPUS_BYTES <= corpus.stat().st_size < CORPUS_BYTES + 5_000


def test_a_too_small_validation_split_is_refused_before_any_folder(corpus, tmp_path, capsys):
    out = tmp_path / "study"
    line = refused_on_one_line(capsys, study_argv(corpus, out), "train.eval_windows=128",
                               "--set train.eval_windows=", "--set data.valid_fraction=")
    assert not out.exists()
    # The numbers it names, checked against the token cache itself.
    config = load_config("demo", [f"data.source={corpus}", *TINY_AT_DEMO_CONTEXT,
                                  "train.eval_windows=1"])
    valid_tokens = check_runs_fit_data([config], progress=False).valid.num_tokens
    assert f"has {valid_tokens:,} tokens" in line
    assert valid_tokens < 128 * 129  # the demo's 128 windows of 129 tokens do not fit
    assert int(suggested(line, "train.eval_windows")) == valid_tokens // 129


def test_a_sweep_refuses_it_before_its_folder(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    refused_on_one_line(capsys, ["sweep-sparsity", "micro", "--out", str(out), *settings(
        f"data.source={corpus}", "model.max_seq_len=128", "train.eval_windows=1000",
        "train.logging.progress=false")],
        "train.eval_windows=1000", "--set train.eval_windows=")
    assert not out.exists()


def test_a_dry_run_refuses_what_the_run_refuses_with_the_same_line(corpus, tmp_path, capsys):
    out = tmp_path / "study"
    real = refused_on_one_line(capsys, study_argv(corpus, out), "train.eval_windows=128")
    assert refused_on_one_line(capsys, study_argv(corpus, out) + ["--dry-run"]) == real
    assert not out.exists()
    separators = write_corpus(tmp_path / "one_story.txt", separator="\n\n")
    real = refused_on_one_line(capsys, study_argv(separators, out, "train.eval_windows=4"),
                               "1 story,")
    assert refused_on_one_line(capsys, study_argv(separators, out, "train.eval_windows=4")
                               + ["--dry-run"]) == real
    sweep = ["sweep-sparsity", "micro", "--out", str(out), *settings(
        f"data.source={corpus}", "model.max_seq_len=128", "train.eval_windows=1000",
        "train.logging.progress=false")]
    real = refused_on_one_line(capsys, sweep, "train.eval_windows=1000")
    assert refused_on_one_line(capsys, sweep + ["--dry-run"]) == real
    assert not out.exists()


def test_a_dry_run_says_which_data_it_checked(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "study"
    assert main(study_argv(corpus, out, "train.eval_windows=4") + ["--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"data: {corpus} checked against every run (vocabulary, training " \
        "split, validation windows)"
    assert not out.exists()
    # A hub source is not downloaded to price a plan: named, not checked (nothing is fetched:
    # the dataset name does not exist).
    monkeypatch.delenv("MOELAB_DATA", raising=False)
    for source in ("hf:no-such-owner/no-such-dataset", "tinystories"):
        assert main(study_argv(corpus, out, "train.eval_windows=4", f"data.source={source}")
                    + ["--dry-run"]) == 0
        assert capsys.readouterr().out.splitlines()[0] == (
            f"data: {source} not checked: a dry run does not download from the Hugging Face "
            "hub; the run checks it before training")


def test_the_suggested_valid_fraction_holds_enough(corpus, capsys, tmp_path):
    line = refused_on_one_line(capsys, study_argv(corpus, tmp_path / "study"))
    fraction = suggested(line, "data.valid_fraction")
    config = load_config("demo", [f"data.source={corpus}", *TINY_AT_DEMO_CONTEXT,
                                  f"data.valid_fraction={fraction}"])
    prepared = check_runs_fit_data([config], progress=False)  # raises if it still falls short
    assert prepared.valid.num_tokens >= 128 * 129


def test_a_file_without_separators_is_refused_before_any_folder(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "one_story.txt", separator="\n\n")
    out = tmp_path / "study"
    line = refused_on_one_line(capsys, study_argv(corpus, out, "train.eval_windows=4"),
                               "1 story,", EOT_TEXT, "a folder with train.txt and valid.txt")
    # One story is held out whole or not at all: no data.valid_fraction below 1 splits it.
    assert "raise data.valid_fraction" not in line
    assert not out.exists()


def test_a_file_of_a_few_stories_is_told_to_raise_the_held_out_share(tmp_path, capsys):
    stories = sample_stories()[:3]
    corpus = tmp_path / "three_stories.txt"
    corpus.write_text("".join(f"{story}\n{EOT_TEXT}\n" for story in stories))
    out = tmp_path / "study"
    refused_on_one_line(capsys, study_argv(corpus, out, "train.eval_windows=4"),
                        "3 stories,", "raise data.valid_fraction")
    assert not out.exists()
    # The fix it names works: 3 x 0.34 = 1.02, so one of the three stories is held out.
    from moelab.data.sources import resolve_source

    data = load_config("demo", [f"data.source={corpus}", "data.valid_fraction=0.34"]).data
    train, valid = resolve_source(data).load()
    assert (train.num_stories, valid.num_stories) == (2, 1)


def test_a_vocabulary_larger_than_the_model_is_refused(corpus):
    config = load_config("demo", [f"data.source={corpus}", *TINY_AT_DEMO_CONTEXT,
                                  "train.eval_windows=1", "data.vocab_size=320"])
    prepared = check_runs_fit_data([config], progress=False)
    small = load_config("demo", [f"data.source={corpus}", "model.vocab_size=300",
                                 "train.eval_windows=1"])
    with pytest.raises(MoelabError, match="model.vocab_size=300 is invalid: the tokenizer"):
        from moelab.data.preflight import check_config_fits

        check_config_fits(small, prepared)


@pytest.mark.slow
def test_the_corrected_command_then_trains(corpus, tmp_path, capsys):
    out = tmp_path / "study"
    line = refused_on_one_line(capsys, study_argv(corpus, out))
    fix = f"train.eval_windows={suggested(line, 'train.eval_windows')}"
    assert main(study_argv(corpus, out, fix)) == 0
    assert (out / "report.md").is_file()
    assert f"data `{corpus}`" in (out / "report.md").read_text()


@pytest.mark.slow
def test_a_folder_a_failed_try_left_names_the_command_that_starts_afresh(corpus, tmp_path,
                                                                         capsys):
    """A first try that failed after planning (here: every run asks for a device this machine
    lacks) leaves a folder; the corrected config is refused with the one command that starts
    afresh, and that command works."""
    out = tmp_path / "study"
    assert main(study_argv(corpus, out, "train.eval_windows=4", "train.device=cuda:97")) != 0
    assert (out / "plan.json").is_file()
    line = refused_on_one_line(capsys, study_argv(corpus, out, "train.eval_windows=4"),
                               "none of its runs finished", f"rm -r {out}")
    assert "train.device" in line
    shutil.rmtree(out)  # what the line says to run
    assert main(study_argv(corpus, out, "train.eval_windows=4")) == 0
