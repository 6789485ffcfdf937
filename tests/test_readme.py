"""The README's Python example runs as printed, on a tiny run in the folder it names."""

import re
import runpy
from pathlib import Path

import pytest
import torch

from moelab.config import load_config
from moelab.train import train
from tiny_overrides import TINY_MOE_RUN

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), flags=re.S)


@pytest.mark.slow
def test_the_readme_python_example_runs_on_a_trained_run(tmp_path, monkeypatch, capsys):
    (example,) = python_blocks()
    run_dir = re.search(r'load_run\("([^"]+)"\)', example).group(1)
    config = load_config(None, TINY_MOE_RUN + ["train.max_tokens=1024", "train.eval_interval=2",
                                               "train.sample_tokens=0"])
    train(config, tmp_path / run_dir)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "example.py"
    script.write_text(example, "utf-8")

    namespace = runpy.run_path(str(script))

    logits, tokens = namespace["logits"], namespace["tokens"]
    assert logits.shape == (1, tokens.shape[1], config.model.vocab_size)
    assert torch.isfinite(logits).all()
    printed = capsys.readouterr().out.rstrip("\n")
    assert printed == namespace["tokenizer"].decode([int(logits[0, -1].argmax())])
