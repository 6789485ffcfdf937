"""docs/reference/ is generated from the code (the argparse parsers, the config dataclasses)
and cannot drift from it; every config key is documented; `config show --comments` loads back
as the same config."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from moelab.cli import main
from moelab.cli.model import resolved_yaml
from moelab.cli.reference import render, stale
from moelab.config.docs import commented_yaml, keys

ROOT = Path(__file__).resolve().parents[1]


def test_committed_reference_equals_a_fresh_render():
    assert stale(ROOT / "docs" / "reference") == [], "run `python -m moelab.cli.reference`"


@pytest.mark.slow
def test_check_names_a_drifted_page(tmp_path):
    for name, text in render().items():
        (tmp_path / name).write_text(text.replace("| `--json` |", "| `--jsn` |", 1))
    result = subprocess.run([sys.executable, "-m", "moelab.cli.reference", "--out", str(tmp_path),
                             "--check"], capture_output=True, text=True)
    assert result.returncode == 1 and "cli.md differs" in result.stderr


def test_every_config_key_is_documented_with_its_default():
    documented = keys()
    assert all(doc.doc for doc in documented), [d.key for d in documented if not d.doc]
    table = render()["config.md"]
    for doc in documented:
        assert f"| `{doc.key}` |" in table
    # a hand-picked key against the schema's own default
    assert "| `model.moe.top_k` | int | `2` |" in table


def test_every_command_of_the_help_is_in_the_reference(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    (\S[\w-]+)\s", capsys.readouterr().out, flags=re.M)
    assert len(listed) > 15
    cli = render()["cli.md"]
    for command in listed:
        assert f"## `moelab {command}" in cli


@pytest.mark.parametrize("preset", ["demo", "paper", "cpu-ablation"])
def test_commented_yaml_loads_back_as_the_same_config(preset):
    plain = resolved_yaml(preset, [])
    commented = commented_yaml(plain)
    assert yaml.safe_load(commented) == yaml.safe_load(plain)
    assert "# Weight of the Switch load-balancing loss" in commented
    assert commented.count("\n#") + commented.count("  #") > 40


def test_config_show_comments(capsys):
    assert main(["config", "show", "demo", "--comments"]) == 0
    out = capsys.readouterr().out
    assert "    # Experts each token is sent to (k); sparsity S = (E - k) / E.\n    top_k: 2" in out
    # Sentences with an abbreviation inside, whole (they were cut at "e.g." and "et al.").
    assert ("  # The configuration (subset) of an hf:NAME dataset, e.g. sample-10BT; null: its "
            "default.\n  hf_config: null") in out
    assert ("  # wsd only: 'linear' or 'sqrt' (the 1 - sqrt(t) cooldown of Hägele et al. 2024)."
            "\n  decay_shape: sqrt") in out


def test_a_summary_is_the_first_sentence_not_the_text_before_an_abbreviation():
    from moelab.config.docs import KeyDoc

    def summary(doc: str) -> str:
        return KeyDoc("key", "int", 0, doc).summary

    assert summary("Steps per run. null: all of them.") == "Steps per run."
    assert summary("A subset, e.g. sample-10BT; null: its default. Then more.") == \
        "A subset, e.g. sample-10BT; null: its default."
    assert summary("The cooldown of Hägele et al. 2024, i.e. 1 - sqrt(t).") == \
        "The cooldown of Hägele et al. 2024, i.e. 1 - sqrt(t)."
    assert summary("One line\n    over two. Second.") == "One line over two."


# --------------------------------------------------------------------------------------------
# outputs.md: the files runs, studies and sweeps write, from their records
# --------------------------------------------------------------------------------------------

def _core_records() -> list[type]:
    """The records of a run's files, a study's and a sweep's results.csv and analysis.json."""
    from moelab.cli.reference_outputs import reachable, run_files, study_files
    from moelab.study.results import ArmResult, RunResult
    from moelab.sweep.folder import AnalysisSettings
    from moelab.sweep.results_csv import ResultRow

    roots = [f.record for f in run_files() + study_files() if f.record]
    return reachable([*roots, ResultRow, AnalysisSettings, ArmResult, RunResult])


def test_every_field_of_the_run_and_study_files_and_results_csv_is_documented():
    from moelab.cli.reference_outputs import undocumented

    assert undocumented(_core_records()) == []
    assert "`moelab.study.results.RunResult`: One run of an arm" in render()["outputs.md"]


def test_every_field_of_the_sweep_analysis_files_is_documented():
    from moelab.cli.reference_outputs import UNDOCUMENTED, reachable, sweep_files, undocumented

    assert undocumented(reachable([f.record for f in sweep_files() if f.record])) == []
    assert UNDOCUMENTED not in render()["outputs.md"]


def test_results_csv_page_lists_every_column_with_a_hand_count():
    page = render()["outputs.md"]
    # Counted by hand in the cpu sweep's committed results.csv header (24 names, 2026-12-02).
    header = (ROOT / "experiments/results/sweeps/cpu/results.csv").read_text().splitlines()[0]
    assert len(header.split(",")) == 24
    assert "Every file has the 24 columns of group *every file*" in page
    for column in ("run", "C_budget", "N_active", "best_val_loss", "peak_memory_bytes", "device",
                   "cpu", "threads", "zero_shot_<task>", "finetune_gain", "shared_experts", "G"):
        assert f"| `{column}` |" in page
    assert "| `best_val_loss` | float | every file | The run's lowest validation loss" in page


def test_a_results_csv_column_added_without_regenerating_fails_the_check(monkeypatch, tmp_path):
    import dataclasses
    from typing import Optional

    import moelab.sweep.results_csv as results_csv

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class RowWithANewColumn(results_csv.ResultRow):
        tokens_per_joule: Optional[float] = None
        """A column added to the schema."""

    for name, text in render().items():
        (tmp_path / name).write_text(text)
    assert stale(tmp_path) == []
    monkeypatch.setattr(results_csv, "ResultRow", RowWithANewColumn)
    assert stale(tmp_path) == ["outputs.md"]
    assert "| `tokens_per_joule` | float or null | every file | A column added" in render()["outputs.md"]


@pytest.mark.slow
def test_metrics_lines_have_the_keys_the_page_documents(tmp_path):
    import json

    from moelab.config import load_config
    from moelab.train import train
    from tiny_overrides import TINY_MOE_RUN

    config = load_config("demo", [*TINY_MOE_RUN, "train.max_tokens=512", "train.sample_tokens=0"])
    train(config, tmp_path / "run")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_line = next(line for line in lines if line["kind"] == "train")
    eval_line = next(line for line in lines if line["kind"] == "eval")
    # The keys, listed by hand from the loop as it wrote them before the lines were typed records.
    assert list(eval_line) == ["kind", "step", "tokens", "val_loss", "val_bpb", "best_val_loss",
                               "routing", "collapse"]
    assert set(train_line) >= {"kind", "step", "tokens", "loss", "ce_loss", "lb_loss", "z_loss",
                               "lr", "grad_norm", "tokens_per_s", "tokens_per_cpu_s",
                               "flops_per_s", "balance"}
    page = render()["outputs.md"]
    section = page.split('<a id="evalevent">')[1].split("### ")[0]
    for key in eval_line:
        assert f"| `{key}` |" in section
    routing = page.split("### LayerRouting")[1].split("### ")[0]
    assert [f"| `{key}` |" in routing for key in eval_line["routing"][0]] == \
        [True] * len(eval_line["routing"][0])
    section = page.split('<a id="trainevent">')[1].split("### ")[0]
    for key in train_line:
        assert f"| `{key}` |" in section
