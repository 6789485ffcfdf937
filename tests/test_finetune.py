"""``moelab finetune``: a finished run's final weights trained on new text in a run of its own.

The reference is measured independently: the source run's weights scored by ``moelab eval
--data`` on the new text's held-out split. The fine-tuned run must score below it there, start
from exactly the source's weights, and validate on that same split.
"""

from __future__ import annotations

import json
import random

import pytest

from moelab.codec import to_json
import torch

from moelab.cli import main
from moelab.config import load_config
from moelab.model import Transformer
from moelab.train import evaluate_run, finetune, load_run
from moelab.train.checkpoint import load_weights
from moelab.train.run_folder import RunFolder
from one_line_errors import refused_on_one_line
from tiny_overrides import TINY_MOE_RUN

SOURCE_RUN = TINY_MOE_RUN + ["train.max_tokens=5120", "train.eval_interval=10",
                             "train.sample_tokens=0"]
FINETUNE_SETS = ["train.max_tokens=5120", "train.eval_interval=5", "train.lr=0.005"]


def counting_stories(count: int) -> str:
    """Short stories in one fixed pattern, unlike TinyStories: ``<|endoftext|>``-separated."""
    rng = random.Random(0)
    names, things = ["Tom", "Mia", "Sam", "Lily", "Ben"], ["apples", "stars", "cups", "boats"]
    stories = []
    for _ in range(count):
        name, thing, n = rng.choice(names), rng.choice(things), rng.randint(2, 9)
        stories.append(f"{name} had {n} {thing}. {name} gave one away. Now {name} has "
                       f"{n - 1} {thing}. The end.")
    return "\n<|endoftext|>\n".join(stories) + "\n"


@pytest.fixture(scope="module")
def source_and_finetune(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    text = root / "counting.txt"
    text.write_text(counting_stories(400))
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        config_file = root / "tiny.yaml"
        config_file.write_text("{}\n")
        sets = [arg for item in SOURCE_RUN for arg in ("--set", item)]
        assert main(["train", str(config_file), "--out", str(root / "source"), *sets]) == 0
        sets = [arg for item in FINETUNE_SETS for arg in ("--set", item)]
        assert main(["finetune", str(root / "source"), "--data", str(text), "--out",
                     str(root / "tuned"), *sets]) == 0
    return root, text


@pytest.mark.slow
def test_the_finetune_beats_the_source_on_the_new_text(source_and_finetune, capsys):
    root, text = source_and_finetune
    source_on_new = evaluate_run(root / "source", data=text, device="cpu").val_loss
    tuned_on_new = evaluate_run(root / "tuned", data=text, device="cpu").val_loss
    assert tuned_on_new < source_on_new - 0.5, (tuned_on_new, source_on_new)
    # Its own validation split is that held-out text: its final eval is the same number.
    summary = RunFolder(root / "tuned").read_summary()
    assert summary["final_val_loss"] == pytest.approx(tuned_on_new, rel=1e-5)
    record = json.loads((root / "tuned" / "finetune.json").read_text())
    assert record["source_val_loss"] == pytest.approx(source_on_new, rel=1e-5)


@pytest.mark.slow
def test_it_starts_from_the_source_weights_with_a_fresh_schedule(source_and_finetune):
    root, text = source_and_finetune
    config = RunFolder(root / "tuned").read_config()
    source_checkpoint = root / "source" / "checkpoints" / "step_00000020"
    assert config.train.init_from == str(source_checkpoint.resolve())
    assert config.data.source == str(text.resolve())
    # The first step's lr is the warmup's first (a fresh schedule), at step 1 of the new run.
    events = RunFolder(root / "tuned").read_metrics()
    first = next(e for e in events if e["kind"] == "train")
    assert first["step"] == 1 and first["lr"] == pytest.approx(0.005 / int(0.05 * 20))
    # The source weights it names are the source's final ones, loaded as the first step saw.
    model = Transformer(config.model)
    load_weights(source_checkpoint, model)
    source_model, source_tokenizer = load_run(root / "source")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, source_model.state_dict()[name])
    # The tokenizer is the source's, byte for byte.
    _, tuned_tokenizer = load_run(root / "tuned")
    assert tuned_tokenizer.sha256() == source_tokenizer.sha256()


@pytest.mark.slow
def test_a_finetune_starts_from_the_weights_not_a_random_init(source_and_finetune, tmp_path):
    # One step at lr 1e-12: the weights barely move, so the val loss is the source's own.
    root, text = source_and_finetune
    summary = finetune(root / "source", text, tmp_path / "one_step",
                       ["train.max_tokens=256", "train.lr=1e-12"])
    assert summary.run.final_val_loss == pytest.approx(summary.reference.source_val_loss, abs=1e-4)
    random_init = load_config(None, SOURCE_RUN)
    assert random_init.train.init_from is None


@pytest.mark.slow
def test_rerunning_the_finetune_resumes_it(source_and_finetune):
    root, text = source_and_finetune
    before = RunFolder(root / "tuned").read_summary()
    again = finetune(root / "source", text, root / "tuned", FINETUNE_SETS)
    written = to_json(again.run)  # as summary.json holds it (the machine record as a mapping)
    assert {k: written[k] for k in before} == before


@pytest.mark.slow
def test_changed_source_weights_are_refused(source_and_finetune, tmp_path, capsys):
    root, text = source_and_finetune
    tuned = RunFolder(root / "tuned").read_config()
    config_file = tmp_path / "tuned.yaml"
    config_file.write_text(
        (root / "tuned" / "config.yaml").read_text().replace(tuned.train.init_sha256, "a" * 64))
    refused_on_one_line(capsys, ["train", str(config_file), "--out", str(tmp_path / "again")],
                        "train.init_from=", "the config names aaaaaaaaaaaa")


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--data", "{text}", "--out", "{tmp}/o", "--set", "model.d_model=64"],
     "--set model.d_model=64 is invalid in a finetune"),
    (["--data", "{text}", "--out", "{tmp}/o", "--set", "train.init_from=/x"],
     "--set train.init_from=/x is invalid in a finetune"),
    (["--data", "{tmp}/missing.txt", "--out", "{tmp}/o"], "missing.txt"),
    (["--data", "{text}", "--out", "{tmp}/o", "--set", "train.max_tokens=10"],
     "train.max_tokens=10 is invalid: less than one step"),
])
def test_bad_finetune_input_is_one_line(source_and_finetune, tmp_path, capsys, args, message):
    root, text = source_and_finetune
    args = [a.format(text=text, tmp=tmp_path) for a in args]
    refused_on_one_line(capsys, ["finetune", str(root / "source"), *args], message)


@pytest.mark.slow
def test_an_unfinished_or_missing_source_is_refused(source_and_finetune, tmp_path, capsys):
    root, text = source_and_finetune
    refused_on_one_line(capsys, ["finetune", str(tmp_path), "--data", str(text), "--out",
                                 str(tmp_path / "o")], "is not a run folder")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text((root / "source" / "config.yaml").read_text())
    refused_on_one_line(capsys, ["finetune", str(unfinished), "--data", str(text), "--out",
                                 str(tmp_path / "o")], "has not finished")
