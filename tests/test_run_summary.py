"""summary.json as one typed record: what the loop writes is exactly RunSummary's fields at
schema version 1, a summary from before the version upgrades, and damage is one line."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from moelab.codec import to_json
from moelab.config import load_config
from moelab.errors import MoelabError
from moelab.train import train
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import SCHEMA_VERSION, RunSummary, parse_summary
from tiny_overrides import TINY_MOE_RUN


@pytest.mark.slow
def test_a_run_writes_every_field_of_the_typed_summary_once(tmp_path):
    config = load_config("demo", [*TINY_MOE_RUN, "train.max_tokens=512", "train.sample_tokens=0"])
    train(config, tmp_path / "run")
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert list(written) == [f.name for f in fields(RunSummary)]
    assert written["schema_version"] == SCHEMA_VERSION == 2
    summary = RunFolder(tmp_path / "run").summary()
    assert to_json(summary) == written
    # Hand counts of the tiny run: 2 steps of batch 8 x context 32.
    assert (summary.steps, summary.tokens, summary.tokens_per_step) == (2, 512, 256)
    assert summary.step_time_s == pytest.approx(summary.train_time_s / 2)


def test_a_summary_from_before_the_schema_version_is_upgraded():
    legacy = {"status": "complete", "best_val_loss": 3.5, "flops_per_token": 600,
              "train_time_s": 10.0, "steps": 4, "some_removed_key": 1}
    summary = parse_summary(legacy)
    assert summary.flops_per_token_6n == 600  # its old name
    assert summary.step_time_s == 2.5         # 10 s over 4 steps
    assert summary.schema_version == 0 and summary.peak_memory_bytes is None
    with pytest.raises(MoelabError, match=r"old\.json lacks tokens, flops_per_token_kaplan: it was "
                                          r"written by an older moelab"):
        summary.require(("best_val_loss", "tokens", "flops_per_token_kaplan"), "old.json")


def test_a_version_1_summary_reads_its_full_count_as_kaplan():
    # Schema version 1 named the count with attention at 6 n_layers n_ctx d_model ``full``.
    record = {"status": "complete", "schema_version": 1, "best_val_loss": 3.0,
              "flops_per_token_6n": 600, "flops_per_token_full": 750}
    summary = parse_summary(record)
    assert (summary.flops_per_token_6n, summary.flops_per_token_kaplan) == (600, 750)
    assert summary.schema_version == 1
    assert "flops_per_token_full" not in to_json(summary)


@pytest.mark.parametrize("edit, message", [
    ({"best_val_loss": "low"}, r"best_val_loss='low' is not a finite number"),
    ({"tokens_per_s": float("inf")}, r"tokens_per_s=inf is not a finite number"),
    ({"steps": True}, r"steps=True is not a finite number"),
    ({"routing": 3}, r"routing is not a list of layers"),
    ({"routing": [1, 2]}, r"routing is not a list of layers"),
])
def test_damage_is_one_line_naming_the_file(edit, message):
    record = {"status": "complete", "schema_version": 1, "best_val_loss": 3.0, **edit}
    with pytest.raises(MoelabError, match=rf"^run/summary\.json is corrupt \({message}"):
        parse_summary(record, "run/summary.json")
